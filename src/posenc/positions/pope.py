"""PoPE: polar coordinate position embedding (Gopalakrishnan, Csordás, Schmidhuber, Mozer, 2025, "Decoupling the
'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv:2509.10534).

RoPE rotates 2-D pairs of q and k whose own angle comes from the content, so
the score mixes content and position angles. PoPE makes each of the Dh
coordinates a complex number whose *magnitude* is the content and whose
*phase* is the position alone:

    q̃_c = softplus(q_c)·e^{i(m·θ_c − δ_c)},   k̃_c = softplus(k_c)·e^{i·n·θ_c},
    score = Re Σ_c q̃_c·conj(k̃_c) = Σ_c softplus(q_c)·softplus(k_c)·cos((m − n)·θ_c − δ_c),

with Dh frequencies θ_c = base^(−c/Dh), c = 0 … Dh − 1 (twice RoPE's count)
and an optional learned phase bias δ_c ∈ [−2π, 0] per head and frequency
(initialised 0, clamped). Written as reals, q and k become 2·Dh wide,
[softplus(x)·cos φ, softplus(x)·sin φ]; attention divides by √Dh of the head
width (it passes the scale to SDPA explicitly) and the values keep width Dh.
The paper puts δ on the keys; it is put on the queries here (the phase
difference is the same, −δ_c), so grouped-query keys shared by several query
heads still allow one δ per query head.

Reference used to verify: the paper's definition (the score above) as a float64
loop over (query, key, coordinate).

Shape legend: B batch, H heads, T sequence length, Dh head width (the output is 2·Dh wide).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.positions.base import ModelContext, RotaryScheme, check_positions, cos_sin
from posenc.validation import number, positive_int


class PoPE(RotaryScheme):
    """PoPE (Gopalakrishnan et al., 2025): q, k → softplus magnitudes with position-only phases, 2·Dh wide.

    Reference used to verify: the paper's score Σ_c sp(q_c)·sp(k_c)·cos((m − n)θ_c − δ_c) as a float64 loop.

    Args:
        head_dim, num_heads: from the model.
        base: the frequency base, θ_c = base^(−c/Dh).
        phase_bias: learn δ (per head and frequency, in [−2π, 0]); False: δ = 0.
    """

    name: ClassVar[str] = "pope"

    def __init__(self, *, head_dim: int, num_heads: int, base: float = 10000.0, phase_bias: bool = True) -> None:
        super().__init__()
        self.head_dim, self.num_heads = positive_int(head_dim, "head_dim"), positive_int(num_heads, "num_heads")
        self.base = number(base, "base", above=1, fix="the RoPE base is usually 10000")
        self.phase_bias = nn.Parameter(torch.zeros(self.num_heads, self.head_dim)) if phase_bias else None  # (H, Dh)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {**super().context_args(ctx), "num_heads": ctx.num_heads}

    def inv_freq(self) -> Tensor:
        """θ_c = base^(−c/Dh), c = 0 … Dh − 1, float64 (Dh,)."""
        return self.base ** (-torch.arange(self.head_dim, dtype=torch.float64) / self.head_dim)

    def angles(self, positions: Tensor) -> Tensor:
        """p·θ_c in float64, (..., T, Dh)."""
        positions = check_positions(positions)
        return positions.double().unsqueeze(-1) * self.inv_freq().to(positions.device)

    def _polar(self, x: Tensor, positions: Tensor, *, query: bool) -> Tensor:
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"pope: head width is {x.shape[-1]} but the scheme was built with head_dim={self.head_dim}")
        positions = check_positions(positions).to(x.device)
        if positions.shape[-1] != x.shape[-2]:
            raise ValueError(f"pope: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}")
        compute = torch.promote_types(x.dtype, torch.float32)
        cos, sin = cos_sin(self.angles(positions))  # (..., T, Dh) float64
        cos, sin = cos.to(compute), sin.to(compute)
        if positions.dim() == 2 and x.dim() == 4:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, Dh)
        if query and self.phase_bias is not None:
            # the phase m·θ − δ: cos(φ − δ) = cos φ cos δ + sin φ sin δ, sin(φ − δ) = sin φ cos δ − cos φ sin δ
            delta = self.phase_bias.clamp(-2 * math.pi, 0).to(compute)  # (H, Dh)
            if x.dim() == 4:
                delta = delta[: x.shape[1]] if x.shape[1] == 1 else delta
                delta = delta.unsqueeze(-2)  # (H, 1, Dh)
            else:
                delta = delta[0]
            cd, sd = delta.cos(), delta.sin()
            cos, sin = cos * cd + sin * sd, sin * cd - cos * sd
        # contiguous first: on a transposed (B, H, T, Dh) view, aot_autograd's softplus backward takes the view's
        # strides and the projection's gradient can then not be viewed back (torch.compile backward fails)
        magnitude = F.softplus(x.to(compute).contiguous())
        return torch.cat((magnitude * cos, magnitude * sin), dim=-1).to(x.dtype)  # (..., T, 2·Dh)

    def rotate_query(self, q: Tensor, q_pos: Tensor) -> Tensor:
        return self._polar(q, q_pos, query=True)

    def rotate_key(self, k: Tensor, k_pos: Tensor) -> Tensor:
        return self._polar(k, k_pos, query=False)

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """All-ones queries and keys (head 0): softplus(1)²·Σ_c cos((i − j)θ_c − δ_c), float64 (Ti, Tj)."""
        pos_i, pos_j = check_positions(pos_i, name="pos_i"), check_positions(pos_j, name="pos_j")
        with torch.no_grad():
            a = self.rotate_query(torch.ones(1, 1, pos_i.shape[-1], self.head_dim, dtype=torch.float64), pos_i)
            b = self.rotate_key(torch.ones(1, 1, pos_j.shape[-1], self.head_dim, dtype=torch.float64), pos_j)
        return (a[0, 0] @ b[0, 0].T).double().cpu()

    def options(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "num_heads": self.num_heads, "base": self.base,
                "phase_bias": self.phase_bias is not None}
