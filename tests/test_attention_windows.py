"""Sliding and chunked attention against a naive reference, cached == full, and memory without a T×T mask.

The reference is written here from the window rules alone (float64, explicit
loops over queries, one softmax per query over exactly the keys the rule
allows, sinks as an extra logit), independent of ``window_mask`` and of the
blockwise kernel.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc import attention as attention_module
from posenc.attention import KVCache, MultiHeadAttention
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.plan import LayerSpec, QueryScale, Window
from posenc.positions import build


def visible(kind: str, size: int | None, i: int, j: int) -> bool:
    """The window rules in words: causal, and within W keys / inside the same chunk."""
    if j > i:
        return False
    if kind == "sliding":
        return i - j < size
    if kind == "chunked":
        return i // size == j // size
    return True


def naive(attn: MultiHeadAttention, x: torch.Tensor, kind: str, size: int | None) -> torch.Tensor:
    """One query at a time: project, rotate, bias, softmax over the allowed keys (+ sink), in float64."""
    b, t, _ = x.shape
    h, hkv, dh = attn.num_heads, attn.num_kv_heads, attn.head_dim
    pos = torch.arange(t)
    q = attn.q_proj(x).view(b, t, h, dh).transpose(1, 2).double()
    k = attn.k_proj(x).view(b, t, hkv, dh).transpose(1, 2).double()
    v = attn.v_proj(x).view(b, t, hkv, dh).transpose(1, 2).double()
    q, k = attn.position.rotate(q, k, pos, pos)
    if attn.query_scale is not None:
        q = q * attn.query_scale.factors(pos).double()[:, None]
    k, v = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    bias = attn.position.attention_bias(pos, pos, q)
    out = torch.zeros(b, h, t, dh, dtype=torch.float64)
    for i in range(t):
        keys = [j for j in range(t) if visible(kind, size, i, j)]
        logits = (q[:, :, i : i + 1] @ k[:, :, keys].transpose(-1, -2))[:, :, 0] * attn.scale  # (B, H, n)
        if bias is not None:
            logits = logits + bias.double().expand(b, h, t, t)[:, :, i, keys]
        if attn.sinks is not None:
            logits = torch.cat((logits, attn.sinks.double().view(1, h, 1).expand(b, h, 1)), dim=-1)
        w = logits.softmax(-1)[..., : len(keys)]
        out[:, :, i] = (w[..., None] * v[:, :, keys]).sum(-2)
    return attn.out_proj(out.transpose(1, 2).reshape(b, t, h * dh).to(x.dtype))


WINDOWS = [("sliding", 1), ("sliding", 4), ("sliding", 9), ("chunked", 3), ("chunked", 8), ("full", None)]


@pytest.mark.parametrize("kind,size", WINDOWS)
@pytest.mark.parametrize("scheme", ["rope", "alibi", "none"])
@pytest.mark.parametrize("sinks", [False, True])
def test_window_equals_naive_reference(kind, size, scheme, sinks, gen):
    heads = 4
    attn = MultiHeadAttention(dim=32, num_heads=heads, num_kv_heads=2, position=build(scheme, dim=32, num_heads=heads,
                              causal=True), window=Window(kind, size), sinks=sinks).eval()
    if sinks:
        with torch.no_grad():
            attn.sinks.copy_(torch.randn(heads, generator=gen))
    t = int(torch.randint(10, 40, (1,), generator=gen))
    x = torch.randn(2, t, 32, generator=gen)
    with torch.no_grad():
        want = naive(attn, x, kind, size)
        got, _ = attn(x, causal=True)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        dense, weights = attn(x, causal=True, need_weights=True)
        torch.testing.assert_close(dense, want, rtol=1e-5, atol=1e-5)
    # every hidden key has weight 0, every row sums to 1 (less the sink's share)
    hidden = torch.tensor([[not visible(kind, size, i, j) for j in range(t)] for i in range(t)])
    assert torch.all(weights[..., hidden] == 0)
    if not sinks:
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, heads, t))


@pytest.mark.parametrize("kind,size", WINDOWS)
def test_cached_decoding_equals_full_and_keeps_only_the_window(kind, size, gen):
    attn = MultiHeadAttention(dim=16, num_heads=2, position=build("rope", dim=16, num_heads=2), window=Window(kind, size))
    t = 31
    x = torch.randn(1, t, 16, generator=gen)
    with torch.no_grad():
        full, _ = attn(x, causal=True)
        cache, outs, held = KVCache(), [], []
        cuts = sorted({0, 5, 6, 13, t} | set(range(14, t)))
        for a, b in zip(cuts, cuts[1:]):
            out, _ = attn(x[:, a:b], causal=True, cache=cache)
            outs.append(out)
            held.append(cache.stored)
        torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.length == t
    bound = {"sliding": (size or 0) - 1, "chunked": (size or 0) - 1, "full": t}[kind]
    assert max(held) <= bound  # after every call: only what the next query's window can still reach
    # the positions kept with the keys are the true ones
    assert cache.positions.tolist() == list(range(t - cache.stored, t))


def test_sliding_forward_never_builds_a_t_by_t_mask(monkeypatch, gen):
    shapes = []
    real = attention_module.window_mask

    def spy(window, **kw):
        shapes.append((kw["q_len"], kw["k_len"]))
        return real(window, **kw)

    monkeypatch.setattr(attention_module, "window_mask", spy)
    w, t = 16, 2048
    attn = MultiHeadAttention(dim=16, num_heads=2, window=Window("sliding", w))
    with torch.no_grad():
        attn(torch.randn(1, t, 16, generator=gen), causal=True)
    block = attention_module.WINDOW_BLOCK
    assert len(shapes) == math.ceil(t / block)
    assert max(q * k for q, k in shapes) <= block * (block + w)  # O(T·W) in all, never T × T
    assert all(k < t for _, k in shapes[1:])


def test_window_with_padding_masks_is_refused(gen):
    attn = MultiHeadAttention(dim=16, num_heads=2, window=Window("sliding", 3))
    with pytest.raises(ValueError, match="sliding 3 attention takes no valid_lens"):
        attn(torch.randn(2, 8, 16, generator=gen), causal=True, valid_lens=torch.tensor([8, 5]))


@pytest.mark.parametrize("bad", [("sliding", 0), ("chunked", None), ("full", 4), ("ring", 4), ("sliding", True)])
def test_bad_windows_are_refused(bad):
    with pytest.raises(ValueError, match="window"):
        Window(*bad)


def test_a_plan_mixing_nope_two_rope_bases_alibi_and_windows_caches_exactly(gen):
    plan = [
        LayerSpec(position="rope", position_options={"base": 10_000.0}, window=Window("sliding", 4)),
        LayerSpec(position="none", query_scale=QueryScale("llama4", {"floor_scale": 4.0, "attn_scale": 0.3})),
        LayerSpec(position="rope", position_options={"base": 1e6}, window=Window("chunked", 5)),
        LayerSpec(position="alibi"),
        LayerSpec(position="rope", position_options={"base": 10_000.0}, window=Window("sliding", 4)),
    ]
    cfg = DecoderConfig(vocab_size=50, dim=32, num_layers=5, num_heads=4, num_kv_heads=2, ffn_dim=48,
                      position="none", layer_plan=plan)
    model = build_decoder(cfg).eval()
    assert model.describe()["schemes_built"] == 4  # layers 0 and 4 share one RoPE
    assert model.layers[0].attn.position is model.layers[4].attn.position
    ids = torch.randint(0, 50, (2, 26), generator=gen)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = torch.cat([model(ids[:, :7], cache=cache)] + [model(ids[:, i:i + 1], cache=cache)
                                                              for i in range(7, 26)], dim=1)
        torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)
        out = model.generate(ids[:1, :5], max_new_tokens=12)
        again = model(out)[:, 4:-1].argmax(-1)  # greedy: each new token is the full pass's argmax there
    assert torch.equal(again, out[:, 5:])
    # after 26 tokens: a sliding-4 layer holds 3 keys, the chunk-5 layer only token 25 (its chunk 25–29 so far)
    assert [c.stored for c in cache] == [3, 26, 1, 26, 3]


def test_plan_reads_back_from_json_and_refuses_additive_layers():
    plan = [LayerSpec(position="rope", window=Window("sliding", 8)).to_dict(), {"position": "none"}]
    cfg = DecoderConfig(vocab_size=10, dim=16, num_layers=2, num_heads=2, ffn_dim=16, layer_plan=plan)
    again = DecoderConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.plan[0].window == Window("sliding", 8)
    with pytest.raises(ValueError, match="additive"):
        DecoderConfig(vocab_size=10, dim=16, num_layers=2, num_heads=2, ffn_dim=16,
                    layer_plan=[{"position": "sinusoidal"}, {"position": "none"}])
    with pytest.raises(ValueError, match="layer_plan has 1 specs for 2 layers"):
        DecoderConfig(vocab_size=10, dim=16, num_layers=2, num_heads=2, ffn_dim=16, layer_plan=[{"position": "none"}])
    with pytest.raises(ValueError, match=r"layer_plan\[1\].*unknown layer spec field"):
        DecoderConfig(vocab_size=10, dim=16, num_layers=2, num_heads=2, ffn_dim=16,
                    layer_plan=[{"position": "none"}, {"position": "none", "windw": 3}])
