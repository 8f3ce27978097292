"""Per-token loss at every position of one long causal pass, and perplexity by position bucket.

``token_nll(model, ids)`` runs the whole sequence once (SDPA's causal path:
no (T, T) matrix) and turns hidden states into losses ``chunk`` positions at
a time, so the (T, V) logits never exist at once. Entry p of the result is
−log P(ids[p + 1] | ids[0..p]): the loss of the token at position p + 1,
predicted with p + 1 tokens of context. Because the model is causal, the
first L₀ entries of a long pass are exactly the losses of a pass of length
L₀ — the in-range control comes with every long pass for free.

``window`` feeds the same sequence through the KV cache ``window`` tokens at
a time instead; it must give the same losses (a test checks it), and is the
path for models whose activations at full length do not fit.

Shape legend: T length, D width, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.extend.forward import final_hidden


def _chunked_nll(head: nn.Module, hidden: Tensor, targets: Tensor, chunk: int, pass_rows: int) -> Tensor:
    """hidden (T, D), targets (T,) → −log p(target) (T,) float32, ``chunk`` rows of logits at a time.

    A head held as stored (``QuantLinear``) multiplies every chunk as the body's layers multiplied the
    ``pass_rows`` rows of the same forward pass — through the exact weight once they reach its threshold — not
    by the chunk's size."""
    from posenc.models.quant import chunk_of_pass

    out = []
    for start in range(0, hidden.shape[0], chunk):
        logits = chunk_of_pass(head, hidden[start:start + chunk], pass_rows).float()  # (c, V)
        out.append(F.cross_entropy(logits, targets[start:start + chunk], reduction="none"))
    return torch.cat(out)


@torch.no_grad()
def token_nll(model: nn.Module, ids: Sequence[int] | Tensor, *, chunk: int = 1024, window: int | None = None,
              progress: Any = None) -> Tensor:
    """Loss of every next-token prediction in one causal pass over ``ids``.

    Args:
        model: a causal LM with ``head`` (and ``hidden``, or see ``final_hidden``).
        ids: T ≥ 2 token ids.
        chunk: positions per logits block.
        window: None for one forward pass; else feed ``window`` tokens at a time through a KV cache.
        progress: a tqdm bar to advance by the tokens processed (optional).

    Returns:
        (T − 1,) float32: entry p is −log P(ids[p+1] | ids[..p]).
    """
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    if ids.numel() < 2:
        raise ValueError(f"need at least 2 tokens to score, got {ids.numel()}")
    if chunk <= 0 or (window is not None and window <= 0):
        raise ValueError(f"chunk and window must be positive, got chunk={chunk}, window={window}")
    device = next(model.parameters()).device
    ids = ids.to(device)
    model.eval()
    if window is None:
        hidden = final_hidden(model, ids[None])[0]  # (T, D)
        if progress is not None:
            progress.update(ids.numel())
        return _chunked_nll(model.head, hidden[:-1], ids[1:], chunk, pass_rows=hidden.shape[0])
    cache = model.new_cache()
    parts = []
    for start in range(0, ids.numel(), window):
        piece = ids[start:start + window]
        hidden = final_hidden(model, piece[None], cache=cache)[0]  # (w, D)
        targets = ids[start + 1:start + 1 + piece.numel()]  # the last window has one target fewer
        parts.append(_chunked_nll(model.head, hidden[:targets.numel()], targets, chunk, pass_rows=piece.numel()))
        if progress is not None:
            progress.update(piece.numel())
    return torch.cat(parts)


def bucket_edges(length: int, original_max_len: int) -> list[int]:
    """Bucket boundaries every L₀/2 positions: 0, L₀/2, L₀, 1.5·L₀, … , the last one ``length``."""
    step = max(1, original_max_len // 2)
    edges = list(range(0, length, step))
    return edges + [length]


def bucket_perplexity(nll: Tensor, edges: Sequence[int], *, offset: int = 0) -> list[dict[str, Any]]:
    """exp(mean loss) over target positions [a, b) for consecutive edges (entry p targets position offset + p + 1)."""
    targets = torch.arange(1, nll.numel() + 1) + offset
    rows = []
    for a, b in zip(edges[:-1], edges[1:]):
        sel = nll[(targets >= a) & (targets < b)].double()
        rows.append({"start": a, "end": b, "tokens": int(sel.numel()),
                     "ppl": math.exp(sel.mean().item()) if sel.numel() else None})
    return rows


def smoothed_curve(nll: Tensor, points: int = 128) -> dict[str, list[float]]:
    """Perplexity over ``points`` equal windows of positions (for plotting): window centres and exp(mean)."""
    n = nll.numel()
    width = max(1, n // points)
    centres, ppl = [], []
    for start in range(0, n - width + 1, width):
        centres.append(start + 1 + width / 2)
        ppl.append(math.exp(nll[start:start + width].double().mean().item()))
    return {"position": centres, "ppl": ppl, "window": width}
