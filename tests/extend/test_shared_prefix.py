"""Retrieval trials that continue a kept prefix's KV cache give what one pass over the whole prompt gives.

``PrefixCaches`` forks kept caches (``KVCache.fork``); the reference is the plain cached pass over the whole
prompt, for a plain RoPE model, a remapping method (Self-Extend: keys re-rotated per piece at every call), a
layer plan with sliding windows (caches that drop keys), and posenc's own decoder-only model (its layer
caches hold a self- and a cross-attention cache).
"""

from __future__ import annotations

import random

import pytest
import torch

from posenc.attention import KVCache
from posenc.extend.forward import final_hidden
from posenc.extend.methods import build_variant
from posenc.extend.passkey import PrefixCaches, greedy_continuation
from posenc.extend.retrieval import build_prompt, make_trial
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.plan import LayerSpec, Window

L0 = 64


def _llama(plan=None) -> torch.nn.Module:
    cfg = DecoderConfig(vocab_size=257, dim=32, num_layers=3, num_heads=4, num_kv_heads=2, ffn_dim=48,
                      position="rope", max_position_embeddings=L0,
                      layer_plan=[s.to_dict() for s in plan] if plan else None)
    return build_decoder(cfg).eval()


def _models(kind: str, tiny_model) -> torch.nn.Module:
    if kind == "decoder-only":
        return tiny_model
    if kind == "llama":
        return _llama()
    if kind == "self-extend":
        return build_variant(_llama(), "self-extend", factor=4.0, original_max_len=L0)
    sliding = LayerSpec(position="rope", window=Window("sliding", 24))
    return _llama([sliding, LayerSpec(position="rope"), sliding])


@pytest.mark.parametrize("kind", ["llama", "self-extend", "sliding", "decoder-only"])
@pytest.mark.parametrize("task", ["passkey", "multikey"])
@torch.no_grad()
def test_continuing_kept_prefixes_equals_the_whole_prompt(kind, task, tiny_model, tokenizer, seed):
    model = _models(kind, tiny_model)
    rng = random.Random(seed)
    length = rng.randint(850, 1000)  # 5–7 filler sentences of 88 bytes: five distinct depths
    trials = [make_trial(rng, task, length, index=t, depths="grid") for t in range(10)]
    prefixes = PrefixCaches(model, budget=10 * length)
    reused = []
    for trial in trials:
        ids = build_prompt(tokenizer, trial).ids
        first_needle = min(start for start, _ in build_prompt(tokenizer, trial).spans)
        cache, held, took = prefixes.start(ids, first_needle)
        assert held == first_needle and 0 <= took <= held
        got = final_hidden(model, torch.tensor([ids[held:]]), cache=cache)[:, -1]
        want = final_hidden(model, torch.tensor([ids]), cache=model.new_cache())[:, -1]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        reused.append(took)
    if task == "passkey":  # depths 0, ¼, ½, ¾, 1 twice: the first round builds on the previous depth's prefix,
        starts = [build_prompt(tokenizer, t).spans[0][0] for t in trials]  # the second reuses the whole prefix
        assert starts[:5] == sorted(set(starts)) and starts[5:] == starts[:5]
        assert reused == [0] + starts[:4] + starts[5:]


@torch.no_grad()
def test_a_fork_leaves_the_kept_cache_as_it_is(seed):
    model = _llama()
    ids = torch.randint(0, 257, (1, 40))
    cache = model.new_cache()
    model.hidden(ids[:, :30], cache=cache)
    model.hidden(ids[:, 30:31], cache=cache)  # grows in place: the cache now has spare room
    before = [(c.k.clone(), c.v.clone(), c.positions.clone()) for c in cache]
    fork = [c.fork() for c in cache]
    model.hidden(ids[:, 31:], cache=cache)  # the source writes into its room, past what the fork holds
    model.hidden(ids[:, 35:], cache=fork)   # the fork appends into room of its own
    for c, (k, v, p) in zip(fork, before):
        torch.testing.assert_close(c.k[..., :31, :], k, rtol=0, atol=0)
        assert c.length == 31 + 5 and c.positions[31:].tolist() == list(range(31, 36))
    for c, (k, _, _) in zip(cache, before):
        torch.testing.assert_close(c.k[..., :31, :], k, rtol=0, atol=0)
        assert c.length == 40
    assert isinstance(fork[0], KVCache)


@torch.no_grad()
def test_greedy_answers_are_the_same_shared_or_not(seed, tokenizer):
    model = _llama()
    rng = random.Random(seed)
    prefixes = PrefixCaches(model, budget=1000)
    for index in range(6):
        prompt = build_prompt(tokenizer, make_trial(rng, "passkey", 700, index=index))
        whole = greedy_continuation(model, prompt.ids, 6)
        shared = greedy_continuation(model, prompt.ids, 6, prefixes=prefixes, shared=prompt.spans[0][0])
        assert shared == whole
    # the budget bounds what is kept: 0 keeps nothing, and nothing is reused
    none = PrefixCaches(model, budget=0)
    for index in range(3):
        prompt = build_prompt(tokenizer, make_trial(rng, "passkey", 700, index=index))
        none.start(prompt.ids, prompt.spans[0][0])
        assert none.reused == 0 and not none.kept
