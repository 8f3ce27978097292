"""FIRE: a learned function of the normalised relative distance (Li et al., 2024, ICLR).

"Functional Interpolation for Relative Positions Improves Long Context
Transformers": the bias of query i on key j is

    b(i, j) = f_θ( ψ(|i − j|) / ψ(max(L, i)) ),   ψ(x) = ln(|c·x| + 1),

with f_θ a small MLP (1 → width → H), c a learned scale and L a learned
threshold (L = |L_mult·L_init|). Normalising by the query position maps every
distance into [0, 1], so positions past the training length reuse inputs the
MLP has already seen ("interpolation" instead of extrapolation). The paper
defines it for causal attention; for keys after the query the distance is
|i − j|, as in the authors' code, which makes a bidirectional bias symmetric.

Shape legend: B batch, H heads, Tq query length, Tk key length.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.validation import F32_EXACT_INT, F32_MAX, F32_TINY, at_most, check_table, number, positive_int
from posenc.positions.base import BiasScheme, check_positions
from posenc.positions.bias import relative_distance


class FIRE(BiasScheme):
    """FIRE (Li et al., 2024): bias = MLP(ψ(|i − j|)/ψ(max(L, i))), per head.

    Reference used to verify: the paper's formula restated in float64 with the
    module's own MLP weights.

    Args:
        num_heads: number of heads H (the MLP's output width).
        mlp_width: hidden width of the MLP (32 in the paper).
        init_c: initial c in ψ (0.1 in the paper).
        init_L: initial threshold L (512 in the paper); learned through a multiplier.
        eps: added to the normaliser (the paper's 1e-6).
    """

    name: ClassVar[str] = "fire"

    def __init__(self, *, num_heads: int, mlp_width: int = 32, init_c: float = 0.1, init_L: float = 512.0,
                 eps: float = 1e-6) -> None:
        super().__init__(num_heads=num_heads)
        check_table(positive_int(mlp_width, "mlp_width"), num_heads + 3, "FIRE MLP", option="mlp_width")
        # c, L and the distances are float32: c and L must be normal float32 numbers (a smaller positive value
        # becomes 0, a larger one inf), and ψ's argument c·x must stay finite for the threshold and for every
        # distance float32 holds exactly (x <= 2²⁴; beyond it the distance is no longer itself)
        number(init_L, "init_L", minimum=F32_TINY, maximum=F32_MAX,
               fix="the threshold L is a float32 parameter; the paper uses 512")
        number(init_c, "init_c", minimum=F32_TINY, fix="c is a float32 parameter; the paper uses 0.1")
        reach = max(float(init_L), float(F32_EXACT_INT))
        at_most(float(init_c), "init_c", F32_MAX / reach,
                why=f"ψ(x) = ln(c·x + 1) is formed in float32 for x up to max(init_L, 2^24) = {reach:.3g} (the "
                    f"threshold and every distance float32 holds exactly), and c·x overflows float32 (max "
                    f"{F32_MAX:.3g}) beyond {F32_MAX:.3g}/{reach:.3g}", fix="the paper uses 0.1")
        # ψ(x)/(ψ(L) + eps) <= ln(F32_MAX)/eps once ψ(L) rounds to 0: eps must keep that quotient in float32
        number(eps, "eps", minimum=math.log(F32_MAX) / F32_MAX, maximum=F32_MAX,
               fix=f"the quotient ψ(|i−j|)/(ψ(max(L, i)) + eps) is at most ln({F32_MAX:.3g})/eps in float32, which "
                   "must stay finite; the paper uses 1e-6")
        self.mlp_width, self.eps = mlp_width, float(eps)
        self.init_c, self.init_L_value = float(init_c), float(init_L)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.register_buffer("init_L", torch.tensor(float(init_L)))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    def threshold(self) -> Tensor:
        """The learned threshold L = |L_mult·L_init| (a 0-d tensor)."""
        return (self.L_multiplier * self.init_L).abs()

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """ψ(|i − j|)/ψ(max(L, i)) in the parameters' dtype, (Tq, Tk) or (B, Tq, Tk)."""
        q_pos = check_positions(q_pos, name="q_pos")
        dtype, device = self.c.dtype, self.c.device
        distance = relative_distance(q_pos, k_pos).abs().to(device=device, dtype=dtype)
        query = q_pos.to(device=device, dtype=dtype).unsqueeze(-1)  # (..., Tq, 1)
        normaliser = torch.log(torch.abs(self.c * torch.maximum(query, self.threshold())) + 1) + self.eps
        return torch.log(torch.abs(self.c * distance) + 1) / normaliser

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        bias = self.mlp(self.normalized_distance(q_pos, k_pos).unsqueeze(-1))  # (..., Tq, Tk, H)
        return bias.movedim(-1, -3)  # (..., H, Tq, Tk)

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "mlp_width": self.mlp_width, "init_c": self.init_c,
                "init_L": self.init_L_value, "eps": self.eps}
