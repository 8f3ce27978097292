"""xPos against the paper's formula (float64 loop), its relative property, decay and range."""

import pytest
import torch

from posenc.positions import XPos, build


def reference(x, positions, head_dim, base, scale_base, gamma, sign):
    """Interleaved pairs (torchscale layout): rotate pair i by p·θ_i and scale it by ζ_i^(±p/γ)."""
    out = x.double().clone()
    for t, p in enumerate(positions.tolist()):
        for i in range(head_dim // 2):
            theta = base ** (-2 * i / head_dim)
            zeta = (2 * i / head_dim + gamma) / (1 + gamma)
            s = zeta ** (sign * p / scale_base)
            a, b = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            c, d = torch.cos(torch.tensor(p * theta, dtype=torch.float64)), torch.sin(torch.tensor(p * theta, dtype=torch.float64))
            out[..., t, 2 * i] = s * (a * c - b * d)
            out[..., t, 2 * i + 1] = s * (b * c + a * d)
    return out


def test_matches_formula(gen):
    head_dim = 2 * int(torch.randint(1, 9, (1,), generator=gen))
    base = float(torch.randint(100, 10**5, (1,), generator=gen))
    scale_base = float(torch.randint(64, 1024, (1,), generator=gen))
    xpos = XPos(head_dim=head_dim, base=base, scale_base=scale_base)
    q = torch.randn(1, 2, 5, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 5, head_dim, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 5000, (5,), generator=gen)
    q_got, k_got = xpos.rotate(q, k, pos, pos)
    torch.testing.assert_close(q_got, reference(q, pos, head_dim, base, scale_base, 0.4, +1), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(k_got, reference(k, pos, head_dim, base, scale_base, 0.4, -1), rtol=1e-10, atol=1e-12)


def test_score_depends_on_distance_and_decays(gen):
    xpos = build("xpos", dim=64, num_heads=4, scale_base=64.0)
    m, n = torch.randint(0, 3000, (2,), generator=gen).tolist()
    shift = int(torch.randint(1, 3000, (1,), generator=gen))
    q = torch.randn(1, 1, 1, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, generator=gen, dtype=torch.float64)

    def score(a, b):
        qq, kk = xpos.rotate(q, k, torch.tensor([a]), torch.tensor([b]))
        return (qq * kk).sum()

    torch.testing.assert_close(score(m + shift, n + shift), score(m, n), rtol=1e-9, atol=1e-12)
    # query after key (causal use): the all-ones similarity's envelope Σ 2ζ_i^(d/γ) ≥ |sim(d)| shrinks with d
    sim = xpos.similarity(torch.arange(0, 2000, 100), torch.tensor([0]))[:, 0]
    envelope = 2 * (xpos.zeta()[None, :] ** (torch.arange(0, 2000, 100, dtype=torch.float64)[:, None] / 64)).sum(-1)
    assert bool((sim.abs() <= envelope + 1e-9).all()) and bool((envelope[1:] < envelope[:-1]).all())


def test_refuses_positions_beyond_the_dtype_range():
    xpos = XPos(head_dim=16)
    limit = xpos.max_position_for(torch.float32)
    x = torch.randn(1, 1, 1, 16)
    xpos.rotate(x, x, torch.tensor([limit]), torch.tensor([limit]))
    q, k = xpos.rotate(x, x, torch.tensor([limit]), torch.tensor([limit]))
    assert bool(torch.isfinite(q).all() and torch.isfinite(k).all())
    with pytest.raises(ValueError, match=rf"position {limit + 1} is beyond {limit}"):
        xpos.rotate(x, x, torch.tensor([limit + 1]), torch.tensor([0]))
    assert xpos.max_position_for(torch.float64) > 8 * limit


def test_single_sided_rotation_is_refused_but_module_apply_works():
    xpos = XPos(head_dim=8)
    with pytest.raises(TypeError, match="rotate_query"):
        xpos.rotate_one(torch.zeros(1, 8), torch.arange(1))
    seen = []
    xpos.apply(lambda m: seen.append(m))
    assert seen == [xpos]
