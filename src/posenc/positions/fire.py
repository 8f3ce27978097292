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

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.validation import check_table, number, positive_int
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
        number(init_c, "init_c", above=0)
        number(init_L, "init_L", above=0)
        number(eps, "eps", above=0)
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
