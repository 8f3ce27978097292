"""Position remapping: RoPE whose relative position depends on the (query, key) pair, and the attention that runs it.

Training-free context extension either rescales RoPE's frequencies
(``rotary_scaling``) or keeps them and *remaps positions*: the relative
position r(i, j) a query at position i and a key at position j see is no
longer i − j but a function that stays inside the trained range. No single
rotation of q by its own position and of k by its own can give such an r, so
a remapping scheme states its r as a few **pieces**, each an ordinary pair of
rotations valid on one region of (i, j)::

    Piece(q_at, k_at, span):  score(i, j) = ⟨R(q_at(i))·q_i, R(k_at(j))·k_j⟩   for first(i) ≤ j < end(i)
                              → relative position q_at(i) − k_at(j)

and ``remap_attention`` runs them: blocks of queries against blocks of keys,
each block's logits taken from the piece whose region holds the pair, merged
over key blocks by an online softmax (running maximum and log-sum-exp, as in
FlashAttention: Dao et al., 2022; Milakov & Gimelshein, 2018). No (Tq, Tk)
matrix exists at any time.

Memory: the rotated copies, P·(H·Tq + Hkv·Tk)·Dh values for P pieces
(O(T), like the keys themselves), plus one block of logits,
B·H·``Q_BLOCK``·``K_BLOCK`` floats (8 MiB at 9 heads in float32), and its masks.
In bfloat16 / float16 on the CPU, causal attention instead calls PyTorch's
fused attention kernel per piece and block of ``Q_BLOCK`` queries and merges
the calls by the log-sum-exp each returns (``_remap_flash``): the products run
on the CPU's matrix units where it has them, as plain RoPE's SDPA does. A
piece's keys for one query are an interval of key positions (its ``span``), so
for a single sequence of consecutive positions a block reads the keys all its
queries share in one call without a mask and only the ragged edges with one
(masks ≤ 2·``Q_BLOCK``² values per piece); with padding or batched positions,
one masked call per piece over the slice its region reaches (masks
B·``Q_BLOCK``·Tk values, 16 MiB at 16k keys).

======================  =================================================================================
scheme                  r(i, j) for d = i − j ≥ 0
======================  =================================================================================
``self-extend``         d if d < W, else ⌊i/G⌋ − ⌊j/G⌋ + W − ⌊W/G⌋  (Jin et al., 2024, "LLM Maybe LongLM")
``rerope``              min(d, W)                              (Su, 2023, kexue.fm/archives/9708)
``rerope-leaky``        d if d < W, else W + (d − W)/k         (Su, 2023, the same post)
``string``              d if d < S, else d − S + W             (An et al., 2024, "Why Does the Effective
                                                                Context Length of LLMs Fall Short?")
``dca``                 by chunks of L = chunk_size − local_size: intra-chunk i mod L − j mod L (= d);
                        next chunk min(L + i mod L, c) − j mod L; farther min(2L − 1, c) − j mod L,
                        c = chunk_size                         (An et al., 2024, "Training-Free Long-
                                                                Context Scaling of LLMs"; Qwen2.5-1M)
======================  =================================================================================

Every piece's positions are functions of the query's or the key's own position
alone, so a KV cache holds keys *unrotated* (with their true positions, as
every cache does) and each call rotates them per piece: cached decoding equals
the full pass for every scheme here. Without a causal mask (an encoder) a pair
with j > i gets r = −r(j, i): each piece's mirror (q rotated as the key was,
k as the query was) serves the pairs above the diagonal.

The schemes are registered ``rotary`` schemes: ``rotate`` is plain RoPE at the
true positions (what the lab and the explorer draw as the scheme's table), and
``similarity`` is the remapped one, Σ_p 2·cos(r(i, j)·θ_p) (+ Dh − R unrotated
coordinates). ``MultiHeadAttention`` sees ``remaps = True`` and calls
``remap_attention`` instead of rotating and calling SDPA.

Shape legend: B batch (Bp: 1 or B, for shared or per-sequence positions), H
query heads, Hkv key/value heads, g = H / Hkv, Tq/Tk query/key length, Dh
head width, R rotated width, P pieces (or rotated pairs, where said).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.checks import compiling
from posenc.positions.base import check_positions
from posenc.positions.rotary import Pairing, RoPE, apply_rotary
from posenc.validation import number
from posenc.window import FULL, Window, window_mask

#: Queries per block and keys per block of ``remap_attention``.
Q_BLOCK = 512
K_BLOCK = 1024
#: Options that are positions or lengths are at most 2^53: effective positions are float64 and stay exact.
LENGTH_MAX = 2**53


@dataclass(frozen=True)
class Piece:
    """One position set of a remapping scheme, valid on the pairs its ``span`` gives.

    Args:
        name: what the piece is (``neighbour``, ``grouped``, ``intra``, …).
        q_at: query positions (Bp, Tq) int64 → the float64 positions its queries are rotated at.
        k_at: key positions (Bp, Tk) int64 → the float64 positions its keys are rotated at.
        span: query positions i (any shape) int64 → (first, end) int64 of i's shape: the piece serves the pair
            (i, j) iff first ≤ j < end (one interval of key positions per query; ±``BEYOND`` for no bound).
            The spans of a scheme's pieces partition the key positions of every query.
    """

    name: str
    q_at: Callable[[Tensor], Tensor]
    k_at: Callable[[Tensor], Tensor]
    span: Callable[[Tensor], tuple[Tensor, Tensor]]

    def region(self, i: Tensor, j: Tensor) -> Tensor:
        """bool, broadcast of i and j: the pairs (i, j) this piece serves (i (Bp, Tq, 1), j (Bp, 1, Tk) → (Bp, Tq, Tk))."""
        first, end = self.span(i)
        return (first <= j) & (j < end)


#: "No bound" in a piece's span: beyond any position (positions are at most 2^53).
BEYOND = 2**62


def _from(first: Tensor) -> tuple[Tensor, Tensor]:
    """The span of key positions first … (no upper bound)."""
    return first, torch.full_like(first, BEYOND)


def _below(end: Tensor) -> tuple[Tensor, Tensor]:
    """The span of key positions … end − 1 (no lower bound)."""
    return torch.full_like(end, -BEYOND), end


def _length(value: Any, name: str, *, minimum: int = 1, fix: str = "") -> int:
    return number(value, name, minimum=minimum, maximum=LENGTH_MAX, integer=True,
                  fix=fix or "a window, shift or chunk is a number of positions, at most 2**53 (float64-exact)")


class RemapScheme(RoPE):
    """RoPE with per-pair positions: subclasses give ``pieces`` and the closed form ``relative_position``.

    ``rotate`` (the scheme's own table) is plain RoPE at the true positions; attention uses the pieces.
    """

    remaps: ClassVar[bool] = True

    def pieces(self) -> tuple[Piece, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:  # pragma: no cover - abstract
        """r(i, j) for broadcastable int64 positions with i ≥ j, float64."""
        raise NotImplementedError

    def method_options(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {**super().options(), **self.method_options()}

    def largest_relative_position(self, length: int) -> float:
        """The largest r(i, j) a causal sequence of ``length`` tokens uses (over every i ≥ j), a block of rows at a time."""
        j = torch.arange(length, dtype=torch.long)[None, :]
        best = 0.0
        for n in range(0, length, 256):
            i = torch.arange(n, min(length, n + 256), dtype=torch.long)[:, None]
            r = self.relative_position(i, j).masked_fill(j > i, -math.inf)
            best = max(best, float(r.max()))
        return best

    def rotate_at(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate x (B, heads, T, Dh) by float64 positions (Bp, T): RoPE's frequencies, pairing and attention factor."""
        theta = self.inv_freq().to(device=x.device)  # (P,) float64
        angles = positions.to(device=x.device, dtype=torch.float64).unsqueeze(-1) * theta  # (Bp, T, P)
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        scale = self.attention_factor
        cos, sin = (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)
        return apply_rotary(x, cos.unsqueeze(1), sin.unsqueeze(1), pairing=self.pairing)  # (Bp, 1, T, P) per head

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """Σ_p 2·a²·cos(r(i, j)·θ_p) + (Dh − R): rotated all-ones vectors at the remapped relative position.

        a is the attention factor; r(i, j) = −r(j, i) for j > i. The cosine sum is evaluated once per
        distinct r (at most a few per distance), then gathered.
        """
        pos_i, pos_j = check_positions(pos_i, name="pos_i"), check_positions(pos_j, name="pos_j")
        i, j = pos_i.reshape(-1, 1), pos_j.reshape(1, -1)
        r = torch.where(i >= j, self.relative_position(i, j), -self.relative_position(j, i))  # (Ti, Tj)
        values, index = torch.unique(r, return_inverse=True)
        theta = self.inv_freq()
        per_value = torch.cat([2 * self.attention_factor ** 2 * torch.cos(values[n:n + 4096, None] * theta).sum(-1)
                               for n in range(0, values.numel(), 4096)]) if values.numel() else values
        return per_value[index] + (self.head_dim - self.rotary_dim)


def _floor_div(x: Tensor, n: int) -> Tensor:
    return torch.div(x, n, rounding_mode="floor")


class SelfExtend(RemapScheme):
    """Self-Extend (Jin et al., 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning").

    Neighbour attention keeps exact relative positions d = i − j below the window W; beyond it,
    grouped attention uses the floor-divided positions ⌊i/G⌋ and ⌊j/G⌋, the query shifted by
    W − ⌊W/G⌋ so the two meet at the window's edge. A sequence of T tokens then uses relative
    positions up to about W + (T − W)/G.

    Reference used to verify: the closed form above from the paper (its Eq. 4 and Algorithm 1, the
    authors' LongLM code's ``group_query_position = q // G + W − W // G``), as an explicit per-pair
    reference in float64 (``tests/positions/test_remap.py``).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        group_size: G, positions per group beyond the window (≥ 1; 1 is plain RoPE).
        neighbor_window: W, the relative positions kept exact.
    """

    name: ClassVar[str] = "self-extend"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, group_size: int = 4, neighbor_window: int = 512) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.group_size = _length(group_size, "group_size", fix="Self-Extend groups G ≥ 1 positions (the paper: 2-16)")
        self.neighbor_window = _length(neighbor_window, "neighbor_window",
                                       fix="the neighbour window W keeps relative positions below it exact (512-4096)")

    def method_options(self) -> dict[str, Any]:
        return {"group_size": self.group_size, "neighbor_window": self.neighbor_window}

    def pieces(self) -> tuple[Piece, ...]:
        g, w = self.group_size, self.neighbor_window
        shift = w - w // g
        return (
            Piece("neighbour", lambda p: p.double(), lambda p: p.double(), lambda i: _from(i - w + 1)),  # i − j < W
            Piece("grouped", lambda p: _floor_div(p, g).double() + shift, lambda p: _floor_div(p, g).double(),
                  lambda i: _below(i - w + 1)),  # i − j ≥ W
        )

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:
        g, w = self.group_size, self.neighbor_window
        grouped = (_floor_div(i, g) - _floor_div(j, g)).double() + (w - w // g)
        return torch.where(i - j < w, (i - j).double(), grouped)


class ReRoPE(RemapScheme):
    """ReRoPE (Su, 2023, "Rectified Rotary Position Embeddings", kexue.fm/archives/9708): r = min(d, W).

    Relative positions past the window W are clamped to W, so no relative position ever exceeds W,
    at any length. The clamped piece rotates queries at W and leaves keys at position 0.

    Reference used to verify: the closed form min(i − j, W) as an explicit per-pair float64 reference
    (``tests/positions/test_remap.py``).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        window: W, the largest relative position (≥ 1).
    """

    name: ClassVar[str] = "rerope"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, window: int = 512) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.window = _length(window, "window", fix="ReRoPE's window W is the largest relative position (e.g. L0/2)")

    def method_options(self) -> dict[str, Any]:
        return {"window": self.window}

    def pieces(self) -> tuple[Piece, ...]:
        w = self.window
        return (
            Piece("exact", lambda p: p.double(), lambda p: p.double(), lambda i: _from(i - w + 1)),  # i − j < W
            Piece("clamped", lambda p: torch.full_like(p, w, dtype=torch.float64),
                  lambda p: torch.zeros_like(p, dtype=torch.float64), lambda i: _below(i - w + 1)),
        )

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:
        return (i - j).clamp(max=self.window).double()


