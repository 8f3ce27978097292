"""Multimodal RoPE (M-RoPE): each rotated pair follows one of three position axes (time, height, width).

Qwen2-VL (Wang et al., 2024, "Qwen2-VL", §2.1) gives every token a triple of
positions (t, h, w) — text tokens (p, p, p), image patches their frame, row
and column offset by the text before them — and splits the R/2 rotated pairs
into three sections, ``mrope_section`` = (S_t, S_h, S_w): the first S_t pairs
rotate by t, the next S_h by h, the last S_w by w. Qwen3-VL interleaves the
axes instead (pair i follows h when i ≡ 1 (mod 3) and i < 3·S_h, w when
i ≡ 2 (mod 3) and i < 3·S_w, t otherwise), so every axis gets high and low
frequencies.

How a triple enters posenc: positions stay one int64 per token, (T,) or
(B, T), so attention, masks, caches and every other code path take them as
they take any positions. A plain position p *is* the triple (p, p, p) — text
needs nothing, and M-RoPE on plain positions is RoPE exactly, bit for bit. A
triple whose entries differ is packed into one int64 by ``pack_positions``
(bit 62 set, then 20 bits each for t, h and w; entries 0 … 2²⁰ − 1) and read
back by ``unpack_positions``; a packed value is ≥ 2⁶², so plain positions
must stay below that (M-RoPE refuses the ambiguity). Other schemes would read
a packed value as a huge position: pack only for M-RoPE.

Reference used to verify: HF ``transformers`` ``Qwen2VLRotaryEmbedding`` and
``Qwen3VLTextRotaryEmbedding`` (their ``recomposition_frequencies``) with
``apply_rotary_pos_emb``, on random triples.

Shape legend: B batch, T sequence length, P = R/2 rotated pairs, 3 axes (t, h, w).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from posenc.positions.base import check_positions
from posenc.positions.rotary import Pairing, RoPE
from posenc.validation import number

Layout = Literal["sections", "interleaved"]
LAYOUTS: tuple[str, ...] = ("sections", "interleaved")
#: Bits per axis in a packed triple, the largest entry, and the flag bit that marks a packed value.
AXIS_BITS = 20
AXIS_MAX = (1 << AXIS_BITS) - 1
PACKED_FLAG = 1 << 62


def pack_positions(triples: Tensor) -> Tensor:
    """(t, h, w) triples (3, T) or (B, 3, T) → int64 positions (T,) or (B, T) for M-RoPE.

    Equal triples (p, p, p) become the plain position p (any p < 2⁶²); others are packed
    (bit 62, then t, h, w in 20 bits each).

    Raises:
        TypeError: not an integer tensor.
        ValueError: the axis of 3 is missing, a negative entry, or an entry of an unequal triple above 2²⁰ − 1.
    """
    if not isinstance(triples, Tensor) or triples.dtype.is_floating_point or triples.dtype.is_complex \
            or triples.dtype == torch.bool:
        raise TypeError("M-RoPE triples must be an integer tensor (3, T) or (B, 3, T) of (t, h, w) positions")
    if triples.dim() not in (2, 3) or triples.shape[-2] != 3:
        raise ValueError(f"M-RoPE triples must have shape (3, T) or (B, 3, T), got {tuple(triples.shape)}")
    triples = triples.long()
    if bool((triples < 0).any()):
        raise ValueError(f"M-RoPE positions must be >= 0, got minimum {int(triples.min())}")
    t, h, w = triples.unbind(-2)
    equal = (t == h) & (h == w)
    if bool((t[equal] >= PACKED_FLAG).any()):
        raise ValueError(f"a text position (t = h = w) must be below 2^62 = {PACKED_FLAG}: larger values are "
                         "packed triples")
    unequal = triples.transpose(-1, -2)[~equal]  # (N, 3)
    if unequal.numel() and int(unequal.max()) > AXIS_MAX:
        raise ValueError(f"an M-RoPE triple with unequal entries holds each in {AXIS_BITS} bits: entries must be at "
                         f"most {AXIS_MAX}, got {int(unequal.max())}")
    packed = PACKED_FLAG | (t << (2 * AXIS_BITS)) | (h << AXIS_BITS) | w
    return torch.where(equal, t, packed)


def unpack_positions(positions: Tensor) -> Tensor:
    """int64 positions (T,) or (B, T) → (t, h, w) triples (3, T) or (B, 3, T); a plain p is (p, p, p)."""
    positions = check_positions(positions)
    packed = positions >= PACKED_FLAG
    t = torch.where(packed, (positions >> (2 * AXIS_BITS)) & AXIS_MAX, positions)
    h = torch.where(packed, (positions >> AXIS_BITS) & AXIS_MAX, positions)
    w = torch.where(packed, positions & AXIS_MAX, positions)
    return torch.stack((t, h, w), dim=-2)


def default_sections(pairs: int, layout: Layout) -> list[int]:
    """Qwen's split scaled to P pairs: (16, 24, 24) of 64 for Qwen2-VL, (24, 20, 20) of 64 for Qwen3-VL."""
    spatial = (3 * pairs) // 8 if layout == "sections" else (5 * pairs) // 16
    return [pairs - 2 * spatial, spatial, spatial]


