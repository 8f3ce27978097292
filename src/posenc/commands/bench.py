"""``posenc bench``: time posenc's hot paths against their peers, side by side, and record the results."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

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
    import torch

    from posenc.bench import SUITES, report
    from posenc.bench import run as run_bench

    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; valid: {', '.join(SUITES)}")
    allocators = [a.strip() for a in args.alloc.split(",") if a.strip()]
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    size = "full" if args.full else args.size
    compile_peers = args.compile if args.compile is not None else size == "full"
    command = canonical_command(args, suites=suites, size=size, allocators=allocators, compile_peers=compile_peers)
    result = run_bench(suites, size=size, allocators=allocators, compile_peers=compile_peers, seed=args.seed,
                       command=command, progress=not args.quiet)
    print(report.render_terminal(result))
    out_json, out_md = args.json, args.markdown
    if args.out:
        out_json = out_json or f"{args.out}/results.json"
        out_md = out_md or f"{args.out}/results.md"
    report.write(result, json_path=out_json, markdown_path=out_md)
    for path in (out_json, out_md):
        if path:
            print(f"wrote {path}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time position application, attention and training against peers",
                       description="Time posenc against peer forms (HF, torchtune, Meta, torch.compile, "
                                   "naive attention, torch.nn.Transformer) in one interleaved run; print medians "
                                   "and ratios to the copy floor and to each peer.")
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
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="directory for results.json and results.md")
    p.add_argument("--json", default=None, help="write the results as JSON here")
    p.add_argument("--markdown", default=None, help="write the results as Markdown here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
