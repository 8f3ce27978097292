"""Framings: token layout, loss masking, and exact match == greedy decoding."""

from __future__ import annotations

import pytest
import torch

from posenc import ModelConfig, build_decoder_only, build_encoder_decoder
from posenc.tasks import IGNORE, Example, build_task, collate, correct, loss_sum
from posenc.tasks.framing import logits


def test_decoder_layout_scores_only_the_answer():
    vocab = build_task("copy").vocab()
    ex = Example(source=("a", "b", "c"), target=("c", "b"), length=3)
    short = Example(source=("a",), target=("a",), length=1)
    batch = collate([ex, short], vocab, "decoder")
    a, b, c = vocab.encode(["a", "b", "c"])
    assert batch.ids[0].tolist() == [vocab.bos, a, b, c, vocab.sep, c, b]
    assert batch.labels[0].tolist() == [IGNORE] * 4 + [c, b, vocab.eos]
    assert batch.ids[1].tolist() == [vocab.bos, a, vocab.sep, a] + [vocab.pad] * 3
    assert batch.labels[1].tolist() == [IGNORE, IGNORE, a, vocab.eos] + [IGNORE] * 3


def test_encoder_decoder_layout():
    vocab = build_task("copy").vocab()
    batch = collate([Example(("a", "b"), ("b",), 2), Example(("c",), ("c", "c"), 1)], vocab, "encoder-decoder")
    a, b, c = vocab.encode(["a", "b", "c"])
    assert batch.src.tolist() == [[a, b], [c, vocab.pad]]
    assert batch.src_mask.tolist() == [[False, False], [False, True]]
    assert batch.ids.tolist() == [[vocab.bos, b, vocab.pad], [vocab.bos, c, c]]
    assert batch.labels.tolist() == [[b, vocab.eos, IGNORE], [c, c, vocab.eos]]
    with pytest.raises(ValueError, match="unknown framing"):
        collate([Example(("a",), ("a",), 1)], vocab, "seq2seq")


def test_loss_is_the_sum_over_scored_tokens(seed):
    task = build_task("reverse")
    vocab = task.vocab()
    model = build_decoder_only(ModelConfig(vocab_size=len(vocab), dim=16, num_heads=2, num_layers=1, position="rope"))
    batch = collate(task.examples([2, 5, 3], torch.Generator().manual_seed(seed)), vocab, "decoder")
    loss, count = loss_sum(model, batch)
    assert count == (2 + 1) + (5 + 1) + (3 + 1)
    logp = model(batch.ids).log_softmax(-1)
    expected = sum(-logp[i, t, batch.labels[i, t]] for i in range(3) for t in range(batch.ids.shape[1])
                   if batch.labels[i, t] != IGNORE)
    torch.testing.assert_close(loss, expected)


def _greedy_target(model, vocab, source, framing, steps):
    """The model's own greedy answer to ``source`` (tokens up to, not including, <eos>)."""
    ids = torch.tensor([vocab.encode(source)])
    if framing == "decoder":
        prompt = torch.tensor([[vocab.bos, *vocab.encode(source), vocab.sep]])
        out = model.generate(prompt, max_new_tokens=steps)[0, prompt.shape[1]:].tolist()
    else:
        out = model.generate(ids, bos_id=vocab.bos, max_new_tokens=steps)[0, 1:].tolist()
    return out


@pytest.mark.parametrize("framing", ["decoder", "encoder-decoder"])
def test_teacher_forcing_reproduces_greedy_decoding(framing, seed):
    """Feed the model's own greedy output g as the target: the teacher-forced argmax at each scored
    position is g again, so 'every argmax equals its label' is exactly 'greedy outputs the answer'."""
    task = build_task("copy", num_symbols=5)
    vocab = task.vocab()
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=len(vocab), dim=16, num_heads=2, num_layers=2, position="rope")
    model = (build_decoder_only if framing == "decoder" else build_encoder_decoder)(cfg).eval()
    examples = task.examples([3, 4, 5], torch.Generator().manual_seed(seed))
    for ex in examples:
        greedy = _greedy_target(model, vocab, ex.source, framing, steps=6)
        batch = collate([Example(ex.source, tuple(vocab.decode(greedy)), ex.length)], vocab, framing)
        with torch.no_grad():
            pred = logits(model, batch).argmax(-1)[batch.labels != IGNORE]  # 6 answer slots + the <eos> slot
        assert pred[:6].tolist() == greedy
        assert correct(model, batch).item() == (pred[6].item() == vocab.eos)
        # the true copy answer is judged right iff greedy decoding (stopped at <eos>) produces it
        truth = collate([ex], vocab, framing)
        with torch.no_grad():
            full = _greedy_target(model, vocab, ex.source, framing, steps=len(ex.target) + 1)
        assert correct(model, truth).item() == (full == vocab.encode(ex.target) + [vocab.eos])