class LeakyReRoPE(RemapScheme):
    """Leaky ReRoPE (Su, 2023, kexue.fm/archives/9708): r = d below the window W, W + (d − W)/k beyond.

    Past the window relative positions grow with slope 1/k, so a sequence of T tokens uses relative
    positions up to W + (T − W)/k. The leaky piece rotates queries at W + (i − W)/k and keys at j/k
    (fractional positions, formed in float64).

    Reference used to verify: the closed form as an explicit per-pair float64 reference
    (``tests/positions/test_remap.py``).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        window: W, the relative positions kept exact.
        leak_factor: k ≥ 1, the inverse slope past the window (1 is plain RoPE).
    """

    name: ClassVar[str] = "rerope-leaky"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, window: int = 512, leak_factor: float = 16.0) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.window = _length(window, "window", fix="the window W keeps relative positions below it exact")
        self.leak_factor = float(number(leak_factor, "leak_factor", minimum=1, maximum=LENGTH_MAX,
                                        fix="positions past the window grow with slope 1/k: k ≥ 1 (k = 1 is RoPE)"))

    def method_options(self) -> dict[str, Any]:
        return {"window": self.window, "leak_factor": self.leak_factor}

    def pieces(self) -> tuple[Piece, ...]:
        w, k = self.window, self.leak_factor
        return (
            Piece("exact", lambda p: p.double(), lambda p: p.double(), lambda i: _from(i - w + 1)),  # i − j < W
            Piece("leaky", lambda p: w + (p.double() - w) / k, lambda p: p.double() / k,
                  lambda i: _below(i - w + 1)),
        )

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:
        d = (i - j).double()
        return torch.where(d < self.window, d, self.window + (d - self.window) / self.leak_factor)


