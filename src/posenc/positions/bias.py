"""Bias position schemes: a (H, Tq, Tk) term added to attention logits.

Every member answers ``attention_bias(q_pos, k_pos) -> (H, Tq, Tk)`` (or
(B, H, Tq, Tk) for per-sequence positions), so attention consumes them
uniformly, whatever the scheme.

Shape legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.positions.base import BiasScheme, check_positions


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """k_pos − q_pos, int64, (Tq, Tk) or (B, Tq, Tk) (negative: the key is in the past)."""
    q_pos = check_positions(q_pos, name="q_pos")
    k_pos = check_positions(k_pos, name="k_pos")
    return k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)


def alibi_slopes(num_heads: int) -> Tensor:
    """Head slopes of ALiBi (Press et al., 2022), float64 (H,).

    For a power of two n: the geometric sequence starting at 2^(−8/n) with that
    ratio. Otherwise, as in the paper's reference code: the slopes for the
    closest power of two below n, then every other slope of the 2× sequence.
    """
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(closest)
    if closest != num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(BiasScheme):
    """Attention with linear biases (Press et al., 2022): bias = −m_h·|i − j|.

    With a causal mask this equals the paper's m_h·(j − i) for j ≤ i (and
    BLOOM's m_h·j up to a per-row constant, which softmax ignores); without
    one it is the symmetric form used by bidirectional encoders.

    Reference used to verify: the paper's ``get_slopes`` and HF BLOOM's
    ``build_alibi_tensor``.

    Args:
        num_heads: number of attention heads (any count, not only powers of two).
    """

    name: ClassVar[str] = "alibi"

    def __init__(self, *, num_heads: int) -> None:
        super().__init__(num_heads=num_heads)
        self.register_buffer("slopes", alibi_slopes(num_heads).float(), persistent=False)

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        distance = relative_distance(q_pos, k_pos).abs().to(self.slopes.device)  # (Tq, Tk) | (B, Tq, Tk)
        slopes = alibi_slopes(self.num_heads).to(distance.device)  # float64, exact
        bias = -slopes.view(-1, 1, 1) * distance.unsqueeze(-3).double()  # (H, Tq, Tk) | (B, H, Tq, Tk)
        return bias.float()

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads}
