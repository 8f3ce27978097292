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
from posenc.validation import check_memory, check_output, dumps, finite_float, int_at_least, seed_arg

#: Most optimiser updates one run may ask for (a billion: weeks of work for the largest model here); a larger
#: --steps is a typo, not a plan — refused instead of starting a run that would never end.
MAX_STEPS = 10**9
#: Bytes per float of activations kept for the backward pass (float32).
_FLOAT = 4
#: Rough bytes per token of an example held in Python (tuples of str references + objects).
_EXAMPLE_TOKEN_BYTES, _EXAMPLE_BYTES = 24, 400


def set_threads(threads: int | None, world_size: int) -> int:
    """torch intra-op threads: ``threads``, else 1.

    The models here are tiny: a second thread per process buys little and, on a busy
    machine, synchronising threads costs more than it gains. Use the cores with
    processes instead (``lengthgen --jobs N`` or ``torchrun --nproc_per_node N``).
    """
    import torch

    n = threads or 1
    if n < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(n)
    return n


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Options shared by ``train`` and ``lengthgen`` (unset ones keep the preset's value)."""
    g = p.add_argument_group("model and training (default: the preset)")
    g.add_argument("--framing", choices=["decoder", "encoder-decoder"], default=None)
    positive = int_at_least(1)
    g.add_argument("--train-max", type=positive, default=None, help="longest training length")
    g.add_argument("--test-max", type=positive, default=None, help="longest evaluated length")
    g.add_argument("--steps", type=int_at_least(1, MAX_STEPS), default=None)
    g.add_argument("--batch-size", type=positive, default=None)
    g.add_argument("--lr", type=finite_float(above=0), default=None)
    g.add_argument("--dim", type=positive, default=None)
    g.add_argument("--heads", type=positive, default=None)
    g.add_argument("--layers", type=positive, default=None)
    g.add_argument("--dropout", type=finite_float(minimum=0, below=1), default=None)
    g.add_argument("--eval-examples", type=positive, default=None, help="evaluated examples per length")
    add_threads(g, help="torch threads per process (default 1; use --jobs/torchrun for more cores)")
    add_quiet(g)


def settings_from_args(args: argparse.Namespace, base: Any) -> Any:
    from posenc.lengthgen import with_overrides

    return with_overrides(base, framing=args.framing, train_max=args.train_max, test_max=args.test_max,
                          steps=args.steps, batch_size=args.batch_size, lr=args.lr, dim=args.dim, heads=args.heads,
                          layers=args.layers, dropout=args.dropout, eval_examples=args.eval_examples,
                          eval_every=getattr(args, "eval_every", None))


def plan_cell(task_name: str, settings: Any, task_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check, before any work, that one cell's sizes fit in memory; return the planned sizes.

    Estimates the largest training step (activations kept for the backward pass,
    attention maps included) and the fixed evaluation set, and refuses either when
    it exceeds the memory budget (:func:`posenc.validation.memory_budget`), naming
    the figure and the option to lower.
    """
    from posenc.tasks import build_task, sequence_length
    from posenc.tasks.framing import check_framing

    from posenc import lengthgen as lg

    framing = check_framing(settings.framing)
    task = build_task(task_name, **(task_options or {}))
    lo, train_max, test_max = settings.lengths_for(task)
    train_lengths = lg.valid_lengths(task, lo, train_max)
    test_lengths = lg.valid_lengths(task, lo, test_max)
    if not train_lengths:
        raise ValueError(f"task {task_name!r} has no example of length {lo}..{train_max}; raise --train-max")
    t_train = max(sequence_length(*task.size_bound(n), framing) for n in train_lengths)
    t_test = max(sequence_length(*task.size_bound(n), framing) for n in test_lengths)
    ffn = settings.ffn_dim or 4 * settings.dim
    per_layer = t_train * (12 * settings.dim + 2 * ffn) + 3 * settings.heads * t_train * t_train  # floats per example
    vocab = len(task.vocab())
    step_bytes = settings.batch_size * (settings.layers * per_layer + 3 * t_train * vocab) * _FLOAT
    check_memory(step_bytes, f"one training step (batch {settings.batch_size} × {t_train} positions, "
                 f"{settings.layers} layers of width {settings.dim})",
                 fix="lower --batch-size, --train-max, --dim or --layers")
    examples = settings.eval_examples * len(test_lengths)
    eval_bytes = examples * (_EXAMPLE_BYTES + 2 * t_test * _EXAMPLE_TOKEN_BYTES)
    check_memory(eval_bytes, f"the evaluation set ({settings.eval_examples} examples × {len(test_lengths)} lengths "
                 f"up to {t_test} positions)", fix="lower --eval-examples or --test-max")
    return {"train_positions": t_train, "test_positions": t_test, "step_bytes": step_bytes,
            "eval_examples": examples, "eval_bytes": eval_bytes}


def run(args: argparse.Namespace) -> int:
    from posenc import lengthgen as lg
    from posenc.train import init_distributed

    info = init_distributed()
    set_threads(args.threads, info.world_size)
    settings = settings_from_args(args, lg.QUICK if args.quick else lg.DEFAULT)
    if args.resume and not args.checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir (the directory of the run to continue)")
    # Everything that could fail after training is checked before it.
    check_output(args.json, "--json")
    if args.checkpoint_dir:
        from posenc.checkpoint import check_run_dir

        check_output(args.checkpoint_dir, "--checkpoint-dir", kind="dir")
        check_run_dir(args.checkpoint_dir)
    plan_cell(args.task, settings)  # sizes against the memory budget
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
    p.add_argument("--checkpoint-every", type=int_at_least(0), default=0, help="also save every N steps (0: at the end and on Ctrl-C)")
    p.add_argument("--resume", action="store_true", help="continue the run in --checkpoint-dir exactly")
    p.add_argument("--eval-every", type=int_at_least(1), default=None, help="also evaluate every N steps")
    add_json(p, help="write the result (accuracy by length, history) as JSON to FILE ('-': stdout); strict JSON: "
                     "a value that is not a finite number is written as null")
    add_model_args(p)
    p.set_defaults(func=run)
