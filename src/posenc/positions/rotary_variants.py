"""RoPE frequency transforms that shipped after the 2023 catalogue: proportional RoPE (Gemma 4), mixed NTK.

Both are frequency transforms in the sense of ``posenc.positions.rotary_scaling``
(one signature, ``(rotary_dim, base, *, seq_len=None, **params) -> (inv_freq,
attention_factor)``), added to its ``ROPE_SCALINGS`` table under their HF / vLLM
names, and each is a registered scheme: a ``ScaledRoPE`` whose only change is
``inv_freq``.

* ``proportional`` — HF ``rope_type="proportional"`` (Gemma 4's global layers):
  only the first ``⌊proportion·Dh/2⌋`` pairs rotate, with the frequencies of a
  head of the *full* width, base^(−2i/Dh); the other pairs get frequency 0
  (they pass through unrotated); all divided by ``factor``.
* ``ntk-mixed`` — Su Jianlin's "mixed" NTK (kexue.fm/archives/9706), vLLM's
  ``NTKScalingRotaryEmbedding(mixed_b=…)``: θ_m = base^(−2(m−1)/R) / λ_m with
  λ_m = exp(a·m^b), a = ln(factor)/(R/2)^b, m = 1 … R/2 — the slowest pair is
  divided by exactly ``factor``, faster ones by less, the split set by b.

HunYuan's NTK-α (base·α^(R/(R−2)), HF ``hunyuan_v1_dense``'s
``compute_ntk_alpha_rope_parameters``) is posenc's ``rope-ntk`` with
``factor=α`` — the same formula — and gets no scheme of its own.

Shape legend: R rotated width (= Dh for proportional RoPE), P = R/2 pairs.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.positions.rotary import Pairing, rope_frequencies
from posenc.positions.rotary_scaling import ROPE_SCALINGS, ScaledRoPE, _check_factor
from posenc.validation import number


def proportional_pairs(head_dim: int, proportion: float) -> int:
    """How many pairs proportional RoPE rotates: ⌊proportion·Dh/2⌋, as HF computes it (``int(p·Dh // 2)``)."""
    return int(proportion * head_dim // 2)


def proportional_frequencies(rotary_dim: int, base: float, *, seq_len: int | None = None, proportion: float,
                             factor: float = 1.0) -> tuple[Tensor, float]:
    """Proportional RoPE (HF ``_compute_proportional_rope_parameters``): θ_i = base^(−2i/Dh)/factor for the first
    ⌊proportion·Dh/2⌋ pairs, 0 for the rest. ``rotary_dim`` is the whole head width Dh.
    """
    proportion = number(proportion, "proportion", minimum=0, maximum=1,
                        fix="the share of a head's pairs that rotate (Gemma 4: 0.25)")
    factor = _check_factor(factor)
    rotated = proportional_pairs(rotary_dim, proportion)
    theta = torch.zeros(rotary_dim // 2, dtype=torch.float64)
    # the exponent's denominator is the full head width: the rotated pairs keep a full head's frequencies
    theta[:rotated] = base ** (-torch.arange(0, 2 * rotated, 2, dtype=torch.float64) / rotary_dim)
    return theta / factor, 1.0


def ntk_mixed_frequencies(rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float,
                          mixed_b: float) -> tuple[Tensor, float]:
    """Mixed NTK (kexue.fm/archives/9706; vLLM ``NTKScalingRotaryEmbedding`` with ``mixed_b``):
    θ_m / exp(a·m^b), a = ln(factor)/(R/2)^b, m = 1 … R/2."""
    factor = _check_factor(factor)
    mixed_b = number(mixed_b, "mixed_b", above=0,
                     fix="b sets how fast the stretch grows from the fastest pair to the slowest (Su uses b ≈ 0.625)")
    pairs = rotary_dim // 2
    # a·m^b = ln(factor)·(m/P)^b: the same number, without P^b overflowing float64 for a large b
    share = torch.arange(1, pairs + 1, dtype=torch.float64) / pairs
    return rope_frequencies(rotary_dim, base) / torch.exp(math.log(factor) * share**mixed_b), 1.0


ROPE_SCALINGS.update({"proportional": proportional_frequencies, "ntk-mixed": ntk_mixed_frequencies})


class ProportionalRoPE(ScaledRoPE):
    """Proportional RoPE (p-RoPE; Gemma 4's global layers, HF ``rope_type="proportional"``).

    A share ``proportion`` of each head's pairs rotates with the frequencies a
    head of the full width would have (base^(−2i/Dh), i < ⌊proportion·Dh/2⌋);
    the remaining pairs carry no position at all (frequency 0). Unlike partial
    rotary (``rotary_dim``), which gives the first R coordinates the
    frequencies of an R-wide head, the rotated pairs keep the full head's
    fastest frequencies and the slowest ones are dropped. The rotation covers the
    whole head, so in the half pairing the rotated pairs are (x_i, x_{i+Dh/2}),
    i < ⌊proportion·Dh/2⌋, exactly as HF's ``rotate_half`` over the full width.

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["proportional"]``
    (frequencies) and Gemma 4's rotary embedding with ``apply_rotary_pos_emb`` (rotation).

    Args:
        head_dim, base, pairing: as for ``RoPE`` (Gemma 4's global layers: base 1e6).
        proportion: share of the pairs that rotate, 0 … 1 (HF ``partial_rotary_factor``; Gemma 4: 0.25).
        factor: divides every frequency (HF ``factor``, default 1: none).
    """

    name: ClassVar[str] = "rope-proportional"
    scaling: ClassVar[str] = "proportional"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 proportion: float = 0.25, factor: float = 1.0) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing)
        self.proportion = number(proportion, "proportion", minimum=0, maximum=1,
                                 fix="the share of a head's pairs that rotate (Gemma 4: 0.25)")
        self.factor = _check_factor(factor)

    @property
    def rotated_pairs(self) -> int:
        """Pairs that rotate: ⌊proportion·Dh/2⌋; the other Dh/2 − that many carry no position."""
        return proportional_pairs(self.head_dim, self.proportion)

    def scaling_params(self) -> dict[str, Any]:
        return {"proportion": self.proportion, "factor": self.factor}

    def options(self) -> dict[str, Any]:
        out = super().options()
        out.pop("rotary_dim")  # always the whole head
        return out


class MixedNTKRoPE(ScaledRoPE):
    """RoPE with "mixed" NTK scaling (Su Jianlin, 2023, kexue.fm/archives/9706; vLLM's ``mixed_b``).

    Each pair m = 1 … R/2 is slowed by λ_m = exp(a·m^b), a = ln(factor)/(R/2)^b:
    the slowest pair by exactly ``factor`` (as in position interpolation), the
    fastest by factor^((2/R)^b) (≈ 1: local order stays sharp). b = 1 is a
    geometric ramp; a larger b keeps more pairs near 1.

    Reference used to verify: the formula in float64 (vLLM's
    ``NTKScalingRotaryEmbedding._compute_inv_freq`` read for the conventions:
    m counted from 1, the exponent of the unscaled base).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        factor: the slowest pair's stretch (> 0; the extension factor).
        mixed_b: b > 0, the exponent of the per-pair stretch.
    """

    name: ClassVar[str] = "rope-ntk-mixed"
    scaling: ClassVar[str] = "ntk-mixed"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 4.0, mixed_b: float = 0.625) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.factor = _check_factor(factor)
        self.mixed_b = number(mixed_b, "mixed_b", above=0,
                              fix="b sets how fast the stretch grows from the fastest pair to the slowest "
                                  "(Su uses b ≈ 0.625)")

    def scaling_params(self) -> dict[str, Any]:
        return {"factor": self.factor, "mixed_b": self.mixed_b}


RECENT_ROPES: tuple[type[ScaledRoPE], ...] = (ProportionalRoPE, MixedNTKRoPE)
