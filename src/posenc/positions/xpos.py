"""xPos: RoPE with a per-pair exponential decay (Sun et al., 2023, "A Length-Extrapolatable Transformer").

Queries at position m are rotated by m·θ_i and scaled by ζ_i^(m/γ); keys at
position n are rotated by n·θ_i and scaled by ζ_i^(−n/γ), with

    ζ_i = (2i/R + 0.4) / 1.4,   γ = scale_base (512 in the paper),

so that q̃_m·k̃_n = Σ_i ζ_i^((m−n)/γ)·(pair i of q rotated by (m−n)θ_i)·k:
still a function of m − n only, now decaying with distance (ζ_i < 1).

The scales are taken from position 0, never re-centred, so a position's scale
is the same in every call (cached decoding equals full decoding). The price is
range: ζ_0^(±p/γ) leaves the floating-point range at large p (float32:
p ≈ 36 000 for γ = 512 at any R); ``max_position_for(dtype)`` says where, and
``rotate`` raises beyond it instead of returning inf/NaN. (torchscale re-centres
positions on the current sequence, which keeps the scales small but makes a
cached key's scale depend on the call that produced it.)

Shape legend: B batch, H heads, T sequence length, Dh head width, R rotated
width, P = R/2 pairs.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.checks import check_values
from posenc.validation import F32_EPS, POSITION_MAX, at_most, number, positive_int
from posenc.positions.base import check_positions
from posenc.positions.rotary import Pairing, RoPE, apply_rotary


class XPos(RoPE):
    """xPos (Sun et al., 2023): RoPE times ζ_i^(m/γ) on queries and ζ_i^(−n/γ) on keys.

    Reference used to verify: the paper's formula restated as a float64 loop
    (torchscale's ``XPOS`` module is the authors' code; its re-centring of
    positions is not reproduced, see the module docstring).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        scale_base: γ, the decay length (512 in the paper).
        gamma: the ζ offset (0.4 in the paper): ζ_i = (2i/R + gamma)/(1 + gamma).
    """

    name: ClassVar[str] = "xpos"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "interleaved",
                 rotary_dim: int | None = None, scale_base: float = 512.0, gamma: float = 0.4) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.scale_base = number(scale_base, "scale_base", above=0)
        self.gamma = number(gamma, "gamma", above=0, fix="ζ_0 = gamma/(1+gamma) must be in (0, 1); the paper uses 0.4")
        # ζ_0 as zeta() forms it (float64): from gamma ≈ 2^53 on, gamma/(1+gamma) rounds to 1 and nothing decays
        log_zeta0 = math.log(self.gamma / (1 + self.gamma))
        if not log_zeta0 < 0:
            raise ValueError(f"gamma={gamma!r} must be below about 9e15 (2^53): ζ_0 = gamma/(1+gamma) rounds to 1 "
                             "in float64 beyond it, so xpos would not decay at all (plain RoPE); the paper uses "
                             "0.4, or use rope")
        # the decay ζ_0^(p/γ) must be visible in float32 at some position posenc accepts (p <= 2^63 − 1):
        # |ln ζ_0|·p/γ >= 2^-23 (float32's epsilon); a larger γ makes every scale exactly 1 — plain RoPE
        at_most(self.scale_base, "scale_base", POSITION_MAX * -log_zeta0 / F32_EPS,
                why=f"beyond it ζ_0^(p/scale_base) (ζ_0 = {math.exp(log_zeta0):.3g} for gamma={self.gamma:g}) differs "
                    "from 1 by less than float32's epsilon (2^-23) at every position up to 2^63 − 1, so xpos would "
                    "be plain RoPE", fix="the paper uses 512; for no decay use rope")

    def zeta(self) -> Tensor:
        """ζ_i = (2i/R + gamma)/(1 + gamma), float64 (P,)."""
        i = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64)
        return (i / self.rotary_dim + self.gamma) / (1 + self.gamma)

    def log_scale(self, positions: Tensor) -> Tensor:
        """ln ζ_i^(p/γ) = (p/γ)·ln ζ_i, float64 (..., T, P)."""
        positions = check_positions(positions)
        return positions.double().unsqueeze(-1) / self.scale_base * self.zeta().log().to(positions.device)

    def max_position_for(self, dtype: torch.dtype = torch.float32) -> int:
        """Largest position whose query and key scales are both normal numbers in ``dtype``."""
        info = torch.finfo(dtype)
        headroom = min(math.log(info.max), -math.log(info.tiny))
        zeta0 = self.gamma / (1 + self.gamma)  # ζ_0, the fastest decay; plain float: no tensor read
        # capped at the largest int64 position: a comparison with a larger Python int cannot be made on a tensor
        return min(int(headroom * self.scale_base / -math.log(zeta0)), POSITION_MAX)

    def _scaled_rotation(self, x: Tensor, positions: Tensor, sign: float) -> Tensor:
        positions = self.check_input(x, positions)
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        limit = self.max_position_for(dtype)
        fix = "use a larger scale_base, float64 activations, or a scheme without decay (rope)"
        check_values(positions <= limit,
                     lambda: f"xpos: position {int(positions.max())} is beyond {limit}, where "
                             f"ζ^(±p/{self.scale_base:g}) leaves the {dtype} range; {fix}",
                     compiled_message=f"xpos: a position is beyond {limit}, where ζ^(±p/{self.scale_base:g}) "
                                      f"leaves the {dtype} range; {fix}")
        positions = positions.to(x.device)
        theta = self.angles(positions)
        scale = (sign * self.log_scale(positions)).exp()  # (..., T, P)
        cos, sin = (theta.cos() * scale).to(dtype), (theta.sin() * scale).to(dtype)  # the scale commutes with the rotation
        if positions.dim() == 2 and x.dim() == 4:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, P)
        return apply_rotary(x, cos, sin, pairing=self.pairing)

    def rotate_one(self, x: Tensor, positions: Tensor) -> Tensor:
        """Not defined for xPos: queries and keys are scaled oppositely; use ``rotate_query``/``rotate_key``."""
        raise TypeError("xpos scales queries by ζ^(m/γ) and keys by ζ^(−n/γ): use rotate(q, k, q_pos, k_pos), "
                        "rotate_query(q, q_pos) or rotate_key(k, k_pos)")

    def rotate_query(self, q: Tensor, q_pos: Tensor) -> Tensor:
        """Rotate and scale queries (..., T, Dh) by ζ^(m/γ)."""
        return self._scaled_rotation(q, q_pos, 1.0)

    def rotate_key(self, k: Tensor, k_pos: Tensor) -> Tensor:
        """Rotate and scale keys (..., T, Dh) by ζ^(−n/γ)."""
        return self._scaled_rotation(k, k_pos, -1.0)

    apply_query, apply_key = rotate_query, rotate_key  # the names xPos had before the scheme contract named them

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """Scaled-rotated all-ones query at pos_i · key at pos_j: Σ_i 2·ζ_i^((m−n)/γ)·cos((m−n)θ_i) + (Dh − R)."""
        q = self._scaled_rotation(torch.ones(pos_i.shape[-1], self.head_dim, dtype=torch.float64), pos_i, 1.0)
        k = self._scaled_rotation(torch.ones(pos_j.shape[-1], self.head_dim, dtype=torch.float64), pos_j, -1.0)
        return q @ k.transpose(-1, -2)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "scale_base": self.scale_base, "gamma": self.gamma}
