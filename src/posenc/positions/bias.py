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
from torch import Tensor, nn

from posenc.positions.base import BiasScheme, ModelContext, check_positions
from posenc.validation import F32_MAX, NORMAL_DRAW_MAX, at_most, check_memory, check_table, number, positive_int


def relative_distance(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """k_pos − q_pos, int64, (Tq, Tk) or (B, Tq, Tk) (negative: the key is in the past)."""
    q_pos = check_positions(q_pos, name="q_pos")
    k_pos = check_positions(k_pos, name="k_pos")
    return k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)


def alibi_slopes(num_heads: int, max_bias: float = 8.0) -> Tensor:
    """Head slopes of ALiBi (Press et al., 2022), float64 (H,).

    For a power of two n: the geometric sequence starting at 2^(−max_bias/n) with
    that ratio (max_bias = 8 in the paper; MPT's ``alibi_bias_max``). Otherwise,
    as in the paper's reference code: the slopes for the closest power of two
    below n, then every other slope of the 2× sequence — the layout of BLOOM's
    ``build_alibi_tensor`` and, reordered the same way, of MPT's
    ``build_mpt_alibi_tensor`` (both checked in ``tests/positions``).
    """
    positive_int(num_heads, "num_heads")
    number(max_bias, "max_bias", above=0, fix="the paper and BLOOM use 8")
    # built as Python floats (the reference code's arithmetic, bit for bit): ~50 bytes a head
    check_memory(50.0 * num_heads, f"ALiBi's slopes for num_heads={num_heads}", fix="use fewer heads")
    return _slopes(num_heads, float(max_bias))


def _slopes(num_heads: int, max_bias: float = 8.0) -> Tensor:
    """``alibi_slopes`` for a head count already checked (a scheme's own, in its forward: no check to trace)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-max_bias / n)
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

    Reference used to verify: the paper's ``get_slopes``, HF BLOOM's
    ``build_alibi_tensor`` and HF MPT's ``build_mpt_alibi_tensor``.

    Args:
        num_heads: number of attention heads (any count, not only powers of two).
        max_bias: the slopes run 2^(−max_bias/n) … 2^(−max_bias); 8 in the paper
            (MPT's ``alibi_bias_max``).
    """

    name: ClassVar[str] = "alibi"

    def __init__(self, *, num_heads: int, max_bias: float = 8.0) -> None:
        super().__init__(num_heads=num_heads)
        self.register_buffer("slopes", alibi_slopes(num_heads, max_bias).float(), persistent=False)
        self.max_bias = float(max_bias)

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        distance = relative_distance(q_pos, k_pos).abs().to(self.slopes.device)  # (Tq, Tk) | (B, Tq, Tk)
        slopes = _slopes(self.num_heads, self.max_bias).to(distance.device)  # float64, exact (checked when built)
        bias = -slopes.view(-1, 1, 1) * distance.unsqueeze(-3).double()  # (H, Tq, Tk) | (B, H, Tq, Tk)
        return bias.to(self.slopes.dtype)  # float32, or float64 after model.double()

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads} | ({"max_bias": self.max_bias} if self.max_bias != 8.0 else {})


