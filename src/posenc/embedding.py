"""Token embeddings, the output head (tied or separate), and neighbour lists.

Article 003: an id becomes a row of a V × d table; a hidden vector becomes
scores over the vocabulary by dot products with the rows of an output matrix —
the same table again when the weights are tied.

Shape legend: B batch, T sequence length, V vocabulary size, D width.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.checks import check_values


def check_ids(ids: Tensor, vocab_size: int) -> Tensor:
    """Raise a clear error unless ``ids`` is an integer tensor with values in [0, vocab_size).

    The range check reads values: under ``torch.compile`` it is an in-graph
    assertion (``posenc.checks``), not a host sync.
    """
    if not isinstance(ids, Tensor):
        raise TypeError(f"token ids must be an integer torch.Tensor, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"token ids must have an integer dtype (torch.long), got {ids.dtype}")
    fix = "check the tokenizer's vocabulary size against the model's vocab_size"

    def message() -> str:
        lo, hi = int(ids.min()), int(ids.max())
        return f"token id {lo if lo < 0 else hi} is outside the vocabulary [0, {vocab_size}); {fix}"

    check_values((ids >= 0) & (ids < vocab_size), message,
                 compiled_message=f"a token id is outside the vocabulary [0, {vocab_size}); {fix}")
    return ids


def one_hot_lookup(ids: Tensor, table: Tensor) -> Tensor:
    """The rows of ``table`` for ``ids`` computed as ``one_hot(ids) @ table``.

    The same numbers as ``table[ids]``, obtained the long way (V·D multiply-adds
    per id instead of a copy): each one-hot row has a single 1, so every output
    element is one product 1·w plus zeros, which is exact in floating point.
    """
    check_ids(ids, table.shape[0])
    return F.one_hot(ids, table.shape[0]).to(table.dtype) @ table  # (..., V) @ (V, D)


class TokenEmbedding(nn.Module):
    """A V × D lookup table, optionally scaled by √D (Vaswani et al., 2017, §3.4).

    Args:
        vocab_size: V, number of rows.
        dim: D, width of each row.
        scale: multiply looked-up rows by √D, so that the embedding is not
            drowned by an added position encoding of norm ≈ √(D/2).
        init_std: standard deviation of the normal initialisation; default
            D^(−1/2), which makes the scaled rows' norm ≈ √D.
        padding_idx: optional id whose row is zero and receives no gradient.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        dim: int,
        scale: bool = True,
        init_std: float | None = None,
        padding_idx: int | None = None,
    ) -> None:
        super().__init__()
        if vocab_size <= 0 or dim <= 0:
            raise ValueError(f"vocab_size and dim must be positive, got vocab_size={vocab_size}, dim={dim}")
        self.vocab_size = vocab_size
        self.dim = dim
        self.scale = scale
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        nn.init.normal_(self.weight, std=dim**-0.5 if init_std is None else init_std)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    @property
    def multiplier(self) -> float:
        """√D when scaling, else 1."""
        return math.sqrt(self.dim) if self.scale else 1.0

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) int ids → (B, T, D) vectors."""
        check_ids(ids, self.vocab_size)
        x = F.embedding(ids, self.weight, padding_idx=self.padding_idx)
        return x * self.multiplier if self.scale else x

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, scale={self.scale}"


class OutputHead(nn.Module):
    """Scores over the vocabulary: logits = h · Wᵀ.

    Tied, W *is* the token embedding's table (one V·D parameter tensor serves
    both ends); untied, W is a V × D matrix of its own (2·V·D in all).

    Args:
        dim: D, width of the hidden vectors.
        vocab_size: V.
        tied_to: the TokenEmbedding to share the table with, or None.
        bias: add a per-token bias (a V-vector) to the logits (Marian's ``final_logits_bias``).
        input_scale: multiply the hidden vectors by this first (T5 with a tied head: D^(−1/2)).
    """

    def __init__(self, *, dim: int, vocab_size: int, tied_to: TokenEmbedding | None = None, bias: bool = False,
                 input_scale: float = 1.0) -> None:
        super().__init__()
        if tied_to is not None and (tied_to.vocab_size, tied_to.dim) != (vocab_size, dim):
            raise ValueError(
                f"cannot tie a ({vocab_size} × {dim}) head to a ({tied_to.vocab_size} × {tied_to.dim}) embedding"
            )
        self.dim = dim
        self.vocab_size = vocab_size
        self.tied = tied_to is not None
        if tied_to is not None:
            self.weight = tied_to.weight  # the same Parameter object: one tensor, two uses
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, dim))
            nn.init.normal_(self.weight, std=dim**-0.5)
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None
        if not (isinstance(input_scale, (int, float)) and 0 < input_scale < float("inf")):
            raise ValueError(f"input_scale must be a finite number > 0, got {input_scale!r}")
        self.input_scale = float(input_scale)

    def forward(self, h: Tensor) -> Tensor:
        """(…, D) hidden vectors → (…, V) logits."""
        if h.shape[-1] != self.dim:
            raise ValueError(f"hidden vectors have width {h.shape[-1]}, the head expects {self.dim}")
        if self.input_scale != 1.0:
            h = h * self.input_scale
        return F.linear(h, self.weight, self.bias)

    def extra_repr(self) -> str:
        scale = f", input_scale={self.input_scale:g}" if self.input_scale != 1.0 else ""
        return f"dim={self.dim}, vocab_size={self.vocab_size}, tied={self.tied}{scale}"


def count_parameters(*modules: nn.Module) -> int:
    """Number of distinct parameter elements across ``modules`` (a shared tensor counts once)."""
    seen: dict[int, int] = {}
    for module in modules:
        for p in module.parameters():
            seen[id(p)] = p.numel()
    return sum(seen.values())


def neighbours(
    table: Tensor,
    index: int,
    *,
    k: int = 5,
    metric: Literal["cosine", "dot"] = "cosine",
    exclude_self: bool = True,
) -> tuple[Tensor, Tensor]:
    """The ``k`` rows of ``table`` closest to row ``index``.

    Cosine ranks by direction alone; dot product also rewards length, so a
    stretched row rises in every dot-product list while its cosine neighbours
    do not move (article 003).

    Returns:
        (indices, scores), each (k,), best first.
    """
    if metric not in ("cosine", "dot"):
        raise ValueError(f"metric must be 'cosine' or 'dot', got {metric!r}")
    if not 0 <= index < table.shape[0]:
        raise ValueError(f"row index {index} is outside the table's {table.shape[0]} rows")
    t = table.detach().double()
    if metric == "cosine":
        scores = F.normalize(t, dim=-1) @ F.normalize(t[index], dim=-1)
    else:
        scores = t @ t[index]
    if exclude_self:
        scores[index] = -math.inf
    k = min(k, table.shape[0] - int(exclude_self))
    top = torch.topk(scores, k)
    return top.indices, top.values
