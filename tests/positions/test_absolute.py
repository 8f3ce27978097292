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
