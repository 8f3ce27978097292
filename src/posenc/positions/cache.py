"""One cache for tables derived from a scheme's options (sinusoid rows, RoPE cos/sin).

A scheme that serves rows of a derived table forms rows 0 … L − 1 once (L a
power of two covering the largest position asked for, at least ``min_rows``)
per (dtype, device), and gathers the rows each call needs. The cache is keyed
on ``key`` — everything the values depend on, given by the caller at every
call (for RoPE: the class and its options) — so changing an option after
construction can never serve stale rows. It is a plain attribute, not a
buffer: checkpoints hold only learned weights, and the rows are bit-for-bit
those the caller's ``build`` gives (formed in float64, cast at the end).

Shape legend: T positions, W table width.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor

Build = Callable[[Tensor], tuple[Tensor, ...]]


class TableCache:
    """Rows of derived tables, formed once per (dtype, device, key) and grown by doubling.

    Args:
        limit: the largest table kept, in elements (rows × width, per table);
            larger requests return None and the caller computes directly.
        min_rows: the smallest table formed.
    """

    def __init__(self, *, limit: int, min_rows: int = 256) -> None:
        if limit <= 0 or min_rows <= 0:
            raise ValueError(f"limit and min_rows must be positive, got limit={limit}, min_rows={min_rows}")
        self.limit, self.min_rows = limit, min_rows
        self._entries: dict[tuple[torch.dtype, torch.device], tuple[Hashable, tuple[Tensor, ...]]] = {}

    def rows(self, positions: Tensor, *, key: Hashable, width: int, dtype: torch.dtype, build: Build) -> tuple[Tensor, ...] | None:
        """The rows at ``positions`` (int64 (…, T), on the device wanted) of the tables ``build`` forms.

        Args:
            positions: checked non-negative int64 positions.
            key: everything the values depend on besides dtype and device.
            width: columns of each table (to apply ``limit``).
            dtype: the dtype ``build`` returns (part of the cache key).
            build: positions 0 … L − 1 (L,) → tables (L, W) each, already in ``dtype``.

        Returns:
            One (…, T, W) tensor per table, or None when nothing is asked for or
            the table would exceed ``limit`` (compute directly then).
        """
        if not positions.numel():
            return None
        rows = max(self.min_rows, 1 << int(positions.max()).bit_length())
        if rows * width > self.limit:
            return None
        slot = (dtype, positions.device)
        entry = self._entries.get(slot)
        if entry is None or entry[0] != key or entry[1][0].shape[0] < rows:
            entry = self._entries[slot] = (key, build(torch.arange(rows, device=positions.device)))
        return tuple(F.embedding(positions, table) for table in entry[1])

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
