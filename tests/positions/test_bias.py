import pytest
import math

import torch

from posenc.positions import ALiBi, T5RelativeBias, alibi_slopes, build, t5_bucket


def paper_slopes(n: int) -> list[float]:
    """Press et al.'s reference get_slopes, restated."""
    def pow2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


def test_slopes_match_paper_for_any_head_count():
    for n in range(1, 70):
        torch.testing.assert_close(alibi_slopes(n), torch.tensor(paper_slopes(n), dtype=torch.float64))


def test_bias_is_minus_slope_times_distance(gen):
    heads = int(torch.randint(1, 17, (1,), generator=gen))
    alibi = ALiBi(num_heads=heads)
    q_pos = torch.randint(0, 1000, (4,), generator=gen)
    k_pos = torch.randint(0, 1000, (6,), generator=gen)
    bias = alibi.attention_bias(q_pos, k_pos)
    ref = -alibi_slopes(heads)[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs().double()
    torch.testing.assert_close(bias.double(), ref, rtol=1e-6, atol=1e-4)
    assert bias.shape == (heads, 4, 6)


def test_alibi_matches_bloom_up_to_a_row_constant(gen):
    """BLOOM's build_alibi_tensor gives m_h·j; posenc's causal part −m_h·(i − j) differs by −m_h·i per row."""
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom",
                                reason="HF transformers is the test-only reference for BLOOM's ALiBi")
    heads = int(torch.randint(1, 40, (1,), generator=gen))
    length = int(torch.randint(2, 30, (1,), generator=gen))
    ref = bloom.build_alibi_tensor(torch.ones(1, length, dtype=torch.long), heads, torch.float64)  # (H, 1, T)
    ref = ref.view(heads, 1, length)
    ours = ALiBi(num_heads=heads).attention_bias(torch.arange(length), torch.arange(length)).double()  # (H, T, T)
    slopes = ref[:, 0, 1]  # BLOOM's slope is its bias at key position 1
    torch.testing.assert_close(slopes, alibi_slopes(heads), rtol=1e-6, atol=0)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    row = torch.arange(length, dtype=torch.float64)
    expected = ref - slopes[:, None, None] * row[None, :, None]  # m·j − m·i
    torch.testing.assert_close(ours[:, causal], expected.expand(-1, length, -1)[:, causal], rtol=1e-6, atol=1e-5)


# -- T5 ---------------------------------------------------------------------------


def test_t5_buckets_match_hf(gen):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5",
                             reason="HF transformers is the test-only reference for T5's bucketing")
    for _ in range(8):
        bidirectional = bool(torch.randint(0, 2, (1,), generator=gen))
        num_buckets = int(torch.randint(4, 80, (1,), generator=gen))
        max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
        max_distance = max_exact + int(torch.randint(1, 1000, (1,), generator=gen))
        rel = torch.cat([torch.arange(-2 * max_distance, 2 * max_distance),
                         torch.randint(-10**6, 10**6, (500,), generator=gen)])
        ref = t5.T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                       max_distance=max_distance)
        got = t5_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
        assert torch.equal(got, ref), (bidirectional, num_buckets, max_distance)


def test_t5_bias_is_the_table_at_each_bucket(gen):
    heads = int(torch.randint(1, 9, (1,), generator=gen))
    scheme = T5RelativeBias(num_heads=heads, bidirectional=False, num_buckets=16, max_distance=50)
    q_pos = torch.randint(0, 10**6, (2, 5), generator=gen)
    k_pos = torch.randint(0, 10**6, (2, 7), generator=gen)
    bias = scheme.attention_bias(q_pos, k_pos)
    assert bias.shape == (2, heads, 5, 7)
    for b in range(2):
        for i in range(5):
            for j in range(7):
                bucket = t5_bucket(k_pos[b, j] - q_pos[b, i], bidirectional=False, num_buckets=16, max_distance=50)
                torch.testing.assert_close(bias[b, :, i, j], scheme.table.weight[int(bucket)])
    # causal bucketing: every key after the query shares bucket 0 with distance 0
    assert bool((scheme.buckets(torch.tensor([3]), torch.arange(3, 40)) == 0).all())
    # bidirectional: keys after the query use the upper half
    both = T5RelativeBias(num_heads=1)
    assert bool((both.buckets(torch.tensor([0]), torch.arange(1, 40)) >= 16).all())


def test_t5_bad_sizes_raise():
    with pytest.raises(ValueError, match="max_distance=4"):
        T5RelativeBias(num_heads=2, num_buckets=32, max_distance=4)
    with pytest.raises(TypeError, match="integer"):
        t5_bucket(torch.tensor([1.5]), bidirectional=True, num_buckets=32, max_distance=128)


# -- KERPLE -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["kerple-log", "kerple-power"])
def test_kerple_matches_paper_formula(name, gen):
    heads = int(torch.randint(1, 9, (1,), generator=gen))
    scheme = build(name, dim=8 * heads, num_heads=heads).double()
    with torch.no_grad():  # random values, some below the clamp, some above 2
        scheme.r1.copy_(torch.rand(heads, generator=gen, dtype=torch.float64) * 3 - 0.5)
        scheme.r2.copy_(torch.rand(heads, generator=gen, dtype=torch.float64) * 3 - 0.5)
    q_pos, k_pos = torch.randint(0, 10**6, (4,), generator=gen), torch.randint(0, 10**6, (6,), generator=gen)
    got = scheme.attention_bias(q_pos, k_pos)
    ref = torch.zeros(heads, 4, 6, dtype=torch.float64)
    for h in range(heads):
        r1 = max(float(scheme.r1[h].detach()), 1e-2)
        raw = float(scheme.r2[h].detach())
        r2 = max(raw, 1e-2) if name == "kerple-log" else min(max(raw, 1e-2), 2.0)
        for i in range(4):
            for j in range(6):
                d = abs(int(q_pos[i]) - int(k_pos[j]))
                ref[h, i, j] = -r1 * math.log(1 + r2 * d) if name == "kerple-log" else -r1 * d**r2
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_kerple_power_gradient_is_finite_at_distance_zero():
    scheme = build("kerple-power", dim=16, num_heads=2)
    scheme.attention_bias(torch.arange(5), torch.arange(5)).sum().backward()
    assert bool(torch.isfinite(scheme.r1.grad).all() and torch.isfinite(scheme.r2.grad).all())


@pytest.mark.parametrize("heads", [1, 3, 4, 6, 8, 12])
@pytest.mark.parametrize("max_bias", [8.0, 16.0, 4.5])
def test_alibi_max_bias_against_the_formula(heads, max_bias):
    """Slopes 2^(−max_bias·k/n) for a power of two n; otherwise the closest power below, then every other
    slope of the 2n sequence (the paper's layout, with 8 replaced by max_bias)."""
    import math

    def geometric(n):
        return [2.0 ** (-max_bias * (k + 1) / n) for k in range(n)]

    c = 2 ** math.floor(math.log2(heads))
    want = geometric(c) + geometric(2 * c)[0::2][: heads - c]
    torch.testing.assert_close(alibi_slopes(heads, max_bias), torch.tensor(want, dtype=torch.float64),
                               rtol=1e-15, atol=0)
    if max_bias == 8.0:
        torch.testing.assert_close(alibi_slopes(heads, max_bias), alibi_slopes(heads), rtol=0, atol=0)


def test_alibi_max_bias_must_be_positive():
    with pytest.raises(ValueError, match="max_bias"):
        alibi_slopes(4, 0.0)
