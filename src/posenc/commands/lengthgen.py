"""``posenc lengthgen``: which position scheme keeps working beyond its training length?

Trains one model per (task, scheme, seed) until it learns the task on the
training lengths (the convergence gate) or its step budget runs out, tests
exact match at every length up to about twice the training length, and writes
results.json, results.md and accuracy.png: per-cell Wilson intervals,
bootstrap intervals over seeds and test examples, a paired-bootstrap ranking
with ties, the convergence table and the reading of the published ranking.

Examples::

    posenc lengthgen --quick --jobs 2                       # pipeline check, minutes
    posenc lengthgen --task copy,reverse --jobs 2           # 12 schemes × 3 seeds per task
    posenc lengthgen --shard 0/4 --out part                 # … 1/4, 2/4, 3/4 elsewhere; copy cells/ together
    posenc lengthgen --report-only --out part               # then the report of what is there

Finished cells are never recomputed: the same command continues an interrupted grid.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from posenc.cli_options import (add_force, add_out, add_position, add_quiet, add_threads, key_value, key_values,
                                out_dir)
from posenc.validation import finite_float, int_at_least

#: Most optimiser updates one cell may ask for: a larger --steps is a typo, not a plan.
MAX_STEPS = 10**9


def _csv(text: str, what: str) -> list[str]:
    """A comma list with no empty or repeated items (posenc.validation.parse_list)."""
    from posenc.validation import parse_list

    return parse_list(text, what)


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes INDEX/COUNT, e.g. 0/4, got {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise argparse.ArgumentTypeError(f"--shard {text}: need 0 <= INDEX < COUNT")
    return index, count


def set_threads(threads: int | None) -> int:
    """torch intra-op threads: ``threads``, else 1 (the models are tiny; use --jobs for more cores)."""
    import torch

    n = threads or 1
    torch.set_num_threads(n)
    return n


def add_cell_args(p: argparse.ArgumentParser) -> None:
    """Options of one cell, shared by ``train`` and ``lengthgen`` (unset ones keep the preset's value)."""
    g = p.add_argument_group("model, training and gate (default: the task's preset)")
    positive = int_at_least(1)
    g.add_argument("--task-option", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="an option of the task, repeatable, given to every chosen task that takes it "
                        "(e.g. answer_order=msd for addition, num_symbols=26 for copy/reverse/sort)")
    g.add_argument("--framing", choices=["decoder", "encoder-decoder"], default=None)
    g.add_argument("--train-max", type=positive, default=None, help="longest training length")
    g.add_argument("--test-max", type=positive, default=None, help="longest tested length")
    g.add_argument("--steps", type=int_at_least(1, MAX_STEPS), default=None, help="step budget of a cell")
    g.add_argument("--batch-size", type=positive, default=None)
    g.add_argument("--lr", type=finite_float(above=0), default=None)
    g.add_argument("--dim", type=positive, default=None)
    g.add_argument("--heads", type=positive, default=None)
    g.add_argument("--layers", type=positive, default=None)
    g.add_argument("--dropout", type=finite_float(minimum=0, below=1), default=None)
    g.add_argument("--eval-examples", type=positive, default=None, help="test examples per length")
    g.add_argument("--eval-every", type=positive, default=None, help="convergence-gate check every N steps")
    g.add_argument("--gate-examples", type=positive, default=None,
                   help="held-out examples per training length that the convergence gate evaluates")
    g.add_argument("--threshold", type=finite_float(above=0), default=None,
                   help="gate: stop once held-out in-range exact match reaches this (default 0.99)")
    add_threads(g, help="torch threads per process (default 1: the models are tiny; use --jobs for more cores)")
    add_quiet(g)


def given_task_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--task-option`` pairs as a dict; a key given twice is an error naming it."""
    return key_values(getattr(args, "task_option", None), "--task-option")


def check_task_options(args: argparse.Namespace, tasks: list[str]) -> None:
    """Every ``--task-option`` is taken by at least one of ``tasks``, else an error naming what each takes."""
    from posenc.tasks import task_option_names

    takes = {t: task_option_names(t) for t in tasks}
    for key in given_task_options(args):
        if not any(key in names for names in takes.values()):
            what = "; ".join(f"{t}: {', '.join(n) or 'none'}" for t, n in takes.items())
            raise ValueError(f"--task-option {key}: no chosen task takes it (the options of each: {what})")


def config_from_args(args: argparse.Namespace, base: Any, task: str) -> Any:
    """``base`` (``task``'s CellConfig) with the options given on the command line (of the
    ``--task-option`` pairs, those ``task`` takes); the task is built once here, so a bad value fails
    before any work."""
    from posenc.tasks import task_option_names

    names = task_option_names(task)
    options = {**base.task_options, **{k: v for k, v in given_task_options(args).items() if k in names}}
    config = base.with_changes(
        task_options=options, framing=args.framing, train_max=args.train_max, test_max=args.test_max,
        batch_size=args.batch_size, eval_examples=args.eval_examples, gate_examples=args.gate_examples,
        threshold=args.threshold,
        model={"dim": args.dim, "num_heads": args.heads, "num_layers": args.layers, "dropout": args.dropout},
        train={"steps": args.steps, "lr": args.lr, "eval_every": args.eval_every})
    config.task(task)
    return config


def grid_from_args(args: argparse.Namespace) -> Any:
    from posenc import lengthgen as lg
    from posenc.tasks import task_class, task_names

    tasks = _csv(args.task, "--task")
    for t in tasks:
        if t not in task_names():
            task_class(t)  # the registry's refusal: the valid tasks and the closest name
    schemes = args.position  # canonical names, aliases resolved, 'all' expanded (cli_options.position_names)
    from posenc.validation import parse_list, seed

    def one_seed(text: str) -> int:
        try:
            return seed(int(text), "--seeds")
        except ValueError as err:
            raise ValueError(f"--seeds takes integers, got {text!r}" if "int()" in str(err) else str(err)) from None

    seeds = parse_list(args.seeds, "--seeds", convert=one_seed)
    check_task_options(args, tasks)  # an option no chosen task takes is an error before any work
    configs = {t: config_from_args(args, lg.QUICK if args.quick else lg.preset(t), t) for t in tasks}
    return lg.GridConfig(tasks=tuple(tasks), schemes=tuple(schemes), seeds=tuple(seeds), per_task=configs)


def run(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out
    from posenc.train import init_distributed
    from posenc.validation import check_output

    info = init_distributed()  # under torchrun every cell trains data-parallel; rank 0 writes
    try:
        grid = grid_from_args(args)
        out = out_dir(args)
        if args.jobs > 1 and args.shard != (0, 1) and not args.report_only:
            raise ValueError("--jobs splits the grid into shards itself; do not combine it with --shard")
        if args.jobs > 1 and out is None and not args.report_only:
            raise ValueError("--jobs N gathers its processes' cells in OUT/cells: give --out DIR, not -")
        if out is not None and not args.report_only:
            check_output(out, "--out", kind="dir")  # before any cell trains (and before the lock makes the folder)
        if args.report_only and out is not None and not out.is_dir():
            raise FileNotFoundError(f"--report-only: {out} is not a folder of cells (give the --out of a lengthgen run)")
        # one run per folder for the whole grid: rank 0 or the --jobs parent holds it; the cells' checkpoint
        # folders (OUT/checkpoints/<cell>) are locked by train itself, each in its own .lock
        with hold_out(out if info.is_main else None, shards="lengthgen", command="lengthgen", force=args.force):
            return _run(args, grid, out, is_main=info.is_main)
    finally:
        if info.world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()


def _run(args: argparse.Namespace, grid: Any, out: Any, *, is_main: bool) -> int:
    from posenc import lengthgen as lg

    threads = set_threads(args.threads)
    meta: dict[str, Any] = {"command": "posenc " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                            "machine": lg.machine_note(threads, args.jobs)}
    if args.report_only:  # the report of the grid these options name, from the cells finished so far
        if out is None:
            raise ValueError("--report-only reads OUT/cells: give --out DIR, not -")
        cells = lg.load_cells(out, grid)
        have = {lg.cell_name(c["task"], c["scheme"], c["seed"]) for c in cells}
        meta.update(config=grid.identities(), expected=len(grid.cells()),
                    missing=[lg.cell_name(*c) for c in grid.cells() if lg.cell_name(*c) not in have])
        paths = lg.write_report(cells, out, meta)
        print(f"report of {len(cells)} of {len(grid.cells())} cells: {', '.join(str(p) for p in paths.values())}")
        return 0
    todo = grid.shard(*args.shard)
    if is_main:
        print(f"lengthgen: {len(todo)} cells — tasks {list(grid.tasks)}, positions {list(grid.schemes)}, "
              f"seeds {list(grid.seeds)}; {args.jobs} job(s) × {threads} thread(s); "
              + (f"writing to {out}" if out else "writing no files"), flush=True)
    began = time.perf_counter()
    quiet = args.quiet or not is_main
    log = (lambda _: None) if quiet else print
    if args.jobs > 1:
        lg.run_jobs(grid, out, jobs=args.jobs, fresh=args.fresh, threads=threads)
        cells = lg.load_cells(out, grid)
        wanted = grid.cells()
    else:
        cells = lg.run_grid(grid, out, shard=args.shard, fresh=args.fresh, progress=not quiet, log=log)
        wanted = todo
    have = {lg.cell_name(c["task"], c["scheme"], c["seed"]) for c in cells}
    missing = [lg.cell_name(*c) for c in wanted if lg.cell_name(*c) not in have]
    meta.update(wall_seconds=time.perf_counter() - began, config=grid.identities(), expected=len(wanted),
                missing=missing)
    if not cells:
        return 130
    if not is_main:  # another rank of a torchrun: rank 0 reports
        return 130 if missing else 0
    if out is None:
        print("\n".join(lg.headline(lg.summarise(cells))))
    elif args.shard[1] > 1:
        print(f"shard {args.shard[0]}/{args.shard[1]}: {len(cells)} cells in {out}/cells; when every shard is done, "
              f"copy the cells/ folders together and run `posenc lengthgen --report-only --out DIR`")
    else:
        paths = lg.write_report(cells, out, meta)
        print(f"wrote {', '.join(str(p) for p in paths.values())}  ({meta['wall_seconds']:.0f} s)")
    if missing:
        print(f"{len(missing)} cell(s) not finished ({', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}); "
              "run the same command again to continue", file=sys.stderr)
        return 130
    return 0


def register(sub: Any) -> None:
    from posenc.cli_options import command_help
    from posenc.lengthgen import SCHEMES, TASKS

    p = sub.add_parser("lengthgen", help="length-generalisation benchmark across position schemes",
                       **command_help(__doc__))
    p.add_argument("--task", default=",".join(TASKS), help=f"comma list of tasks (default {','.join(TASKS)})")
    add_position(p, default=",".join(SCHEMES), many=True, options=False)
    p.add_argument("--seeds", default="0,1,2", help="comma list of seeds (default 0,1,2)")
    p.add_argument("--quick", action="store_true", help="a small preset that runs in minutes on 2 cores")
    add_out(p, default="runs/lengthgen", help="report folder: cells/, checkpoints/ of running cells, the report")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                   help="run only cells I, I+N, … (split a grid across machines; then --report-only)")
    p.add_argument("--jobs", type=int_at_least(1, 256), default=1, help="run the grid as N local processes, then one report")
    p.add_argument("--report-only", action="store_true",
                   help="only (re)write the report of this grid from the cells finished in OUT/cells")
    p.add_argument("--fresh", action="store_true", help="retrain cells already finished in OUT")
    add_cell_args(p)
    add_force(p)
    p.set_defaults(func=run)
