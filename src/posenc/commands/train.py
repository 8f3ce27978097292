"""``posenc train``: train one model on one synthetic task, with checkpoints and exact resume.

Example::

    posenc train --task copy --position rope --steps 1500 --checkpoint-dir runs/copy-rope
    # Ctrl-C saves; the same command with --resume continues to the same final weights.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.cli_options import (add_json, add_position, add_quiet, add_seed, add_threads, command_help, json_to_stdout,
                                write_json)
from posenc.commands.lengthgen import add_cell_args, check_task_options, config_from_args, set_threads
from posenc.malloc import pin_mmap_threshold
from posenc.validation import int_at_least


def run(args: argparse.Namespace) -> int:
    from posenc import lengthgen as lg
    from posenc.train import init_distributed

    info = init_distributed()
    set_threads(args.threads)
    pin_mmap_threshold()  # peak memory that does not grow with freed activations (posenc.malloc)
    check_task_options(args, [args.task])
    config = config_from_args(args, lg.QUICK if args.quick else lg.preset(args.task), args.task)
    config = config.with_changes(train={"checkpoint_every": args.checkpoint_every})
    if args.resume and not args.checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir (the directory of the run to continue)")
    # Everything that could fail after training is checked before it.
    from posenc.validation import check_output

    check_output(args.json, "--json")
    if args.checkpoint_dir:
        from posenc.checkpoint import check_run_dir

        check_output(args.checkpoint_dir, "--checkpoint-dir", kind="dir")
        check_run_dir(args.checkpoint_dir)
    lg.plan_cell(args.task, config)  # sizes against the memory budget
    cell = lg.train_cell(args.task, args.position, seed=args.seed, config=config,
                         checkpoint_dir=args.checkpoint_dir, resume=args.resume, progress=not args.quiet)
    if info.is_main:
        lo, hi = cell["train_lengths"]
        show = sys.stderr if json_to_stdout(args) else sys.stdout  # `--json -`: stdout holds only the JSON
        print(f"{cell['task']} / {cell['scheme']}: trained {cell['steps']} steps on lengths {lo}–{hi} "
              f"(final loss {cell['final_loss']:.4f}, {cell['seconds']:.0f} s)", file=show)
        gate = cell["gate"]
        print(f"convergence gate (held-out in-range exact match >= {gate['threshold']}): "
              + (f"passed at step {gate['passed_at']}" if cell["learned"] else f"not passed ({gate['accuracy']:.3f})"),
              file=show)
        print("length  accuracy", file=show)
        for n, acc in cell["accuracy"].items():
            print(f"{n:>6}  {100 * acc:6.1f} %{'' if int(n) <= hi else '   (beyond training)'}", file=show)
        write_json(args, cell)
    if info.world_size > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 130 if cell["interrupted"] else 0


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train one model on a synthetic task (checkpoints, --resume)",
                       **command_help(__doc__, examples=("posenc train --task copy --position rope --quick",)))
    p.add_argument("--task", default="copy", help="copy, reverse, sort, addition or scan (default copy)")
    add_position(p, default="rope", options=False)
    add_seed(p, help="seed of the weights and the training data")
    p.add_argument("--quick", action="store_true", help="the small preset of 'posenc lengthgen --quick'")
    p.add_argument("--checkpoint-dir", default=None, help="save here (at the end, every --checkpoint-every, on Ctrl-C)")
    p.add_argument("--checkpoint-every", type=int_at_least(0), default=0, help="also save every N steps (0: at the end and on Ctrl-C)")
    p.add_argument("--resume", action="store_true", help="continue the run in --checkpoint-dir exactly")
    add_json(p, help="write the result (accuracy by length, history) as JSON to FILE ('-': stdout); strict JSON: "
                     "a value that is not a finite number is written as null")
    add_cell_args(p)
    p.set_defaults(func=run)
