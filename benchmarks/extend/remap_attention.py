"""Time the remapping methods' causal attention against plain RoPE's SDPA, bfloat16 on the CPU, in one run.

    PYTHONPATH=src python benchmarks/extend/remap_attention.py [--lengths 4096,8192,16384] [--repeats 3]

One layer of SmolLM2-135M's shapes (9 query heads, 3 key/value heads, head width 64), one sequence, causal,
positions 0 … T − 1, 1 torch thread. Per length, interleaved rounds of: plain causal SDPA on the same (rotated
once) queries and keys, and for each remapping scheme (the options ``posenc extend`` gives SmolLM2 at factor 2)
``remap_attention`` two ways — ``spans``: the path a single sequence takes (keys all queries of a block share read
without a mask), and ``masked``: the same call with an all-true padding mask, which takes the per-piece masked
path (one (512, Tk) mask per piece and block, the only path before 2026-12-05). Prints medians and the ratios to
SDPA; also checks that the two paths agree (largest difference, in units of the output's bfloat16 spacing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from posenc.extend.methods import method_options
from posenc.positions import build
from posenc.positions.remap import remap_attention

SCHEMES = ("self-extend", "rerope", "rerope-leaky", "string", "dca")
HEADS, KV_HEADS, DIM, L0 = 9, 3, 64, 8192


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,8192,16384")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, 1 thread, bfloat16")
    print("| T | method | path | median s | ÷ SDPA | paths differ by (bf16 ulps of max) |")
    print("|---|---|---|---|---|---|")
    for length in (int(x) for x in args.lengths.split(",")):
        gen = torch.Generator().manual_seed(length)
        q = torch.randn(1, HEADS, length, DIM, generator=gen).bfloat16()
        k = torch.randn(1, KV_HEADS, length, DIM, generator=gen).bfloat16()
        v = torch.randn(1, KV_HEADS, length, DIM, generator=gen).bfloat16()
        pos = torch.arange(length)
        everyone = torch.ones(1, 1, 1, length, dtype=torch.bool)
        schemes = {name: build(name, dim=HEADS * DIM, num_heads=HEADS, base=100000.0,
                               **method_options(name, factor=2.0, original_max_len=L0)) for name in SCHEMES}
        ke, ve = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1)
        runs = {("rope", "SDPA"): lambda: torch.nn.functional.scaled_dot_product_attention(q, ke, ve, is_causal=True)}
        for name, s in schemes.items():
            runs[(name, "spans")] = lambda s=s: remap_attention(s, q, k, v, pos, pos, scale=DIM**-0.5, causal=True)
            runs[(name, "masked")] = lambda s=s: remap_attention(s, q, k, v, pos, pos, scale=DIM**-0.5, causal=True,
                                                                 allowed=everyone)
        times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
        for _ in range(args.repeats):
            for key, fn in runs.items():
                times[key].append(timed(fn))
        sdpa = statistics.median(times[("rope", "SDPA")])
        for (name, path), ts in times.items():
            differ = ""
            if path == "spans":
                a = runs[(name, "spans")]()[0].float()
                b = runs[(name, "masked")]()[0].float()
                differ = f"{float((a - b).abs().max()) / (float(b.abs().max()) * 2**-8):.2f}"
            print(f"| {length} | {name} | {path} | {statistics.median(ts):.3f} | {statistics.median(ts) / sdpa:.2f} |"
                  f" {differ} |", flush=True)


if __name__ == "__main__":
    main()
