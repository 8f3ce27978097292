"""The check every peer passes before it is timed: same result as posenc, or no timing at all."""

from __future__ import annotations

import torch
from torch import Tensor


class MismatchError(RuntimeError):
    """A peer disagreed with posenc: its timing would compare different computations."""


def check_same(name: str, got: Tensor, want: Tensor, *, atol: float, rtol: float = 0.0) -> float:
    """Raise MismatchError unless ``got`` equals ``want`` to tolerance; return the max abs difference."""
    if got.shape != want.shape:
        raise MismatchError(f"{name}: shape {tuple(got.shape)} differs from posenc's {tuple(want.shape)}")
    diff = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
    if not torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol):
        raise MismatchError(f"{name}: differs from posenc by up to {diff:.3g} (allowed {atol:g} + {rtol:g}·|x|)")
    return diff
