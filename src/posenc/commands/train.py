"""``posenc train``: train one model on one synthetic task, with checkpoints and exact resume.

Example::

    posenc train --task copy --scheme rope --steps 1500 --checkpoint-dir runs/copy-rope
    # Ctrl-C saves; the same command with --resume continues to the same final weights.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


from posenc.commands.lengthgen import add_cell_args, config_from_args, set_threads


def run(args: argparse.Namespace) -> int:
    from posenc import lengthgen as lg
    from posenc.train import init_distributed

    info = init_distributed()
    set_threads(args.threads)
    config = config_from_args(args, lg.QUICK if args.quick else lg.DEFAULT)
    config = config.with_changes(train={"checkpoint_every": args.checkpoint_every})
    if args.resume and not args.checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir (the directory of the run to continue)")
    cell = lg.train_cell(args.task, lg.canonical(args.scheme), seed=args.seed, config=config,
                         checkpoint_dir=args.checkpoint_dir, resume=args.resume, progress=not args.quiet)
    if info.is_main:
        lo, hi = cell["train_lengths"]
        print(f"{cell['task']} / {cell['scheme']}: trained {cell['steps']} steps on lengths {lo}–{hi} "
              f"(final loss {cell['final_loss']:.4f}, {cell['seconds']:.0f} s)")
        gate = cell["gate"]
        print(f"convergence gate (held-out in-range exact match >= {gate['threshold']}): "
              + (f"passed at step {gate['passed_at']}" if cell["learned"] else f"not passed ({gate['accuracy']:.3f})"))
        print("length  accuracy")
        for n, acc in cell["accuracy"].items():
            print(f"{n:>6}  {100 * acc:6.1f} %{'' if int(n) <= hi else '   (beyond training)'}")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(cell, handle, indent=1)
    if info.world_size > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 130 if cell["interrupted"] else 0


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train one model on a synthetic task (checkpoints, --resume)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="copy", help="copy, reverse, sort, addition or scan")
    p.add_argument("--scheme", default="rope", help="a registered position scheme (aliases nope, absolute)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="the small preset of `lengthgen --quick`")
    p.add_argument("--checkpoint-dir", default=None, help="save here (at the end, every --checkpoint-every, on Ctrl-C)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="also save every N steps (0: at the end and on Ctrl-C)")
    p.add_argument("--resume", action="store_true", help="continue the run in --checkpoint-dir exactly")
    p.add_argument("--json", default=None, help="write the result (accuracy by length, history) to this file")
    add_cell_args(p)
    p.set_defaults(func=run)