def axis_of_pair(sections: Sequence[int], layout: Layout) -> Tensor:
    """Which axis (0 = t, 1 = h, 2 = w) each rotated pair follows, int64 (P,)."""
    pairs = sum(sections)
    if layout == "sections":
        return torch.repeat_interleave(torch.arange(3), torch.tensor(list(sections)))
    index = torch.arange(pairs)
    axis = torch.zeros(pairs, dtype=torch.long)
    for a, offset in ((1, 1), (2, 2)):  # Qwen3-VL: h on i ≡ 1, w on i ≡ 2 (mod 3), within 3·S of each
        axis[(index % 3 == offset) & (index < 3 * sections[a])] = a
    return axis


class MRoPE(RoPE):
    """Multimodal RoPE (Qwen2-VL sections; Qwen3-VL interleaved): pair i rotates by the position on its axis.

    See the module docstring for how (t, h, w) triples are given (``pack_positions``).

    Reference used to verify: HF ``transformers`` ``Qwen2VLRotaryEmbedding`` (sections) and
    ``Qwen3VLTextRotaryEmbedding`` (interleaved), random triples, float32.

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE`` (Qwen: half pairing, base 1e6).
        sections: pairs per axis (S_t, S_h, S_w), summing to rotary_dim/2 (HF ``mrope_section``); default
            Qwen's split scaled to the width (``default_sections``).
        layout: "sections" (Qwen2-VL, Qwen2.5-VL: contiguous) or "interleaved" (Qwen3-VL).
    """

    name: ClassVar[str] = "mrope"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, sections: Sequence[float] | None = None,
                 layout: Layout = "sections") -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        pairs = self.rotary_dim // 2
        if sections is None:
            sections = default_sections(pairs, layout)
        sections = [number(s, f"sections[{i}]", minimum=0, integer=True) for i, s in enumerate(sections)]
        if len(sections) != 3 or sum(sections) != pairs:
            raise ValueError(f"sections={sections} must be three pair counts (t, h, w) summing to rotary_dim/2 = "
                             f"{pairs}; Qwen2-VL uses [16, 24, 24] for a 128-wide head")
        if layout == "interleaved" and (3 * sections[1] > pairs + 1 or 3 * sections[2] > pairs + 2):
            raise ValueError(f"sections={sections}: interleaved, h takes pairs 1, 4, … below 3·S_h and w pairs 2, "
                             f"5, … below 3·S_w, so 3·S_h − 1 and 3·S_w − 1 must be at most P = {pairs}")
        self.sections, self.layout = sections, layout
        self.register_buffer("axis", axis_of_pair(sections, layout), persistent=False)  # (P,)

    def angles(self, positions: Tensor) -> Tensor:
        """p_axis(i)·θ_i in float64, (..., T, P): each pair by the position on its axis."""
        triples = unpack_positions(positions).double()  # (..., 3, T)
        per_pair = triples.index_select(-2, self.axis.to(triples.device))  # (..., P, T)
        return per_pair.transpose(-1, -2) * self.inv_freq().to(triples.device)  # (..., T, P)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "sections": list(self.sections), "layout": self.layout}
