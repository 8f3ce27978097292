"""``posenc bench``: time posenc's hot paths against their peers, side by side, and record the results."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from posenc.cli_options import (add_json, add_out, add_quiet, add_seed, add_threads, apply_threads, command_help,
                                hold_out, out_dir)

DEFAULT_SUITES = "rope,angles,additive,bias,attention,train,lab"


def canonical_command(args: argparse.Namespace, *, suites: list[str], size: str, allocators: list[str],
                      compile_peers: bool) -> str:
    """The command line that reproduces this run, every choice spelled out."""
    parts = ["posenc", "bench", "--size", size, "--suites", ",".join(suites), "--alloc", ",".join(allocators),
             "--compile" if compile_peers else "--no-compile", "--seed", str(args.seed)]
    if args.threads is not None:
        parts += ["--threads", str(args.threads)]
    for flag in ("out", "json", "markdown"):
        if getattr(args, flag):
            parts += [f"--{flag}", getattr(args, flag)]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from posenc.bench import SUITES, report
    from posenc.bench import run as run_bench

    from posenc.validation import check_output, did_you_mean, parse_list

    suites = parse_list(args.suites, "--suites")
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}{did_you_mean(unknown[0], SUITES)}; valid: {', '.join(SUITES)}")
    allocators = parse_list(args.alloc, "--alloc")
    for flag in ("out", "json", "markdown"):  # before the timings, not after
        check_output(getattr(args, flag, None), f"--{flag}", kind="dir" if flag == "out" else "file")
    folder = out_dir(args)
    with hold_out(folder):  # one run per results folder: two would overwrite each other's results
        apply_threads(args)
        size = "full" if args.full else args.size
        compile_peers = args.compile if args.compile is not None else size == "full"
        command = canonical_command(args, suites=suites, size=size, allocators=allocators, compile_peers=compile_peers)
        result = run_bench(suites, size=size, allocators=allocators, compile_peers=compile_peers, seed=args.seed,
                           command=command, progress=not args.quiet)
        to_stdout = args.json == "-"
        if to_stdout:
            print(json.dumps(result, indent=2))
        else:
            print(report.render_terminal(result))
        out_json, out_md = (None if to_stdout else args.json), args.markdown
        if folder is not None:
            out_json = out_json or str(folder / "results.json")
            out_md = out_md or str(folder / "results.md")
        report.write(result, json_path=out_json, markdown_path=out_md)
        for path in (out_json, out_md):
            if path:
                print(f"wrote {path}", file=sys.stderr if to_stdout else sys.stdout)
        return 0


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time position application, attention and training against peers",
                       description="Time posenc against peer forms (HF, torchtune, Meta, torch.compile, "
                                   "naive attention, torch.nn.Transformer) in one interleaved run; print medians "
                                   "and ratios to the copy floor and to each peer.",
                       **command_help(examples=("posenc bench                                    # ~2-3 min on 2 cores",
                                                "posenc bench --size tiny --suites rope,bias --json -",
                                                "posenc bench --full --out runs/bench")))
    p.add_argument("--suites", default=DEFAULT_SUITES,
                   help=f"comma-separated suites (default: {DEFAULT_SUITES}); also: compile "
                        "(eager vs torch.compile training and decoding, minutes of C++ builds)")
    p.add_argument("--size", choices=["tiny", "small", "full"], default="small",
                   help="problem sizes: tiny (seconds, for tests), small (default, ~2–3 min on 2 cores), full (the issue's sizes, ~8–12 min)")
    p.add_argument("--full", action="store_true", help="same as --size full")
    p.add_argument("--alloc", default="default,reuse",
                   help="allocator modes for in-process timings: default (glibc as is), reuse (freed memory kept)")
    p.add_argument("--compile", dest="compile", action="store_true", default=None,
                   help="also time torch.compile of the HF form (default: only with --full; needs a C++ compiler)")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    add_threads(p)
    add_seed(p, help="seed of the random inputs")
    add_out(p, default=None, help="folder for results.json and results.md")
    add_json(p)
    p.add_argument("--markdown", default=None, metavar="FILE", help="write the results as Markdown to FILE")
    add_quiet(p)
    p.set_defaults(func=run)