class STRING(RemapScheme):
    """STRING (An et al., 2024, "Why Does the Effective Context Length of LLMs Fall Short?", ShifTed Rotray
    position embeddING): relative positions d ≥ S are replaced by d − S + W.

    Positions a model saw rarely in training (the largest) are overwritten by well-trained smaller
    ones: the position matrix is shifted down-left by S, and the local window W keeps the nearest
    keys' positions from repeating. The shifted piece rotates queries at i − S + W, keys at j. The
    largest relative position in T tokens is max(S − 1, T − 1 − S + W): the paper applies it within
    the trained length L₀ (S = L₀/3, W = 128); past L₀ it does not by itself keep positions in range.

    Reference used to verify: the paper's definition (Section 4, Algorithm 1) as an explicit per-pair
    float64 reference (``tests/positions/test_remap.py``).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        shift: S, the offset (the paper: L₀/3 to L₀/2).
        local_window: W < S, added back to shifted positions (the paper: 32-128).
    """

    name: ClassVar[str] = "string"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, shift: int = 1024, local_window: int = 128) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.shift = _length(shift, "shift", fix="STRING's offset S (the paper: a third of the trained length)")
        self.local_window = _length(local_window, "local_window", minimum=0,
                                    fix="STRING's local window W (the paper: 32-128), below the shift")
        if self.local_window >= self.shift:
            raise ValueError(f"local_window={local_window} must be below shift={shift}: shifted positions d − S + W "
                             "must be smaller than the d they replace (the paper: W = 128, S = L0/3)")

    def method_options(self) -> dict[str, Any]:
        return {"shift": self.shift, "local_window": self.local_window}

    def pieces(self) -> tuple[Piece, ...]:
        s, w = self.shift, self.local_window
        return (
            Piece("local", lambda p: p.double(), lambda p: p.double(), lambda i: _from(i - s + 1)),  # i − j < S
            Piece("shifted", lambda p: p.double() - (s - w), lambda p: p.double(), lambda i: _below(i - s + 1)),
        )

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:
        d = (i - j).double()
        return torch.where(d < self.shift, d, d - (self.shift - self.local_window))


