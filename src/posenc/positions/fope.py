"""FoPE: Fourier position embedding (Hua et al., 2024, "Fourier Position Embedding: Enhancing Attention's
Periodic Extension for Length Generalization", arXiv:2412.17739).

FoPE changes RoPE in two ways:

1. **Floor frequencies clipped to zero.** Pairs whose wavelength 2π/θ_i is
   longer than the training length L never complete a turn in training, so
   their rotation beyond L is unseen; FoPE sets θ_i = 0 for them (no rotation).
2. **Each pair is a Fourier series.** Instead of cos(p·θ_d) and sin(p·θ_d),
   pair d is multiplied by Σ_a C[a, d]·cos(p·θ_a) / Σ_a C[a, d] and
   Σ_a S[a, d]·sin(p·θ_a) / Σ_a S[a, d], over the D kept frequencies a, with
   C, S = I + a small random matrix (Xavier-normal, gain 0.3), one pair of
   matrices per head. The coefficients are drawn once and kept fixed in the
   paper (``learnable=False``); they are parameters, so a checkpoint keeps them.

The "rotation" is no longer orthogonal and q·k is no longer a function of
m − n alone (C ≠ S mixes frequencies); the lab's ``rel`` column shows by how
much. With C = S = I it is RoPE with the floor frequencies clipped.

Reference used to verify: the paper's appendix code (its
``FoPEFourierEmbedding``: floor clip at 2π/L, Xavier-normal coefficients plus
the identity, column-normalised einsum of sin/cos with the coefficients),
restated as a float64 loop. Departures: the paper's code pads the clipped
pairs' cos *and* sin with 1; here a clipped pair has frequency 0 — cos 1,
sin 0, not rotated — which is what "clipped to zero frequency" says. The
pairing is posenc's (``half`` by default; the paper's code pairs interleaved).

Shape legend: B batch, H heads, Hc coefficient sets (H, or 1 shared), T sequence length, Dh head width,
P = Dh/2 pairs, D kept (unclipped) pairs.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.positions.base import ModelContext, check_positions
from posenc.positions.rotary import Pairing, RoPE, apply_rotary
from posenc.validation import number, positive_int


class FoPE(RoPE):
    """Fourier position embedding (Hua et al., 2024): RoPE with floor frequencies clipped and each pair a Fourier
    series over the kept frequencies.

    Reference used to verify: the paper's appendix code restated as a float64 loop (see the module docstring).

    Args:
        head_dim, num_heads: from the model.
        base, pairing: as for ``RoPE``.
        train_length: L, the training length; pairs with wavelength 2π/θ > L get θ = 0.
        init_gain: gain of the Xavier-normal draw added to the identity (0.3 in the paper).
        separate_heads: one pair of coefficient matrices per head (the paper), or one shared by all heads.
        learnable: train the coefficients (the paper keeps them fixed).
    """

    name: ClassVar[str] = "fope"

    def __init__(self, *, head_dim: int, num_heads: int, base: float = 10000.0, pairing: Pairing = "half",
                 train_length: int = 512, init_gain: float = 0.3, separate_heads: bool = True,
                 learnable: bool = False) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.train_length = positive_int(train_length, "train_length",
                                         fix="the training length L that sets which frequencies are clipped")
        self.init_gain = number(init_gain, "init_gain", minimum=0, maximum=10, fix="the paper uses 0.3")
        self.separate_heads, self.learnable = bool(separate_heads), bool(learnable)
        theta = super().inv_freq()
        kept = theta >= 2 * math.pi / self.train_length  # wavelength 2π/θ at most L
        self.register_buffer("kept", kept, persistent=False)  # (P,)
        # the kept pairs as indices (D,), fixed at construction: selecting them by index keeps the shapes static
        # under torch.compile (a boolean-mask select is a data-dependent nonzero: a graph break per rotation);
        # the same elements as the mask selects
        self.register_buffer("kept_index", kept.nonzero().flatten(), persistent=False)  # (D,) int64
        sets, d = (self.num_heads if self.separate_heads else 1), int(kept.sum())
        self.cos_coef = nn.Parameter(self._draw(sets, d), requires_grad=self.learnable)  # (Hc, D, D)
        self.sin_coef = nn.Parameter(self._draw(sets, d), requires_grad=self.learnable)

    def _draw(self, sets: int, d: int) -> Tensor:
        w = torch.empty(sets, d, d)
        if d:
            nn.init.xavier_normal_(w, gain=self.init_gain)  # the paper draws the (Hc, D, D) tensor at once
        return w + torch.eye(d)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        # not ctx.max_length: that is the longest sequence the model will *see* (test lengths included), while
        # the clip is set by the training length; a trainer passes train_length itself (lengthgen does)
        return {**super().context_args(ctx), "num_heads": ctx.num_heads}

    def inv_freq(self) -> Tensor:
        """θ_i, with the floor frequencies (wavelength > train_length) set to 0."""
        theta = super().inv_freq()
        return torch.where(self.kept.to(theta.device), theta, torch.zeros_like(theta))

    def angles(self, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        return positions.double().unsqueeze(-1) * self.inv_freq().to(positions.device)

    def fourier_cos_sin(self, positions: Tensor, *, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """The Fourier cos and sin of every pair: (Hc, T, P) for (T,) positions, (B, Hc, T, P) for (B, T)."""
        index = self.kept_index.to(positions.device)
        angles = self.angles(positions).index_select(-1, index)  # (..., T, D), float64
        cos_c = self.cos_coef / self.cos_coef.sum(dim=-2, keepdim=True)  # columns sum to 1
        sin_c = self.sin_coef / self.sin_coef.sum(dim=-2, keepdim=True)
        cos_k = torch.einsum("...td,hde->...hte", angles.cos().to(dtype), cos_c.to(dtype))  # (..., Hc, T, D)
        sin_k = torch.einsum("...td,hde->...hte", angles.sin().to(dtype), sin_c.to(dtype))
        shape = (*cos_k.shape[:-1], self.head_dim // 2)
        cos = torch.ones(shape, dtype=dtype, device=cos_k.device)  # clipped pairs: cos 1, sin 0 (not rotated)
        sin = torch.zeros(shape, dtype=dtype, device=cos_k.device)
        index = index.to(cos_k.device)
        cos, sin = cos.index_copy(-1, index, cos_k), sin.index_copy(-1, index, sin_k)
        return cos, sin

    def rotate_one(self, x: Tensor, positions: Tensor) -> Tensor:
        positions = self.check_input(x, positions).to(x.device)
        heads = self.cos_coef.shape[0]
        if x.dim() == 4 and x.shape[1] not in (heads, 1) and heads != 1:
            raise ValueError(f"fope: {x.shape[1]} heads but coefficients for {heads}; with grouped-query attention "
                             "(fewer key heads) build it with separate_heads=False")
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos, sin = self.fourier_cos_sin(positions, dtype=dtype)  # (Hc, T, P) | (B, Hc, T, P)
        if x.dim() == 2:  # (T, Dh): the lab's probe, head 0's coefficients
            cos, sin = cos[..., 0, :, :], sin[..., 0, :, :]
        elif x.dim() == 4 and x.shape[1] == 1 and heads != 1:
            cos, sin = cos[..., :1, :, :], sin[..., :1, :, :]
        return apply_rotary(x, cos, sin, pairing=self.pairing)

    def cos_sin(self, positions: Tensor, *, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """The Fourier cos/sin (``fourier_cos_sin``), with the head axis."""
        return self.fourier_cos_sin(check_positions(positions), dtype=dtype)

    def options(self) -> dict[str, Any]:
        out = super().options()
        out.pop("rotary_dim")
        return {**out, "num_heads": self.num_heads, "train_length": self.train_length, "init_gain": self.init_gain,
                "separate_heads": self.separate_heads, "learnable": self.learnable}
