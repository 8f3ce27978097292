"""The contract every position scheme keeps.

A position scheme can act in exactly one of three places:

=========  =====================================  ==============================
family     acts on                                hook it overrides
=========  =====================================  ==============================
additive   token vectors before the first block   ``add(x, positions)``, ``encode``
rotary     queries and keys inside attention      ``rotate_query``, ``rotate_key``
bias       attention logits                       ``attention_bias(q_pos, k_pos, q)``
none       nothing                                —
=========  =====================================  ==============================

Every scheme inherits all the hooks; the base versions do nothing, so a model
calls all of them at their places and never asks which scheme it holds.
``rotate(q, k, q_pos, k_pos)`` applies ``rotate_query`` and ``rotate_key``;
``rotate_query`` alone serves cached cross-attention, whose keys were rotated
when cached. ``encode(positions)`` is the vectors an additive scheme adds (the
lab measures them; other families raise). ``context_args`` says what the scheme
takes from the model it is built for (see ``ModelContext``).

Positions are data, not shape: every hook takes explicit integer positions,
``(T,)`` shared by the batch or ``(B, T)`` per sequence. Offsets for cached
decoding, left padding and positions far beyond training are the same path.

Every scheme also answers ``similarity(pos_i, pos_j)``: the similarity it
induces between two positions alone, in float64 — the Gram matrix of an additive
table, the dot product of rotated all-ones vectors for rotary schemes, the bias
itself for bias schemes. The lab measures properties on that one object.

Shape legend: B batch, H heads, T/Tq/Tk sequence lengths, D model width,
Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from posenc.checks import check_values, compiling
from posenc.validation import check_memory

Family = Literal["additive", "rotary", "bias", "none"]


@torch.library.custom_op("posenc::cos_sin", mutates_args=())
def _cos_sin_op(theta: Tensor) -> tuple[Tensor, Tensor]:
    return theta.cos(), theta.sin()


@_cos_sin_op.register_fake
def _(theta: Tensor) -> tuple[Tensor, Tensor]:
    return torch.empty_like(theta), torch.empty_like(theta)


def cos_sin(theta: Tensor) -> tuple[Tensor, Tensor]:
    """(cos θ, sin θ) of a table of angles, e.g. (…, T, P) float64 from integer positions.

    Under ``torch.compile`` the two are one opaque op (``posenc::cos_sin``), so
    the compiler computes the table once and the kernels that broadcast it over
    batch and heads only read it. Left to itself inductor fuses the float64
    trigonometry into each consumer and redoes it for every element of the
    queries and keys, forward and backward — measured at 14 % of a small
    Llama's compiled training step on CPU (d = 128, batch 8 × 64). Eager and
    compiled give the same values.
    Angles that need gradients take the differentiable ops.
    """
    if compiling() and not theta.requires_grad:
        return torch.ops.posenc.cos_sin(theta)
    return theta.cos(), theta.sin()


def check_positions(positions: Tensor, *, name: str = "positions") -> Tensor:
    """Validate integer positions and return them as int64.

    Positions must be an integer tensor: a float (let alone bf16) tensor cannot
    hold large positions exactly (bf16 is exact only up to 256), so the public
    API refuses them rather than silently rounding.

    Raises:
        TypeError: positions is not a tensor or not of an integer dtype.
        ValueError: positions has more than 2 dimensions or a negative entry.

    Under ``torch.compile`` the sign check is an in-graph assertion
    (``posenc.checks``): no graph break, no host sync.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be an integer torch.Tensor, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(
            f"{name} must have an integer dtype (torch.long), got {positions.dtype}; "
            "positions held in a floating-point dtype lose exactness (bf16 is exact only up to 256) — "
            "build them with torch.arange(..., dtype=torch.long)"
        )
    if positions.dim() not in (1, 2):
        raise ValueError(f"{name} must have shape (T,) or (B, T), got {tuple(positions.shape)}")
    check_values(positions >= 0, lambda: f"{name} must be >= 0, got minimum {int(positions.min())}",
                 compiled_message=f"{name} must be >= 0")
    return positions.long()


