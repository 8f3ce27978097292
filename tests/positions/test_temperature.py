"""Attention temperature: Llama 4's query scale against HF's attention, Scalable-Softmax against its definition."""

import math

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.positions import Llama4QueryScale, ScalableSoftmax, build


def randint(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def test_llama4_factor_formula(gen):
    floor_scale, attn_scale = randint(gen, 1, 10**4), float(torch.rand((), generator=gen)) + 0.01
    scale = Llama4QueryScale(floor_scale=floor_scale, attn_scale=attn_scale)
    p = torch.randint(0, 10**9, (50,), generator=gen)
    ref = torch.tensor([1 + attn_scale * math.log(1 + (int(x) + 1) // floor_scale) for x in p], dtype=torch.float64)
    torch.testing.assert_close(scale.factor(p), ref, rtol=1e-14, atol=0)
    # exactly 1 until position floor_scale − 2, then a step at floor_scale − 1
    assert float(scale.factor(torch.tensor([floor_scale - 2]))) == 1.0 if floor_scale >= 2 else True
    assert float(scale.factor(torch.tensor([floor_scale - 1]))) == pytest.approx(1 + attn_scale * math.log(2))


def test_llama4_scale_matches_hf_nope_layer(gen):
    """HF's Llama4TextAttention on a NoPE layer (temperature tuning on) vs posenc attention with the scheme."""
    transformers = pytest.importorskip("transformers", minversion="5.0")
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention
    floor_scale, t = randint(gen, 1, 6), 13
    config = Llama4TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                              num_hidden_layers=1, no_rope_layers=[0], floor_scale=floor_scale, attn_scale=0.7,
                              attn_temperature_tuning=True)
    config._attn_implementation = "sdpa"
    hf = Llama4TextAttention(config, 0).double().eval()
    scheme = build("llama4-temperature", dim=32, num_heads=4, floor_scale=floor_scale, attn_scale=0.7)
    ours = MultiHeadAttention(dim=32, num_heads=4, num_kv_heads=2, bias=False, position=scheme).double().eval()
    with torch.no_grad():
        for a, b in ((ours.q_proj, hf.q_proj), (ours.k_proj, hf.k_proj), (ours.v_proj, hf.v_proj),
                     (ours.out_proj, hf.o_proj)):
            a.weight.copy_(b.weight)
    x = torch.randn(2, t, 32, generator=gen, dtype=torch.float64)
    ref, _ = hf(x, position_embeddings=None, attention_mask=None)
    got, _ = ours(x, causal=True)
    # HF forms the factor in float32 (log1p of float32 steps): agreement to float32's rounding of the factor
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
    # the temperature acts: without it (attn_scale 0) the outputs differ once a step is crossed
    plain = MultiHeadAttention(dim=32, num_heads=4, num_kv_heads=2, bias=False,
                               position=build("llama4-temperature", dim=32, num_heads=4, attn_scale=0.0)).double()
    plain.load_state_dict(ours.state_dict())
    assert not torch.allclose(plain(x, causal=True)[0], got)


def test_ministral3_variant_has_no_plus_one(gen):
    pytest.importorskip("transformers", minversion="5.0")
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale
    original, beta = randint(gen, 2, 64), float(torch.rand((), generator=gen))
    p = torch.randint(0, 10 * original, (1, 40), generator=gen)
    ref = get_llama_4_attn_scale(p.float(), beta, original)[0, 0, :, 0].double()  # (T,)
    ours = Llama4QueryScale(floor_scale=original, attn_scale=beta, plus_one=False).factor(p[0])
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
    llama4 = Llama4QueryScale(floor_scale=original, attn_scale=beta).factor(torch.tensor([original - 1]))
    assert float(llama4) > 1.0 == float(Llama4QueryScale(floor_scale=original, attn_scale=beta,
                                                         plus_one=False).factor(torch.tensor([original - 1])))


def test_ssmax_weights_are_the_papers_definition(gen):
    """softmax over keys 0…i of (s_h·ln(i + 1))·q·k/√Dh — SSMax's n^{s z} / Σ n^{s z}, n = i + 1."""
    heads, head_dim, t = 3, 4, 9
    scheme = build("ssmax", dim=heads * head_dim, num_heads=heads, bias=True).double()
    with torch.no_grad():
        scheme.temperature.scale.copy_(torch.rand(heads, generator=gen, dtype=torch.float64) + 0.2)
        scheme.temperature.bias.copy_(torch.randn(heads, generator=gen, dtype=torch.float64))
    attn = MultiHeadAttention(dim=heads * head_dim, num_heads=heads, position=scheme).double()
    x = torch.randn(1, t, heads * head_dim, generator=gen, dtype=torch.float64)
    _, weights = attn(x, causal=True, need_weights=True)
    q = attn.q_proj(x).view(1, t, heads, head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(1, t, heads, head_dim).transpose(1, 2)
    s, b = scheme.temperature.scale.detach(), scheme.temperature.bias.detach()
    ref = torch.zeros(1, heads, t, t, dtype=torch.float64)
    for h in range(heads):
        for i in range(t):
            z = (q[0, h, i] @ k[0, h, : i + 1].T / math.sqrt(head_dim)).detach()
            n = i + 1
            p = torch.exp((s[h] * math.log(n) + b[h]) * z)  # n^{s z}·e^{b z}
            ref[0, h, i, : i + 1] = p / p.sum()
    torch.testing.assert_close(weights, ref, rtol=1e-10, atol=1e-12)


def test_ssmax_learns_its_scale(gen):
    scheme = build("ssmax", dim=16, num_heads=2)
    q = torch.randn(1, 2, 5, 8, generator=gen)
    scheme.rotate_query(q, torch.arange(5)).sum().backward()
    assert scheme.temperature.scale.grad is not None and bool((scheme.temperature.scale.grad != 0).all())
    assert sum(p.numel() for p in scheme.parameters()) == 2


def test_scale_queries_per_sequence_positions(gen):
    """(B, T) positions scale each sequence by its own positions; (T,) broadcasts over the batch."""
    for module in (Llama4QueryScale(floor_scale=3), ScalableSoftmax(num_heads=2)):
        q = torch.randn(2, 2, 4, 8, generator=gen, dtype=torch.float64)
        pos = torch.randint(0, 100, (2, 4), generator=gen)
        both = module.double().scale_queries(q, pos)
        for b in range(2):
            torch.testing.assert_close(both[b:b + 1], module.scale_queries(q[b:b + 1], pos[b]))


def test_bf16_queries_get_float32_products(gen):
    q = torch.randn(1, 1, 3, 8, generator=gen).bfloat16()
    pos = torch.tensor([10**6, 10**6 + 1, 2 * 10**6])
    out = Llama4QueryScale(floor_scale=7).scale_queries(q, pos)
    ref = (q.float() * Llama4QueryScale(floor_scale=7).factor(pos).float()[:, None]).bfloat16()
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)


@pytest.mark.parametrize(("name", "option", "value", "match"), [
    ("llama4-temperature", "floor_scale", 0, "floor_scale=0 must be a positive integer"),
    ("llama4-temperature", "attn_scale", -1.0, "attn_scale=-1.0 must be"),
    ("llama4-temperature", "attn_scale", float("nan"), "attn_scale=nan"),
    ("ssmax", "scale_init", 1e30, "scale_init=1e\\+30 must be at most"),
])
def test_bad_options_name_the_value(name, option, value, match):
    with pytest.raises(ValueError, match=match):
        build(name, dim=16, num_heads=2, **{option: value})


def test_queries_and_positions_must_agree():
    with pytest.raises(ValueError, match="3 query positions"):
        Llama4QueryScale().scale_queries(torch.zeros(1, 1, 4, 8), torch.arange(3))
    with pytest.raises(TypeError, match="integer dtype"):
        ScalableSoftmax(num_heads=1).scale_queries(torch.zeros(1, 1, 3, 8), torch.arange(3.0))
