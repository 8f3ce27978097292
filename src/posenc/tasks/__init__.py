"""Synthetic sequence tasks with exact length control, for length-generalisation studies.

>>> import torch
>>> from posenc.tasks import build_task
>>> build_task("reverse").sample(4, torch.Generator().manual_seed(0)).target
('a', 'd', 'j', 'e')

Tasks: copy, reverse, sort, addition (Kazemnejad et al., 2023) and SCAN
(Lake & Baroni, 2018). Each is built by name; unknown names raise with the list.
"""

from __future__ import annotations

from typing import Any

from posenc.tasks.base import BOS, EOS, PAD, SEP, SPECIALS, Example, Task, Vocab
from posenc.tasks.framing import FRAMINGS, IGNORE, Batch, collate, correct, loss_sum, sequence_length
from posenc.tasks.scan import Scan
from posenc.tasks.symbolic import Addition, Copy, Reverse, Sort
from posenc.validation import did_you_mean

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (Copy, Reverse, Sort, Addition, Scan)}


def task_names() -> list[str]:
    return list(TASKS)


def task_option_names(name: str) -> list[str]:
    """The keyword options task ``name`` takes (e.g. ``num_symbols`` for copy, ``answer_order`` for addition)."""
    return list(task_class(name)().options())


def task_class(name: str) -> type[Task]:
    """The class registered as ``name``; unknown names raise with the list."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}{did_you_mean(name, TASKS)}; "
                         f"valid tasks: {', '.join(TASKS)}") from None


def build_task(name: str, **options: Any) -> Task:
    """The task registered as ``name`` with its keyword ``options`` (an option it does not take is an
    error naming the ones it does)."""
    valid = task_option_names(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"task {name!r} has no option {', '.join(map(repr, unknown))}; "
                         f"its options: {', '.join(valid) or 'none'}")
    return task_class(name)(**options)


__all__ = [
    "BOS", "EOS", "FRAMINGS", "IGNORE", "PAD", "SEP", "SPECIALS", "Addition", "Batch", "Copy", "Example",
    "Reverse", "Scan", "Sort", "Task", "Vocab", "build_task", "collate", "correct", "loss_sum",
    "sequence_length", "task_class", "task_names", "task_option_names",
]
