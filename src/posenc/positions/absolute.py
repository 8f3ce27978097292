"""Absolute (additive) position schemes: sinusoidal, learned, naive integer index.

Shape legend: B batch, T sequence length, D width.
"""

from __future__ import annotations

import math
import typing
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from posenc.checks import check_values, compiling
from posenc.positions.base import AdditiveScheme, ModelContext, check_positions, cos_sin
from posenc.positions.cache import TableCache
from posenc.validation import F32_EXACT_INT, NORMAL_DRAW_MAX, check_table, float32_squares, number, positive_int


def check_even(value: int, *, name: str, what: str) -> None:
    """Raise a ValueError naming ``value`` when a width that holds pairs is odd."""
    if value <= 0 or value % 2:
        raise ValueError(
            f"{name}={value} must be a positive even number: {what} works on pairs of coordinates "
            f"(use {value + 1 if value > 0 else 2} or {max(value - 1, 2)})"
        )


#: Column layouts of a sinusoidal table: sin/cos of pair i in columns (2i, 2i + 1) — Vaswani et al.'s
#: formula, d2l — or all sines then all cosines, [sin | cos] (tensor2tensor, fairseq, Marian, M2M100, Whisper).
Layout = Literal["interleaved", "concatenated"]
LAYOUTS: tuple[str, ...] = typing.get_args(Layout)
#: What the frequency exponent divides by: ω_i = base^(−i/(D/2)) = base^(−2i/D) (Vaswani et al., Marian), or
#: base^(−i/(D/2 − 1)) (tensor2tensor's ``get_timing_signal_1d``, fairseq, M2M100, Whisper's ``sinusoids``),
#: whose last pair turns exactly at 1/base.
Denominator = Literal["half", "half-minus-one"]
DENOMINATORS: tuple[str, ...] = typing.get_args(Denominator)


