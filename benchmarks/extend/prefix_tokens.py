"""Tokens a retrieval cell reads with and without shared filler prefixes (``posenc.extend.passkey.PrefixCaches``).

Counted from the prompts alone (no model): the grid's seeded trials, its keep rule and budget.

    .venv/bin/python benchmarks/extend/prefix_tokens.py MODEL.gguf|HF_FOLDER [--lengths 4096,8192] [--trials 20]
"""

from __future__ import annotations

import argparse

from posenc.extend.retrieval import DEPTH_MODES, TASKS, shared_prefix_tokens
from posenc.pretrained.tokenizer import load_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--lengths", default="4096,8192,12288,16384,32768")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--depths", choices=DEPTH_MODES, default="grid",
                   help="the needle depths of the trials counted (default grid: the mode of the recorded table)")
    args = p.parse_args()
    tokenizer = load_tokenizer(args.model)
    print("| task | length | tokens, whole prompts | tokens read, shared prefixes | fewer |")
    print("| --- | --- | --- | --- | --- |")
    for task in TASKS:
        for length in (int(n) for n in args.lengths.split(",")):
            whole, read = shared_prefix_tokens(tokenizer, task, length, args.trials, depths=args.depths)
            print(f"| {task} | {length:,} | {whole:,} | {read:,} | {whole / read:.2f}× |")


if __name__ == "__main__":
    main()
