"""Loss by position: one long pass equals window-by-window decoding, and an independent full-logits reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.extend.forward import sdpa_spy
from posenc.extend.loss import bucket_edges, bucket_perplexity, smoothed_curve, token_nll
from posenc.extend.methods import METHODS, build_variant


@pytest.mark.parametrize("method", METHODS)
def test_one_pass_equals_window_by_window(tiny_model, gen, l0, method):
    ids = torch.randint(0, 257, (3 * l0 + 5,), generator=gen)
    # the fixed dynamic NTK is given the pass's length up front: that is what lets it be cached
    model = build_variant(tiny_model, method, factor=2.0, original_max_len=l0, length=ids.numel())
    whole = token_nll(model, ids, chunk=37)
    windowed = token_nll(model, ids, window=29, chunk=11)
    assert whole.shape == (ids.numel() - 1,)
    torch.testing.assert_close(windowed, whole, rtol=1e-4, atol=1e-4)


def test_matches_full_logits_reference(tiny_model, gen):
    ids = torch.randint(0, 257, (150,), generator=gen)
    logits = tiny_model(ids[None])[0].double()  # (T, V), the model's own forward
    reference = F.cross_entropy(logits[:-1], ids[1:], reduction="none")
    torch.testing.assert_close(token_nll(tiny_model, ids, chunk=16).double(), reference, rtol=1e-4, atol=1e-4)


def test_long_pass_stays_on_sdpa_causal_path(tiny_model, gen, l0):
    ids = torch.randint(0, 257, (4 * l0,), generator=gen)
    with sdpa_spy() as calls:
        token_nll(tiny_model, ids)
    assert calls.causal == tiny_model.config.num_layers and calls.causal_path_only
    with sdpa_spy() as calls:  # the windowed path needs a (Tq, Tk) mask after the first window: the spy sees it
        token_nll(tiny_model, ids, window=l0)
    assert calls.masked == 3 * tiny_model.config.num_layers and not calls.causal_path_only
    assert calls.largest_mask[-2:] == [l0, 4 * l0]


def test_buckets_and_curve(gen):
    nll = torch.rand(199, generator=gen) * 5
    edges = bucket_edges(200, 80)
    assert edges == [0, 40, 80, 120, 160, 200]
    rows = bucket_perplexity(nll, edges)
    # entry p is the loss of the token at position p + 1: the first bucket holds targets 1..39
    assert rows[0]["tokens"] == 39 and sum(r["tokens"] for r in rows) == 199
    assert rows[2]["ppl"] == pytest.approx(math.exp(nll[79:119].double().mean().item()))
    curve = smoothed_curve(nll, points=10)
    assert len(curve["ppl"]) == 10 and curve["ppl"][0] == pytest.approx(math.exp(nll[:19].double().mean().item()))


def test_bad_input():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        token_nll(torch.nn.Linear(1, 1), [3])
