"""FIRE against the paper's formula (float64, the module's own MLP weights) and its normalisation property."""

import math

import pytest
import torch

from posenc.positions import FIRE


def test_matches_formula(gen):
    heads = int(torch.randint(1, 9, (1,), generator=gen))
    fire = FIRE(num_heads=heads, init_c=float(torch.rand((), generator=gen)) + 0.01,
                init_L=float(torch.randint(8, 1024, (1,), generator=gen))).double()
    q_pos = torch.randint(0, 10**6, (2, 4), generator=gen)
    k_pos = torch.randint(0, 10**6, (2, 5), generator=gen)
    got = fire.attention_bias(q_pos, k_pos)
    assert got.shape == (2, heads, 4, 5)
    c, L = float(fire.c.detach()), abs(float(fire.L_multiplier.detach()) * float(fire.init_L))
    w1, b1 = fire.mlp[0].weight[:, 0], fire.mlp[0].bias
    w2, b2 = fire.mlp[2].weight, fire.mlp[2].bias
    for b in range(2):
        for i in range(4):
            for j in range(5):
                qi, kj = int(q_pos[b, i]), int(k_pos[b, j])
                x = math.log(abs(c * abs(qi - kj)) + 1) / (math.log(abs(c * max(L, qi)) + 1) + 1e-6)
                ref = w2 @ torch.relu(w1 * x + b1) + b2
                torch.testing.assert_close(got[b, :, i, j], ref, rtol=1e-10, atol=1e-12)


def test_causal_inputs_stay_in_unit_interval(gen):
    """ψ(i − j)/ψ(max(L, i)) ∈ [0, 1] for keys at or before the query, at any length: FIRE interpolates."""
    fire = FIRE(num_heads=2, init_L=64.0).double()
    q_pos = torch.randint(0, 10**6, (50,), generator=gen)
    k_pos = torch.randint(0, 10**6, (60,), generator=gen)
    x = fire.normalized_distance(q_pos, k_pos)
    past = k_pos[None, :] <= q_pos[:, None]
    x = x.detach()
    assert float(x[past].min()) >= 0 and float(x[past].max()) <= 1


def test_parameters_learn():
    fire = FIRE(num_heads=3)
    fire.attention_bias(torch.arange(6), torch.arange(6)).sum().backward()
    for p in (fire.c, fire.L_multiplier, fire.mlp[0].weight):
        assert p.grad is not None and bool(torch.isfinite(p.grad).all())


def test_bad_options_raise():
    with pytest.raises(ValueError, match="init_c"):
        FIRE(num_heads=2, init_c=0.0)
