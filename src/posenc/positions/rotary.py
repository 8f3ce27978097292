"""Rotary position embedding (RoPE) and the conversion between its two pairings.

RoPE (Su et al., 2021, "RoFormer") rotates each pair of query/key coordinates
by the angle p·θ_i, θ_i = base^(−2i/R), so that q_m·k_n depends on m − n only.
Two pairings are in use and are *not* interchangeable without permuting the
projection weights:

* ``half``  — pairs (x_i, x_{i+R/2}) (GPT-NeoX, HF Llama ``rotate_half``);
* ``interleaved`` — pairs (x_{2i}, x_{2i+1}) (GPT-J, Meta's original Llama,
  torchtune).

Angles are formed in float64 from integer positions and only then cast
(a low-precision position would round); the rotation itself runs in at least float32 and the
result is cast back to the input dtype.

Shape legend: B batch, H heads, T sequence length, Dh head width,
R rotated width (≤ Dh), P = R/2 rotated pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from posenc import kernels
from posenc.checks import compiling
from posenc.validation import number, positive_int
from posenc.positions.absolute import check_even
from posenc.positions import rotary_kernel
from posenc.positions.base import RotaryScheme, check_positions, cos_sin
from posenc.positions.cache import TableCache

Pairing = Literal["half", "interleaved"]
PAIRINGS: tuple[str, ...] = ("half", "interleaved")


def rope_frequencies(rotary_dim: int, base: float = 10000.0) -> Tensor:
    """θ_i = base^(−2i/R) for i = 0 … R/2 − 1, float64."""
    check_even(rotary_dim, name="rotary_dim", what="RoPE")
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: Pairing = "half") -> Tensor:
    """Rotate the first 2·P coordinates of ``x`` pairwise; the rest pass through.

    Runs the kernel of ``posenc.positions.rotary_kernel`` (one complex
    multiply for the interleaved pairing, cache-blocked ops for the half
    pairing); uses ``apply_rotary_reference`` for tiny inputs (fewer than
    ``SMALL_NUMEL`` elements, e.g. one decoding step, where per-op overhead
    dominates), when cos/sin need gradients, when they do not broadcast
    against x without enlarging it, and under ``torch.compile`` (which fuses
    the textbook form into one pass of its own).

    Args:
        x: (..., T, Dh) queries or keys.
        cos, sin: (..., T, P), broadcastable against x's leading dims.
        pairing: "half" or "interleaved".

    Returns:
        Tensor of x's shape and dtype.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    if compiling():  # the compiler fuses the textbook form into one pass; the eager kernel is opaque to it
        return apply_rotary_reference(x, cos, sin, pairing=pairing)
    if x.numel() < rotary_kernel.SMALL_NUMEL:  # a few tokens (decoding): fewest Python-level ops wins
        return apply_rotary_reference(x, cos, sin, pairing=pairing)
    pairs = cos.shape[-1]
    target = (*x.shape[:-1], pairs)
    fits = (2 * pairs <= x.shape[-1] and cos.dim() >= 2 and cos.shape[-2] == x.shape[-2]
            and _broadcasts_to(cos.shape, target) and _broadcasts_to(sin.shape, target))
    if not fits or (torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)):
        return apply_rotary_reference(x, cos, sin, pairing=pairing)
    return rotary_kernel.rotate(x, cos, sin, pairing=pairing)


