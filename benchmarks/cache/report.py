"""Summarise the cache benchmarks' per-token losses: loss by position per cache policy (text + figure).

    python benchmarks/cache/report.py [OUT]   (OUT: the runs' folder, default /tmp/posenc-cache)

Two sets of runs:

* ``run.sh`` / ``run_gemma3.sh`` (4,096 tokens, OUT/POLICY.jsonl and OUT/gemma3-POLICY.jsonl) →
  benchmarks/cache/smollm2.txt, gemma3.txt and docs/img/cache-smollm2.png, cache-gemma3.png;
* ``run_long.sh`` (streams of at least 16 times the cache, OUT/long/MODEL-POLICY.jsonl) →
  benchmarks/cache/long/MODEL.json.gz (every scored token's loss per policy, rounded to 1e-4 nats, and each
  run's summary: the recorded result), long/MODEL.txt and docs/img/cache-long-MODEL.png, rebuilt from the
  .json.gz alone when the per-token files are gone.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/posenc-cache")
TEXT = "seven /usr/share/common-licenses texts"
SMOLLM2 = "SmolLM2-135M-Instruct Q4_1 GGUF"
GEMMA3 = "Gemma 3 270M Q4_K_M GGUF (15 sliding layers, window 512, keep it; 3 global layers)"
GEMMA3_CACHE = ("(shift:4,ctx:1360: about 680 to 1,360; a smaller ctx is refused,\n"
                "its shift could cut into the sliding layers' 512-token window)")
#: name → (folder, file prefix, title, cache, policies, tokens per forward, bin, what full is, note on the cache)
RUNS = {
    "smollm2": ("", "", SMOLLM2, 256, ["full", "window:256", "sink:1,window:255", "sink:4,window:252",
                                        "sink:16,window:240", "shift:4,ctx:256"], 16, 256,
                "one 4,096-token window (every token sees all before it; the reference)", ""),
    "gemma3": ("", "gemma3-", GEMMA3, 768, ["full", "window:768", "sink:4,window:764", "shift:4,ctx:1360"], 16, 256,
               "one 4,096-token window (every token sees all before it; the reference)", GEMMA3_CACHE),
    "long/smollm2": ("long", "smollm2-", SMOLLM2, 1024, ["full", "window:1024", "sink:1,window:1023",
                                                         "sink:4,window:1020", "sink:16,window:1008",
                                                         "shift:4,ctx:1024"], 32, 1024,
                     "windows of 8,192 tokens (the trained context) scored whole, a fresh one every 8,192 tokens "
                     "(the reference within the trained context)", ""),
    "long/gemma3": ("long", "gemma3-", GEMMA3, 768, ["full", "window:768", "sink:4,window:764", "shift:4,ctx:1360"],
                    32, 1024, "windows of 8,192 tokens scored whole, a fresh one every 8,192 tokens (the reference "
                    "within a context Gemma 3 was trained on)", GEMMA3_CACHE),
    "long/smollm2-bible": ("long", "smollm2-bible-", SMOLLM2, 1024, ["full", "window:1024", "sink:4,window:1020",
                                                                     "shift:4,ctx:1024"], 32, 4096,
                           "windows of 8,192 tokens (the trained context) scored whole, a fresh one every 8,192 "
                           "tokens (the reference within the trained context)", ""),
}
#: the text each run read, where it is not the licences
TEXTS = {"long/smollm2-bible": "the World English Bible, Genesis to Numbers, from Debian's SWORD module"}


def path(folder: str, prefix: str, policy: str) -> Path:
    return OUT / folder / f"{prefix}{policy.replace(':', '-').replace(',', '_')}.jsonl"


def losses(p: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in p.read_text().splitlines()]


def record(name: str) -> Path:
    """The committed record of a long run: benchmarks/cache/long/MODEL.json.gz."""
    return ROOT / "benchmarks" / "cache" / f"{name}.json.gz"


def main() -> None:
    for name, (folder, prefix, title, cache, policies, step, bin_, full, note) in RUNS.items():
        rows = {p: losses(path(folder, prefix, p)) for p in policies if path(folder, prefix, p).exists()}
        if name.startswith("long/"):
            if len(rows) == len(policies):  # a finished run: its losses and summaries become the record
                summaries = {p: json.loads(path(folder, prefix, p).with_suffix(".json").read_text()) for p in rows}
                record(name).parent.mkdir(parents=True, exist_ok=True)
                data = json.dumps({"losses": {p: [round(x, 4) for x in v] for p, v in rows.items()},
                                   "runs": summaries}).encode()
                with gzip.GzipFile(record(name), "wb", mtime=0) as f:  # the same bytes for the same losses
                    f.write(data)
            if record(name).exists():  # the report is always the record's, whether just written or not
                with gzip.open(record(name), "rt") as f:
                    rows = json.load(f)["losses"]
        if "full" in rows:
            report(name, rows, title, cache, step, bin_, full, note)


def mean(v: list[float]) -> float:
    return sum(v) / len(v)


def report(name: str, rows: dict[str, list[float]], title: str, cache: int, step: int, bin_: int, full: str,
           note: str) -> None:
    n = min(len(v) for v in rows.values())
    bins = [(lo, min(lo + bin_, n + 1)) for lo in range(1, n + 1, bin_)]
    lines = [f"Loss by position (nats/token, mean over bins of {bin_:,} tokens) over one stream of "
             f"{n + 1:,} tokens ({TEXTS.get(name, TEXT)}),",
             f"{title}, weights dequantised to float32 (--weights dequantised), 1 thread;",
             f"every policy but full holds {cache:,} tokens" + (f" {note}" if note else "")
             + f", fed {step} tokens per forward; the stream is {(n + 1) / cache:.0f}x the cache.",
             f"full: {full}.", ""]
    for p, v in rows.items():
        after = v[cache:n]
        lines.append(f"{p:<20} mean {mean(v[:n]):.4f}   tokens 1-{cache - 1} {mean(v[:cache - 1]):.4f}   "
                     f"tokens {cache}-{n} (past the cache) {mean(after):.4f}   perplexity {math.exp(mean(v[:n])):.2f}")
    if name.startswith("long/"):  # drift: each policy's loss over the quarters of the stream past the cache
        q = [cache + (n - cache) * k // 4 for k in range(5)]
        lines += ["", "past the cache, by quarter of the stream (tokens):",
                  f"{'':<20}" + "".join(f"{f'{q[k]}-{q[k + 1] - 1}':>15}" for k in range(4))]
        lines += [f"{p:<20}" + "".join(f"{mean(v[q[k]:q[k + 1]]):>15.4f}" for k in range(4)) for p, v in rows.items()]
    lines += ["", "by position (bin start; one column per policy, same order as above):"]
    lines.append("      " + "".join(f"{p[:18]:>19}" for p in rows))
    for lo, hi in bins:
        lines.append(f"  {lo:>5}" + "".join(f"{mean(v[lo - 1:hi - 1]):>19.4f}" for v in rows.values()))
    lines += ["", f"where the first tokens leave the cache (bins of 32 tokens from {cache - 64 + 1}):"]
    lines.append("      " + "".join(f"{p[:18]:>19}" for p in rows))
    for lo in range(cache - 64 + 1, cache + 192 + 1, 32):
        lines.append(f"  {lo:>5}" + "".join(f"{mean(v[lo - 1:lo + 31]):>19.4f}" for v in rows.values()))
    text = "\n".join(lines) + "\n"
    (ROOT / f"benchmarks/cache/{name}.txt").write_text(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p, v in rows.items():
        ax.plot([lo for lo, _ in bins], [mean(v[lo - 1:hi - 1]) for lo, hi in bins], marker="o", ms=3, label=p)
    ax.axvline(cache, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(f"position in the stream (bin start, {bin_:,} tokens per bin)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{title.split(' (')[0]}, {cache:,}-token cache, {n + 1:,}-token stream: loss by position per "
                 "cache policy", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ROOT / f"docs/img/cache-{name.replace('/', '-')}.png", dpi=110)


if __name__ == "__main__":
    main()