class DualChunkAttention(RemapScheme):
    """Dual Chunk Attention (An et al., 2024, "Training-Free Long-Context Scaling of Large Language Models",
    ChunkLlama; Qwen2.5-1M's ``dual_chunk_attention_config``).

    The sequence is cut into chunks of L = chunk_size − local_size positions; keys are rotated at
    j mod L. A query attends with three position sets: intra-chunk (same chunk: query at i mod L,
    exact relative positions), successive-chunk (the previous chunk: query at min(L + i mod L, c),
    exact for the first local_size queries of a chunk, then capped) and inter-chunk (earlier chunks:
    query at min(2L − 1, c)), with c = chunk_size. No relative position exceeds c, at any length.

    Reference used to verify: vLLM's ``DualChunkRotaryEmbedding`` (the position tables it builds for
    Qwen2.5-1M: ``q_t``, ``qc_t``, ``k_t`` and the inter-chunk row ``qc_t[L − 1]``), restated as an explicit
    per-pair float64 reference (``tests/positions/test_remap.py``).

    Args:
        head_dim, base, pairing, rotary_dim: as for ``RoPE``.
        chunk_size: c, the largest relative position (Qwen2.5-1M: its trained 262,144; ChunkLlama: ¾·L₀).
        local_size: positions of the previous chunk kept exact (Qwen2.5-1M: 8,192); below chunk_size.
    """

    name: ClassVar[str] = "dca"

    def __init__(self, *, head_dim: int, base: float = 10000.0, pairing: Pairing = "half",
                 rotary_dim: int | None = None, chunk_size: int = 4096, local_size: int = 128) -> None:
        super().__init__(head_dim=head_dim, base=base, pairing=pairing, rotary_dim=rotary_dim)
        self.chunk_size = _length(chunk_size, "chunk_size", minimum=2,
                                  fix="DCA's chunk size is the largest relative position it uses (e.g. L0)")
        self.local_size = _length(local_size, "local_size", minimum=0,
                                  fix="DCA's local size (Qwen2.5-1M: chunk_size/32)")
        if self.local_size >= self.chunk_size:
            raise ValueError(f"local_size={local_size} must be below chunk_size={chunk_size}: chunks are "
                             "chunk_size − local_size positions long (Qwen2.5-1M: 262144 and 8192)")

    @property
    def chunk_len(self) -> int:
        return self.chunk_size - self.local_size

    def method_options(self) -> dict[str, Any]:
        return {"chunk_size": self.chunk_size, "local_size": self.local_size}

    def pieces(self) -> tuple[Piece, ...]:
        n, c = self.chunk_len, self.chunk_size
        inter = float(min(2 * n - 1, c))

        def key(p: Tensor) -> Tensor:
            return torch.remainder(p, n).double()

        def start(i: Tensor) -> Tensor:  # the first position of i's chunk
            return _floor_div(i, n) * n

        def previous(i: Tensor) -> tuple[Tensor, Tensor]:  # the span of the chunk before i's
            first = start(i)
            return first - n, first

        return (
            # j from i's chunk on rather than within it: the same for i ≥ j, and a pair with j > i (left
            # padding) is intra-chunk
            Piece("intra", key, key, lambda i: _from(start(i))),
            Piece("successive", lambda p: (torch.remainder(p, n) + n).clamp(max=c).double(), key,
                  previous),
            Piece("inter", lambda p: torch.full_like(p, inter, dtype=torch.float64), key,
                  lambda i: _below(start(i) - n)),  # every chunk before it
        )

    def relative_position(self, i: Tensor, j: Tensor) -> Tensor:
        n, c = self.chunk_len, self.chunk_size
        ci, cj = _floor_div(i, n), _floor_div(j, n)
        jm = torch.remainder(j, n)
        succ = (torch.remainder(i, n) + n).clamp(max=c) - jm
        inter = min(2 * n - 1, c) - jm
        return torch.where(ci <= cj, i - j, torch.where(ci == cj + 1, succ, inter)).double()


