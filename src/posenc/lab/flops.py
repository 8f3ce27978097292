"""Counting floating-point operations of real torch calls.

Uses the per-operator formulas torch itself registers for
``torch.utils.flop_counter`` (2 per multiply-add: mm, bmm, addmm, conv, SDPA …),
applied by a light ``TorchDispatchMode``. ``FlopCounterMode`` gives the same
totals but also installs module-tracking hooks whose first use imports
``torch._dynamo`` — seconds of start-up the lab cannot afford.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry


class _Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def count_flops(fn: Callable[[], Any]) -> int:
    """Floating-point operations of ``fn()`` as torch's flop formulas count them (no gradients)."""
    counter = _Counter()
    with torch.no_grad(), counter:
        fn()
    return counter.total