def default_positions(length: int, *, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """Positions ``offset, offset + 1, …, offset + length - 1`` as int64 ``(T,)``."""
    return torch.arange(offset, offset + length, dtype=torch.long, device=device)


@dataclass(frozen=True, kw_only=True)
class ModelContext:
    """What the model a scheme is built for says about itself.

    The registry hands this to ``PositionScheme.context_args`` so each scheme
    takes from the model what it needs and nothing else: additive schemes the
    width, rotary schemes the head width, bias schemes the head count, a learned
    table the longest sequence, a bucketed bias whether the stack is causal.

    Args:
        dim: model width D (the width after the position scheme).
        num_heads: attention heads H; ``dim`` must be a multiple of it.
        max_length: the longest sequence the model will see (None: unknown; the
            schemes that need a length keep their own default).
        causal: whether the attention this scheme serves is causal (a decoder).

    Raises:
        ValueError: a non-positive width/head count, a width not divisible by the
            head count, or a non-positive max_length.
    """

    dim: int
    num_heads: int
    max_length: int | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        if self.num_heads <= 0 or self.dim <= 0 or self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} must be a positive multiple of num_heads={self.num_heads}")
        # every scheme keeps at least one float64 value per dimension (frequencies, a table row): a width
        # whose one row does not fit the memory budget cannot be built, so say so before anything allocates
        check_memory(8.0 * self.dim, f"a position scheme of width dim={self.dim} (one float64 per dimension)",
                     fix="use a model width a machine can hold")
        if self.max_length is not None and self.max_length <= 0:
            raise ValueError(f"max_length must be positive (or None), got {self.max_length}")

    @property
    def head_dim(self) -> int:
        """Width of one head, Dh = D / H."""
        return self.dim // self.num_heads