REMAP_SCHEMES: tuple[type[RemapScheme], ...] = (SelfExtend, ReRoPE, LeakyReRoPE, STRING, DualChunkAttention)


# -- the attention ------------------------------------------------------------------------------------------


def _batched(positions: Tensor) -> Tensor:
    return positions if positions.dim() == 2 else positions.unsqueeze(0)  # (Bp, T)


def remap_attention(
    scheme: RemapScheme,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    *,
    scale: float,
    causal: bool = False,
    q_index: int = 0,
    k_index: int = 0,
    window: Window = FULL,
    allowed: Tensor | None = None,
    sinks: Tensor | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    q_block: int = Q_BLOCK,
    k_block: int = K_BLOCK,
) -> tuple[Tensor, Tensor | None]:
    """softmax(scale·⟨R(q_at(i))q_i, R(k_at(j))k_j⟩ of the piece holding (i, j)) · v, blockwise, online softmax.

    Args:
        scheme: the remapping scheme (its pieces and rotation).
        q: (B, H, Tq, Dh) queries, *not* rotated; k, v: (B, Hkv, Tk, Dh) keys (not rotated) and values.
        q_pos, k_pos: (T,) or (B, T) int64 positions.
        causal: query i (sequence index q_index + i) sees key j (index k_index + j) only if
            k_index + j ≤ q_index + i, and within ``window`` (sliding / chunked); without it every key,
            pairs with k_pos > q_pos taking the mirrored pieces.
        allowed: an extra may-attend mask broadcastable to (B, 1, Tq, Tk) (padding), or None.
        sinks: (H,) sink logits (GPT-OSS) or None.
        dropout: dropout on the attention weights (training).
        need_weights: also return the (B, H, Tq, Tk) weights (one block: the matrix is asked for).
        q_block, k_block: block sizes.

    Returns:
        (output (B, H, Tq, Dh) in q's dtype, weights or None). A query that sees no key gets the mean of
        the values (uniform weights over masked keys, as ``MultiHeadAttention`` gives).
    """
    batch, heads, q_len, head_dim = q.shape
    kv_heads, k_len = k.shape[1], k.shape[-2]
    groups = heads // kv_heads
    compute = torch.promote_types(q.dtype, torch.float32)
    qp, kp = _batched(q_pos).to(q.device), _batched(k_pos).to(q.device)  # (Bp, Tq), (Bp, Tk)
    if (causal and q.dtype in FLASH_DTYPES and q.device.type == "cpu" and sinks is None and dropout == 0
            and not need_weights and not compiling() and q_len > 0 and k_len > 0):
        return _remap_flash(scheme, q, k, v, qp, kp, scale=scale, q_index=q_index, k_index=k_index, window=window,
                            allowed=allowed, q_block=q_block), None
    if need_weights:
        q_block, k_block = max(q_len, 1), max(k_len, 1)
    sets: list[tuple[Piece, bool]] = [(p, False) for p in scheme.pieces()]
    if not causal:  # pairs above the diagonal: each piece mirrored (r(i, j) = −r(j, i))
        sets += [(p, True) for p in scheme.pieces()]
    # every piece's rotated queries and keys, once: (B, Hkv, g, Tq, Dh) and (B, Hkv, 1, Tk, Dh)
    rotated = []
    for piece, mirrored in sets:
        q_at, k_at = (piece.k_at, piece.q_at) if mirrored else (piece.q_at, piece.k_at)
        qr = scheme.rotate_at(q.to(compute), q_at(qp)).reshape(batch, kv_heads, groups, q_len, head_dim)
        kr = scheme.rotate_at(k.to(compute), k_at(kp)).unsqueeze(2)
        rotated.append((qr, kr))
    values = v.to(compute).unsqueeze(2)  # (B, Hkv, 1, Tk, Dh)
    extra = None if allowed is None else allowed.unsqueeze(2)  # (B or 1, 1, 1, Tq or 1, Tk)
    neg_inf = torch.tensor(-math.inf, dtype=compute, device=q.device)
    outs, weight_rows = [], []
    for qs in range(0, q_len, q_block):
        qe = min(q_len, qs + q_block)
        first = q_index + qs  # sequence index of the block's first query
        lo, hi = _block_keys(window, first, q_index + qe - 1, k_index, k_len) if causal else (0, k_len)
        shape = (batch, kv_heads, groups, qe - qs, 1)
        if sinks is not None:
            m = sinks.to(compute).view(1, kv_heads, groups, 1, 1).expand(shape).clone()
            denom = torch.ones(shape, dtype=compute, device=q.device)
        else:
            m = torch.full(shape, -math.inf, dtype=compute, device=q.device)
            denom = torch.zeros(shape, dtype=compute, device=q.device)
        acc = torch.zeros(batch, kv_heads, groups, qe - qs, head_dim, dtype=compute, device=q.device)
        for ks in range(lo, hi, k_block):
            ke = min(hi, ks + k_block)
            i, j = qp[:, qs:qe, None], kp[:, None, ks:ke]  # (Bp, bq, 1), (Bp, 1, bk)
            forward = i >= j  # (Bp, bq, bk)
            scores = None
            for (piece, mirrored), (qr, kr) in zip(sets, rotated):
                if causal:  # the regions decide (a pair with k_pos > q_pos falls in the nearest piece)
                    sel = piece.region(i, j)
                else:
                    sel = (piece.region(j, i) & ~forward) if mirrored else (piece.region(i, j) & forward)
                if not compiling() and not bool(sel.any()):
                    continue  # no pair of this block in the piece: skip its matmul
                s = qr[..., qs:qe, :] @ kr[..., ks:ke, :].transpose(-1, -2) * scale  # (B, Hkv, g, bq, bk)
                sel = sel[:, None, None]  # (Bp, 1, 1, bq, bk)
                scores = torch.where(sel, s, neg_inf if scores is None else scores)
            if scores is None:
                continue
            if causal:
                visible = _window_block(window, first, k_index + ks, qe - qs, ke - ks, q.device)
                scores = scores.masked_fill(~visible, -math.inf)
            if extra is not None:
                scores = scores.masked_fill(~extra[..., qs:qe, ks:ke] if extra.shape[-2] > 1
                                            else ~extra[..., ks:ke], -math.inf)
            top = torch.maximum(m, scores.amax(-1, keepdim=True))
            safe = top.masked_fill(top == -math.inf, 0)  # rows with no visible key yet
            p = torch.exp(scores - safe)  # (B, Hkv, g, bq, bk)
            correction = torch.exp(m - safe)
            denom = denom * correction + p.sum(-1, keepdim=True)
            dropped = F.dropout(p, dropout) if dropout > 0 else p
            acc = acc * correction + dropped @ values[..., ks:ke, :]
            m = top
            if need_weights:
                weight_rows.append((p, ks, ke))
        seen = denom > 0
        out = torch.where(seen, acc / denom.clamp_min(torch.finfo(compute).tiny),
                          values.mean(-2, keepdim=True).expand_as(acc))  # (B, Hkv, g, bq, Dh)
        outs.append(out)
        if need_weights:
            full = torch.zeros(batch, kv_heads, groups, qe - qs, k_len, dtype=compute, device=q.device)
            for p, ks, ke in weight_rows:
                full[..., ks:ke] = p / denom.clamp_min(torch.finfo(compute).tiny)
            if not bool(seen.all()):
                full = torch.where(seen, full, torch.full_like(full, 1.0 / max(k_len, 1)))
            weight_rows = [full]
    out = torch.cat(outs, dim=-2) if len(outs) != 1 else outs[0]
    out = out.reshape(batch, heads, q_len, head_dim).to(q.dtype)
    weights = None
    if need_weights:
        weights = (weight_rows[0] if weight_rows else torch.zeros(batch, kv_heads, groups, q_len, k_len, dtype=compute,
                                                                   device=q.device))
        weights = weights.reshape(batch, heads, q_len, k_len).to(q.dtype)
    return out, weights


