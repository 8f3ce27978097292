"""posenc's ``shift:KEEP`` cache policy side by side with llama.cpp's own context shift, token by token.

    python benchmarks/cache/shift_vs_llamacpp.py --build LLAMA_BUILD --out benchmarks/cache/llamacpp-shift

The same token ids (the model's own tokenizer on the licenses text) go through both programs one at a time:
llama.cpp by ``llama_shift.cpp`` (built here against ``--build``, a llama.cpp CMake build folder such as
``benchmarks/llamacpp/setup.sh`` makes), which applies llama-completion's rule — when ``n_past + 1 >= n_ctx``,
drop half of what follows the first KEEP tokens and move the rest back with ``llama_memory_seq_add`` (its
K-shift re-rotates the cached keys) — and posenc by ``perplexity``'s stream scorer under ``shift:KEEP,ctx:N``
with N = n_ctx − 1 (posenc moves when N tokens are held and one more comes: the same moments). Each token's
loss is recorded for both, and for posenc with the cache that never moves (``full``) as the reference for what
the shift costs.

If posenc moves its cache as llama.cpp does, the two programs' losses stay as close after each shift as before
the first one (they differ by their kernels' rounding: 4-bit weights, 8-bit activations in each); a cache moved
differently (other positions, other tokens kept) would open a gap at the first shift. ``results.md`` gives the
mean |Δ loss| between the programs in each stretch between shifts, and ``loss.png`` the loss by position.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "realmodels"))
TEXTS = [Path("/usr/share/common-licenses") / n for n in ("GPL-3", "GPL-2", "LGPL-2.1", "Apache-2.0")]


def build_probe(build: Path, out: Path) -> Path:
    from posenc.ropecheck.llamacpp import source_root

    root = source_root(build)
    libs = [build / "src" / "libllama.a", *(build / "ggml" / "src" / n for n in ("libggml.a", "libggml-cpu.a",
                                                                                  "libggml-base.a"))]
    exe = out / "llama_shift"
    subprocess.run(["g++", "-O2", "-std=c++17", str(HERE / "llama_shift.cpp"), f"-I{root / 'include'}",
                    f"-I{root / 'ggml' / 'include'}", *map(str, libs), "-fopenmp", "-lpthread", "-ldl", "-lm", "-o",
                    str(exe)], check=True)
    return exe


def shift_points(n: int, ctx: int, keep: int) -> list[int]:
    """Token indices at which llama-completion's rule moves the cache (before feeding that token)."""
    points, n_past = [], 0
    for i in range(n - 1):
        if n_past + 1 >= ctx:
            n_past -= (n_past - keep) // 2
            points.append(i)
        n_past += 1
    return points


def run_model(name: str, path: Path, exe: Path, tokens: int, ctx: int, keep: int) -> dict:
    import torch

    from posenc.commands.perplexity import score_stream
    from posenc.pretrained import load_pretrained

    torch.set_num_threads(1)
    pm = load_pretrained(path)
    text = "\n\n".join(p.read_text(encoding="utf-8", errors="replace") for p in TEXTS if p.is_file())
    ids = pm.tokenizer.encode(text)[:tokens]
    t0 = time.perf_counter()
    done = subprocess.run([str(exe), str(path), str(ctx), str(keep)], input=" ".join(map(str, ids)),
                          capture_output=True, text=True, check=True)
    llama_s = time.perf_counter() - t0
    llama = [float(line.split()[2]) for line in done.stdout.strip().splitlines()]
    out = {"model": name, "file": path.name, "tokens": len(ids), "ctx": ctx, "keep": keep,
           "shifts": shift_points(len(ids), ctx, keep), "llama.cpp": llama, "llama_seconds": llama_s}
    for policy in (f"shift:{keep},ctx:{ctx - 1}", "full"):
        losses: list[float] = []
        t0 = time.perf_counter()
        score_stream(pm.model, torch.tensor(ids), policy, quiet=True, per_token=losses)
        out[f"posenc {policy}"] = losses
        out[f"posenc {policy} seconds"] = time.perf_counter() - t0
    return out


