"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar, 2024, "Contextual Position Encoding").

Positions are counted by the context instead of by tokens: each query i gates
every key j it sees with g_ij = σ(q_i·k_j/√Dh), and the position of key j
relative to query i is the sum of the gates between them,

    p_ij = Σ_{t = j}^{i} g_it,

a fractional count (of sentences, words, … whatever the gates learn to mark).
A learned table e[0 … npos_max − 1] of head-width vectors gives integer
positions their embeddings; a fractional p_ij interpolates between
e[⌊p⌋] and e[⌈p⌉], and the logit gets q_i·e[p_ij] (added to q·k/√Dh as it
stands, unscaled, as in the paper's code). p is clamped to npos_max − 1.

Which keys count. The paper's code takes the gates of the masked logits and
sums them from key j to the end of the row (a reversed cumulative sum), so
under its causal mask the sum runs over keys j … i. Here the bias hook does not
see the mask, so keys are selected by position: a key at or before the query
(k_pos ≤ q_pos) sums the gates of the keys from it up to the query, in
sequence order; a key after the query (bidirectional attention only) sums
those from the query up to it — the mirror image, so an encoder gets a
sensible CoPE too. For a causal decoder this is the paper's p_ij exactly, and
a cached decoding step (one query against all cached keys) computes the same
sums as the full forward. Keys are assumed to be in position order (as any
cache and any left- or right-padded batch keeps them); padding keys at the
ends never fall between a real query and a real key.

The bias depends on q *and* k, so CoPE answers ``logit_bias(q, k, q_pos, k_pos)``
(attention calls it with the keys); ``attention_bias(q_pos, k_pos, q)`` — the
position-only probe the lab uses — takes all-ones keys.

Reference used to verify: the paper's code (its appendix: gates = σ(logits),
flip-cumsum-flip, clamp, gather ceil/floor, interpolate) restated as a float64
loop over (query, key) pairs with a causal mask.

Shape legend: B batch, H heads, Hkv key/value heads, Tq query length, Tk key
length, Dh head width, N = npos_max table rows.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.positions.base import BiasScheme, ModelContext, check_positions
from posenc.validation import check_table, number, positive_int


class CoPE(BiasScheme):
    """CoPE (Golovneva et al., 2024): bias_ij = q_i·e[p_ij], p_ij = Σ_{t=j}^{i} σ(q_i·k_t/√Dh), e interpolated.

    Reference used to verify: the paper's code as a float64 loop (see the module docstring).

    ``similarity`` probes with all-ones queries and keys: every gate is σ(√Dh),
    so p_ij = σ(√Dh)·(|i − j| + 1) and the similarity is Σ_d e[p_ij][d] — a
    function of |i − j| alone, the same for every head.

    Args:
        num_heads: H (the table is shared by the heads, as in the paper).
        head_dim: Dh, the width of each table row.
        npos_max: N, table rows; positions are clamped to N − 1 (the paper uses 64 for its tasks).
        init_std: standard deviation of the table's normal initialisation (0: zeros, as in the paper's code).
    """

    name: ClassVar[str] = "cope"

    def __init__(self, *, num_heads: int, head_dim: int, npos_max: int = 64, init_std: float = 0.02) -> None:
        super().__init__(num_heads=num_heads)
        self.head_dim = positive_int(head_dim, "head_dim")
        self.npos_max = number(npos_max, "npos_max", minimum=2, integer=True,
                               fix="CoPE interpolates between table rows; the paper uses 64")
        check_table(self.npos_max, self.head_dim, "CoPE position table", option="npos_max")
        self.init_std = number(init_std, "init_std", minimum=0, maximum=1e3, fix="the usual value is 0.02")
        self.table = nn.Parameter(torch.empty(self.npos_max, self.head_dim))  # (N, Dh): e[0 … N − 1]
        nn.init.normal_(self.table, std=self.init_std)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {**super().context_args(ctx), "head_dim": ctx.head_dim}

    def contextual_positions(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """p_ij (B, H, Tq, Tk) in q's compute dtype (at least float32), before clamping."""
        if q.dim() != 4 or k.dim() != 4 or q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"cope: q and k must be (B, H, T, {self.head_dim}), got {tuple(q.shape)} and "
                             f"{tuple(k.shape)}")
        q_pos, k_pos = check_positions(q_pos, name="q_pos"), check_positions(k_pos, name="k_pos")
        if q_pos.shape[-1] != q.shape[-2] or k_pos.shape[-1] != k.shape[-2]:
            raise ValueError(f"cope: {q_pos.shape[-1]} query / {k_pos.shape[-1]} key positions for {q.shape[-2]} "
                             f"queries / {k.shape[-2]} keys")
        if k.shape[1] != q.shape[1]:  # grouped-query attention: each kv head serves H / Hkv query heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # (B, H, Tk, Dh)
        compute = torch.promote_types(q.dtype, torch.float32)
        gates = torch.sigmoid(q.to(compute) @ k.to(compute).transpose(-1, -2) / math.sqrt(self.head_dim))
        rel = (k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)).to(q.device)  # (Tq, Tk) | (B, Tq, Tk)
        if rel.dim() == 3:
            rel = rel.unsqueeze(1)  # (B, 1, Tq, Tk)
        before, after = rel <= 0, rel >= 0
        from_key = (gates * before).flip(-1).cumsum(-1).flip(-1)  # Σ_{t ≥ j, pos_t ≤ pos_i} g_it
        to_key = (gates * after).cumsum(-1)  # Σ_{t ≤ j, pos_t ≥ pos_i} g_it
        return torch.where(before, from_key, to_key)

    def logit_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        pos = self.contextual_positions(q, k, q_pos, k_pos).clamp(max=self.npos_max - 1)  # (B, H, Tq, Tk)
        per_row = q.to(pos.dtype) @ self.table.to(pos.dtype).T  # (B, H, Tq, N): q_i · e[n] for every row n
        floor, ceil = pos.floor(), pos.ceil()
        w = pos - floor
        low, high = per_row.gather(-1, floor.long()), per_row.gather(-1, ceil.long())
        return (high * w + low * (1 - w)).to(q.dtype)

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        """The position-only probe: ``logit_bias`` with all-ones keys (and all-ones queries if none are given)."""
        q_pos, k_pos = check_positions(q_pos, name="q_pos"), check_positions(k_pos, name="k_pos")
        if q is None:
            q = torch.ones(1, self.num_heads, q_pos.shape[-1], self.head_dim, dtype=torch.float64,
                           device=self.table.device)
        k = torch.ones(q.shape[0], q.shape[1], k_pos.shape[-1], self.head_dim, dtype=q.dtype, device=q.device)
        return self.logit_bias(q, k, q_pos, k_pos)

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        pos_i, pos_j = check_positions(pos_i, name="pos_i"), check_positions(pos_j, name="pos_j")
        if pos_i.dim() != 1 or pos_j.dim() != 1:
            raise ValueError("similarity takes (T,) positions")
        with torch.no_grad():
            return self.attention_bias(pos_i, pos_j)[0].double().cpu()  # (H, Ti, Tj)

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "head_dim": self.head_dim, "npos_max": self.npos_max}