#: Activation dtypes whose causal remapped attention runs on PyTorch's fused CPU attention kernel, one call per
#: piece and block of queries, merged by log-sum-exp (:func:`_remap_flash`): for bfloat16 the CPU's matrix units
#: (AMX) do the products, as they do for plain RoPE's SDPA; float32 keeps the exact blockwise loop above.
FLASH_DTYPES = (torch.bfloat16, torch.float16)


def _remap_flash(scheme: RemapScheme, q: Tensor, k: Tensor, v: Tensor, qp: Tensor, kp: Tensor, *, scale: float,
                 q_index: int, k_index: int, window: Window, allowed: Tensor | None, q_block: int) -> Tensor:
    """Causal ``remap_attention`` in q's (half-precision) dtype on ``_scaled_dot_product_flash_attention_for_cpu``.

    Per block of ``q_block`` queries and per piece, fused calls over the keys the piece serves, each returning
    its rows' log-sum-exp; the calls' outputs are then weighted by exp(lse_call − lse_all), exactly the softmax
    over the union of their keys. Rotations are computed in float32 and rounded to q's dtype, as a
    half-precision model's RoPE is.

    Positions one run of consecutive integers for queries and for keys, and no ``allowed`` mask (a single
    sequence, the usual case): each query's keys in a piece are one interval of columns (its span, cut by
    causality and the window), so a block's calls are one *without* a mask over the columns every query of
    the block sees, and two narrow ones with a mask over the ragged edges (≤ ``q_block`` columns wide where
    the span moves with the query); no (block, Tk) mask is built. Otherwise (padding, batched positions): one
    call per piece over the slice of keys its region reaches, with an additive (bq, bk) mask (0 or −inf:
    the region, causality, the window, ``allowed``). Holds at most one block's masks, never (Tq, Tk).
    """
    batch, heads, q_len, head_dim = q.shape
    kv_heads, k_len = k.shape[1], k.shape[-2]
    groups = heads // kv_heads
    attend = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    pieces = scheme.pieces()
    rotated = []  # per piece: (B, H, Tq, Dh) queries and (B, H, Tk, Dh) keys, rotated, in q's dtype
    for piece in pieces:
        qr = scheme.rotate_at(q.float(), piece.q_at(qp)).to(q.dtype)
        kr = scheme.rotate_at(k.float(), piece.k_at(kp)).to(q.dtype)
        rotated.append((qr, kr.repeat_interleave(groups, dim=1) if groups > 1 else kr))
    values = v.repeat_interleave(groups, dim=1) if groups > 1 else v  # (B, H, Tk, Dh): query head h reads h // g
    runs = allowed is None and _consecutive(qp) and _consecutive(kp)
    k_first = int(kp[0, 0]) if runs and k_len else 0  # the position of key column 0
    outs = []
    for qs in range(0, q_len, q_block):
        qe = min(q_len, qs + q_block)
        first = q_index + qs
        lo, hi = _block_keys(window, first, q_index + qe - 1, k_index, k_len)
        parts, sums = [], []  # per call: (B, H, bq, Dh) float32 outputs and (B or 1, H, bq) lse, −inf where unseen

        def call(qr: Tensor, kr: Tensor, a: int, b: int, mask: Tensor | None, seen: Tensor | None) -> None:
            out, lse = attend(qr[:, :, qs:qe], kr[:, :, a:b], values[:, :, a:b], 0.0, False,
                              attn_mask=None if mask is None else mask[:, None], scale=scale)
            parts.append(out.float())  # (B, H, bq, Dh); lse (B, H, bq) float32
            sums.append(lse if seen is None else lse.masked_fill(~seen[:, None], -math.inf))

        if runs:
            rows = torch.arange(first, q_index + qe, device=q.device)  # the block's sequence indices
            causal_end = rows - k_index + 1  # columns < this are causal
            window_from = window.first_visible(rows) - k_index
            at = qp[0, qs:qe]  # the block's query positions; key column c holds position k_first + c
            for piece, (qr, kr) in zip(pieces, rotated):
                start, end = piece.span(at)
                start = torch.maximum(start - k_first, window_from).clamp(lo, hi)  # (bq,) column bounds
                end = torch.minimum(end - k_first, causal_end).clamp(lo, hi)
                for a, b, masked in _calls(start, end):
                    if not masked:
                        call(qr, kr, a, b, None, None)
                        continue
                    columns = torch.arange(a, b, device=q.device)
                    sel = (start[:, None] <= columns) & (columns < end[:, None])  # (bq, b − a)
                    mask = torch.zeros(sel.shape, dtype=q.dtype, device=q.device).masked_fill_(~sel, -math.inf)
                    call(qr, kr, a, b, mask[None], sel.any(dim=-1)[None])
        else:
            visible = _window_block(window, first, k_index + lo, qe - qs, hi - lo, q.device)  # (bq, bk)
            if allowed is not None:  # (B or 1, 1, Tq or 1, Tk) → (B or 1, bq or 1, bk)
                extra = allowed[..., qs:qe, lo:hi] if allowed.shape[-2] > 1 else allowed[..., lo:hi]
                visible = visible & extra[:, 0]
            i, j = qp[:, qs:qe, None], kp[:, None, lo:hi]  # (Bp, bq, 1), (Bp, 1, bk)
            for piece, (qr, kr) in zip(pieces, rotated):
                sel = piece.region(i, j) & visible  # (Bp or B, bq, bk)
                cols = sel.any(dim=1).any(dim=0).nonzero()
                if len(cols) == 0:
                    continue
                a, b = int(cols[0]), int(cols[-1]) + 1
                sel = sel[..., a:b]
                mask = torch.zeros(sel.shape, dtype=q.dtype, device=q.device).masked_fill_(~sel, -math.inf)
                call(qr, kr, lo + a, lo + b, mask, sel.any(dim=-1))  # a row with no key here gives 0, not −inf
        if not parts:  # no query of the block sees a key: the mean of the values, as the loop gives
            outs.append(values.float().mean(-2, keepdim=True).expand(batch, heads, qe - qs, head_dim))
            continue
        lse = torch.stack(torch.broadcast_tensors(*sums))  # (calls, B, H, bq)
        total = torch.logsumexp(lse, dim=0)
        weight = torch.exp(lse - total.masked_fill(total == -math.inf, 0))[..., None]  # (calls, B, H, bq, 1)
        out = (weight * torch.stack(parts)).sum(0)
        unseen = (total == -math.inf)[..., None]
        if bool(unseen.any()):
            out = torch.where(unseen, values.float().mean(-2, keepdim=True), out)
        outs.append(out)
    return (torch.cat(outs, dim=-2) if len(outs) != 1 else outs[0]).to(q.dtype)


