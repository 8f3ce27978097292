"""FoPE and PoPE against their papers' definitions in float64."""

import math

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.positions import RoPE, build


def test_fope_matches_the_papers_fourier_series(gen):
    head_dim, heads, length = 16, 2, int(torch.randint(8, 2000, (1,), generator=gen))
    fope = build("fope", dim=heads * head_dim, num_heads=heads, train_length=length, pairing="interleaved").double()
    theta = RoPE(head_dim=head_dim).inv_freq()
    kept = [i for i in range(head_dim // 2) if 2 * math.pi / float(theta[i]) <= length]
    assert fope.kept.tolist() == [i in kept for i in range(head_dim // 2)]
    q = torch.randn(1, heads, 5, head_dim, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 10**4, (5,), generator=gen)
    got = fope.rotate_query(q, pos)
    c, s = fope.cos_coef.detach().double(), fope.sin_coef.detach().double()
    ref = q.clone()
    for h in range(heads):
        for t in range(5):
            p = int(pos[t])
            for di, d in enumerate(kept):  # output pair d: a series over the kept frequencies a
                cos = sum(c[h, ai, di] * math.cos(p * float(theta[a])) for ai, a in enumerate(kept)) / c[h, :, di].sum()
                sin = sum(s[h, ai, di] * math.sin(p * float(theta[a])) for ai, a in enumerate(kept)) / s[h, :, di].sum()
                x1, x2 = q[0, h, t, 2 * d], q[0, h, t, 2 * d + 1]
                ref[0, h, t, 2 * d], ref[0, h, t, 2 * d + 1] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)  # clipped pairs are left as they are


def test_fope_with_identity_coefficients_is_rope_with_clipped_floor(gen):
    fope = build("fope", dim=64, num_heads=2, train_length=300).double()
    with torch.no_grad():
        eye = torch.eye(fope.cos_coef.shape[-1], dtype=torch.float64)
        fope.cos_coef.copy_(eye.expand_as(fope.cos_coef))
        fope.sin_coef.copy_(eye.expand_as(fope.sin_coef))
    rope = RoPE(head_dim=32).double()
    q = torch.randn(1, 2, 6, 32, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 10**5, (6,), generator=gen)
    got, ref = fope.rotate_query(q, pos), rope.rotate_query(q, pos)
    kept = fope.kept.repeat(2)  # half pairing: pair i is coordinates i and i + 16
    torch.testing.assert_close(got[..., kept], ref[..., kept], rtol=1e-10, atol=1e-10)
    assert torch.equal(got[..., ~kept], q[..., ~kept]) and int((~fope.kept).sum()) > 0


def test_fope_coefficients_are_fixed_unless_learnable(gen):
    fixed = build("fope", dim=32, num_heads=4)
    assert not fixed.cos_coef.requires_grad and "cos_coef" in fixed.state_dict()
    learned = build("fope", dim=32, num_heads=4, learnable=True)
    q = torch.randn(1, 4, 5, 8, generator=gen)
    learned.rotate_query(q, torch.arange(5)).sum().backward()
    assert learned.cos_coef.grad is not None
    with pytest.raises(ValueError, match="separate_heads=False"):
        fixed.rotate_key(torch.randn(1, 2, 5, 8), torch.arange(5))
    shared = build("fope", dim=32, num_heads=4, separate_heads=False)
    assert shared.rotate_key(torch.randn(1, 2, 5, 8), torch.arange(5)).shape == (1, 2, 5, 8)


def test_pope_score_is_the_papers(gen):
    """q̃·k̃ = Σ_c sp(q_c)·sp(k_c)·cos((m − n)θ_c − δ_c), float64 loop; through attention the weights use 1/√Dh."""
    heads, head_dim = 2, 6
    pope = build("pope", dim=heads * head_dim, num_heads=heads, base=100.0).double()
    with torch.no_grad():
        pope.phase_bias.uniform_(-2 * math.pi, 0, generator=gen)
    q = torch.randn(1, heads, 4, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(1, heads, 5, head_dim, generator=gen, dtype=torch.float64)
    qp, kp = torch.randint(0, 1000, (4,), generator=gen), torch.randint(0, 1000, (5,), generator=gen)
    rq, rk = pope.rotate(q, k, qp, kp)
    got = rq @ rk.transpose(-1, -2)
    sp = torch.nn.functional.softplus
    theta = [100.0 ** (-c / head_dim) for c in range(head_dim)]
    ref = torch.zeros(1, heads, 4, 5, dtype=torch.float64)
    for h in range(heads):
        for i in range(4):
            for j in range(5):
                ref[0, h, i, j] = sum(float(sp(q[0, h, i, c]) * sp(k[0, h, j, c]))
                                      * math.cos((int(qp[i]) - int(kp[j])) * theta[c] - float(pope.phase_bias[h, c].detach()))
                                      for c in range(head_dim))
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
    attn = MultiHeadAttention(dim=heads * head_dim, num_heads=heads, position=pope).double()
    x = torch.randn(1, 5, heads * head_dim, generator=gen, dtype=torch.float64)
    out, weights = attn(x, causal=True, need_weights=True)
    fast, _ = attn(x, causal=True)  # SDPA with the explicit 1/√Dh scale
    torch.testing.assert_close(fast, out, rtol=1e-10, atol=1e-10)


def test_pope_keeps_position_apart_from_content(gen):
    """The phase of every coordinate is the position alone: content only scales (softplus > 0)."""
    pope = build("pope", dim=8, num_heads=1, phase_bias=False).double()
    q = torch.randn(1, 1, 3, 8, generator=gen, dtype=torch.float64)
    pos = torch.tensor([5, 6, 7])
    r = pope.rotate_query(q, pos)
    phase = torch.atan2(r[..., 8:], r[..., :8])
    torch.testing.assert_close(torch.cos(phase), torch.cos(pope.angles(pos)).expand_as(phase))
