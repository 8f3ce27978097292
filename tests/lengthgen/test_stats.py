"""Interval arithmetic: Wilson against hand computations, the bootstrap against the binomial formula,
the paired comparison and the competition rank on cases whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc.lengthgen import stats


def test_wilson_matches_a_hand_computation():
    # 8 of 10, z = 1.96: centre (0.8 + 1.96²/20) / (1 + 1.96²/10) = 0.99208 / 1.38416 = 0.716738;
    # half-width 1.96·sqrt(0.8·0.2/10 + 1.96²/400) / 1.38416 = 0.313624 / 1.38416 = 0.226581
    lo, hi = stats.wilson(8, 10, z=1.96)
    assert lo == pytest.approx(0.716738 - 0.226581, abs=1e-6) and hi == pytest.approx(0.716738 + 0.226581, abs=1e-6)
    # 0 of n: the interval is [0, z²/(n + z²)] (the centre equals the half-width)
    assert stats.wilson(0, 10, z=1.96) == pytest.approx((0.0, 1.96**2 / (10 + 1.96**2)), abs=1e-12)
    # n of n mirrors it
    assert stats.wilson(10, 10, z=1.96) == pytest.approx((1 - 1.96**2 / (10 + 1.96**2), 1.0), abs=1e-12)
    # Newcombe (1998), Table I, 81/263: 0.2553 to 0.3662
    lo, hi = stats.wilson(81, 263)
    assert round(lo, 4) == 0.2553 and round(hi, 4) == 0.3662


@pytest.mark.parametrize("k, n", [(-1, 10), (11, 10), (0, 0)])
def test_wilson_refuses_impossible_counts(k, n):
    with pytest.raises(ValueError, match="0 <= k <= n"):
        stats.wilson(k, n)


def test_bootstrap_of_one_seed_has_the_binomial_spread(seed):
    rng = np.random.default_rng(seed)
    p, width = float(rng.uniform(0.2, 0.8)), 400
    hits = (rng.random((1, width)) < p).astype(np.uint8)
    reps = stats.bootstrap({"a": hits}, replicates=4000, seed=seed)["a"]
    observed = hits.mean()
    assert reps.mean() == pytest.approx(observed, abs=0.01)
    assert reps.std() == pytest.approx(math.sqrt(observed * (1 - observed) / width), rel=0.1)


def test_bootstrap_resamples_seeds_too(seed):
    # two seeds, one perfect and one at zero, on identical examples: the mean is 0.5 but a seed
    # resample gives 0, 0.5 or 1 (probabilities 1/4, 1/2, 1/4) — the seed spread shows in the interval
    hits = np.stack([np.ones(50, np.uint8), np.zeros(50, np.uint8)])
    reps = stats.bootstrap({"a": hits}, replicates=4000, seed=seed)["a"]
    assert set(np.unique(reps)) == {0.0, 0.5, 1.0}
    assert (reps == 0.5).mean() == pytest.approx(0.5, abs=0.04)
    lo, hi = stats.interval(reps)
    assert lo == 0.0 and hi == 1.0


def test_paired_comparison_and_rank(seed):
    rng = np.random.default_rng(seed)
    base = (rng.random((3, 300)) < 0.6).astype(np.uint8)
    better = np.maximum(base, (rng.random((3, 300)) < 0.5).astype(np.uint8))  # every hit of base, and more
    reps = stats.bootstrap({"base": base, "same": base.copy(), "better": better}, replicates=1000, seed=seed)
    pairs = stats.compare(reps)
    assert pairs[("better", "base")]["significant"] and pairs[("better", "base")]["diff"] > 0
    assert pairs[("base", "better")]["significant"] and pairs[("base", "better")]["diff"] < 0
    # identical verdicts on the same resampled examples: the difference is 0 in replicates whose seed
    # draws coincide, and never significant
    assert not pairs[("same", "base")]["significant"]
    means = {k: float(v.mean()) for k, v in {"base": base, "same": base, "better": better}.items()}
    assert stats.rank(means, pairs) == {"better": 1, "base": 2, "same": 2}


def test_bootstrap_refuses_mismatched_test_sets():
    with pytest.raises(ValueError, match="one E"):
        stats.bootstrap({"a": np.ones((2, 5)), "b": np.ones((2, 6))})