def sinusoid_frequencies(dim: int, base: float = 10000.0, denominator: str = "half") -> Tensor:
    """ω_i = base^(−i/(dim/2)) ("half") or base^(−i/(dim/2 − 1)) ("half-minus-one"), i = 0 … dim/2 − 1, float64."""
    check_even(dim, name="dim", what="the sinusoidal table")
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator must be one of {DENOMINATORS}, got {denominator!r}")
    if denominator == "half":
        return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if dim < 4:
        raise ValueError(f"dim={dim}: the denominator 'half-minus-one' divides by dim/2 − 1 and needs dim >= 4")
    return base ** (-torch.arange(dim // 2, dtype=torch.float64) / (dim // 2 - 1))


def sinusoid_table(positions: Tensor, dim: int, base: float = 10000.0, *, layout: str = "interleaved",
                   denominator: str = "half", offset: int = 0) -> Tensor:
    """The sinusoidal table of Vaswani et al. (2017) and its published variants, float64, at integer ``positions``.

    interleaved: PE[p, 2i] = sin(q·ω_i), PE[p, 2i+1] = cos(q·ω_i); concatenated:
    PE[p, i] = sin(q·ω_i), PE[p, dim/2 + i] = cos(q·ω_i); q = p + ``offset`` and ω_i
    per ``denominator`` (``sinusoid_frequencies``). Angles are formed in float64 from
    the integer positions, so any position (1e6 and beyond) is exact to float64
    rounding: there is no max_len cliff.

    Returns:
        (..., T, dim) float64, for positions of shape (..., T).
    """
    positions = check_positions(positions)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    angles = (positions + offset).double().unsqueeze(-1) * \
        sinusoid_frequencies(dim, base, denominator).to(positions.device)
    cos, sin = cos_sin(angles)  # one op under torch.compile: the table is computed once, not per batch row
    if layout == "concatenated":
        return torch.cat((sin, cos), dim=-1)  # (..., T, dim): [sin | cos]
    table = torch.stack((sin, cos), dim=-1)  # (..., T, dim/2, 2)
    return table.flatten(-2)  # (..., T, dim): sin, cos interleaved


class SinusoidalPositions(AdditiveScheme):
    """Fixed sinusoidal encoding added to token vectors (Vaswani et al., 2017, §3.5), in each published layout.

    The default is the paper's formula (interleaved, ω_i = base^(−2i/D), from
    position 0). Real models store it otherwise: Marian as [sin | cos] halves;
    tensor2tensor, fairseq, M2M100 and Whisper as halves with ω_i =
    base^(−i/(D/2 − 1)); fairseq-style models read position p at p + 2 (their
    padding offset). ``posenc inspect`` tells them apart by fit
    (``posenc.inspect.sinusoid``).

    Reference used to verify: the float64 formula itself, d2l's
    ``PositionalEncoding`` layout, and HF's ``MarianSinusoidalPositionalEmbedding``,
    ``M2M100SinusoidalPositionalEmbedding.get_embedding`` and Whisper's ``sinusoids``
    (``tests/positions/test_absolute.py``).

    Args:
        dim: model width, even.
        base: the wavelength base (10000 in the paper).
        layout: "interleaved" (sin, cos of pair i in columns 2i, 2i + 1) or "concatenated" ([sin | cos]).
        denominator: "half" (ω_i = base^(−2i/D)) or "half-minus-one" (ω_i = base^(−i/(D/2 − 1))).
        offset: position p is encoded as p + offset (fairseq / M2M100: 2).
    """

    name: ClassVar[str] = "sinusoidal"

    def __init__(self, *, dim: int, base: float = 10000.0, layout: Layout = "interleaved",
                 denominator: Denominator = "half", offset: int = 0) -> None:
        super().__init__(dim=dim)
        check_even(dim, name="dim", what="the sinusoidal encoding")
        self.base = number(base, "base", above=1, fix="the wavelength base is usually 10000")
        if layout not in LAYOUTS:
            raise ValueError(f"sinusoidal: layout must be one of {LAYOUTS}, got {layout!r}")
        if denominator not in DENOMINATORS:
            raise ValueError(f"sinusoidal: denominator must be one of {DENOMINATORS}, got {denominator!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= F32_EXACT_INT:
            raise ValueError(f"sinusoidal: offset={offset!r} must be an integer >= 0 (fairseq / M2M100: 2)")
        sinusoid_frequencies(dim, self.base, denominator)  # validate the width for the denominator now
        self.layout, self.denominator, self.offset = layout, denominator, offset

    #: Largest cached table (rows × dim elements): 4 Mi — 16 MiB in float32.
    TABLE_LIMIT: ClassVar[int] = 1 << 22

    def encode(self, positions: Tensor) -> Tensor:
        return sinusoid_table(positions, self.dim, self.base, layout=self.layout, denominator=self.denominator,
                              offset=self.offset)

    def table(self, positions: Tensor, *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Rows of a table formed once per (dtype, device) for positions 0 … L − 1 (L a power of two).

        Bit-for-bit ``encode(positions).to(dtype)`` (float64 formula, cast at the
        end), so ``add`` is one gather of T rows and one read-add-write of x.
        Served by ``TableCache`` keyed on (class, dim, base, layout, denominator, offset); positions past
        ``TABLE_LIMIT``, and every call under ``torch.compile`` (sizing the table
        reads a value), are formed directly.
        """
        positions = check_positions(positions).to(device)
        if compiling():
            return super().table(positions, dtype=dtype, device=device)
        cache: TableCache = self.__dict__.setdefault("_table_cache", TableCache(limit=self.TABLE_LIMIT))
        key = (type(self).__qualname__, self.dim, self.base, self.layout, self.denominator, self.offset)
        rows = cache.rows(positions, key=key, width=self.dim, dtype=dtype,
                          build=lambda p: (super(SinusoidalPositions, self).table(p, dtype=dtype, device=device),))
        if rows is None:
            return super().table(positions, dtype=dtype, device=device)
        return rows[0]  # (..., T, D)

    def options(self) -> dict[str, Any]:
        layout = {"layout": self.layout, "denominator": self.denominator, "offset": self.offset}
        defaults = {"layout": "interleaved", "denominator": "half", "offset": 0}
        return {"dim": self.dim, "base": self.base} | {k: v for k, v in layout.items() if v != defaults[k]}


class LearnedPositions(AdditiveScheme):
    """A learned table of ``max_len`` position vectors (BERT, GPT-2, OPT).

    Position p reads row p + ``offset``: OPT's table has two rows more than its
    context and reads position p at row p + 2 (HF ``OPTLearnedPositionalEmbedding``,
    a relic of fairseq's padding index); every other model has offset 0. It has no
    row beyond ``max_len - 1``: asking for one raises, naming the table size,
    instead of indexing out of bounds.

    Args:
        dim: model width.
        max_len: number of rows (positions 0 … max_len − 1 − offset).
        init_std: standard deviation of the normal initialisation (GPT-2: 0.02).
        offset: the row of position 0 (OPT: 2); the rows before it are never read.
    """

    name: ClassVar[str] = "learned"

    def __init__(self, *, dim: int, max_len: int = 1024, init_std: float = 0.02, offset: int = 0) -> None:
        super().__init__(dim=dim)
        self.max_len = positive_int(max_len, "max_len")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < self.max_len:
            raise ValueError(f"learned: offset={offset!r} must be an integer in [0, max_len={self.max_len}): the row "
                             "position 0 reads (OPT: 2, otherwise 0)")
        self.offset = offset
        self.init_std = float32_squares(number(init_std, "init_std", minimum=0), "init_std", width=dim,
                                        reach=NORMAL_DRAW_MAX, what="the table's entries (normal draws)",
                                        fix="GPT-2 uses 0.02")
        check_table(self.max_len, dim, "position table", option="max_len")
        self.weight = nn.Parameter(torch.empty(max_len, dim))
        nn.init.normal_(self.weight, std=init_std)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        """The model's width and, when it knows one, its longest sequence as ``max_len``."""
        args = super().context_args(ctx)
        return args if ctx.max_length is None else {**args, "max_len": ctx.max_length}

    def encode(self, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        fix = "build it with a larger max_len or use a scheme defined at any position (sinusoidal, rope, alibi, ...)"
        last = self.max_len - 1 - self.offset
        rows = f"{self.max_len} rows" + (f", position 0 at row {self.offset}" if self.offset else "")
        check_values(
            positions <= last,
            lambda: f"learned position table has {rows} (positions 0..{last}) "
                    f"but position {int(positions.max())} was asked for; {fix}",
            compiled_message=f"learned position table has {rows} (positions 0..{last}) "
                             f"but a larger position was asked for; {fix}")
        return self.weight[positions.to(self.weight.device) + self.offset]

    def max_position(self) -> int | None:
        return self.max_len - 1 - self.offset

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim, "max_len": self.max_len} | ({"offset": self.offset} if self.offset else {})


class NaiveIndexPositions(AdditiveScheme):
    """The raw position index appended as one extra coordinate (article 000's first try).

    It is what *not* to do: the signal grows with the position, so the position
    part of the logits (i·j) swamps the content part at large positions. Kept
    for the lab and for completeness. ``extra_width`` is 1: token vectors of
    width ``dim`` leave with width ``dim + 1``.

    Args:
        dim: width of the token vectors it receives.
        scale: multiply the index by this (1.0 = the raw index).
    """

    name: ClassVar[str] = "naive"
    extra_width: ClassVar[int] = 1

    def __init__(self, *, dim: int, scale: float = 1.0) -> None:
        super().__init__(dim=dim)
        # the column p·scale is squared in attention and normalisation; up to p = 2²⁴ (the positions a
        # float32 column holds exactly — beyond it the column is no longer the index) it must stay finite
        self.scale = float32_squares(number(scale, "scale"), "scale", width=1, reach=F32_EXACT_INT,
                                     what="the index column's entries (positions up to 2^24 times scale)",
                                     fix="1.0 is the raw index")

    def encode(self, positions: Tensor) -> Tensor:
        return check_positions(positions).double().unsqueeze(-1) * self.scale  # (..., T, 1)

    def add(self, x: Tensor, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        if positions.shape[-1] != x.shape[-2]:
            raise ValueError(f"naive: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}")
        column = self.encode(positions).to(device=x.device, dtype=x.dtype)
        column = column.expand(*x.shape[:-1], 1)
        return torch.cat((x, column), dim=-1)  # (B, T, D + 1)

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim, "scale": self.scale}


def sinusoid_norm(dim: int) -> float:
    """The norm every sinusoidal row has: √(dim/2) (each sin²+cos² pair is 1)."""
    return math.sqrt(dim / 2)


class ScaledSinusoidalPositions(AdditiveScheme):
    """The sinusoidal table times one learned scalar (Hua et al., 2022, "Transformer Quality in Linear Time").

    Lets the model choose how loud positions are next to token vectors
    (article 000's "who wins" ratio), starting from ``init_scale``
    (default D^(−1/2), as in FLASH / x-transformers: row norm 1/√2).

    Reference used to verify: ``sinusoid_table`` times the scale (the
    sinusoid itself is verified against the float64 formula).

    Args:
        dim: model width, even.
        base: the wavelength base.
        init_scale: initial value of the learned scale; default dim^(−1/2).
    """

    name: ClassVar[str] = "scaled-sinusoidal"

    def __init__(self, *, dim: int, base: float = 10000.0, init_scale: float | None = None) -> None:
        super().__init__(dim=dim)
        check_even(dim, name="dim", what="the sinusoidal encoding")
        self.base = number(base, "base", above=1, fix="the wavelength base is usually 10000")
        self.init_scale = dim**-0.5 if init_scale is None else float32_squares(
            number(init_scale, "init_scale"), "init_scale", width=max(dim // 2, 1),
            what="its sin-cos pairs (squared norm init_scale² each, dim/2 of them per row)",
            fix=f"leave it unset for dim^-1/2 = {dim**-0.5:.3g}")
        self.scale = nn.Parameter(torch.tensor(self.init_scale))

    def encode(self, positions: Tensor) -> Tensor:
        table = sinusoid_table(positions, self.dim, self.base).to(device=self.scale.device)
        return table * self.scale.double()  # (..., T, D) float64, differentiable in the scale

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """scale² times the sinusoidal Gram matrix, all in float64."""
        a = sinusoid_table(pos_i, self.dim, self.base)
        b = sinusoid_table(pos_j, self.dim, self.base)
        return float(self.scale.detach()) ** 2 * (a @ b.transpose(-1, -2))

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim, "base": self.base, "init_scale": self.init_scale}