class PositionScheme(nn.Module):
    """Base class of every position scheme. See the module docstring.

    Subclasses set ``family`` and override exactly the hook of their family,
    plus ``similarity``. ``extra_width`` is the number of coordinates the scheme
    appends to token vectors (1 for the naive integer index, else 0); a model
    gives its token embedding ``dim - extra_width`` columns so that the width
    after the scheme is ``dim``.
    """

    family: ClassVar[Family] = "none"
    name: ClassVar[str] = "none"
    extra_width: ClassVar[int] = 0
    #: Number of heads the similarity has a separate map for (bias schemes), else None.
    heads: int | None = None

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        """The constructor arguments this scheme takes from the model (``ctx``); none for NoPE.

        Families override this (width, head width, head count); a scheme that
        needs more of the model (a learned table's length) extends its family's.
        The scheme's own options, given to the registry, override these.
        """
        return {}

    # -- the three hooks ---------------------------------------------------
    def add(self, x: Tensor, positions: Tensor) -> Tensor:
        """Additive hook: token vectors ``x`` (B, T, D) → (B, T, D + extra_width)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotary hook: queries (B, H, Tq, Dh) and keys (B, H, Tk, Dh) → same shapes."""
        return q, k

    def rotate_query(self, q: Tensor, q_pos: Tensor) -> Tensor:
        """The rotary hook for queries alone (cached cross-attention: its keys were rotated when cached)."""
        return q

    def rotate_key(self, k: Tensor, k_pos: Tensor) -> Tensor:
        """The rotary hook for keys alone (what a cache stores)."""
        return k

    def encode(self, positions: Tensor) -> Tensor:
        """The vectors the additive hook adds at ``positions``, (..., T, D); only additive schemes add any.

        Raises:
            TypeError: the scheme is not additive.
        """
        raise TypeError(f"{self.name} is a {self.family} scheme: it adds no vectors to the tokens "
                        "(only additive schemes have encode)")

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor | None:
        """Bias hook: a tensor broadcastable to (B, H, Tq, Tk) added to the logits, or None.

        ``q`` (B, H, Tq, Dh) is given for schemes whose bias depends on the query
        (Shaw et al.); others ignore it.
        """
        return None

    def logit_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """What attention adds to its logits, given the (rotated) queries (B, H, Tq, Dh) and keys (B, Hkv, Tk, Dh).

        ``attention_bias(q_pos, k_pos, q)`` for every scheme but those whose bias depends on the keys too
        (CoPE's gates σ(q·k)), which override this.
        """
        return self.attention_bias(q_pos, k_pos, q)

    #: Whether the scheme adds a term built from the attention weights to the output (``value_bias``): attention
    #: then forms the weights explicitly instead of calling SDPA.
    uses_weights: bool = False

    #: Whether the scheme's relative position depends on the (query, key) pair beyond i − j (Self-Extend, ReRoPE,
    #: STRING, DCA: ``posenc.positions.remap``): attention then leaves q and k unrotated, caches raw keys, and runs
    #: ``remap_attention`` with the scheme's pieces instead of rotating and calling SDPA.
    remaps: ClassVar[bool] = False

    def value_bias(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Value hook: Σ_j α_ij·r(i, j), (B, H, Tq, Dh), added to the attention output (Shaw et al.'s a^V); None here.

        Called only when ``uses_weights``, with the weights α (B, H, Tq, Tk) that multiply the values.
        """
        return None

    # -- what the lab measures -------------------------------------------
    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """Position-only similarity, float64, (Ti, Tj) — or (H, Ti, Tj) if ``heads``.

        The base scheme (NoPE) induces no similarity at all: zeros.
        """
        pos_i = check_positions(pos_i, name="pos_i")
        pos_j = check_positions(pos_j, name="pos_j")
        return torch.zeros(pos_i.shape[-1], pos_j.shape[-1], dtype=torch.float64)

    def max_position(self) -> int | None:
        """Largest position the scheme can encode, or None when any position works."""
        return None

    def describe(self) -> dict[str, Any]:
        """Plain data saying exactly what this scheme is (name, family, options)."""
        return {"name": self.name, "family": self.family, **self.options()}

    def options(self) -> dict[str, Any]:
        """The constructor options this scheme was built with."""
        return {}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.options().items())


class NoPosition(PositionScheme):
    """NoPE: no position information at all (Kazemnejad et al., 2023).

    With a causal mask a decoder can still infer positions; without one the
    attention is permutation-equivariant.
    """

    family: ClassVar[Family] = "none"
    name: ClassVar[str] = "none"


class AdditiveScheme(PositionScheme):
    """A table of position vectors combined with the token vectors once, at the input.

    Subclasses implement ``encode(positions) -> (..., T, D)`` (float64 or the
    parameter dtype); ``add`` casts to the activation dtype and adds.
    """

    family: ClassVar[Family] = "additive"

    def __init__(self, *, dim: int) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim = dim

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {"dim": ctx.dim - cls.extra_width}

    def encode(self, positions: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def add(self, x: Tensor, positions: Tensor) -> Tensor:
        positions = check_positions(positions)
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"{self.name}: token vectors have width {x.shape[-1]} but the scheme was built "
                f"with dim={self.dim}"
            )
        if positions.shape[-1] != x.shape[-2]:
            raise ValueError(
                f"{self.name}: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}"
            )
        table = self.table(positions, dtype=x.dtype, device=x.device)  # (T, D) or (B, T, D)
        return x + table

    def table(self, positions: Tensor, *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``encode(positions)`` cast to the activation dtype/device; schemes may serve it from a cache."""
        return self.encode(positions).to(device=device, dtype=dtype)

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        with torch.no_grad():  # plain data for the lab, even for learned tables
            a = self.encode(check_positions(pos_i, name="pos_i")).double()
            b = self.encode(check_positions(pos_j, name="pos_j")).double()
        return a @ b.transpose(-1, -2)

    def options(self) -> dict[str, Any]:
        return {"dim": self.dim}


class RotaryScheme(PositionScheme):
    """A rotation of queries and keys by position; subclasses implement ``rotate_query`` and ``rotate_key``
    (each by its own positions), and ``rotate`` applies both."""

    family: ClassVar[Family] = "rotary"

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate_query(q, q_pos), self.rotate_key(k, k_pos)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {"head_dim": ctx.head_dim}


class BiasScheme(PositionScheme):
    """A (H, Tq, Tk) term added to attention logits; subclasses implement ``attention_bias``.

    ``similarity`` is the bias itself, per head.
    """

    family: ClassVar[Family] = "bias"

    def __init__(self, *, num_heads: int) -> None:
        super().__init__()
        if num_heads <= 0:
            raise ValueError(f"num_heads must be positive, got {num_heads}")
        self.num_heads = num_heads
        self.heads = num_heads

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {"num_heads": ctx.num_heads}

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        pos_i = check_positions(pos_i, name="pos_i")
        pos_j = check_positions(pos_j, name="pos_j")
        with torch.no_grad():
            bias = self.attention_bias(pos_i, pos_j)
        assert bias is not None
        return bias.double().reshape(-1, pos_i.shape[-1], pos_j.shape[-1])

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads}
