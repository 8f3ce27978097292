"""``posenc inspect PATH``: measure a real checkpoint's position and token embeddings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from posenc.cli_options import (add_force, add_json, add_out, add_seed, command_help, hold_out, json_to_stdout,
                                out_dir, write_json)
from posenc.validation import check_output, dumps, int_at_least, seed_arg


def run(args: argparse.Namespace) -> int:
    from posenc.inspect import inspect_checkpoint, load_checkpoint
    from posenc.inspect.report import compact, summary_lines, write_report

    if args.list_tensors:
        ckpt = load_checkpoint(args.path)
        for name in ckpt.names():
            entry = ckpt.entries[name]
            print(f"{name:<70} {entry.dtype:<5} {list(entry.shape)}")
        return 0
    check_output(args.out, "--out", kind="dir")
    check_output(args.json, "--json")
    rows = None
    if args.rows:
        start, _, stop = args.rows.partition(":")
        try:
            rows = (int(start or 0), int(stop) if stop else None)
        except ValueError:
            raise ValueError(f"--rows must look like START:STOP (e.g. 0:128), got {args.rows!r}") from None
    tokens = [t for t in args.tokens.split(",") if t] if args.tokens else None
    folder = out_dir(args)
    from posenc.progress import Stages

    # one run per report folder (two would mix their figures and inspect.json); another command's is refused
    with hold_out(folder, command="inspect", force=args.force):
        # past ~2 s its stages are shown on stderr (reading, finding the tables, measuring them, the figures)
        with Stages(f"inspect {Path(args.path).name}") as stages:
            result = inspect_checkpoint(args.path, position_tensor=args.position_tensor,
                                        token_tensor=args.token_tensor, head_tensor=args.head_tensor,
                                        position_offset=args.position_offset, tokens=tokens, k=args.neighbours,
                                        max_positions=args.max_positions, seed=args.seed, sample=args.sample,
                                        rows=rows)
            if folder is not None:
                stages.stage("drawing the figures and writing the report")
            page = write_report(result, folder) if folder is not None else None
        to_stdout = json_to_stdout(args)
        if not to_stdout:
            print("\n".join(summary_lines(result)))
        write_json(args, compact(result))
        if page:
            print(f"report      {page}", file=sys.stderr if to_stdout else sys.stdout)
        return 0


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="measure a checkpoint's position and token embeddings (safetensors, GGUF or "
                                                 "CTranslate2)",
                       description="Find the position table, token table and output head of a safetensors "
                                   "checkpoint (file, shard index, or folder with config.json), a llama.cpp "
                                   ".gguf file (config from its metadata, tables dequantised) or a CTranslate2 "
                                   "model folder (model.bin: faster-whisper's Whisper) and measure them. "
                                   "Pickle-based files are refused.",
                       **command_help(examples=("posenc inspect smollm2",
                                                "posenc inspect gpt2/model.safetensors --out runs/inspect-gpt2",
                                                "posenc inspect model.gguf --list-tensors")))
    p.add_argument("path", help="a .safetensors file, a *.safetensors.index.json, a model folder, a .gguf file, "
                                "or a CTranslate2 model folder")
    add_json(p, help="write the measurements as JSON to FILE ('-': print them instead of the summary)")
    add_out(p, default=None, help="write index.html, inspect.json and PNG figures into this folder")
    p.add_argument("--position-tensor", metavar="NAME", help="name of the position table (overrides the search)")
    p.add_argument("--token-tensor", metavar="NAME", help="name of the token table (overrides the search)")
    p.add_argument("--head-tensor", metavar="NAME", help="name of the output head (overrides the search)")
    p.add_argument("--position-offset", type=int_at_least(0), metavar="K",
                   help="rows before position 0 in the position table (OPT/BART: 2, detected from config)")
    p.add_argument("--rows", metavar="START:STOP",
                   help="measure only these positions of a learned table (e.g. 0:128, the fine-tuned ones)")
    p.add_argument("--tokens", metavar="W1,W2,...", help="words (or #id) to list neighbours for")
    p.add_argument("--neighbours", type=int_at_least(1), default=8, metavar="K", help="neighbours per list (default 8)")
    p.add_argument("--max-positions", type=int_at_least(2), default=1024, metavar="N",
                   help="positions measured for a rotary scheme read from config.json or GGUF metadata "
                        "(default 1024)")
    p.add_argument("--sample", type=int_at_least(1), default=1000, metavar="N",
                   help="token rows sampled to count how often a row tops its own dot-product list (default 1000)")
    add_seed(p, help="seed of the random baseline and samples")
    p.add_argument("--list-tensors", action="store_true", help="list the checkpoint's tensors and exit")
    add_force(p)
    p.set_defaults(func=run)
