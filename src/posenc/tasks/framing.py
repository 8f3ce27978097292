"""Turning examples into model batches, losses and exact-match accuracy.

Two framings of the same :class:`~posenc.tasks.base.Example`:

* ``decoder`` (decoder-only, prompt + answer)::

      input   <bos> s1 … sn <sep> t1 … tm
      labels   ·    ·  …  ·  t1  t2 … <eos>      (· = not scored)

* ``encoder-decoder``: the encoder reads ``s1 … sn``; the decoder reads
  ``<bos> t1 … tm`` and must output ``t1 … tm <eos>``.

Batches are right-padded. With a causal decoder, padding on the right never
changes a real position's output, so no decoder padding mask is needed; the
encoder gets a key-padding mask.

Exact match is measured by teacher forcing: an answer is right iff the argmax
at every scored position equals the label (answer tokens and the closing
``<eos>``). That is the same verdict as greedy decoding — greedy reproduces the
answer exactly iff each next-token argmax given the correct prefix is correct —
at the cost of one forward pass instead of one per token. The tests check the
equivalence against ``generate``.

Shape legend: B batch, T decoder length, S source length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.tasks.base import Example, Vocab

Framing = Literal["decoder", "encoder-decoder"]
FRAMINGS: tuple[str, ...] = ("decoder", "encoder-decoder")
IGNORE = -100


@dataclass
class Batch:
    """Model inputs for one framing; ``src``/``src_mask`` only for the encoder–decoder."""

    ids: Tensor  #: (B, T) decoder input
    labels: Tensor  #: (B, T) next-token targets, IGNORE where not scored
    lengths: Tensor  #: (B,) each example's task length
    src: Tensor | None = None  #: (B, S) encoder input
    src_mask: Tensor | None = None  #: (B, S) True = padding

    def to(self, device: torch.device | str) -> "Batch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(move(self.ids), move(self.labels), move(self.lengths), move(self.src), move(self.src_mask))

    def rows(self, index: slice | Tensor) -> "Batch":
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return Batch(pick(self.ids), pick(self.labels), pick(self.lengths), pick(self.src), pick(self.src_mask))


def check_framing(framing: str) -> Framing:
    if framing not in FRAMINGS:
        raise ValueError(f"unknown framing {framing!r}; valid: {', '.join(FRAMINGS)}")
    return framing  # type: ignore[return-value]


def _pad(rows: Sequence[Sequence[int]], value: int) -> Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate(examples: Sequence[Example], vocab: Vocab, framing: Framing) -> Batch:
    """Right-padded tensors for ``examples`` in ``framing``."""
    if not examples:
        raise ValueError("cannot collate an empty list of examples")
    lengths = torch.tensor([e.length for e in examples], dtype=torch.long)
    if check_framing(framing) == "decoder":
        ids, labels = [], []
        for e in examples:
            prompt = [vocab.bos, *vocab.encode(e.source), vocab.sep]
            answer = [*vocab.encode(e.target), vocab.eos]
            seq = prompt + answer
            ids.append(seq[:-1])
            labels.append([IGNORE] * (len(prompt) - 1) + answer)
        return Batch(ids=_pad(ids, vocab.pad), labels=_pad(labels, IGNORE), lengths=lengths)
    src = [vocab.encode(e.source) for e in examples]
    tgt = [[vocab.bos, *vocab.encode(e.target)] for e in examples]
    labels = [[*vocab.encode(e.target), vocab.eos] for e in examples]
    src_t = _pad(src, vocab.pad)
    src_mask = torch.arange(src_t.shape[1])[None, :] >= torch.tensor([len(s) for s in src])[:, None]
    return Batch(ids=_pad(tgt, vocab.pad), labels=_pad(labels, IGNORE), lengths=lengths, src=src_t, src_mask=src_mask)


def sequence_length(source_len: int, target_len: int, framing: Framing) -> int:
    """Positions the model needs for a source and target of these sizes (decoder input, or the
    longer of encoder and decoder inputs)."""
    if framing == "decoder":
        return source_len + target_len + 2  # <bos> src <sep> tgt (the <eos> is only a label)
    return max(source_len, target_len + 1)


def logits(model: nn.Module, batch: Batch) -> Tensor:
    """(B, T, V) next-token logits; calls the model's forward (so DDP synchronises)."""
    if batch.src is None:
        return model(batch.ids)
    return model(batch.src, batch.ids, src_padding_mask=batch.src_mask)


def loss_sum(model: nn.Module, batch: Batch) -> tuple[Tensor, int]:
    """Summed cross-entropy over the scored tokens, and their count — the loss function for ``train``."""
    out = logits(model, batch)  # (B, T, V)
    loss = F.cross_entropy(out.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE, reduction="sum")
    return loss, int((batch.labels != IGNORE).sum())


@torch.no_grad()
def correct(model: nn.Module, batch: Batch) -> Tensor:
    """(B,) bool: the whole answer (and its <eos>) is right under greedy decoding (via teacher forcing)."""
    pred = logits(model, batch).argmax(-1)  # (B, T)
    scored = batch.labels != IGNORE
    return ((pred == batch.labels) | ~scored).all(dim=1)
