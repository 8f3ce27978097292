import math

import pytest
import torch

from posenc.positions import LearnedPositions, NaiveIndexPositions, SinusoidalPositions, build
from posenc.positions.absolute import sinusoid_table


def reference_table(positions: list[int], dim: int, base: float) -> torch.Tensor:
    """Naive float64 loops over the formula, independent of the vectorised code."""
    out = torch.zeros(len(positions), dim, dtype=torch.float64)
    for r, p in enumerate(positions):
        for i in range(dim // 2):
            w = base ** (-2 * i / dim)
            out[r, 2 * i] = math.sin(p * w)
            out[r, 2 * i + 1] = math.cos(p * w)
    return out


def test_sinusoid_matches_float64_formula(gen):
    dim = 2 * int(torch.randint(1, 40, (1,), generator=gen))
    base = float(torch.randint(100, 100000, (1,), generator=gen))
    positions = torch.randint(0, 10**6, (20,), generator=gen)
    torch.testing.assert_close(sinusoid_table(positions, dim, base), reference_table(positions.tolist(), dim, base),
                               rtol=0, atol=1e-9)


def test_sinusoid_norm_is_sqrt_half_d_everywhere(gen):
    dim = 2 * int(torch.randint(1, 100, (1,), generator=gen))
    table = sinusoid_table(torch.randint(0, 10**7, (100,), generator=gen), dim)
    torch.testing.assert_close(table.norm(dim=-1), torch.full((100,), math.sqrt(dim / 2), dtype=torch.float64))


def test_sinusoid_added_in_activation_dtype():
    pe = SinusoidalPositions(dim=8)
    x = torch.zeros(2, 5, 8, dtype=torch.bfloat16)
    out = pe.add(x, torch.arange(5))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out[0].float(), sinusoid_table(torch.arange(5), 8).to(torch.bfloat16).float())


def test_odd_width_raises_with_fix():
    with pytest.raises(ValueError, match=r"dim=7 must be a positive even number.*use 8 or 6"):
        SinusoidalPositions(dim=7)


def test_float_positions_refused():
    pe = SinusoidalPositions(dim=8)
    with pytest.raises(TypeError, match="integer dtype"):
        pe.add(torch.zeros(1, 3, 8), torch.arange(3, dtype=torch.bfloat16))


def test_learned_table_errors_past_its_size():
    pe = LearnedPositions(dim=4, max_len=16)
    pe.add(torch.zeros(1, 16, 4), torch.arange(16))
    with pytest.raises(ValueError, match=r"16 rows.*position 16"):
        pe.add(torch.zeros(1, 17, 4), torch.arange(17))


def test_naive_index_appends_the_raw_index():
    pe = NaiveIndexPositions(dim=4)
    x = torch.randn(2, 6, 4)
    out = pe.add(x, torch.arange(100, 106))
    assert out.shape == (2, 6, 5)
    assert torch.equal(out[..., :4], x)
    assert torch.equal(out[0, :, 4], torch.arange(100, 106, dtype=torch.float32))
    torch.testing.assert_close(pe.similarity(torch.arange(3), torch.arange(3)),
                               torch.tensor([[0, 0, 0], [0, 1, 2], [0, 2, 4]], dtype=torch.float64))


def test_gram_similarity_of_additive_scheme():
    pe = build("sinusoidal", dim=16, num_heads=2)
    i, j = torch.arange(5), torch.arange(3, 9)
    torch.testing.assert_close(pe.similarity(i, j), sinusoid_table(i, 16) @ sinusoid_table(j, 16).T)


def test_scaled_sinusoid_is_learned_scale_times_table(gen):
    from posenc.positions import ScaledSinusoidalPositions
    dim = 2 * int(torch.randint(1, 33, (1,), generator=gen))
    pe = ScaledSinusoidalPositions(dim=dim).double()
    assert float(pe.scale.detach()) == pytest.approx(dim**-0.5)
    pos = torch.randint(0, 10**6, (7,), generator=gen)
    torch.testing.assert_close(pe.encode(pos), dim**-0.5 * sinusoid_table(pos, dim))
    pe.add(torch.zeros(1, 7, dim, dtype=torch.float64), pos).sum().backward()
    torch.testing.assert_close(pe.scale.grad, sinusoid_table(pos, dim).sum())  # d(s·PE)/ds summed
    torch.testing.assert_close(pe.similarity(pos, pos), dim**-1 * sinusoid_table(pos, dim) @ sinusoid_table(pos, dim).T)