def t5_bucket(relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's relative-position buckets (Raffel et al., 2020), int64, same shape as ``relative_position``.

    ``relative_position`` is key − query. Bidirectional: half the buckets for
    keys after the query. Causal: keys after the query fall in bucket 0 (with
    distance 0; a causal mask hides them anyway). Of each half, the first
    half are exact distances 0 … max_exact − 1, the rest logarithmic bins up to
    ``max_distance``; farther distances share the last bin.

    The logarithm is taken in float32 as in Mesh TensorFlow's original (and
    HF's port), so that bucket boundaries, and hence pretrained T5 tables,
    line up exactly.
    """
    if isinstance(relative_position, Tensor) and relative_position.dtype.is_floating_point:
        raise TypeError(f"relative_position must be an integer tensor, got {relative_position.dtype}")
    number(num_buckets, "num_buckets", integer=True)
    number(max_distance, "max_distance", integer=True, fix="give a whole number of positions, e.g. 128")
    if num_buckets < 2 or (bidirectional and num_buckets < 4):
        raise ValueError(f"num_buckets={num_buckets} is too small (need >= 2, or >= 4 when bidirectional)")
    n = relative_position.long()
    buckets = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (n > 0).long() * num_buckets
        n = n.abs()
    else:
        n = (-n).clamp(min=0)
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(f"max_distance={max_distance} must exceed the exact range {max_exact} (num_buckets/4 or /2)")
    # log bins: max_exact + ln(n/max_exact)/ln(max_distance/max_exact)·(num_buckets − max_exact), float32
    ratio = n.float().clamp(min=max_exact) / max_exact  # clamp: small n take the exact branch below
    large = max_exact + (torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(n < max_exact, n, large)


class T5RelativeBias(BiasScheme):
    """T5's bucketed relative position bias (Raffel et al., 2020, §2.1): a learned scalar per (bucket, head).

    The bias table is one module; a model shares one scheme instance across
    all layers of a stack, as T5 does (each of T5's stacks computes it in its
    first layer and reuses it). T5 folds the 1/√d logit scale into its
    initialisation; posenc keeps the scale and adds the bias unscaled.

    Reference used to verify: HF ``transformers`` ``T5Attention._relative_position_bucket``
    (bucketing) and an explicit table lookup (bias).

    Args:
        num_heads: number of heads H.
        num_buckets: buckets in total (both directions when bidirectional); 32 in T5.
        max_distance: distances from here on share the last bucket; 128 in T5.
        bidirectional: True for encoders (T5's encoder), False for causal decoders.
        init_std: standard deviation of the table's normal initialisation.
    """

    name: ClassVar[str] = "t5"

    def __init__(self, *, num_heads: int, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True, init_std: float = 0.02) -> None:
        super().__init__(num_heads=num_heads)
        check_table(positive_int(num_buckets, "num_buckets"), num_heads, "bucket table", option="num_buckets")
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bool(bidirectional)
        t5_bucket(torch.zeros(1, dtype=torch.long), bidirectional=self.bidirectional,
                  num_buckets=num_buckets, max_distance=max_distance)  # validate now
        self.init_std = at_most(
            number(init_std, "init_std", minimum=0), "init_std", F32_MAX / 2 / NORMAL_DRAW_MAX,
            why=f"the bias entries (normal draws) reach {NORMAL_DRAW_MAX:.3g}·init_std and are added to float32 "
                f"logits; a bias and a logit each below half of float32's range ({F32_MAX:.3g}/2) keep their sum "
                "finite", fix="the usual value is 0.02")
        self.table = nn.Embedding(num_buckets, num_heads)
        nn.init.normal_(self.table.weight, std=init_std)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        """Head count, and one-directional buckets for a causal stack (T5's decoder): it never sees the future."""
        return {**super().context_args(ctx), "bidirectional": not ctx.causal}

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Bucket of every (query, key) pair, int64 (Tq, Tk) or (B, Tq, Tk)."""
        return t5_bucket(relative_distance(q_pos, k_pos), bidirectional=self.bidirectional,
                         num_buckets=self.num_buckets, max_distance=self.max_distance)

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        values = self.table(self.buckets(q_pos, k_pos).to(self.table.weight.device))  # (..., Tq, Tk, H)
        return values.movedim(-1, -3)  # (..., H, Tq, Tk)

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "num_buckets": self.num_buckets, "max_distance": self.max_distance,
                "bidirectional": self.bidirectional}


class KERPLE(BiasScheme):
    """KERPLE (Chi et al., 2022, "Kernelized Relative Positional Embedding for Length Extrapolation").

    Conditionally positive definite kernels of the distance |m − n|, one pair
    of learned positive parameters (r₁, r₂) per head:

    * ``log``:   bias = −r₁·ln(1 + r₂·|m − n|)
    * ``power``: bias = −r₁·|m − n|^r₂, 0 < r₂ ≤ 2

    As in the authors' code, parameters are clamped to [eps, ∞) (and r₂ ≤ 2 for
    ``power``) where they are used, and initialised uniformly at random:
    r₁ ∈ (0, 2), r₂ ∈ (0, 1) for ``log``, (0, 2) for ``power``. Use the
    registered names ``kerple-log`` and ``kerple-power``.

    Reference used to verify: the paper's formulas (float64).

    Args:
        num_heads: number of heads H.
        eps: lower clamp of both parameters.
    """

    name: ClassVar[str] = "kerple"
    kernel: ClassVar[str] = "log"

    def __init__(self, *, num_heads: int, eps: float = 1e-2) -> None:
        super().__init__(num_heads=num_heads)
        # r₂ of the power kernel is clamped to [eps, 2]; both kernels start with parameters of order 1
        self.eps = number(eps, "eps", above=0, maximum=1, fix="a small positive clamp such as 1e-2")
        self.r1 = nn.Parameter(torch.rand(num_heads) * 2)
        self.r2 = nn.Parameter(torch.rand(num_heads) * (1 if self.kernel == "log" else 2))

    def parameters_used(self) -> tuple[Tensor, Tensor]:
        """(r₁, r₂) after clamping, (H,) each."""
        r1 = self.r1.clamp(min=self.eps)
        r2 = self.r2.clamp(min=self.eps) if self.kernel == "log" else self.r2.clamp(min=self.eps, max=2.0)
        return r1, r2

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        distance = relative_distance(q_pos, k_pos).abs().to(device=self.r1.device, dtype=self.r1.dtype)
        distance = distance.unsqueeze(-3)  # (..., 1, Tq, Tk)
        r1, r2 = (p.view(-1, 1, 1) for p in self.parameters_used())  # (H, 1, 1)
        if self.kernel == "log":
            return -r1 * torch.log1p(r2 * distance)  # (..., H, Tq, Tk)
        # 0^r₂ is 0, but its gradient in r₂ (0·ln 0) is NaN: raise only distances ≥ 1 to the power
        powered = distance.clamp(min=1).pow(r2)
        return -r1 * torch.where(distance > 0, powered, torch.zeros_like(powered))

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "eps": self.eps}


class KERPLELog(KERPLE):
    """KERPLE, logarithmic kernel: bias = −r₁·ln(1 + r₂·|m − n|) (Chi et al., 2022).

    Reference used to verify: the paper's formula (float64). See ``KERPLE``.
    """

    name: ClassVar[str] = "kerple-log"
    kernel: ClassVar[str] = "log"


class KERPLEPower(KERPLE):
    """KERPLE, power kernel: bias = −r₁·|m − n|^r₂, 0 < r₂ ≤ 2 (Chi et al., 2022).

    Reference used to verify: the paper's formula (float64). See ``KERPLE``.
    """

    name: ClassVar[str] = "kerple-power"
    kernel: ClassVar[str] = "power"
