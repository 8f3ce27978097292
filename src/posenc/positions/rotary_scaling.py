"""RoPE context extension as frequency transforms: linear/PI, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE.

Every method changes *which frequencies* RoPE rotates by, and optionally a
factor on cos/sin (YaRN's and LongRoPE's "attention factor"); the rotation
itself is RoPE's (``posenc.positions.rotary``). As in HF ``transformers``'
``modeling_rope_utils``, the methods are a name → function registry with one
signature::

    ROPE_SCALINGS[name](rotary_dim, base, *, seq_len=None, **params) -> (inv_freq, attention_factor)

returning θ_i (float64, (P,)) and a float. Each is also a registered position
scheme (``rope-linear``, ``rope-ntk``, ``rope-dynamic-ntk``, ``rope-yarn``,
``rope-llama3``, ``rope-longrope``): a ``RoPE`` subclass whose only change is
``inv_freq`` / ``attention_factor`` (and, for the two length-dependent methods,
the position → angle map).

Length-dependent methods and cached decoding
--------------------------------------------
Dynamic NTK and LongRoPE pick frequencies from a *sequence length*. HF takes
that length from the current forward call (``max(position_ids) + 1``), so a
cached key keeps the frequencies of the call that produced it while later
queries use newer ones, and a full forward of T tokens differs from the same
tokens decoded step by step. posenc makes the choice explicit, with the
``max_seq_len`` option:

* ``max_seq_len=None`` (default) — **per position**: the token at position p
  (query or key) is rotated with the frequencies of a sequence of length
  p + 1, i.e. exactly what HF would use for that token had it been generated
  one at a time. Rotation is then a pure function of the position, so cached
  decoding equals full decoding and no future token changes an earlier output.
  Below ``original_max_len`` this is plain RoPE; beyond it, q·k depends on the
  absolute positions as well as on m − n (as it does in HF's cached decoding).
* ``max_seq_len=L`` — **fixed**: every position is rotated with the
  frequencies of length L (HF's full forward of an L-token sequence). Relative
  again, and cached == full.

Angles are formed in float64 from integer positions (bf16 holds integers exactly only up to 256).

Shape legend: T sequence length, R rotated width, P = R/2 rotated pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.validation import F64_MAX, POSITION_MAX, float32_squares, number, positive_int
from posenc.positions.base import check_positions
from posenc.positions.rotary import Pairing, RoPE, rope_frequencies

FrequencyTransform = Callable[..., tuple[Tensor, float]]


#: The smallest factor a frequency may be divided by: θ_0/factor = 1/factor times any int64 position must
#: stay a finite float64 angle (a smaller one turns cos and sin into NaN).
FACTOR_MIN = POSITION_MAX / F64_MAX


def _check_factor(factor: float, *, name: str = "factor") -> float:
    factor = number(factor, name, above=0)
    if factor < FACTOR_MIN:
        raise ValueError(f"{name}={factor!r} must be at least {FACTOR_MIN:.3g}: frequencies are divided by it, and "
                         f"the angle p·θ_0/{name} (θ_0 = 1) must stay a finite float64 for every position up to "
                         "2^63 − 1; a factor >= 1 extends the context")
    return factor


def _check_attention_factor(value: float, *, head_dim: int, name: str) -> float:
    """The factor on cos and sin: positive, and small enough that the float32 logits it scales stay finite."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    # queries and keys are both multiplied by it: logits grow by its square, over head_dim products
    return float32_squares(value, name, width=head_dim,
                           what="rotated queries and keys (entries of order 1, times the attention factor)",
                           fix="leave attention_factor unset for the method's default (YaRN: 0.1·ln(factor) + 1)")


def _check_length(value: int, *, name: str) -> int:
    return number(positive_int(value, name), name, maximum=POSITION_MAX, integer=True,
                  fix="a length is compared with int64 positions (at most 2**63 - 1)")


# -- the transforms (one signature, HF-style) --------------------------------------


def linear_frequencies(rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float) -> tuple[Tensor, float]:
    """Position interpolation (Chen et al., 2023; kaiokendev): θ_i / factor.

    Dividing every frequency by ``factor`` is the same as dividing positions by
    it: positions up to factor·L land inside the trained range [0, L).
    """
    return rope_frequencies(rotary_dim, base) / _check_factor(factor), 1.0


