"""RoPE scaling: formulas, the length-dependent semantics, cached decoding beyond L₀, errors."""

import math

import pytest
import torch

from posenc import ModelConfig, build_decoder_only
from posenc.positions import ROPE_SCALINGS, RoPE, build
from posenc.positions.rotary_scaling import SCALED_ROPES, DynamicNTKRoPE, LongRoPE

SCALED = [cls.name for cls in SCALED_ROPES]


def test_linear_interpolation_is_dividing_positions(gen):
    """θ/factor at position p·factor is plain RoPE at position p: PI squeezes positions into the trained range."""
    factor = int(torch.randint(2, 9, (1,), generator=gen))
    scaled = build("rope-linear", dim=32, num_heads=2, factor=float(factor))
    plain = RoPE(head_dim=16)
    p = torch.randint(0, 10**5, (6,), generator=gen)
    torch.testing.assert_close(scaled.angles(p * factor), plain.angles(p), rtol=1e-14, atol=0)


def test_llama3_bands(gen):
    """High frequencies untouched, low ones divided by factor, medium ones in between."""
    scheme = build("rope-llama3", dim=256, num_heads=2, original_max_len=int(torch.randint(64, 9000, (1,), generator=gen)))
    plain = RoPE(head_dim=128, base=scheme.base).inv_freq()
    wavelength = 2 * math.pi / plain
    ratio = plain / scheme.inv_freq()
    high = wavelength < scheme.original_max_len / scheme.high_freq_factor
    low = wavelength > scheme.original_max_len / scheme.low_freq_factor
    assert torch.equal(ratio[high], torch.ones_like(ratio[high]))
    torch.testing.assert_close(ratio[low], torch.full_like(ratio[low], scheme.factor))
    mid = ~high & ~low
    assert bool(((ratio[mid] > 1) & (ratio[mid] < scheme.factor)).all())


def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones(gen):
    scheme = build("rope-yarn", dim=128, num_heads=2, factor=float(torch.randint(2, 32, (1,), generator=gen)),
                   original_max_len=4096)
    ratio = RoPE(head_dim=64).inv_freq() / scheme.inv_freq()
    assert float(ratio[0]) == 1.0  # the fastest pair turns ≫ beta_fast times over L₀
    assert float(ratio[-1]) == pytest.approx(scheme.factor)  # the slowest < beta_slow times
    assert bool((ratio[1:] >= ratio[:-1] - 1e-12).all())  # the ramp in between is monotone


