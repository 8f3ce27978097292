"""Greedy and beam-search decoding for encoder–decoder models, with the KV cache.

A model needs three methods (``posenc.models.EncoderDecoder`` has them;
``baseline.TorchTransformer`` mimics them):

* ``encode(src, src_padding_mask=...) -> memory (B, S, D)``
* ``decode(tgt, memory, memory_padding_mask=..., cache=...) -> logits (B, T, V)``;
  with a cache, ``tgt`` holds only the new tokens
* ``new_cache() -> list`` of per-layer caches, each with ``reorder(index)``

Beam search follows the usual recipe (Wu et al., 2016, GNMT §7; the same
bookkeeping as fairseq's ``SequenceGenerator``): keep ``beam`` live hypotheses
per source, expand each by every token, keep the best ``2·beam`` candidates
so that hypotheses ending in EOS can be set aside without emptying the beam,
and reorder the caches so row r continues the hypothesis it was chosen from.
Scores are summed log-probabilities, divided by the GNMT length penalty
((5 + n) / 6)^α when ranking finished hypotheses. With α = 0 it stops only
when no live hypothesis can still beat the ``beam`` best finished ones (log-
probabilities only fall as a hypothesis grows), so a wide enough beam returns
the exact best sequence — the property tests compare it with exhaustive search.

Shape legend: B sources, K beam, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.translation.tokenizer import BOS, EOS, PAD

NEG_INF = float("-inf")


def _reorder(cache: list[Any], index: Tensor) -> None:
    for layer in cache:
        layer.reorder(index)


def _step_logprobs(logits: Tensor, banned: tuple[int, ...]) -> Tensor:
    """Log-probabilities over the tokens that may be emitted (banned ones get −inf, the rest renormalise)."""
    logits = logits.float().clone()  # (N, V)
    if banned:
        logits[:, list(banned)] = NEG_INF
    return logits.log_softmax(-1)


@torch.no_grad()
def greedy_decode(
    model: Any, src: Tensor, *, src_padding_mask: Tensor | None = None, max_len: int = 128,
    bos_id: int = BOS, eos_id: int = EOS, banned: tuple[int, ...] = (PAD, BOS), use_cache: bool = True,
) -> list[list[int]]:
    """Argmax decoding; returns each source's target ids (without BOS, up to and excluding EOS).

    ``use_cache=False`` re-runs the decoder on the whole prefix at every step
    (the reference the cached path is tested against).
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    memory = model.encode(src, src_padding_mask=src_padding_mask)
    b = src.shape[0]
    ids = torch.full((b, 1), bos_id, dtype=torch.long, device=src.device)
    cache = model.new_cache() if use_cache else None
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        new = ids[:, -1:] if use_cache else ids
        logits = model.decode(new, memory, memory_padding_mask=src_padding_mask, cache=cache)[:, -1]  # (B, V)
        nxt = _step_logprobs(logits, banned).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        done |= nxt == eos_id
        ids = torch.cat((ids, nxt[:, None]), dim=1)
        if bool(done.all()):
            break
    return [_strip(row, eos_id) for row in ids[:, 1:].tolist()]


def _strip(row: list[int], eos_id: int) -> list[int]:
    return row[:row.index(eos_id)] if eos_id in row else row


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + n) / 6)^α (Wu et al., 2016, eq. 14); 1 when α = 0."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    logprob: float  # summed log-probability, EOS included when finished
    score: float  # logprob / length_penalty