def _consecutive(positions: Tensor) -> bool:
    """Whether (Bp, T) positions are one row of consecutive integers (p0, p0 + 1, …)."""
    if positions.shape[0] != 1:
        return False
    row = positions[0]
    return row.numel() < 2 or bool((row[1:] - row[:-1] == 1).all())


def _calls(start: Tensor, end: Tensor) -> list[tuple[int, int, bool]]:
    """The fused calls that cover rows whose keys are the columns [start_r, end_r): (a, b, masked) each.

    The columns every row with keys sees, [max start, min end), need no mask; the ragged edges on either side
    do. One masked call over everything when no column is common to all rows. Rows without keys (end ≤ start)
    take part in no unmasked call.
    """
    has = end > start
    if not bool(has.any()):
        return []
    start, end = start[has], end[has]
    first, last = int(start.min()), int(end.max())
    common_from, common_to = int(start.max()), int(end.min())
    if common_from >= common_to or not bool(has.all()):
        return [(first, last, True)]
    calls = [(common_from, common_to, False)]
    if first < common_from:
        calls.append((first, common_from, True))
    if common_to < last:
        calls.append((common_to, last, True))
    return calls


def _block_keys(window: Window, first: int, last: int, k_index: int, k_len: int) -> tuple[int, int]:
    """[lo, hi): the keys a causal block of queries (sequence indices first … last) can see, within ``window``."""
    hi = min(k_len, last - k_index + 1)
    return min(hi, max(0, window.first_visible(first) - k_index)), hi


def _window_block(window: Window, q_index: int, k_index: int, q_len: int, k_len: int, device: torch.device) -> Tensor:
    """(bq, bk) bool: causal (by sequence index) and inside ``window`` — the rule of ``posenc.window.window_mask``."""
    return window_mask(window, q_index=q_index, k_index=k_index, q_len=q_len, k_len=k_len, device=device)