def ntk_base(rotary_dim: int, base: float, alpha: float) -> float:
    """NTK-aware base: base · alpha^(R / (R − 2)).

    With R = 2 the only frequency is base^0 = 1 whatever the base, so the
    base is returned unchanged.
    """
    if rotary_dim <= 2:
        return float(base)
    try:
        return float(base) * alpha ** (rotary_dim / (rotary_dim - 2))
    except OverflowError:  # beyond float64 every frequency but θ_0 = 1 is 0 to float64's precision: the limit
        return math.inf


def ntk_frequencies(rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float) -> tuple[Tensor, float]:
    """NTK-aware scaling (bloc97, 2023): keep θ_0 = 1, stretch the lowest frequency by ``factor``.

    The base becomes base·factor^(R/(R−2)), so high frequencies barely move
    (local order stays sharp) while the lowest is divided by exactly ``factor``.
    """
    return rope_frequencies(rotary_dim, ntk_base(rotary_dim, base, _check_factor(factor))), 1.0


def dynamic_ntk_frequencies(
    rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float, original_max_len: int,
) -> tuple[Tensor, float]:
    """Dynamic NTK (emozilla, 2023): NTK with alpha = factor·L/L₀ − (factor − 1), L = max(seq_len, L₀).

    At L ≤ L₀ it is plain RoPE; the base grows continuously with the length.
    Same formula as HF's ``dynamic`` type (whose L₀ is ``max_position_embeddings``), written as
    factor·(L − L₀)/L₀ + 1: exactly 1 at L = L₀ for any factor (HF's form cancels catastrophically for a
    large factor, e.g. 1e20 − (1e20 − 1) = 0, and returns a zero base).
    """
    factor, original = _check_factor(factor), _check_length(original_max_len, name="original_max_len")
    length = original if seq_len is None else max(int(seq_len), original)
    return rope_frequencies(rotary_dim, ntk_base(rotary_dim, base, dynamic_ntk_alpha(factor, length, original))), 1.0