@pytest.mark.parametrize("name", ["rope-dynamic-ntk", "rope-longrope"])
@pytest.mark.parametrize("max_seq_len", [None, 40])
def test_cached_equals_full_beyond_the_trained_length(name, max_seq_len, gen):
    """The core test runs below L₀ (where these schemes are plain RoPE); here L₀ = 4 and 12 tokens."""
    options = {"original_max_len": 4, "max_seq_len": max_seq_len}
    lm = build_decoder_only(ModelConfig(vocab_size=23, dim=32, num_heads=4, num_layers=2, position=name,
                                        position_options=options)).double().eval()
    ids = torch.randint(0, 23, (2, 12), generator=gen)
    full = lm(ids)
    cache = lm.new_cache()
    steps = [lm(ids[:, :3], cache=cache)] + [lm(ids[:, i:i + 1], cache=cache) for i in range(3, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    # the scaling is active (so the test above is not plain RoPE's): a per-call length gives other outputs
    per_call = lm.position.__class__(head_dim=8, **(options | {"max_seq_len": 12 if max_seq_len is None else 4}))
    assert not torch.allclose(per_call.angles(torch.arange(12)), lm.position.angles(torch.arange(12)))


def test_per_position_rotation_is_plain_rope_below_trained_length(gen):
    original = int(torch.randint(8, 4096, (1,), generator=gen))
    p = torch.randint(0, original, (20,), generator=gen)
    for scheme in (DynamicNTKRoPE(head_dim=16, original_max_len=original),
                   LongRoPE(head_dim=16, original_max_len=original, short_factor=[1.0] * 8)):
        torch.testing.assert_close(scheme.angles(p), RoPE(head_dim=16).angles(p), rtol=0, atol=0)
    # beyond L₀ dynamic NTK slows every pair but the first (θ_0 = 1 whatever the base)
    scheme = DynamicNTKRoPE(head_dim=16, original_max_len=original)
    far = torch.tensor([2 * original])
    slower = scheme.angles(far)[0] / RoPE(head_dim=16).angles(far)[0]
    assert float(slower[0]) == pytest.approx(1.0) and bool((slower[1:] < 1).all())


def test_dynamic_scaling_grows_continuously_with_length(gen):
    original = int(torch.randint(16, 2048, (1,), generator=gen))
    fn = ROPE_SCALINGS["dynamic"]
    low = [float(fn(16, 10000.0, seq_len=n, factor=4.0, original_max_len=original)[0][-1])
           for n in range(original - 2, original + 40)]
    assert low[0] == low[1] == low[2]  # up to L₀: unchanged
    assert all(a > b for a, b in zip(low[2:], low[3:]))  # then strictly slower, step by step


@pytest.mark.parametrize("name", SCALED + ["xpos"])
def test_scores_shift_invariant_where_the_scheme_is_relative(name, gen):
    """Fixed-frequency schemes keep RoPE's q·k = f(m − n)."""
    options = {"max_seq_len": 10**6} if name in ("rope-dynamic-ntk", "rope-longrope") else {}
    scheme = build(name, dim=64, num_heads=4, **options)
    q = torch.randn(1, 1, 1, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, generator=gen, dtype=torch.float64)
    m, n = torch.randint(0, 5000, (2,), generator=gen).tolist()
    shift = int(torch.randint(1, 10**4, (1,), generator=gen))

    def score(a, b):
        qq, kk = scheme.rotate(q, k, torch.tensor([a]), torch.tensor([b]))
        return (qq * kk).sum()

    torch.testing.assert_close(score(m + shift, n + shift), score(m, n), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name", SCALED)
def test_angles_at_a_million_are_float64_exact(name, gen):
    """Angles at positions up to 1e6 against a float64 reference built with Python floats, cos/sin to 1 ulp."""
    scheme = build(name, dim=64, num_heads=4)
    positions = torch.cat([torch.randint(0, 10**6, (30,), generator=gen), torch.tensor([10**6])])
    per_position = getattr(scheme, "max_seq_len", 0) is None  # dynamic NTK / LongRoPE: θ(p + 1)
    theta = [scheme.inv_freq_at(p + 1) if per_position else scheme.inv_freq() for p in positions.tolist()]
    reference = torch.tensor([[p * float(t) for t in row] for p, row in zip(positions.tolist(), theta)],
                             dtype=torch.float64)
    torch.testing.assert_close(scheme.angles(positions), reference, rtol=1e-13, atol=0)
    cos, sin = scheme.cos_sin(positions)  # float32 by default
    a = scheme.attention_factor
    assert float((cos.double() - a * reference.cos()).abs().max()) <= a * 2**-24 + 1e-12
    assert float((sin.double() - a * reference.sin()).abs().max()) <= a * 2**-24 + 1e-12


def test_bad_options_raise_with_the_value():
    with pytest.raises(ValueError, match=r"factor=0.0 must be a finite number > 0"):
        build("rope-linear", dim=32, num_heads=2, factor=0.0)
    with pytest.raises(ValueError, match="short_factor has 3 entries.*8"):
        build("rope-longrope", dim=32, num_heads=2, short_factor=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="high_freq_factor > low_freq_factor"):
        build("rope-llama3", dim=32, num_heads=2, low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="beta_fast > beta_slow"):
        build("rope-yarn", dim=32, num_heads=2, beta_fast=1.0, beta_slow=2.0)
    with pytest.raises(ValueError, match="max_seq_len=0 must be a positive integer"):
        build("rope-dynamic-ntk", dim=32, num_heads=2, max_seq_len=0)


@pytest.mark.parametrize("name", SCALED)
def test_describe_lists_the_scaling_parameters(name):
    info = build(name, dim=32, num_heads=2).describe()
    assert info["name"] == name and info["family"] == "rotary"
    assert "factor" in info and info["head_dim"] == 16


@pytest.mark.parametrize("name", ["rope-dynamic-ntk", "rope-longrope"])
def test_cache_says_which_frequencies_its_keys_used(name, gen):
    lm = build_decoder_only(ModelConfig(vocab_size=23, dim=32, num_heads=4, num_layers=1, position=name,
                                        position_options={"original_max_len": 4})).double().eval()
    cache = lm.new_cache()
    lm(torch.randint(0, 23, (1, 6), generator=gen), cache=cache)
    lm(torch.randint(0, 23, (1, 1), generator=gen), cache=cache)
    kv = cache[0].self_attn
    used = lm.position.frequencies_used(kv.positions)  # (7, P)
    for p, row in zip(kv.positions.tolist(), used):
        torch.testing.assert_close(row, lm.position.inv_freq_at(p + 1), rtol=1e-13, atol=0)
