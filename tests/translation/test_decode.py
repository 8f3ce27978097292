"""Greedy and beam search: beam 1 == greedy, a wide beam == exhaustive search, cached == full decoding."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from posenc.models import ModelConfig, build_encoder_decoder
from posenc.translation.baseline import BaselineConfig, TorchTransformer
from posenc.translation.decode import beam_search, greedy_decode, length_penalty, translate_ids
from posenc.translation.tokenizer import BOS, EOS, PAD


def tiny_model(position: str, vocab: int = 12, dim: int = 32) -> torch.nn.Module:
    model = build_encoder_decoder(ModelConfig(vocab_size=vocab, dim=dim, num_heads=2, num_layers=2, position=position))
    with torch.no_grad():  # sharpen the random model so its argmax is far from ties
        model.head.tied_to.weight.mul_(3.0) if getattr(model.head, "tied_to", None) is not None else None
    return model.eval()


def sources(gen: torch.Generator, vocab: int, batch: int = 3, length: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, vocab, (batch, length), generator=gen)
    src[0, -2:] = PAD  # one padded source
    return src, src == PAD


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rope", "alibi"])
def test_cached_greedy_equals_full_recompute(position: str, gen: torch.Generator) -> None:
    model = tiny_model(position)
    src, mask = sources(gen, 12)
    cached = greedy_decode(model, src, src_padding_mask=mask, max_len=9, use_cache=True)
    full = greedy_decode(model, src, src_padding_mask=mask, max_len=9, use_cache=False)
    assert cached == full
    # and the logits themselves agree step by step
    memory = model.encode(src, src_padding_mask=mask)
    prefix = torch.tensor([[BOS] + row[:4] + [5] * (4 - len(row[:4])) for row in cached])
    whole = model.decode(prefix, memory, memory_padding_mask=mask)
    cache = model.new_cache()
    steps = [model.decode(prefix[:, t:t + 1], memory, memory_padding_mask=mask, cache=cache) for t in range(prefix.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=1e-5, atol=1e-5)


def test_baseline_prefix_cache_equals_full(gen: torch.Generator) -> None:
    model = TorchTransformer(BaselineConfig(vocab_size=12, dim=32, num_heads=2, num_layers=2, dropout=0.0)).eval()
    src, mask = sources(gen, 12)
    assert greedy_decode(model, src, src_padding_mask=mask, max_len=7) == \
        greedy_decode(model, src, src_padding_mask=mask, max_len=7, use_cache=False)


@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
def test_beam_one_is_greedy(position: str, gen: torch.Generator) -> None:
    model = tiny_model(position)
    src, mask = sources(gen, 12, batch=4)
    greedy = greedy_decode(model, src, src_padding_mask=mask, max_len=10)
    beam = beam_search(model, src, beam=1, src_padding_mask=mask, max_len=10, alpha=0.0)
    assert [h[0].tokens for h in beam] == greedy


def sequence_logprob(model: torch.nn.Module, src: torch.Tensor, tokens: list[int], finished: bool) -> float:
    """log p(tokens [+ EOS] | src) by one full teacher-forced pass, PAD and BOS excluded as decoding does."""
    target = tokens + ([EOS] if finished else [])
    ids = torch.tensor([[BOS] + target[:-1]])
    logp = model.decode(ids, model.encode(src)).log_softmax(-1)[0]  # (T, V)
    logp[:, [PAD, BOS]] = -math.inf
    logp = logp - torch.logsumexp(logp, -1, keepdim=True)
    return float(sum(logp[t, y] for t, y in enumerate(target)))


def test_wide_beam_equals_exhaustive_search(gen: torch.Generator) -> None:
    # vocabulary: PAD, BOS, EOS, UNK + 2 words; the decoder may emit EOS, UNK or a word (PAD/BOS banned)
    vocab, max_len = 6, 4
    model = build_encoder_decoder(ModelConfig(vocab_size=vocab, dim=16, num_heads=2, num_layers=1,
                                              position="rope")).eval()
    src = torch.randint(3, vocab, (1, 5), generator=gen)
    allowed = [EOS, 3, 4, 5]
    candidates = []  # every finished sequence of ≤ max_len tokens, and every unfinished one of exactly max_len
    for n in range(max_len):
        for words in itertools.product([3, 4, 5], repeat=n):
            candidates.append((list(words), True))
    for words in itertools.product([3, 4, 5], repeat=max_len):
        candidates.append((list(words), False))
    with torch.no_grad():
        scored = sorted(((sequence_logprob(model, src, w, f), w) for w, f in candidates), key=lambda x: -x[0])
    beam = beam_search(model, src, beam=len(allowed) ** max_len, max_len=max_len, alpha=0.0, n_best=3)[0]
    assert [h.tokens for h in beam] == [w for _, w in scored[:3]]
    for h, (lp, _) in zip(beam, scored):
        assert h.logprob == pytest.approx(lp, abs=1e-4)
    # a narrow beam can only do as well or worse than the exact search
    narrow = beam_search(model, src, beam=2, max_len=max_len, alpha=0.0)[0][0]
    assert narrow.logprob <= scored[0][0] + 1e-5


def test_beam_scores_are_the_model_logprobs(gen: torch.Generator) -> None:
    model = tiny_model("alibi")
    src, mask = sources(gen, 12, batch=2)
    hyps = beam_search(model, src, beam=3, src_padding_mask=mask, max_len=8, alpha=0.6, n_best=3)
    for i, row in enumerate(hyps):
        assert len(row) == 3 and [h.score for h in row] == sorted((h.score for h in row), reverse=True)
        keep = ~mask[i]
        for h in row:
            finished = len(h.tokens) < 8
            with torch.no_grad():
                lp = sequence_logprob(model, src[i:i + 1, keep], h.tokens, finished)
            assert h.logprob == pytest.approx(lp, abs=1e-4)
            assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 0.6), abs=1e-6)


def test_translate_ids_batches_by_length_and_validates(gen: torch.Generator) -> None:
    model = tiny_model("sinusoidal")
    seqs = [torch.randint(4, 12, (n,), generator=gen).tolist() for n in (3, 9, 5, 1)]
    one_by_one = [greedy_decode(model, torch.tensor([s]), max_len=8)[0] for s in seqs]
    assert translate_ids(model, seqs, beam=1, max_len=8, batch_size=2) == one_by_one
    with pytest.raises(ValueError, match="beam"):
        beam_search(model, torch.tensor([seqs[0]]), beam=0)
