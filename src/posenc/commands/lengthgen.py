"""``posenc lengthgen``: which position scheme keeps working beyond its training length?

Trains one model per (task, scheme, seed), evaluates exact match at every length
up to about twice the training length, and writes results.json, results.md and
accuracy.png. Runs the same under ``torchrun --nproc_per_node=N`` (data-parallel).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from posenc.commands.train import add_model_args, settings_from_args, set_threads


def _csv(text: str, name: str = "list", convert: Any = str) -> list[Any]:
    from posenc.validation import parse_list

    return parse_list(text, name, convert=convert)


def _seed(text: str) -> int:
    from posenc.validation import seed

    return seed(int(text), "seed")


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes INDEX/COUNT, e.g. 0/4, got {text!r}") from None
    return index, count


def run(args: argparse.Namespace) -> int:
    from posenc import lengthgen as lg
    from posenc.positions import names
    from posenc.tasks import task_names
    from posenc.train import init_distributed

    info = init_distributed()
    threads = set_threads(args.threads, info.world_size * max(1, args.jobs))
    began = time.perf_counter()
    meta: dict[str, Any] = {"command": "posenc " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                            "machine": lg.machine_note(threads, args.jobs)}
    if args.report_only:
        cells = lg.load_cells(args.out)
        meta["settings"] = cells[0].get("settings", {})
        paths = lg.write_report(cells, args.out, meta)
        print(f"report of {len(cells)} cells: {', '.join(str(p) for p in paths.values())}")
        return 0
    from posenc.validation import check_output

    check_output(args.out, "--out", kind="dir")
    tasks = _csv(args.task, "--task")
    for t in tasks:
        if t not in task_names():
            raise ValueError(f"unknown task {t!r}; valid tasks: {', '.join(task_names())}")
    schemes = names() if args.scheme == "all" else (
        _csv(args.scheme, "--scheme") if args.scheme is not None else lg.default_schemes())
    schemes = _csv(",".join(lg.resolve_scheme(s) for s in schemes), "--scheme (after aliases)")
    base = lg.QUICK if args.quick else lg.DEFAULT
    grid = lg.GridConfig(tasks=tuple(tasks), schemes=tuple(schemes), seeds=tuple(_csv(args.seeds, "--seeds", _seed)),
                         settings=settings_from_args(args, base))
    if info.is_main:
        print(f"lengthgen: {len(grid.cells())} cells — tasks {tasks}, schemes {schemes}, seeds {list(grid.seeds)}; "
              f"{threads} thread(s) × {info.world_size} process(es); writing to {args.out}")
    if args.jobs > 1:
        cells, finished = _run_jobs(args, grid)
    else:
        cells = lg.run_grid(grid, args.out, shard=args.shard, fresh=args.fresh, progress=not args.quiet,
                            log=print if info.is_main else (lambda _: None))
        finished = len(cells) == len([c for i, c in enumerate(grid.cells()) if i % args.shard[1] == args.shard[0]])
    meta.update(wall_seconds=time.perf_counter() - began, settings=grid.settings.__dict__,
                schemes=schemes, registered_schemes=names(), complete=finished)
    if info.is_main and cells:
        if args.shard[1] > 1:
            print(f"shard {args.shard[0]}/{args.shard[1]} done; collect every shard's cells/ into one directory "
                  "and run `posenc lengthgen --report-only --out DIR`")
        else:
            paths = lg.write_report(cells, args.out, meta)
            print(f"wrote {', '.join(str(p) for p in paths.values())}  ({meta['wall_seconds']:.0f} s)")
    if info.world_size > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0 if finished else 130


def _run_jobs(args: argparse.Namespace, grid: Any) -> tuple[list[dict[str, Any]], bool]:
    """Run the grid as ``args.jobs`` local processes (one shard each, one thread each), then collect."""
    import subprocess
    from dataclasses import asdict

    from posenc import lengthgen as lg

    if args.shard != (0, 1):
        raise ValueError("--jobs splits the whole grid into shards itself; do not combine it with --shard")
    argv = ["lengthgen", "--task", ",".join(grid.tasks), "--scheme", ",".join(grid.schemes),
            "--seeds", ",".join(map(str, grid.seeds)), "--out", str(args.out)]
    argv += ["--quick"] * args.quick + ["--fresh"] * args.fresh
    for flag in ("framing", "train_max", "test_max", "steps", "batch_size", "lr", "dim", "heads", "layers",
                 "dropout", "eval_examples"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    threads = args.threads or 1
    procs = [subprocess.Popen([sys.executable, "-m", "posenc.cli", *argv, "--shard", f"{i}/{args.jobs}",
                               "--threads", str(threads), "--quiet"]) for i in range(args.jobs)]
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # the children got the same Ctrl-C: let them save and stop
        codes = [p.wait() for p in procs]
    wanted = {lg.cell_name(*c) for c in grid.cells()}
    settings = asdict(grid.settings)
    cells = [c for c in lg.load_cells(args.out)
             if lg.cell_name(c["task"], c["scheme"], c["seed"]) in wanted and c.get("settings") == settings]
    order = {lg.cell_name(*c): i for i, c in enumerate(grid.cells())}
    cells.sort(key=lambda c: order[lg.cell_name(c["task"], c["scheme"], c["seed"])])
    return cells, all(code == 0 for code in codes) and len(cells) == len(wanted)


def register(sub: Any) -> None:
    p = sub.add_parser("lengthgen", help="length-generalisation benchmark across position schemes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="copy,reverse", help="comma list of tasks: copy,reverse,sort,addition,scan")
    p.add_argument("--scheme", default=None,
                   help="comma list of schemes (aliases nope=none, absolute=sinusoidal), or 'all'; "
                        "default: the paper's schemes that are registered (none,sinusoidal,learned,rope,alibi,t5)")
    p.add_argument("--seeds", default="0", help="comma list of seeds, e.g. 0,1,2")
    p.add_argument("--quick", action="store_true", help="a small grid that runs in a few minutes on 2 cores")
    p.add_argument("--out", default="lengthgen-report", help="output directory (cells/, checkpoints/, report)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                   help="run only cells i, i+N, … (split a grid across machines; then --report-only)")
    p.add_argument("--jobs", type=int, default=1,
                   help="run the grid as N local processes (one shard and thread each), then write one report")
    p.add_argument("--report-only", action="store_true", help="only (re)write the report from OUT/cells")
    p.add_argument("--fresh", action="store_true", help="retrain cells already finished in OUT")
    add_model_args(p)
    p.set_defaults(func=run)
