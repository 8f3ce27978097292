"""Shaw et al. relative positions: the q-dependent term against an explicit loop, and inside attention."""

import math

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.positions import ShawRelative, build


def test_bias_matches_explicit_loop(gen):
    heads, head_dim = int(torch.randint(1, 5, (1,), generator=gen)), 2 * int(torch.randint(1, 9, (1,), generator=gen))
    k = int(torch.randint(0, 6, (1,), generator=gen))
    shaw = ShawRelative(num_heads=heads, head_dim=head_dim, max_distance=k, init_std=1.0).double()
    q = torch.randn(2, heads, 4, head_dim, generator=gen, dtype=torch.float64)
    q_pos = torch.randint(0, 10**6, (2, 4), generator=gen)
    k_pos = torch.randint(0, 10**6, (2, 6), generator=gen)
    k_pos[:, :3] = q_pos[:, :3] + torch.tensor([-1, 0, 2])  # some distances inside the clip window
    got = shaw.attention_bias(q_pos, k_pos, q)
    ref = torch.zeros(2, heads, 4, 6, dtype=torch.float64)
    for b in range(2):
        for h in range(heads):
            for i in range(4):
                for j in range(6):
                    rel = max(-k, min(k, int(k_pos[b, j]) - int(q_pos[b, i])))
                    ref[b, h, i, j] = q[b, h, i] @ shaw.table[rel + k] / math.sqrt(head_dim)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_attention_logits_are_q_dot_k_plus_relative_key(gen):
    """Inside MultiHeadAttention the weights are softmax(q·(k_j + a_{clip(j−i)})/√Dh) (Shaw eq. 4)."""
    shaw = build("shaw", dim=16, num_heads=2, max_distance=2, init_std=1.0).double()
    attn = MultiHeadAttention(dim=16, num_heads=2, position=shaw).double()
    x = torch.randn(1, 5, 16, generator=gen, dtype=torch.float64)
    _, weights = attn(x, need_weights=True)
    q = attn.q_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    k = attn.k_proj(x).view(1, 5, 2, 8).transpose(1, 2)
    rel = (torch.arange(5)[None, :] - torch.arange(5)[:, None]).clamp(-2, 2) + 2  # (i, j) → table row
    a = shaw.table[rel]  # (5, 5, 8)
    logits = torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,ijd->bhij", q, a)
    torch.testing.assert_close(weights, (logits / math.sqrt(8)).softmax(-1))


def test_needs_q_and_similarity_probes_with_ones():
    shaw = ShawRelative(num_heads=3, head_dim=4, max_distance=1)
    with pytest.raises(ValueError, match="pass q"):
        shaw.attention_bias(torch.arange(3), torch.arange(3))
    sim = shaw.similarity(torch.arange(3), torch.arange(3))
    assert sim.shape == (3, 3, 3) and sim.dtype == torch.float64
    expected = shaw.table.detach().double().sum(-1) / 2  # row sums / √4, rows −1, 0, +1
    torch.testing.assert_close(sim[0, 1], expected)  # query 1 sees keys at −1, 0, +1
    torch.testing.assert_close(sim[2], sim[0])  # shared by all heads


def test_value_term_matches_the_papers_equation_3(gen):
    """z_i = Σ_j α_ij (v_j + a^V_{clip(j−i)}) (Shaw eq. 3) as an explicit loop, through MultiHeadAttention."""
    k = int(torch.randint(0, 4, (1,), generator=gen))
    shaw = build("shaw", dim=16, num_heads=2, max_distance=k, init_std=1.0, values=True).double()
    attn = MultiHeadAttention(dim=16, num_heads=2, position=shaw).double()
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 50, (2, 6), generator=gen)
    out, weights = attn(x, q_pos=pos, causal=True, need_weights=True)
    v = attn.v_proj(x).view(2, 6, 2, 8).transpose(1, 2)
    z = torch.zeros(2, 2, 6, 8, dtype=torch.float64)
    for b in range(2):
        for h in range(2):
            for i in range(6):
                for j in range(6):
                    rel = max(-k, min(k, int(pos[b, j]) - int(pos[b, i])))
                    z[b, h, i] += weights[b, h, i, j] * (v[b, h, j] + shaw.value_table[rel + k])
    ref = attn.out_proj(z.transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    # without need_weights the output is the same (the weights are formed internally) and no weights come back
    same, none = attn(x, q_pos=pos, causal=True)
    assert none is None
    torch.testing.assert_close(same, out, rtol=1e-12, atol=1e-12)
    # the value table is learned: it gets a gradient
    same.sum().backward()
    assert shaw.value_table.grad is not None and bool(shaw.value_table.grad.abs().sum() > 0)


def test_keys_only_is_the_default_and_unchanged():
    shaw = build("shaw", dim=16, num_heads=2)
    assert shaw.value_table is None and not shaw.uses_weights and shaw.options()["values"] is False
    assert sum(p.numel() for p in shaw.parameters()) == 33 * 8


def test_value_term_cached_equals_full_and_causal(gen):
    from posenc import ModelConfig, build_decoder_only
    lm = build_decoder_only(ModelConfig(vocab_size=23, dim=32, num_heads=4, num_layers=2, position="shaw",
                                        position_options={"values": True, "max_distance": 3})).double().eval()
    ids = torch.randint(0, 23, (2, 9), generator=gen)
    full = lm(ids)
    cache = lm.new_cache()
    steps = [lm(ids[:, :4], cache=cache)] + [lm(ids[:, i:i + 1], cache=cache) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    changed = ids.clone()
    changed[:, 5:] = torch.randint(0, 23, (2, 4), generator=gen)
    torch.testing.assert_close(lm(changed)[:, :5], full[:, :5])
