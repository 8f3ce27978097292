"""``posenc train``: train one model on one synthetic task, with checkpoints and exact resume.

Example::

    posenc train --task copy --position rope --steps 1500 --checkpoint-dir runs/copy-rope
    # Ctrl-C saves; the same command with --resume continues to the same final weights.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.cli_options import add_json, add_position, add_quiet, add_seed, add_threads, json_to_stdout, write_json


def set_threads(threads: int | None, world_size: int) -> int:
    """torch intra-op threads: ``threads``, else 1.

    The models here are tiny: a second thread per process buys little and, on a busy
    machine, synchronising threads costs more than it gains. Use the cores with
    processes instead (``lengthgen --jobs N`` or ``torchrun --nproc_per_node N``).
    """
    import torch

    n = threads or 1
    torch.set_num_threads(n)
    return n


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Options shared by ``train`` and ``lengthgen`` (unset ones keep the preset's value)."""
    g = p.add_argument_group("model and training (default: the preset)")
    g.add_argument("--framing", choices=["decoder", "encoder-decoder"], default=None)
    g.add_argument("--train-max", type=int, default=None, help="longest training length")
    g.add_argument("--test-max", type=int, default=None, help="longest evaluated length")
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--batch-size", type=int, default=None)
    g.add_argument("--lr", type=float, default=None)
    g.add_argument("--dim", type=int, default=None)
    g.add_argument("--heads", type=int, default=None)
    g.add_argument("--layers", type=int, default=None)
    g.add_argument("--dropout", type=float, default=None)
    g.add_argument("--eval-examples", type=int, default=None, help="evaluated examples per length")
    add_threads(g, help="torch threads per process (default 1; use --jobs/torchrun for more cores)")
    add_quiet(g)


def settings_from_args(args: argparse.Namespace, base: Any) -> Any:
    from posenc.lengthgen import with_overrides

    return with_overrides(base, framing=args.framing, train_max=args.train_max, test_max=args.test_max,
                          steps=args.steps, batch_size=args.batch_size, lr=args.lr, dim=args.dim, heads=args.heads,
                          layers=args.layers, dropout=args.dropout, eval_examples=args.eval_examples,
                          eval_every=getattr(args, "eval_every", None))


def run(args: argparse.Namespace) -> int:
    from posenc import lengthgen as lg
    from posenc.train import init_distributed

    info = init_distributed()
    set_threads(args.threads, info.world_size)
    settings = settings_from_args(args, lg.QUICK if args.quick else lg.DEFAULT)
    if args.resume and not args.checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir (the directory of the run to continue)")
    cell = lg.train_one(args.task, args.position, seed=args.seed, settings=settings, checkpoint_dir=args.checkpoint_dir,
                        resume=args.resume, checkpoint_every=args.checkpoint_every, progress=not args.quiet)
    if info.is_main:
        lo, hi = cell["train_lengths"]
        show = sys.stderr if json_to_stdout(args) else sys.stdout  # `--json -`: stdout holds only the JSON
        print(f"{cell['task']} / {cell['scheme']}: trained {cell['steps']} steps on lengths {lo}–{hi} "
              f"(final loss {cell['final_loss']:.4f}, {cell['seconds']:.0f} s)", file=show)
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
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="copy", help="copy, reverse, sort, addition or scan")
    add_position(p, default="rope", options=False)
    add_seed(p, help="seed of the weights and the training data")
    p.add_argument("--quick", action="store_true", help="the small preset of `lengthgen --quick`")
    p.add_argument("--checkpoint-dir", default=None, help="save here (at the end, every --checkpoint-every, on Ctrl-C)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="also save every N steps (0: at the end and on Ctrl-C)")
    p.add_argument("--resume", action="store_true", help="continue the run in --checkpoint-dir exactly")
    p.add_argument("--eval-every", type=int, default=None, help="also evaluate every N steps")
    add_json(p, help="write the result (accuracy by length, history) as JSON to FILE ('-': stdout)")
    add_model_args(p)
    p.set_defaults(func=run)
