"""Summarise benchmarks/cache/run.sh's per-token losses: loss by position per cache policy (text + figure).

python benchmarks/cache/report.py [OUT]  (OUT: run.sh's folder, default /tmp/posenc-cache) writes
benchmarks/cache/smollm2.txt and docs/img/cache-smollm2.png, and the same for gemma3 where run_gemma3.sh ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/posenc-cache")
MODELS = {
    "smollm2": ("", "SmolLM2-135M-Instruct Q4_1 GGUF", 256,
                ["full", "window:256", "sink:1,window:255", "sink:4,window:252", "sink:16,window:240",
                 "shift:4,ctx:256"]),
    "gemma3": ("gemma3-", "Gemma 3 270M Q4_K_M GGUF (15 sliding layers, window 512, keep it; 3 global layers)", 768,
               ["full", "window:768", "sink:4,window:764", "shift:4,ctx:1360"]),
}
BIN = 256


def path(prefix: str, policy: str) -> Path:
    return OUT / f"{prefix}{policy.replace(':', '-').replace(',', '_')}.jsonl"


def losses(prefix: str, policy: str) -> list[float]:
    return [json.loads(line)["loss"] for line in path(prefix, policy).read_text().splitlines()]


def main() -> None:
    for model, (prefix, title, cache, policies) in MODELS.items():
        if path(prefix, "full").exists():
            report(model, prefix, title, cache, policies)


def report(model: str, prefix: str, title: str, cache: int, policies: list[str]) -> None:
    rows = {p: losses(prefix, p) for p in policies if path(prefix, p).exists()}
    n = min(len(v) for v in rows.values())
    bins = [(lo, min(lo + BIN, n + 1)) for lo in range(1, n + 1, BIN)]
    lines = ["Loss by position (nats/token, mean over bins of 256 tokens) over one stream of "
             f"{n + 1:,} tokens (seven /usr/share/common-licenses texts),",
             f"{title}, weights dequantised to float32 (--weights dequantised), 1 thread;",
             f"every policy but full holds {cache} tokens"
             + (" (shift:4,ctx:1360: about 680 to 1,360; a smaller ctx is refused,\n"
                "its shift could cut into the sliding layers' 512-token window)" if cache == 768 else "")
             + ", fed 16 tokens per forward.",
             "full: one 4,096-token window (every token sees all before it; the reference).", ""]
    for p, v in rows.items():
        after = v[cache:n]
        lines.append(f"{p:<20} mean {sum(v[:n]) / n:.4f}   tokens 1-{cache - 1} {sum(v[:cache - 1]) / (cache - 1):.4f}   "
                     f"tokens {cache}-{n} (past the cache) {sum(after) / len(after):.4f}   "
                     f"perplexity {2.718281828459045 ** (sum(v[:n]) / n):.2f}")
    lines += ["", "by position (bin start; one column per policy, same order as above):"]
    lines.append("      " + "".join(f"{p[:18]:>19}" for p in rows))
    for lo, hi in bins:
        lines.append(f"  {lo:>5}" + "".join(f"{sum(v[lo - 1:hi - 1]) / (hi - lo):>19.4f}" for v in rows.values()))
    lines += ["", f"where the first tokens leave the cache (bins of 32 tokens from {cache - 64 + 1}):"]
    lines.append("      " + "".join(f"{p[:18]:>19}" for p in rows))
    for lo in range(cache - 64 + 1, cache + 192 + 1, 32):
        lines.append(f"  {lo:>5}" + "".join(f"{sum(v[lo - 1:lo + 31]) / 32:>19.4f}" for v in rows.values()))
    text = "\n".join(lines) + "\n"
    (ROOT / f"benchmarks/cache/{model}.txt").write_text(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p, v in rows.items():
        ax.plot([lo for lo, _ in bins], [sum(v[lo - 1:hi - 1]) / (hi - lo) for lo, hi in bins], marker="o", ms=3,
                label=p)
    ax.axvline(cache, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("position in the stream (bin start, 256 tokens per bin)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{title.split(' (')[0]}, {cache}-token cache: loss by position per cache policy", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ROOT / f"docs/img/cache-{model}.png", dpi=110)


if __name__ == "__main__":
    main()