def dynamic_ntk_alpha(factor: float, length: Any, original: int) -> Any:
    """Dynamic NTK's α at length L ≥ L₀ (a number or a tensor of lengths): factor·(L − L₀)/L₀ + 1."""
    return factor * (length - original) / original + 1


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term: 0.1·mscale·ln(scale) + 1 (1 for scale ≤ 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_frequencies(
    rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float, original_max_len: int,
    beta_fast: float = 32.0, beta_slow: float = 1.0, attention_factor: float | None = None,
    mscale: float | None = None, mscale_all_dim: float | None = None, truncate: bool = True,
) -> tuple[Tensor, float]:
    """YaRN (Peng et al., 2023): interpolate low frequencies, keep high ones, ramp in between.

    Pairs that turn fewer than ``beta_slow`` times over L₀ are interpolated
    (θ/factor); pairs that turn more than ``beta_fast`` times are kept; a linear
    ramp over the pair index joins the two. The attention factor
    (0.1·ln(factor) + 1, or DeepSeek's mscale ratio) multiplies cos and sin.
    """
    factor, original = _check_factor(factor), _check_length(original_max_len, name="original_max_len")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            denominator = yarn_mscale(factor, mscale_all_dim)
            if not denominator > 0:
                raise ValueError(f"mscale_all_dim={mscale_all_dim!r} makes YaRN's attention factor divide by "
                                 f"0.1·mscale_all_dim·ln(factor) + 1 = {denominator:.3g}, which must be > 0; "
                                 "DeepSeek-V3 uses mscale = mscale_all_dim = 1")
            attention_factor = yarn_mscale(factor, mscale) / denominator
        else:
            attention_factor = yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:
        # the (fractional) pair index whose wavelength fits `rotations` times into L₀
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # (P,)
    theta = rope_frequencies(rotary_dim, base)
    # ramp 0 → keep θ (extrapolate), ramp 1 → θ/factor (interpolate)
    return theta / factor * ramp + theta * (1 - ramp), float(attention_factor)


def llama3_frequencies(
    rotary_dim: int, base: float, *, seq_len: int | None = None, factor: float, low_freq_factor: float,
    high_freq_factor: float, original_max_len: int,
) -> tuple[Tensor, float]:
    """Llama 3.1 scaling (Meta, 2024): by wavelength λ = 2π/θ against L₀.

    λ < L₀/high_freq_factor: unchanged; λ > L₀/low_freq_factor: θ/factor; in
    between, a smooth mix with weight s = (L₀/λ − low_freq_factor)/(high_freq_factor − low_freq_factor).
    """
    factor, original = _check_factor(factor), _check_length(original_max_len, name="original_max_len")
    number(low_freq_factor, "low_freq_factor")
    number(high_freq_factor, "high_freq_factor")
    if not high_freq_factor > low_freq_factor > 0:
        raise ValueError(
            f"need high_freq_factor > low_freq_factor > 0, got high_freq_factor={high_freq_factor}, "
            f"low_freq_factor={low_freq_factor}")
    theta = rope_frequencies(rotary_dim, base)
    wavelength = 2 * math.pi / theta
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = (1 - smooth) * theta / factor + smooth * theta
    out = torch.where(wavelength > original / low_freq_factor, theta / factor, mixed)
    return torch.where(wavelength < original / high_freq_factor, theta, out), 1.0


def longrope_frequencies(
    rotary_dim: int, base: float, *, seq_len: int | None = None, short_factor: Sequence[float],
    long_factor: Sequence[float], factor: float, original_max_len: int, attention_factor: float | None = None,
) -> tuple[Tensor, float]:
    """LongRoPE (Ding et al., 2024; Phi-3): one searched rescale factor per pair.

    θ_i / short_factor[i] for lengths ≤ L₀, θ_i / long_factor[i] beyond. The
    attention factor defaults to √(1 + ln(factor)/ln(L₀)) (1 when factor ≤ 1).
    """
    factor, original = _check_factor(factor), _check_length(original_max_len, name="original_max_len")
    pairs = rotary_dim // 2
    for name, values in (("short_factor", short_factor), ("long_factor", long_factor)):
        if len(values) != pairs:
            raise ValueError(f"{name} has {len(values)} entries; rotary_dim={rotary_dim} needs one per pair: {pairs}")
        if any(not (v > 0 and math.isfinite(v)) for v in values):
            raise ValueError(f"{name} entries must be positive, got {list(values)}")
        if min(values, default=1.0) < FACTOR_MIN:
            raise ValueError(f"{name} entries must be at least {FACTOR_MIN:.3g} (frequencies are divided by them, "
                             f"and p·θ/entry must stay a finite float64 angle up to position 2^63 − 1), got "
                             f"{min(values)!r}")
    if attention_factor is None:
        if factor > 1 and original < 2:
            raise ValueError(f"original_max_len={original} leaves LongRoPE's default attention factor "
                             "√(1 + ln(factor)/ln(L₀)) undefined (ln 1 = 0); give original_max_len >= 2 or "
                             "attention_factor")
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    use_long = seq_len is not None and seq_len > original
    ext = torch.tensor(list(long_factor if use_long else short_factor), dtype=torch.float64)
    return rope_frequencies(rotary_dim, base) / ext, float(attention_factor)


#: name → transform, HF ``ROPE_INIT_FUNCTIONS`` style (names as in HF where HF has the method).
ROPE_SCALINGS: dict[str, FrequencyTransform] = {
    "linear": linear_frequencies,
    "ntk": ntk_frequencies,
    "dynamic": dynamic_ntk_frequencies,
    "yarn": yarn_frequencies,
    "llama3": llama3_frequencies,
    "longrope": longrope_frequencies,
}


# -- the schemes --------------------------------------------------------------------


class ScaledRoPE(RoPE):
    """RoPE whose frequencies come from ``ROPE_SCALINGS[scaling]``; subclasses declare their parameters.

    ``inv_freq_at(seq_len)`` is the transform at a sequence length;
    ``inv_freq()`` and ``attention_factor`` are what the rotation uses.
    """

    scaling: ClassVar[str]

    def scaling_params(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def inv_freq_at(self, seq_len: int | None = None) -> Tensor:
        """θ (float64, (P,)) the transform gives for a sequence of ``seq_len`` tokens."""
        return ROPE_SCALINGS[self.scaling](self.rotary_dim, self.base, seq_len=seq_len, **self.scaling_params())[0]

    def inv_freq(self) -> Tensor:
        return self.inv_freq_at(None)

    @property
    def attention_factor(self) -> float:
        return ROPE_SCALINGS[self.scaling](self.rotary_dim, self.base, seq_len=None, **self.scaling_params())[1]

    def options(self) -> dict[str, Any]:
        return {**super().options(), **self.scaling_params()}


class _FactorRoPE(ScaledRoPE):
    """A scaled RoPE whose one option is ``factor`` (linear and static NTK)."""

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 4.0) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.factor = _check_factor(factor)

    def scaling_params(self) -> dict[str, Any]:
        return {"factor": self.factor}


class LinearRoPE(_FactorRoPE):
    """RoPE with position interpolation (Chen et al., 2023; kaiokendev): θ_i / factor.

    Paper: "Extending Context Window of Large Language Models via Positional Interpolation".

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["linear"]``.

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        factor: context extension factor (> 0).
    """

    name: ClassVar[str] = "rope-linear"
    scaling: ClassVar[str] = "linear"


class NTKRoPE(_FactorRoPE):
    """RoPE with static NTK-aware scaling (bloc97, 2023): base · factor^(R/(R−2)).

    HF has no static NTK type; reference used to verify: the formula, and HF's
    ``dynamic`` type, which equals it at factor' = factor − 1 and seq_len = 2·L₀.

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        factor: alpha, the stretch of the lowest frequency (> 0).
    """

    name: ClassVar[str] = "rope-ntk"
    scaling: ClassVar[str] = "ntk"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 4.0) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim, factor=factor)
        r = self.rotary_dim
        if r > 2:  # the NTK base base·factor^(R/(R−2)) must be a RoPE base: finite in float64 and > 1
            power = r / (r - 2)
            ntk = ntk_base(r, self.base, self.factor)
            if not math.isfinite(ntk):
                raise ValueError(
                    f"factor={factor!r} must be at most {(F64_MAX / self.base) ** (1 / power):.3g}: the NTK base "
                    f"base·factor^(R/(R−2)) = {self.base:g}·factor^{power:.4g} overflows float64 beyond it; "
                    "a factor of 2-8 is usual")
            if not ntk > 1:
                raise ValueError(
                    f"factor={factor!r} must be above {self.base ** (-1 / power):.3g}: the NTK base "
                    f"base·factor^(R/(R−2)) = {ntk:.3g} must be > 1 like any RoPE base; a factor of 2-8 is usual")


