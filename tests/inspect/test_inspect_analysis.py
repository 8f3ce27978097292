"""The measures inspect adds around lab.measures, on tables with known answers."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from inspect_helpers import naive_sinusoid
from posenc.inspect.analysis import (
    analyse_positions,
    analyse_tokens,
    distance_r2,
    pick_tokens,
    plane_rotation,
    principal_components,
    self_score,
    sinusoid_likeness,
)


def _orthogonal(d: int, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return q


def test_rotated_sinusoid_has_every_sinusoid_property(gen):
    """A dense table that is secretly a sinusoid (P·Q, Q orthogonal): every measure must see through it."""
    length, d = int(torch.randint(40, 90, (1,), generator=gen)), 2 * int(torch.randint(4, 12, (1,), generator=gen))
    table = naive_sinusoid(length, d) @ _orthogonal(d, gen)
    out = analyse_positions(table, offsets=(1, 3, 7))
    assert out["norms"]["norm_max"] == pytest.approx(math.sqrt(d / 2), abs=1e-12)
    assert out["norms"]["norm_spread"] < 1e-12
    assert out["profile"]["translation_invariant"]
    assert out["distance_r2"] == pytest.approx(1.0, abs=1e-12)
    assert max(out["shift"]["relative_residual"]) < 1e-10
    base = out["baselines"]
    assert max(base["sinusoid"]["shift"]["relative_residual"]) < 1e-10
    assert base["sinusoid"]["distance_r2"] == pytest.approx(1.0, abs=1e-12)


def test_random_table_shift_residual_is_the_projection_size(gen):
    """Fitting d unknowns to L − k noisy equations leaves a relative residual ≈ √(1 − d/(L − k))."""
    length, d = 400, 50
    table = torch.randn(length, d, generator=gen, dtype=torch.float64)
    out = analyse_positions(table, offsets=(1, 17), compare=False)
    for k, rel in zip(out["shift"]["offsets"], out["shift"]["relative_residual"]):
        assert rel == pytest.approx(math.sqrt(1 - d / (length - k)), abs=0.05)
    assert out["distance_r2"] < 0.05


def test_distance_r2_against_a_naive_loop(gen):
    table = torch.randn(12, 5, generator=gen, dtype=torch.float64).cumsum(0)
    unit = [row / row.norm() for row in table]
    cos = {(i, j): float(unit[i] @ unit[j]) for i in range(12) for j in range(12) if i != j}
    by_lag: dict[int, list[float]] = {}
    for (i, j), v in cos.items():
        by_lag.setdefault(j - i, []).append(v)
    mean = sum(cos.values()) / len(cos)
    resid = sum((v - sum(by_lag[j - i]) / len(by_lag[j - i])) ** 2 for (i, j), v in cos.items())
    total = sum((v - mean) ** 2 for v in cos.values())
    assert distance_r2(table) == pytest.approx(1 - resid / total, abs=1e-12)


def test_sinusoid_likeness_finds_the_frequency(gen):
    n, cycles = 200, int(torch.randint(16, 320, (1,), generator=gen)) / 8
    p = torch.arange(n, dtype=torch.float64)
    phase = float(torch.rand(1, generator=gen)) * 6
    series = 3.0 * torch.sin(2 * math.pi * cycles * p / n + phase) + 0.5
    fit = sinusoid_likeness(series)
    assert fit["cycles"] == cycles and fit["period"] == pytest.approx(n / cycles)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-10)
    assert sinusoid_likeness(torch.randn(n, generator=gen, dtype=torch.float64))["r2"] < 0.2


def test_plane_rotation_of_a_circle(gen):
    step = 360.0 * int(torch.randint(1, 49, (1,), generator=gen)) / 100  # whole turns: the mean is the centre
    p = torch.arange(100, dtype=torch.float64)
    circle = torch.stack((torch.cos(p * math.radians(step)), torch.sin(p * math.radians(step))), 1) * 2.5 + 1.0
    rot = plane_rotation(circle)
    assert rot["step_degrees"] == pytest.approx(step, abs=1e-9) and rot["step_degrees_std"] < 1e-9
    assert rot["radius"] == pytest.approx(2.5, abs=1e-9) and rot["radius_cv"] < 1e-9
    assert plane_rotation(circle.flip(1))["step_degrees"] == pytest.approx(-step, abs=1e-9)


def test_pca_shares_and_coordinates(gen):
    table = torch.randn(30, 6, generator=gen, dtype=torch.float64)
    pca = principal_components(table, k=4)
    centred = table - table.mean(0)
    eig = torch.linalg.eigvalsh(centred.T @ centred).flip(0)  # independent: eigenvalues of the scatter matrix
    explained = torch.tensor(pca["explained"], dtype=torch.float64)
    torch.testing.assert_close(explained, (eig / eig.sum())[:4], rtol=1e-9, atol=1e-12)
    coords = torch.tensor(pca["coords"], dtype=torch.float64)
    assert coords.shape == (30, 4)
    torch.testing.assert_close((coords**2).sum(0), eig[:4], rtol=1e-9, atol=1e-9)


def test_neighbours_cosine_vs_dot_with_a_stretched_row(gen):
    """Article 003: stretch one row; its cosine lists do not move, but it climbs every dot-product list."""
    vocab_size, d = 40, 16
    table = torch.randn(vocab_size, d, generator=gen, dtype=torch.float64)
    stretched = int(torch.randint(1, vocab_size, (1,), generator=gen))
    table[stretched] *= 50.0
    vocab = [f"w{i}" for i in range(vocab_size)]
    # The probe is the row closest in angle to the stretched one, so 50x its length puts it first by dot product.
    unit = table / table.norm(dim=1, keepdim=True)
    closeness = unit @ unit[stretched]
    closeness[stretched] = -math.inf
    probe = int(closeness.argmax())
    out = analyse_tokens(table, vocab, tokens=[f"w{probe}"], k=5, sample=vocab_size)
    entry = out["neighbours"][0]
    cos = (unit @ unit[probe]).tolist()
    cos[probe] = -math.inf
    expected = sorted(range(vocab_size), key=lambda i: -cos[i])[:5]
    assert [n["id"] for n in entry["cosine"]] == expected
    dots = (table @ table[probe]).tolist()
    dots[probe] = -math.inf
    assert entry["dot"][0]["token"] == f"w{max(range(vocab_size), key=lambda i: dots[i])}" == f"w{stretched}"
    assert out["longest"][0]["id"] == stretched
    torch.testing.assert_close(torch.tensor(out["norms"], dtype=torch.float64), table.norm(dim=1), rtol=1e-12, atol=0)


def test_self_score_against_naive_argmax(gen):
    vocab_size, d = 30, 6
    table = torch.randn(vocab_size, d, generator=gen, dtype=torch.float64)
    table[0] = 4.0 * table[1]  # row 1's own dot product loses to row 0
    got = self_score(table, sample=vocab_size)
    winners = [max(range(vocab_size), key=lambda j: float(table[j] @ table[r])) for r in range(vocab_size)]
    assert got["sampled"] == vocab_size and got["self_top"] == pytest.approx(sum(w == r for r, w in enumerate(winners))
                                                                              / vocab_size)
    assert winners[1] != 1  # row 0 = 4·row 1 out-scores row 1's own dot product (another row may score higher still)
    # beaten_by: the (up to) ten rows that win most often over another row, with their counts, as a naive count says
    naive = Counter(w for r, w in enumerate(winners) if w != r)
    assert all(naive[i] == c for i, c in got["beaten_by"])
    assert sorted((c for _, c in got["beaten_by"]), reverse=True) == sorted(naive.values(), reverse=True)[:10]


def test_pick_tokens_handles_word_markers_and_ids(gen):
    table = torch.randn(6, 3, generator=gen)
    vocab = ["<s>", "Ġthe", "▁king", "dog", "x", "y"]
    assert pick_tokens(table, vocab, ["the", "king", "dog", "#5"]) == [1, 2, 3, 5]
    assert pick_tokens(table, vocab) == [1, 2, 3]  # the default words that exist
    with pytest.raises(ValueError, match="'cat' is not in the vocabulary"):
        pick_tokens(table, vocab, ["cat"])
    with pytest.raises(ValueError, match="outside"):
        pick_tokens(table, vocab, ["#9"])
    assert len(pick_tokens(table, None)) == 6
