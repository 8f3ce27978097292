"""Shaw et al. (2018) relative position representations: a query-dependent logit term.

"Self-Attention with Relative Position Representations" adds to each logit

    e_ij = (q_i·k_j + q_i·a^K_{clip(j − i, k)}) / √Dh,

with a^K a learned table of 2k + 1 vectors of width Dh, shared by all heads
(as in the paper) and, here, by all layers of a stack. The second term is
the bias this scheme returns; attention already divides q·k by √Dh, so the
bias carries its own 1/√Dh.

The paper's value-side term, z_i = Σ_j α_ij (v_j + a^V_{clip(j−i, k)}), is the
option ``values=True``: a second table a^V, added to the attention output
through the value hook (``value_bias``; attention then forms the weights
explicitly instead of calling SDPA). It is off by default: the paper's own
ablation finds the key-side term alone about as good, and Huang et al.'s
Music Transformer keeps only it.

Computed as q @ a^Kᵀ once per (query, clip distance) — (B, H, Tq, 2k+1) —
then gathered per key, instead of the naive (Tq, Tk, Dh) tensor of vectors.

Shape legend: B batch, H heads, Tq query length, Tk key length, Dh head width,
K = 2k + 1 table rows.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.positions.base import BiasScheme, ModelContext, check_positions
from posenc.validation import NORMAL_DRAW_MAX, check_table, float32_squares, number, positive_int
from posenc.positions.bias import relative_distance


class ShawRelative(BiasScheme):
    """Shaw et al. (2018) relative position keys a^K: bias_ij = q_i·a^K_{clip(j−i, k)}/√Dh.

    Reference used to verify: the paper's formula as an explicit loop over
    (query, key) pairs in float64.

    ``similarity`` probes with an all-ones query (as the rotary schemes probe
    with all-ones vectors): Σ_d a^K_{clip(j−i)}[d]/√Dh, the same for every head.

    With ``values=True`` the output also gets Σ_j α_ij a^V_{clip(j−i, k)} (the paper's eq. 3),
    verified against the same explicit loop.

    Args:
        num_heads: number of heads H.
        head_dim: head width Dh (the width of each table row).
        max_distance: k, the clip distance (the paper finds k ≥ 2 enough; 16 by default).
        init_std: standard deviation of the tables' normal initialisation.
        values: also learn the value-side table a^V (off: keys only, as before).
    """

    name: ClassVar[str] = "shaw"

    def __init__(self, *, num_heads: int, head_dim: int, max_distance: int = 16, init_std: float = 0.02,
                 values: bool = False) -> None:
        super().__init__(num_heads=num_heads)
        head_dim = positive_int(head_dim, "head_dim")
        max_distance = number(max_distance, "max_distance", minimum=0, integer=True)
        check_table(2 * max_distance + 1, head_dim, "relative-distance table", option="max_distance")
        self.head_dim, self.max_distance = head_dim, max_distance
        # the bias is q·a/√Dh, a float32 dot product over the head width with table entries (normal draws)
        self.init_std = float32_squares(number(init_std, "init_std", minimum=0), "init_std", width=head_dim,
                                        reach=NORMAL_DRAW_MAX, what="the table's entries (normal draws)",
                                        fix="the usual value is 0.02")
        self.table = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))  # (K, Dh): rows −k … k
        nn.init.normal_(self.table, std=init_std)
        self.uses_weights = bool(values)
        self.value_table = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim)) if values else None  # (K, Dh)
        if self.value_table is not None:
            nn.init.normal_(self.value_table, std=init_std)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        """Head count and head width: each table row is a vector of the head's width."""
        return {**super().context_args(ctx), "head_dim": ctx.head_dim}

    def table_index(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """clip(j − i, −k, k) + k: the table row of every pair, int64 (Tq, Tk) or (B, Tq, Tk)."""
        return relative_distance(q_pos, k_pos).clamp(-self.max_distance, self.max_distance) + self.max_distance

    def attention_bias(self, q_pos: Tensor, k_pos: Tensor, q: Tensor | None = None) -> Tensor:
        if q is None:
            raise ValueError("shaw: the bias depends on the queries; pass q (B, H, Tq, Dh) to attention_bias")
        if q.dim() != 4 or q.shape[-1] != self.head_dim:
            raise ValueError(f"shaw: q must have shape (B, H, Tq, {self.head_dim}), got {tuple(q.shape)}")
        q_pos, k_pos = check_positions(q_pos, name="q_pos"), check_positions(k_pos, name="k_pos")
        if q_pos.shape[-1] != q.shape[-2]:
            raise ValueError(f"shaw: {q_pos.shape[-1]} query positions for {q.shape[-2]} queries")
        table = self.table.to(q.dtype)
        per_row = q @ table.T / math.sqrt(self.head_dim)  # (B, H, Tq, K): q_i · a_r for every row r
        index = self.table_index(q_pos, k_pos).to(q.device)  # (Tq, Tk) | (B, Tq, Tk)
        if index.dim() == 2:
            index = index.unsqueeze(0)
        index = index.unsqueeze(1).expand(q.shape[0], q.shape[1], -1, -1)  # (B, H, Tq, Tk)
        return per_row.gather(-1, index)  # (B, H, Tq, Tk)

    def value_bias(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Σ_j α_ij·a^V_{clip(j−i)} (B, H, Tq, Dh): the weights summed per table row, times the table."""
        if self.value_table is None:
            return None
        index = self.table_index(check_positions(q_pos, name="q_pos"), check_positions(k_pos, name="k_pos"))
        index = index.to(weights.device)
        if index.dim() == 2:
            index = index.unsqueeze(0)
        index = index.unsqueeze(1).expand_as(weights)  # (B, H, Tq, Tk)
        per_row = weights.new_zeros(*weights.shape[:-1], self.value_table.shape[0])  # (B, H, Tq, K)
        per_row.scatter_add_(-1, index, weights)
        return per_row @ self.value_table.to(weights.dtype)  # (B, H, Tq, Dh)

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        pos_i = check_positions(pos_i, name="pos_i")
        pos_j = check_positions(pos_j, name="pos_j")
        if pos_i.dim() != 1 or pos_j.dim() != 1:
            raise ValueError("similarity takes (T,) positions")
        probe = torch.ones(1, self.num_heads, pos_i.shape[-1], self.head_dim, dtype=torch.float64)
        with torch.no_grad():
            return self.attention_bias(pos_i, pos_j, probe.to(self.table.device))[0].double().cpu()  # (H, Ti, Tj)

    def options(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "head_dim": self.head_dim, "max_distance": self.max_distance,
                "values": self.value_table is not None}