@contextmanager
def positions_fixed(scheme: Any) -> Iterator[None]:
    """Within this block the caller does not edit position tensors in place (a model's forward, where every
    layer rotates with the same positions): RoPE may then reuse the cos/sin rows of the last call by tensor
    identity, inference-mode tensors included. A no-op for schemes that are not RoPE. On exit the rows kept
    are dropped."""
    if not isinstance(scheme, RoPE):
        yield
        return
    state = scheme.__dict__
    state["_positions_fixed"] = state.get("_positions_fixed", 0) + 1
    try:
        yield
    finally:
        state["_positions_fixed"] -= 1
        if not state["_positions_fixed"]:
            state.pop("_recent_rows", None)
            state.pop("_recent_wide", None)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``target`` without enlarging it."""
    return len(shape) <= len(target) and all(a in (1, b) for a, b in zip(reversed(shape), reversed(target)))


def apply_rotary_reference(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: Pairing = "half") -> Tensor:
    """The textbook rotation (x1·cos − x2·sin, x2·cos + x1·sin) with temporaries; same contract as ``apply_rotary``.

    Kept as the readable statement of what the kernel computes, for the tests
    and for cos/sin that carry gradients.
    """
    rot = 2 * cos.shape[-1]
    compute = torch.promote_types(x.dtype, torch.float32)
    xr = x[..., :rot].to(compute)
    cos, sin = cos.to(compute), sin.to(compute)
    if pairing == "half":
        x1, x2 = xr[..., : rot // 2], xr[..., rot // 2 :]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    elif pairing == "interleaved":
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    else:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    out = out.to(x.dtype)
    if rot == x.shape[-1]:
        return out
    return torch.cat((out, x[..., rot:]), dim=-1)


class RoPE(RotaryScheme):
    """Rotary position embedding (Su et al., 2021).

    Reference used to verify: HF ``transformers`` Llama (``rotate_half`` with
    ``inv_freq``) for the half pairing; the complex-multiply form of Meta's
    Llama / torchtune for the interleaved pairing.

    Subclasses that rescale frequencies (context extension) override
    ``inv_freq`` and ``attention_factor`` only; application is shared.

    Args:
        head_dim: width of one attention head.
        base: the frequency base (10000 in RoFormer; 500000 in Llama 3).
        pairing: "half" (NeoX/HF) or "interleaved" (GPT-J/Meta).
        rotary_dim: rotate only the first ``rotary_dim`` coordinates of each
            head (partial rotary, GPT-NeoX/Phi); default all of them.
    """

    name: ClassVar[str] = "rope"
    #: Largest cos/sin table kept (rows × pairs elements each): 2 Mi — 8 MiB in float32.
    TABLE_LIMIT: ClassVar[int] = 1 << 21

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        pairing: Pairing = "half",
        rotary_dim: int | None = None,
    ) -> None:
        super().__init__()
        head_dim = positive_int(head_dim, "head_dim")
        rotary_dim = head_dim if rotary_dim is None else number(rotary_dim, "rotary_dim", integer=True)
        check_even(rotary_dim, name="rotary_dim", what="RoPE")
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim={rotary_dim} cannot exceed head_dim={head_dim}")
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.base = number(base, "base", above=1, fix="the RoPE base is usually 10000 (Llama 3: 500000)")
        self.pairing: Pairing = pairing

    # -- frequency transform: the one thing scaled variants change ---------
    def inv_freq(self) -> Tensor:
        """Per-pair angular frequencies θ_i, float64 (P,)."""
        return rope_frequencies(self.rotary_dim, self.base)

    @property
    def attention_factor(self) -> float:
        """Factor applied to cos and sin (YaRN's mscale); 1 for plain RoPE."""
        return 1.0

    # -- application ---------------------------------------------------------
    def angles(self, positions: Tensor) -> Tensor:
        """p·θ_i in float64, (..., T, P) for positions (..., T).

        Schemes whose frequencies depend on the position (dynamic NTK, LongRoPE)
        override this; a cos/sin cache must be built through it.
        """
        positions = check_positions(positions)
        return positions.double().unsqueeze(-1) * self.inv_freq().to(positions.device)

    def cos_sin(self, positions: Tensor, *, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles times ``attention_factor``, cast to ``dtype`` at the end.

        The rows for positions 0 … L − 1 (L a power of two covering the largest
        position asked for) are formed once per (dtype, device) — float64 angles,
        cast at the end — and every call gathers its rows, so the frequency
        transform and the trigonometry are not redone per call; the values are
        bit-for-bit those of the direct formula. The cache (``TableCache``) is
        keyed on the class and ``options()``, which must therefore name
        everything the frequencies depend on. Positions past ``TABLE_LIMIT``
        rows·pairs, subclasses that override ``angles``, and every call under
        ``torch.compile`` (sizing the table reads a value) are computed directly.
        """
        return self._cos_sin(check_positions(positions), dtype)

    def _cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``cos_sin`` for positions already checked (``rotate_one`` checks them once)."""
        if type(self).angles is not RoPE.angles or compiling():
            return self._cos_sin_direct(positions, dtype)
        cache: TableCache = self.__dict__.setdefault("_cos_sin_cache", TableCache(limit=self.TABLE_LIMIT))
        rows = cache.rows(positions, key=(type(self).__qualname__, repr(self.options())), width=self.rotary_dim // 2,
                          dtype=dtype, build=lambda p: self._cos_sin_direct(p, dtype))
        if rows is None:
            return self._cos_sin_direct(positions, dtype)
        cos, sin = rows  # (..., T, P) each
        return cos, sin

    def _cos_sin_direct(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        cos, sin = cos_sin(self.angles(positions))
        scale = self.attention_factor
        return (cos * scale).to(dtype), (sin * scale).to(dtype)

    def check_input(self, x: Tensor, positions: Tensor) -> Tensor:
        """Validate a (…, T, Dh) input against ``head_dim`` and its (T,) / (B, T) positions; return them as int64."""
        if x.shape[-1] != self.head_dim:
            raise ValueError(
                f"{self.name}: head width is {x.shape[-1]} but the scheme was built with head_dim={self.head_dim}")
        positions = check_positions(positions)
        if positions.shape[-1] != x.shape[-2]:
            raise ValueError(f"{self.name}: {positions.shape[-1]} positions for a sequence of length {x.shape[-2]}")
        return positions

    def rotate_one(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate x (B, H, T, Dh) — or (T, Dh) — by ``positions`` (T,) or (B, T).

        (Not named ``apply``: that would shadow ``nn.Module.apply(fn)``, which
        ``model.apply(init_fn)`` needs to recurse through a model holding RoPE.)
        """
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos, sin, recent = self.rows_for(x, positions, dtype)
        if positions.dim() == 2 and x.dim() == 4:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, P): same for every head
        # inference only: with gradients recorded the ops must not depend on what an earlier call left
        # (activation checkpointing recomputes a layer and compares what it saved)
        if (recent and x.dtype == cos.dtype == torch.float32 and 2 * cos.shape[-1] == x.shape[-1]
                and x.numel() < rotary_kernel.SMALL_NUMEL and not (torch.is_grad_enabled() and x.requires_grad)):
            return self._rotate_few(x, cos, sin)
        return apply_rotary(x, cos, sin, pairing=self.pairing)

    def rows_for(self, x: Tensor, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor, bool]:
        """The cos and sin rows (…, T, rotary_dim/2) that rotate x (…, T, Dh) by ``positions``, and whether they
        are the last call's served again (see "the last rows served" below)."""
        recent = self._recent_cos_sin(x, positions, dtype)
        if recent is not None:
            return recent[0], recent[1], True
        given = positions
        positions = self.check_input(x, positions).to(x.device)
        if type(self).cos_sin is RoPE.cos_sin:
            cos, sin = self._cos_sin(positions, dtype)  # already checked: skip the second check
        else:
            cos, sin = self.cos_sin(positions, dtype=dtype)
        self._remember_cos_sin(given, x, dtype, cos, sin)
        return cos, sin, False

    def _rotate_few(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """A decoding step's rotation in a handful of ops: x·c + partner(x)·s, every coordinate of x rotated.

        Half pairing: partner(x) = roll(x, Dh/2) = (x₂, x₁), c = [cos, cos], s = [−sin, sin]. Interleaved:
        partner(x) swaps each (x₂ᵢ, x₂ᵢ₊₁), c and s repeat each pair's cos and (−sin, sin). Either way the two
        coordinates of a pair are x₁cos − x₂sin and x₂cos + x₁sin: the reference's products and sums, bit
        for bit (a − b is a + (−b) in IEEE arithmetic). The widened rows are kept with the rows they came
        from (every layer of a step rotates by the same rows).
        """
        fused = kernels.loaded()  # a model on posenc's quantised kernel: the same arithmetic in one call
        if (fused is not None and x.is_contiguous() and x.device.type == "cpu" and (x.dim() == 4 or cos.dim() == 2)
                and not compiling()):
            return fused.rope(x, cos.contiguous(), sin.contiguous(), self.pairing == "half")
        memo = self.__dict__.get("_recent_wide")
        if memo is None or memo[0] is not cos:
            if self.pairing == "half":
                wide = (torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1))
            else:
                wide = (torch.stack((cos, cos), dim=-1).flatten(-2), torch.stack((-sin, sin), dim=-1).flatten(-2))
            memo = (cos, *wide)
            self.__dict__["_recent_wide"] = memo
        _, wide_cos, wide_sin = memo
        if self.pairing == "half":
            partner = x.roll(x.shape[-1] // 2, dims=-1)
        else:
            partner = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
        return x * wide_cos + partner * wide_sin

    # -- the last rows served -------------------------------------------------
    # A model rotates the queries and keys of every layer with the same positions tensor: 2·layers calls
    # per forward for one set of rows. The rows of the last call are kept with the tensor they were
    # computed for; a call with that same tensor object, unmodified since (its version counter), on the
    # same device and dtype, and with the same options, is served them without re-checking the positions
    # or gathering again. Any other call computes as before. Not used under torch.compile (which traces
    # the computation once anyway). Inference-mode tensors carry no version counter: their rows are reused
    # only inside ``positions_fixed(scheme)``, where the caller (a model's forward) promises not to edit
    # positions in place.

    def _memo_key(self, x: Tensor, positions: Tensor, dtype: torch.dtype) -> tuple[Any, ...] | None:
        if compiling() or not isinstance(positions, Tensor):
            return None
        if positions.is_inference():
            if not self.__dict__.get("_positions_fixed", 0):
                return None
            version = None
        else:
            version = positions._version
        return (version, x.device, dtype, type(self), repr(self.options()))

    def _recent_cos_sin(self, x: Tensor, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        memo = self.__dict__.get("_recent_rows")
        if memo is None or memo[0] is not positions:
            return None
        key = self._memo_key(x, positions, dtype)
        if key is None or key != memo[1]:
            return None
        if x.shape[-1] != self.head_dim or positions.shape[-1] != x.shape[-2]:
            return None  # let the full path raise its message
        return memo[2]

    def _remember_cos_sin(self, positions: Tensor, x: Tensor, dtype: torch.dtype, cos: Tensor, sin: Tensor) -> None:
        key = self._memo_key(x, positions, dtype)
        if key is not None and not (cos.requires_grad or sin.requires_grad):
            self.__dict__["_recent_rows"] = (positions, key, (cos, sin))

    def rotate_query(self, q: Tensor, q_pos: Tensor) -> Tensor:
        return self.rotate_one(q, q_pos)

    def rotate_key(self, k: Tensor, k_pos: Tensor) -> Tensor:
        return self.rotate_one(k, k_pos)  # RoPE turns queries and keys alike

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """Dot products of rotated all-ones head vectors: Σ_i 2·cos((m−n)θ_i) + (Dh − R)."""
        a = self.rotate_one(torch.ones(pos_i.shape[-1], self.head_dim, dtype=torch.float64), pos_i)
        b = self.rotate_one(torch.ones(pos_j.shape[-1], self.head_dim, dtype=torch.float64), pos_j)
        return a @ b.transpose(-1, -2)

    def options(self) -> dict[str, Any]:
        return {
            "head_dim": self.head_dim,
            "base": self.base,
            "pairing": self.pairing,
            "rotary_dim": self.rotary_dim,
        }


def pairing_permutation(head_dim: int, rotary_dim: int | None = None) -> Tensor:
    """Index map taking interleaved-pairing coordinates to half-pairing ones.

    ``x_half = x_interleaved[..., perm]``: interleaved coordinate 2i goes to
    half slot i and 2i+1 to slot R/2 + i; coordinates past R stay where they are.
    """
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    check_even(rotary_dim, name="rotary_dim", what="RoPE")
    rot = torch.cat((torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)))
    return torch.cat((rot, torch.arange(rotary_dim, head_dim)))


def convert_qk_weight(
    weight: Tensor,
    *,
    num_heads: int,
    head_dim: int,
    source: Pairing,
    target: Pairing,
    rotary_dim: int | None = None,
) -> Tensor:
    """Permute the output rows of a q or k projection weight from one RoPE pairing to another.

    A checkpoint trained with interleaved pairs (Meta Llama) gives the same
    attention scores under half pairing (HF) once its q and k projection rows
    are permuted per head — this is the permutation HF's Llama conversion applies.

    Args:
        weight: (num_heads · head_dim, in_features), nn.Linear layout.
        source, target: "half" or "interleaved".

    Returns:
        The permuted weight (a new tensor).
    """
    for name, value in (("source", source), ("target", target)):
        if value not in PAIRINGS:
            raise ValueError(f"{name} must be one of {PAIRINGS}, got {value!r}")
    if weight.shape[0] != num_heads * head_dim:
        raise ValueError(
            f"weight has {weight.shape[0]} output rows, expected num_heads*head_dim = {num_heads}*{head_dim}"
        )
    if source == target:
        return weight.clone()
    perm = pairing_permutation(head_dim, rotary_dim)
    if source == "half":  # invert: half → interleaved
        perm = torch.argsort(perm)
    w = weight.reshape(num_heads, head_dim, -1)[:, perm.to(weight.device)]
    return w.reshape(weight.shape).clone()
