"""measures: every function against naive float64 loops on fresh random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.lab import measures as m
from posenc.positions import build, names


def naive_sinusoid(length: int, dim: int, base: float) -> list[list[float]]:
    rows = []
    for p in range(length):
        row = []
        for i in range(dim // 2):
            w = base ** (-2 * i / dim)
            row += [math.sin(p * w), math.cos(p * w)]
        rows.append(row)
    return rows


def naive_diagonals(s: list[list[float]]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for i, row in enumerate(s):
        for j, v in enumerate(row):
            out.setdefault(j - i, []).append(v)
    return out


def test_norm_summary_matches_loops(gen):
    t = torch.randn(37, 11, generator=gen, dtype=torch.float64)
    got = m.norm_summary(t)
    want = [math.sqrt(sum(v * v for v in row)) for row in t.tolist()]
    assert got["norms"] == pytest.approx(want, rel=1e-13)
    assert got["norm_spread"] == pytest.approx(max(want) - min(want), rel=1e-12)
    assert not got["constant"]


def test_diagonal_profile_matches_loops(gen):
    s = torch.randn(3, 7, 9, generator=gen, dtype=torch.float64)
    got = m.diagonal_profile(s)
    assert got["lags"] == list(range(-6, 9))
    for h in range(3):
        diags = naive_diagonals(s[h].tolist())
        for n, lag in enumerate(got["lags"]):
            vals = diags[lag]
            assert got["mean"][h][n] == pytest.approx(sum(vals) / len(vals), rel=1e-12, abs=1e-14)
            assert got["spread"][h][n] == pytest.approx(max(vals) - min(vals), rel=1e-12, abs=1e-14)
    assert not got["translation_invariant"]


def test_toeplitz_similarity_is_translation_invariant(gen):
    f = torch.randn(20, generator=gen, dtype=torch.float64)
    i = torch.arange(20)
    s = f[(i[None, :] - i[:, None]).abs()]  # depends on |i − j| only
    got = m.diagonal_profile(s)
    assert got["translation_invariant"] and got["max_spread"] == 0.0
    assert m.forward_profile(s).tolist() == pytest.approx(f.tolist(), rel=1e-14)
    assert m.symmetry(s)["symmetric"]
    assert not m.symmetry(s + torch.triu(torch.ones(20, 20), 1))["symmetric"]


@pytest.mark.parametrize("dim,length,base", [(24, 150, 500.0), (10, 97, 10000.0)])
def test_sinusoid_profile_and_monotonicity_against_loops(dim, length, base):
    table = torch.tensor(naive_sinusoid(length, dim, base), dtype=torch.float64)
    prof = m.table_distance_profile(table)
    ws = [base ** (-2 * i / dim) for i in range(dim // 2)]
    want = [sum(math.cos(d * w) for w in ws) for d in range(length)]
    assert prof["mean"] == pytest.approx(want, abs=1e-11)
    assert prof["translation_invariant"]
    mono = m.monotonicity(prof["mean"])
    rises = sum(1 for a, b in zip(want, want[1:]) if b - a > 1e-9 * max(map(abs, want)))
    assert mono["increases"] == rises and mono["steps"] == length - 1
    assert mono["argmin"] == min(range(length), key=want.__getitem__)
    assert mono["last"] == pytest.approx(want[-1], abs=1e-11)


def test_fft_profile_equals_exact_without_gram(gen):
    t = torch.randn(300, 6, generator=gen, dtype=torch.float64)
    exact = m.table_distance_profile(t)
    fast = m.table_distance_profile(t, exact_rows=100, sample_rows=40, seed=3)
    assert fast["method"] == "fft+sampled" and exact["method"] == "exact"
    assert fast["mean"] == pytest.approx(exact["mean"], abs=1e-11)
    assert fast["first_row"] == pytest.approx(exact["first_row"], abs=1e-12)
    # a sampled spread never exceeds the true one; with every row sampled it is the true one
    assert all(f <= e + 1e-12 for f, e in zip(fast["spread"], exact["spread"]))
    full = m.table_distance_profile(t, exact_rows=100, sample_rows=300)
    assert full["spread"] == pytest.approx(exact["spread"], abs=1e-12)


def test_monotonicity_counts_rises_and_ignores_noise():
    got = m.monotonicity([5.0, 4.0, 4.0 + 1e-15, 3.0, 3.5, 1.0, 2.0])
    assert got["increases"] == 2 and got["argmin"] == 5 and got["min"] == 1.0 and got["last"] == 2.0
    assert m.monotonicity([3.0, 2.0, 1.0])["decays"]
    assert not m.monotonicity([0.0, 0.0])["decays"]
    with pytest.raises(ValueError, match="empty"):
        m.monotonicity([])


def test_shift_map_recovers_a_known_rotation(gen):
    # rows v, A v, A² v, … with A orthogonal: T[p + k] = A^k T[p] exactly
    a, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=torch.float64))
    v = torch.randn(6, generator=gen, dtype=torch.float64)
    rows = [v]
    for _ in range(79):
        rows.append(a @ rows[-1])
    t = torch.stack(rows)
    mk, res = m.shift_map(t, 3)
    assert res.abs().max() < 1e-9
    torch.testing.assert_close(mk, torch.linalg.matrix_power(a, 3), atol=1e-7, rtol=0)
    for method in ("qr", "gram"):  # both methods see an exact map: a residual within their rounding bound
        got = m.shift_residual(t, (1, 3), method=method)
        assert all(r <= b for r, b in zip(got["max_residual"], got["residual_error_bound"])), got


@pytest.mark.parametrize("method", ["qr", "gram"])
@pytest.mark.parametrize("shape", [(90, 7), (300, 24)])
def test_shift_residual_matches_numpy_lstsq(gen, method, shape):
    length, width = shape
    t = torch.randn(length, width, generator=gen, dtype=torch.float64)
    got = m.shift_residual(t, (1, 4, 500), method=method)
    assert got["offsets"] == [1, 4] and got["skipped"] == [500]
    tn = t.numpy()
    for n, k in enumerate((1, 4)):
        x, y = tn[: length - k], tn[k:]
        sol = np.linalg.lstsq(x, y, rcond=None)[0]  # float64 LAPACK reference
        res = y - x @ sol
        want_max = np.abs(res).max() if method == "qr" else np.linalg.norm(res)  # gram: the Frobenius bound
        assert got["max_residual"][n] == pytest.approx(want_max, rel=1e-8)
        assert got["relative_residual"][n] == pytest.approx(np.linalg.norm(res) / np.linalg.norm(y), rel=1e-8)


@pytest.mark.parametrize("length,dim", [(512, 64), (1500, 96)])
def test_shift_methods_agree_on_the_sinusoid_within_their_bounds(length, dim):
    table = torch.tensor(naive_sinusoid(length, dim, 10000.0), dtype=torch.float64)
    qr, gram = (m.shift_residual(table, (1, 5, 50), method=k) for k in ("qr", "gram"))
    for fit in (qr, gram):  # an exact map exists: what is left is rounding, within the method's bound
        assert all(r <= b for r, b in zip(fit["max_residual"], fit["residual_error_bound"])), fit
    # ... and a random table of the same size is far above either bound, with the same relative residual
    rnd = torch.randn(length, dim, dtype=torch.float64)
    a, b = (m.shift_residual(rnd, (1, 5), method=k) for k in ("qr", "gram"))
    assert a["relative_residual"] == pytest.approx(b["relative_residual"], rel=1e-9)
    assert min(b["max_residual"]) > 1e3 * max(b["residual_error_bound"])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="offset"):
        m.shift_map(torch.zeros(5, 2), 5)
    with pytest.raises(TypeError, match="table"):
        m.norm_summary([[1.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="square"):
        m.symmetry(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="method"):
        m.shift_map(torch.randn(5, 2), 1, method="svd")


@pytest.mark.parametrize("name", names())
def test_every_registered_scheme_gets_a_property_row(name):
    row = m.scheme_properties(build(name, dim=32, num_heads=4), length=40, offsets=(1, 3))
    assert row["name"] == name and row["length"] <= 40
    for key in ("norm_constant", "translation_invariant", "symmetric", "defined_beyond"):
        assert isinstance(row[key], bool)
    # decay with distance is only asked of a similarity that is a function of distance
    assert isinstance(row["monotone_decay"], bool) if row["translation_invariant"] else row["monotone_decay"] is None


def test_property_rows_say_what_each_scheme_does():
    sin = m.scheme_properties(build("sinusoidal", dim=16, num_heads=2, base=100.0), length=60, offsets=(1, 7))
    assert sin["norm_constant"] and sin["translation_invariant"] and sin["defined_beyond"]
    assert sin["shift_residual"] < 1e-10 and sin["norm"] == pytest.approx(math.sqrt(8))
    learned = m.scheme_properties(build("learned", dim=16, num_heads=2, max_len=30), length=60, offsets=(1,))
    assert learned["length"] == 30 and not learned["defined_beyond"] and learned["max_position"] == 29
    assert not learned["translation_invariant"] and learned["shift_relative"] > 0.5
    alibi = m.scheme_properties(build("alibi", dim=16, num_heads=4), length=30)
    assert alibi["heads"] == 4 and alibi["monotone_decay"] and alibi["shift_residual"] is None


def test_defined_beyond_reports_the_value_there():
    sin = m.defined_beyond(build("sinusoidal", dim=20, num_heads=2), length=50, probe=1234)
    assert sin["defined"] and sin["matches_origin"]
    assert sin["next_at_probe"] == pytest.approx(sum(math.cos(10000 ** (-2 * i / 20)) for i in range(10)), abs=1e-12)
    learned = m.defined_beyond(build("learned", dim=8, num_heads=2, max_len=10), length=10)
    assert not learned["defined"] and "10 rows" in learned["error"]


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (7, 7), (4, 9), (9, 4), (2, 33, 20), (150, 90), (2, 70, 200)])
def test_diagonal_stats_match_a_loop_over_diagonals(gen, shape):
    s = torch.randn(*shape, generator=gen, dtype=torch.float64)
    got = m.diagonal_profile(s)
    heads = s if s.dim() == 3 else s[None]
    for h, mat in enumerate(heads):
        mean = got["mean"][h] if s.dim() == 3 else got["mean"]
        spread = got["spread"][h] if s.dim() == 3 else got["spread"]
        for n, lag in enumerate(got["lags"]):
            d = torch.diagonal(mat, offset=lag)
            assert mean[n] == pytest.approx(float(d.mean()), rel=1e-12, abs=1e-14)
            assert spread[n] == pytest.approx(float(d.max() - d.min()), rel=1e-12, abs=1e-14)
    fwd = m.forward_profile(s)
    for lag in range(shape[-1]):
        want = [float(torch.diagonal(mat, offset=lag).mean()) for mat in heads]
        assert (fwd[..., lag].flatten().tolist()) == pytest.approx(want, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (3, 130, 130), (257, 257)])  # tiles of 128: edges included
def test_symmetry_matches_the_whole_transpose(gen, shape):
    s = torch.randn(*shape, generator=gen, dtype=torch.float64)
    assert m.symmetry(s)["asymmetry"] == float((s - s.transpose(-1, -2)).abs().max())
    assert m.symmetry(s + s.transpose(-1, -2))["symmetric"]


def test_shift_residual_refuses_a_non_finite_table_instead_of_scoring_it_perfect():
    table = torch.full((16, 4), float("nan"))
    with pytest.raises(ValueError, match="table row 0 holds NaN"):  # was a relative residual of 0.0
        m.shift_residual(table, (1, 2))
    table = torch.randn(16, 4)
    table[9, 2] = float("inf")
    with pytest.raises(ValueError, match="table row 9"):
        m.shift_residual(table, (1,))


def test_shift_residual_of_an_all_zero_table_is_undefined_not_perfect():
    rel = m.shift_residual(torch.zeros(16, 4), (1, 2))["relative_residual"]
    assert all(math.isnan(r) for r in rel)