@torch.no_grad()
def beam_search(
    model: Any, src: Tensor, *, beam: int = 4, src_padding_mask: Tensor | None = None, max_len: int = 128,
    alpha: float = 0.0, bos_id: int = BOS, eos_id: int = EOS, banned: tuple[int, ...] = (PAD, BOS),
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Beam search; returns the ``n_best`` best hypotheses per source, best first.

    A hypothesis that reaches ``max_len`` tokens without EOS is finished as it is.

    Raises:
        ValueError: ``beam`` < 1, ``n_best`` outside [1, beam], or ``max_len`` < 1.
    """
    if beam < 1 or not 1 <= n_best <= beam or max_len < 1:
        raise ValueError(f"need beam >= 1, 1 <= n_best <= beam and max_len >= 1; got beam={beam}, "
                         f"n_best={n_best}, max_len={max_len}")
    b, dev = src.shape[0], src.device
    memory = model.encode(src, src_padding_mask=src_padding_mask)  # (B, S, D)
    memory = memory.repeat_interleave(beam, dim=0)  # (B·K, S, D)
    mem_mask = None if src_padding_mask is None else src_padding_mask.repeat_interleave(beam, dim=0)
    cache = model.new_cache()
    scores = torch.full((b, beam), NEG_INF, device=dev)
    scores[:, 0] = 0.0  # all K rows start identical: let only one of them expand at step 1
    tokens = torch.full((b * beam, 1), bos_id, dtype=torch.long, device=dev)
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    active = [True] * b
    vocab = None
    for step in range(1, max_len + 1):
        logits = model.decode(tokens[:, -1:], memory, memory_padding_mask=mem_mask, cache=cache)[:, -1]  # (B·K, V)
        logp = _step_logprobs(logits, banned)
        vocab = logp.shape[-1]
        cand = (scores.view(-1, 1) + logp).view(b, beam * vocab)  # (B, K·V)
        top_scores, top_idx = cand.topk(min(2 * beam, beam * vocab), dim=-1)  # (B, 2K)
        next_rows, next_tokens, next_scores = [], [], []
        for i in range(b):
            rows, toks, scs = [], [], []
            if active[i]:
                for s, idx in zip(top_scores[i].tolist(), top_idx[i].tolist()):
                    if s == NEG_INF:
                        break
                    row, tok = divmod(idx, vocab)
                    prefix = tokens[i * beam + row, 1:].tolist()
                    if tok == eos_id or step == max_len:
                        words = prefix if tok == eos_id else prefix + [tok]
                        finished[i].append(Hypothesis(words, s, s / length_penalty(len(words) + 1, alpha)))
                    else:
                        rows.append(row); toks.append(tok); scs.append(s)
                    if len(rows) == beam:
                        break
                finished[i].sort(key=lambda h: -h.score)
                del finished[i][beam:]
                best_alive = scs[0] if scs else NEG_INF
                if not rows or (len(finished[i]) >= beam and _cannot_improve(finished[i], best_alive, step, max_len, alpha)):
                    active[i] = False
            while len(rows) < beam:  # pad dead slots: any row, score −inf so it never wins
                rows.append(0); toks.append(eos_id); scs.append(NEG_INF)
            next_rows += [i * beam + r for r in rows]
            next_tokens += toks
            next_scores += scs
        if not any(active):
            break
        index = torch.tensor(next_rows, device=dev)
        _reorder(cache, index)
        tokens = torch.cat((tokens.index_select(0, index), torch.tensor(next_tokens, device=dev)[:, None]), dim=1)
        scores = torch.tensor(next_scores, device=dev).view(b, beam)
    return [sorted(f, key=lambda h: -h.score)[:n_best] for f in finished]


def _cannot_improve(finished: list[Hypothesis], best_alive: float, step: int, max_len: int, alpha: float) -> bool:
    """True when no live hypothesis can overtake the worst of the kept finished ones.

    Log-probabilities never increase; with α ≥ 0 the best possible normalised
    score of a live hypothesis is its current log-probability divided by the
    largest length penalty it could still reach.
    """
    worst = finished[-1].score
    bound = best_alive / length_penalty(max_len if best_alive < 0 else step, alpha) if alpha > 0 else best_alive
    return bound <= worst


def translate_ids(
    model: Any, sources: list[list[int]], *, beam: int = 1, max_len: int | None = None, alpha: float = 0.6,
    batch_size: int = 32, max_len_ratio: float = 2.0, max_len_extra: int = 10, progress: bool = False,
) -> list[list[int]]:
    """Decode many tokenised sources, batched by length; greedy when ``beam`` == 1.

    Each source gets ``max_len`` = ``max_len_ratio`` · len(source) + ``max_len_extra``
    unless ``max_len`` is given.
    """
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    device = next(model.parameters()).device
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if progress:
        from tqdm import tqdm
        batches = tqdm(batches, desc=f"decode (beam {beam})", leave=False)
    for idx in batches:
        longest = max(len(sources[i]) for i in idx)
        src = torch.full((len(idx), longest), PAD, dtype=torch.long)
        for r, i in enumerate(idx):
            src[r, :len(sources[i])] = torch.tensor(sources[i], dtype=torch.long)
        src = src.to(device)
        mask = src == PAD
        limit = max_len if max_len is not None else int(max_len_ratio * longest) + max_len_extra
        if beam == 1:
            results = greedy_decode(model, src, src_padding_mask=mask, max_len=limit)
        else:
            results = [h[0].tokens for h in beam_search(model, src, beam=beam, src_padding_mask=mask,
                                                         max_len=limit, alpha=alpha)]
        for i, r in zip(idx, results):
            out[i] = r
    return out