class _LengthDependentRoPE(ScaledRoPE):
    """Shared by dynamic NTK and LongRoPE: frequencies per position, or fixed by ``max_seq_len``.

    See the module docstring. ``angles`` is the one hook overridden: with
    ``max_seq_len=None`` position p is rotated by p·θ(p + 1); with an integer
    it is p·θ(max_seq_len) for every p.
    """

    max_seq_len: int | None

    def inv_freq(self) -> Tensor:
        """θ for a sequence of ``max_seq_len`` tokens; with per-position frequencies, θ at L₀ (positions < L₀)."""
        return self.inv_freq_at(self.max_seq_len)

    def frequencies_used(self, positions: Tensor) -> Tensor:
        """θ each position is rotated with, in the current mode, float64 (..., T, P).

        For a KV cache: ``frequencies_used(cache.positions)`` are the
        frequencies its keys were rotated with.
        """
        positions = check_positions(positions)
        if self.max_seq_len is not None:
            return self.inv_freq_at(self.max_seq_len).to(positions.device).expand(*positions.shape, -1)
        return self.inv_freq_per_position(positions)

    def angles(self, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        return positions.double().unsqueeze(-1) * self.frequencies_used(positions)

    def inv_freq_per_position(self, positions: Tensor) -> Tensor:  # pragma: no cover - abstract
        """θ(p + 1) for each position p, float64 (..., T, P); equals ``inv_freq_at(p + 1)`` row by row."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {**super().options(), "max_seq_len": self.max_seq_len}


def _check_max_seq_len(max_seq_len: int | None) -> int | None:
    return None if max_seq_len is None else _check_length(max_seq_len, name="max_seq_len")


class DynamicNTKRoPE(_LengthDependentRoPE):
    """RoPE with dynamic NTK scaling (emozilla, 2023): the NTK base grows with the sequence length.

    Which frequencies a key was rotated with: with ``max_seq_len=None``, the
    key at position p used θ(p + 1) — a pure function of p, recorded by the
    position the cache already stores; with ``max_seq_len=L``, θ(L) for all.

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["dynamic"]``
    (its ``max_position_embeddings`` is ``original_max_len`` here).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        factor: scaling factor (> 0).
        original_max_len: L₀, the trained context; shorter sequences get plain RoPE.
        max_seq_len: None for per-position frequencies, or a fixed length.
    """

    name: ClassVar[str] = "rope-dynamic-ntk"
    scaling: ClassVar[str] = "dynamic"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 4.0, original_max_len: int = 2048,
                 max_seq_len: int | None = None) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.factor = _check_factor(factor)
        self.original_max_len = _check_length(original_max_len, name="original_max_len")
        self.max_seq_len = _check_max_seq_len(max_seq_len)

    def scaling_params(self) -> dict[str, Any]:
        return {"factor": self.factor, "original_max_len": self.original_max_len}

    def inv_freq_per_position(self, positions: Tensor) -> Tensor:
        # the dynamic_ntk_frequencies formula, vectorised over L = max(p + 1, L₀): θ_i = base(L)^(−2i/R)
        r = self.rotary_dim
        length = (check_positions(positions) + 1).clamp(min=self.original_max_len).double()
        alpha = dynamic_ntk_alpha(self.factor, length, self.original_max_len)  # exact 1 at L₀
        base = self.base * alpha ** (r / (r - 2)) if r > 2 else torch.full_like(alpha, self.base)
        exponent = -torch.arange(0, r, 2, dtype=torch.float64, device=positions.device) / r  # (P,)
        return base.unsqueeze(-1) ** exponent  # (..., T, P)


class YaRNRoPE(ScaledRoPE):
    """RoPE with YaRN scaling (Peng et al., 2023, "YaRN: Efficient Context Window Extension of LLMs").

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["yarn"]``.

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        factor: context extension factor.
        original_max_len: L₀, the trained context.
        beta_fast, beta_slow: rotation counts bounding the ramp (32 and 1 in the paper).
        attention_factor: factor on cos/sin; default from ``factor`` (and ``mscale``/``mscale_all_dim``).
        mscale, mscale_all_dim: DeepSeek-V2/V3's variant of the attention factor.
        truncate: round the ramp bounds to whole pair indices (HF default True).
    """

    name: ClassVar[str] = "rope-yarn"
    scaling: ClassVar[str] = "yarn"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 4.0, original_max_len: int = 2048,
                 beta_fast: float = 32.0, beta_slow: float = 1.0, attention_factor: float | None = None,
                 mscale: float | None = None, mscale_all_dim: float | None = None, truncate: bool = True) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.factor = _check_factor(factor)
        self.original_max_len = _check_length(original_max_len, name="original_max_len")
        number(beta_fast, "beta_fast")
        number(beta_slow, "beta_slow")
        if not beta_fast > beta_slow > 0:
            raise ValueError(f"need beta_fast > beta_slow > 0, got beta_fast={beta_fast}, beta_slow={beta_slow}")
        # the ramp takes ln(L₀/(2π·beta)) in float64: L₀/(2π·beta) must be a positive finite number
        low, high = self.original_max_len / math.pi / F64_MAX, F64_MAX / (4 * math.pi)  # a factor 2 of margin
        for name, beta in (("beta_fast", beta_fast), ("beta_slow", beta_slow)):
            if not low <= beta <= high:
                raise ValueError(f"{name}={beta!r} must be between {low:.3g} and {high:.3g}: YaRN takes "
                                 f"ln(L₀/(2π·{name})) in float64 (L₀ = original_max_len = {self.original_max_len}), "
                                 "which is not finite outside; the paper uses beta_fast=32, beta_slow=1")
        self.beta_fast, self.beta_slow = float(beta_fast), float(beta_slow)
        self.attention_factor_option = None if attention_factor is None else _check_attention_factor(
            number(attention_factor, "attention_factor"), head_dim=self.head_dim, name="attention_factor")
        self.mscale = None if mscale is None else number(mscale, "mscale")
        self.mscale_all_dim = None if mscale_all_dim is None else number(mscale_all_dim, "mscale_all_dim")
        self.truncate = bool(truncate)
        if attention_factor is None:  # the factor derived from factor/mscale/mscale_all_dim, checked the same way
            _check_attention_factor(self.attention_factor, head_dim=self.head_dim,
                                    name=f"the attention factor from factor={self.factor:g}, mscale={self.mscale}, "
                                         f"mscale_all_dim={self.mscale_all_dim}")

    def scaling_params(self) -> dict[str, Any]:
        return {"factor": self.factor, "original_max_len": self.original_max_len, "beta_fast": self.beta_fast,
                "beta_slow": self.beta_slow, "attention_factor": self.attention_factor_option,
                "mscale": self.mscale, "mscale_all_dim": self.mscale_all_dim, "truncate": self.truncate}


class Llama3RoPE(ScaledRoPE):
    """RoPE with Llama 3.1's frequency-band scaling (Meta, 2024, "The Llama 3 Herd of Models").

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["llama3"]``.

    Args:
        head_dim, pairing, rotary_dim: as for ``RoPE``.
        base: 500000 in Llama 3.
        factor, low_freq_factor, high_freq_factor, original_max_len: 8, 1, 4, 8192 in Llama 3.1.
    """

    name: ClassVar[str] = "rope-llama3"
    scaling: ClassVar[str] = "llama3"

    def __init__(self, *, head_dim: int, base: float = 500000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, factor: float = 8.0, low_freq_factor: float = 1.0,
                 high_freq_factor: float = 4.0, original_max_len: int = 8192) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.factor = _check_factor(factor)
        self.low_freq_factor, self.high_freq_factor = float(low_freq_factor), float(high_freq_factor)
        self.original_max_len = _check_length(original_max_len, name="original_max_len")
        self.inv_freq()  # validate the band factors now, not at the first forward

    def scaling_params(self) -> dict[str, Any]:
        return {"factor": self.factor, "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor, "original_max_len": self.original_max_len}


class LongRoPE(_LengthDependentRoPE):
    """RoPE with LongRoPE's per-pair rescale factors (Ding et al., 2024; Phi-3).

    Short factors rotate positions below L₀, long factors the rest (per
    position, ``max_seq_len=None``), or one set for all positions chosen by
    ``max_seq_len > original_max_len``. Under a KV cache these are HF's two
    generations: a prompt of ≤ L₀ tokens decoded past L₀ (cached keys below
    L₀ keep the short factors) is the per-position mode; a prompt longer than
    L₀ (long factors for every key) is the fixed mode with any
    ``max_seq_len > original_max_len`` (tests/positions/test_longrope_cache.py). Real models ship their searched factors;
    the defaults here (all ones for short; a geometric ramp from 1 to
    ``factor`` over the pairs for long: low frequencies stretched most) are a
    neutral stand-in.

    Reference used to verify: HF ``transformers`` ``ROPE_INIT_FUNCTIONS["longrope"]``.

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        short_factor, long_factor: one positive factor per rotated pair (R/2 each).
        factor: overall extension factor (sets the default attention factor).
        original_max_len: L₀ (4096 in Phi-3).
        attention_factor: factor on cos/sin; default √(1 + ln(factor)/ln(L₀)).
        max_seq_len: None for per-position factors, or a fixed length.
    """

    name: ClassVar[str] = "rope-longrope"
    scaling: ClassVar[str] = "longrope"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, short_factor: Sequence[float] | None = None,
                 long_factor: Sequence[float] | None = None, factor: float = 4.0, original_max_len: int = 4096,
                 attention_factor: float | None = None, max_seq_len: int | None = None) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        pairs = self.rotary_dim // 2
        self.factor = _check_factor(factor)
        self.short_factor = [1.0] * pairs if short_factor is None else [float(v) for v in short_factor]
        self.long_factor = ([self.factor ** (i / max(pairs - 1, 1)) for i in range(pairs)]
                            if long_factor is None else [float(v) for v in long_factor])
        self.original_max_len = _check_length(original_max_len, name="original_max_len")
        self.attention_factor_option = None if attention_factor is None else _check_attention_factor(
            number(attention_factor, "attention_factor"), head_dim=self.head_dim, name="attention_factor")
        self.max_seq_len = _check_max_seq_len(max_seq_len)
        self.inv_freq()  # validate factor lists now

    def scaling_params(self) -> dict[str, Any]:
        return {"short_factor": self.short_factor, "long_factor": self.long_factor, "factor": self.factor,
                "original_max_len": self.original_max_len, "attention_factor": self.attention_factor_option}

    def inv_freq_per_position(self, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        short = self.inv_freq_at(self.original_max_len).to(positions.device)  # (P,)
        long = self.inv_freq_at(self.original_max_len + 1).to(positions.device)
        return torch.where((positions >= self.original_max_len).unsqueeze(-1), long, short)  # (..., T, P)


SCALED_ROPES: tuple[type[ScaledRoPE], ...] = (LinearRoPE, NTKRoPE, DynamicNTKRoPE, YaRNRoPE, Llama3RoPE, LongRoPE)
