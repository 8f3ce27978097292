"""Decoding after a long prompt (SmolLM2-135M Q4_1, as stored): ms per token by prompt length, two trees paired.

Every passkey and retrieval trial of ``posenc extend`` is a long prompt followed by a few greedy tokens, so what a
decoding step costs *after* 4k–16k tokens matters as much as after 128. This runs, in fresh processes that
alternate between the trees given with ``--tree`` (e.g. the current checkout and an older one from ``git
worktree``), one prefill of each prompt length and then ``--tokens`` greedy steps, and prints the median ms per
decoded token per tree and length, and their ratio. The generated ids of every tree are compared (they must be
equal: a faster cache that changed the tokens would be a bug).

Usage::

    git worktree add /tmp/posenc-old <commit>
    python benchmarks/realmodels/decode_long.py --tree . --tree /tmp/posenc-old --lengths 128,4096,8192 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import gguf_path  # noqa: E402


def worker(length: int, tokens: int, threads: int) -> None:
    import torch

    from posenc.pretrained import load_pretrained

    torch.set_num_threads(threads)
    m = load_pretrained(gguf_path()).model
    prompt = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(length))
    with torch.inference_mode():
        cache = m.new_cache()
        nxt = int(m.logits(m.hidden(prompt, cache=cache)[:, -1]).argmax(-1))
        ids, times = [nxt], []
        for _ in range(tokens):
            begin = time.perf_counter()
            nxt = int(m.logits(m.hidden(torch.tensor([[nxt]]), cache=cache)[:, -1]).argmax(-1))
            times.append(time.perf_counter() - begin)
            ids.append(nxt)
    print(json.dumps({"ms_per_token": 1e3 * statistics.median(times), "ids": ids}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True, help="a posenc checkout (its src/ is imported)")
    p.add_argument("--lengths", default="128,4096,8192")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        return worker(args.worker, args.tokens, args.threads)
    trees = [str(Path(t).resolve()) for t in args.tree]
    lengths = [int(x) for x in args.lengths.split(",")]
    results: dict[tuple[str, int], list[float]] = {}
    ids: dict[tuple[str, int], list[int]] = {}
    for r in range(args.rounds):
        for n in lengths:
            for tree in trees if r % 2 == 0 else trees[::-1]:
                env = {**os.environ, "PYTHONPATH": str(Path(tree) / "src"), "OMP_NUM_THREADS": str(args.threads)}
                out = subprocess.run([sys.executable, __file__, "--tree", tree, "--worker", str(n), "--tokens",
                                      str(args.tokens), "--threads", str(args.threads)],
                                     env=env, capture_output=True, text=True, check=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                results.setdefault((tree, n), []).append(row["ms_per_token"])
                ids.setdefault((tree, n), row["ids"])
                print(f"round {r}, {n:6d} tokens, {tree}: {row['ms_per_token']:.1f} ms/token", flush=True)
    print(f"\n{args.threads} thread(s), {args.tokens} decoded tokens, medians over {args.rounds} rounds")
    print("| prompt tokens | " + " | ".join(f"ms/token {Path(t).name}" for t in trees) + " | ratio (first ÷ each) "
          "| same ids |")
    print("|---:|" + "---:|" * len(trees) + "---|---|")
    for n in lengths:
        ms = [statistics.median(results[(t, n)]) for t in trees]
        same = all(ids[(t, n)] == ids[(trees[0], n)] for t in trees)
        print(f"| {n:,} | " + " | ".join(f"{x:.1f}" for x in ms) + " | "
              + ", ".join(f"{ms[0] / x:.2f}" for x in ms[1:]) + f" | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
