"""CoPE against the paper's code restated as a float64 loop, inside attention, and its position-only probe."""

import math

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.positions import build


def paper_cope(q, k, table, npos_max):
    """The paper's appendix code for one (B, H) slice, causal: gates σ(q·k/√d) of visible keys, reversed cumsum,
    clamp, interpolation between the floor and ceil rows of q·E. q (Tq, d), k (Tk, d), queries last in the keys."""
    tq, tk, d = q.shape[0], k.shape[0], q.shape[1]
    out = torch.zeros(tq, tk, dtype=torch.float64)
    for i in range(tq):
        row = tk - tq + i  # the query's index among the keys (cached decoding aligns queries last)
        gates = [1 / (1 + math.exp(-float(q[i] @ k[j]) / math.sqrt(d))) if j <= row else 0.0 for j in range(tk)]
        for j in range(row + 1):
            p = min(sum(gates[j:]), npos_max - 1)
            lo, hi = math.floor(p), math.ceil(p)
            w = p - lo
            out[i, j] = float(q[i] @ table[hi]) * w + float(q[i] @ table[lo]) * (1 - w)
    return out


def test_bias_matches_paper_code(gen):
    heads, head_dim, npos = 2, 4, int(torch.randint(2, 8, (1,), generator=gen))
    cope = build("cope", dim=heads * head_dim, num_heads=heads, npos_max=npos, init_std=1.0).double()
    q = 2 * torch.randn(1, heads, 6, head_dim, generator=gen, dtype=torch.float64)
    k = 2 * torch.randn(1, heads, 6, head_dim, generator=gen, dtype=torch.float64)
    pos = torch.arange(6)
    got = cope.logit_bias(q, k, pos, pos)
    table = cope.table.detach()
    for h in range(heads):
        ref = paper_cope(q[0, h], k[0, h], table, npos)
        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        torch.testing.assert_close(got[0, h][causal], ref[causal], rtol=1e-12, atol=1e-12)


def test_inside_attention_with_a_cache_is_the_paper(gen):
    """Weights of a causal attention with CoPE = softmax(q·k/√d + paper bias); a decoding step sees the same sums."""
    cope = build("cope", dim=16, num_heads=2, npos_max=5, init_std=1.0).double()
    attn = MultiHeadAttention(dim=16, num_heads=2, num_kv_heads=1, position=cope).double()  # GQA keys
    x = torch.randn(1, 7, 16, generator=gen, dtype=torch.float64)
    _, weights = attn(x, causal=True, need_weights=True)
    q = attn.q_proj(x).view(1, 7, 2, 8).transpose(1, 2)
    k = attn.k_proj(x).view(1, 7, 1, 8).transpose(1, 2).expand(1, 2, 7, 8)
    for h in range(2):
        bias = paper_cope(q[0, h].detach(), k[0, h].detach(), cope.table.detach(), 5)
        logits = (q[0, h] @ k[0, h].T / math.sqrt(8)).detach() + bias
        logits = logits.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
        torch.testing.assert_close(weights[0, h], logits.softmax(-1), rtol=1e-10, atol=1e-12)
    from posenc.attention import KVCache
    cache = KVCache()
    full, _ = attn(x, causal=True)
    steps = [attn(x[:, :3], causal=True, cache=cache)[0]] + [attn(x[:, i:i + 1], causal=True, cache=cache)[0]
                                                             for i in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full)


def test_bidirectional_keys_after_the_query_mirror(gen):
    """A key after the query sums the gates from the query up to it: the mirror of the causal count."""
    cope = build("cope", dim=8, num_heads=1, npos_max=64).double()
    q = torch.randn(1, 1, 5, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 5, 8, generator=gen, dtype=torch.float64)
    pos = torch.arange(5)
    p = cope.contextual_positions(q, k, pos, pos)[0, 0]
    g = torch.sigmoid(q[0, 0] @ k[0, 0].T / math.sqrt(8))
    for i in range(5):
        for j in range(5):
            lo, hi = min(i, j), max(i, j)
            torch.testing.assert_close(p[i, j], g[i, lo:hi + 1].sum())


def test_similarity_is_a_function_of_distance(gen):
    cope = build("cope", dim=16, num_heads=2, init_std=1.0)
    sim = cope.similarity(torch.arange(20), torch.arange(20))
    assert sim.shape == (2, 20, 20) and torch.equal(sim[0], sim[1])
    for d in range(1, 5):
        diag = torch.diagonal(sim[0], -d)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag))
    with pytest.raises(ValueError, match="npos_max=1 must be"):
        build("cope", dim=16, num_heads=2, npos_max=1)