def test_learned_offset_reads_row_p_plus_offset(seed):
    """OPT's table: position p is row p + 2; the last position is max_len − 1 − offset."""
    scheme = LearnedPositions(dim=6, max_len=10, offset=2)
    p = torch.tensor([0, 3, 7])
    torch.testing.assert_close(scheme.encode(p), scheme.weight[p + 2], rtol=0, atol=0)
    assert scheme.max_position() == 7 and scheme.options()["offset"] == 2
    with pytest.raises(ValueError, match=r"positions 0\.\.7"):
        scheme.encode(torch.tensor([8]))


@pytest.mark.parametrize("offset", [-1, 10, 1.5, True])
def test_learned_offset_outside_the_table_is_refused(offset):
    with pytest.raises(ValueError, match="offset"):
        LearnedPositions(dim=6, max_len=10, offset=offset)


# -- the published layouts, each against the code that defines it ----------------------------------------------
_hf = pytest.importorskip  # transformers is a test-only dependency: these tests skip without it


def test_concatenated_half_is_marians_table():
    """Marian: [sin | cos] halves, ω_i = 10000^(−2i/D), from position 0 (HF ``MarianSinusoidalPositionalEmbedding``)."""
    marian = _hf("transformers.models.marian.modeling_marian")
    ref = marian.MarianSinusoidalPositionalEmbedding(64, 24).create_weight().double()
    ours = SinusoidalPositions(dim=24, layout="concatenated").encode(torch.arange(64))
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)  # HF's table is float32


def test_half_minus_one_is_whispers_table():
    """Whisper's encoder: [sin | cos], ω_i = 10000^(−i/(D/2 − 1)) (HF ``sinusoids``)."""
    whisper = _hf("transformers.models.whisper.modeling_whisper")
    ref = whisper.sinusoids(100, 32).double()
    ours = SinusoidalPositions(dim=32, layout="concatenated", denominator="half-minus-one").encode(torch.arange(100))
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-5)  # float32 angles up to 99 rad


def test_offset_two_is_m2m100s_positions():
    """M2M100 / fairseq: tensor2tensor's table read at p + padding_idx + 1 = p + 2 (HF ``get_embedding``)."""
    m2m = _hf("transformers.models.m2m_100.modeling_m2m_100")
    ref = m2m.M2M100SinusoidalPositionalEmbedding.get_embedding(40 + 2, 16, padding_idx=1).double()[2:]
    ours = build("sinusoidal", dim=16, num_heads=2, layout="concatenated", denominator="half-minus-one", offset=2)
    torch.testing.assert_close(ours.encode(torch.arange(40)), ref, rtol=0, atol=1e-5)
    assert ours.options() == {"dim": 16, "base": 10000.0, "layout": "concatenated",
                              "denominator": "half-minus-one", "offset": 2}


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_layouts_hold_the_same_pairs(layout):
    """Both layouts hold the same (sin, cos) pairs, only in other columns; the cached table equals encode."""
    scheme = SinusoidalPositions(dim=12, layout=layout, denominator="half-minus-one", offset=3)
    t = scheme.encode(torch.arange(9))
    sin, cos = (t[:, 0::2], t[:, 1::2]) if layout == "interleaved" else (t[:, :6], t[:, 6:])
    torch.testing.assert_close(sin**2 + cos**2, torch.ones(9, 6, dtype=torch.float64))
    want = torch.arange(3, 12).double()[:, None] * 10000.0 ** (-torch.arange(6).double() / 5)
    torch.testing.assert_close(torch.atan2(sin, cos), torch.atan2(want.sin(), want.cos()))
    x = torch.zeros(1, 9, 12)
    torch.testing.assert_close(scheme.add(x, torch.arange(9))[0], t.float())


@pytest.mark.parametrize("bad", [{"layout": "halves"}, {"denominator": "half-1"}, {"offset": -1}, {"offset": 1.5},
                                 {"denominator": "half-minus-one", "dim": 2}])
def test_bad_sinusoid_options_are_refused_by_name(bad):
    opts = {"dim": 8} | bad
    with pytest.raises(ValueError, match=next(iter(k for k in bad if k != "dim"))):
        SinusoidalPositions(**opts)