def summarise(res: dict) -> list[str]:
    keep, ctx = res["keep"], res["ctx"]
    shift = res[f"posenc shift:{keep},ctx:{ctx - 1}"]
    full, llama = res["posenc full"], res["llama.cpp"]
    edges = [0, *res["shifts"], len(llama)]
    lines = [f"## {res['model']} ({res['file']}): {res['tokens']:,} tokens, llama.cpp n_ctx {ctx}, posenc "
             f"`shift:{keep},ctx:{ctx - 1}`, KEEP {keep}", "",
             f"llama.cpp moved its cache before tokens {', '.join(f'{p:,}' for p in res['shifts'])}; "
             f"time: llama.cpp {res['llama_seconds']:.0f} s, posenc "
             f"{res[f'posenc shift:{keep},ctx:{ctx - 1} seconds']:.0f} s (1 thread each, token by token).", "",
             "| tokens | mean loss llama.cpp | mean loss posenc shift | mean loss posenc full | mean \\|Δ\\| posenc "
             "shift vs llama.cpp | mean \\|Δ\\| posenc full vs llama.cpp |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    stretches = []
    for a, b in zip(edges, edges[1:]):
        if b <= a:
            continue
        d_shift = statistics.fmean(abs(x - y) for x, y in zip(shift[a:b], llama[a:b]))
        d_full = statistics.fmean(abs(x - y) for x, y in zip(full[a:b], llama[a:b]))
        stretches.append(d_shift)
        lines.append(f"| {a + 1:,}–{b:,} | {statistics.fmean(llama[a:b]):.4f} | {statistics.fmean(shift[a:b]):.4f} | "
                     f"{statistics.fmean(full[a:b]):.4f} | {d_shift:.4f} | {d_full:.4f} |")
    before, after = stretches[0], statistics.fmean(stretches[1:]) if len(stretches) > 1 else float("nan")
    lines += ["", f"posenc's shift tracks llama.cpp's as closely after the moves as before the first "
              f"(mean |Δ| {after:.4f} after vs {before:.4f} before: {after / before:.2f}×)"
              if after <= 1.5 * before else
              f"**posenc's shift departs from llama.cpp's after the first move** (mean |Δ| {after:.4f} after vs "
              f"{before:.4f} before: {after / before:.2f}×)", ""]
    return lines


def plot(results: list[dict], path: Path) -> None:
    """|Δ loss| against llama.cpp by position (mean of the last 64 tokens): posenc's shift, posenc's unmoved cache."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 3.0 * len(results)), squeeze=False)
    for ax, res in zip(axes[:, 0], results):
        keep, ctx = res["keep"], res["ctx"]
        llama = res["llama.cpp"]
        smooth = lambda xs, w=64: [statistics.fmean(xs[max(0, i - w + 1):i + 1]) for i in range(len(xs))]  # noqa: E731
        x = range(1, len(llama) + 1)
        for key, label, style in ((f"posenc shift:{keep},ctx:{ctx - 1}", f"posenc shift:{keep},ctx:{ctx - 1}", "-"),
                                  ("posenc full", "posenc, cache never moved", "--")):
            ax.plot(x, smooth([abs(a - b) for a, b in zip(res[key], llama)]), label=label, ls=style, lw=1.2)
        for p in res["shifts"]:
            ax.axvline(p, color="black", lw=0.5, ls=":")
        ax.set_title(f"{res['model']}: |loss − llama.cpp's loss with its context shift| by position "
                     "(mean of the last 64 tokens); dotted: the shifts", fontsize=9)
        ax.set_xlabel("token")
        ax.set_ylabel("|Δ loss| (nats)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    from as_stored import _MODEL, model_gguf

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, help="a llama.cpp CMake build folder (not needed with --report)")
    p.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    p.add_argument("--tokens", type=int, default=1536)
    p.add_argument("--ctx", type=int, default=512, help="llama.cpp's n_ctx (a multiple of 256; Gemma 3's 512-token "
                   "sliding window needs 1,536: posenc's shift must keep a whole window)")
    p.add_argument("--keep", type=int, default=4)
    p.add_argument("--work", type=Path, default=Path("/tmp/posenc-llamacpp-bench"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report", action="store_true", help="only rebuild results.md and loss.png from --out's JSON")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in [] if args.report else args.models:
        exe = build_probe(args.build, args.work)
        _MODEL[0] = name
        res = run_model(name, model_gguf(args.work), exe, args.tokens, args.ctx, args.keep)
        res["command"] = f"python benchmarks/cache/shift_vs_llamacpp.py {' '.join(sys.argv[1:])}"
        res["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        (args.out / f"{name}.json").write_text(json.dumps(res) + "\n", encoding="utf-8")
    # every model recorded in --out so far (a model needing another context is run by a second invocation)
    results = [json.loads(f.read_text(encoding="utf-8")) for f in sorted(args.out.glob("*.json"), reverse=True)]
    lines = ["# posenc's `shift:KEEP` against llama.cpp's context shift", ""]
    lines += [f"- {r['model']}: `{r['command']}` ({r['when']})" for r in results] + [""]
    for res in results:
        lines += summarise(res)
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot(results, args.out / "loss.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
