"""Intervals and comparisons for exact-match accuracies: Wilson for one cell, bootstrap for a scheme.

* One cell (one trained model) answers n test examples, k correctly: its
  accuracy is a binomial proportion, and :func:`wilson` gives its score
  interval (Wilson, 1927; Brown, Cai & DasGupta, 2001 recommend it over the
  normal approximation, which collapses to a point at 0 % and 100 %).
* A scheme on a task has several seeds. Its accuracy varies with the seed
  (training) *and* with the test sample, so :func:`bootstrap` resamples both:
  each replicate draws the seeds with replacement and, once for every scheme
  alike, the test examples with replacement (all schemes answer the same test
  set). The percentile interval of the replicates is the scheme's interval.
* Two schemes are compared by the *paired* bootstrap on those same replicates:
  the difference of their means is computed on the same resampled examples, so
  the test-set noise they share cancels. A difference whose 95 % interval
  excludes 0 is called significant; otherwise the two are tied.
  :func:`rank` turns that into a competition rank: 1 + the number of schemes
  significantly ahead (so schemes tied with the leader share rank 1).

With three seeds a seed resample has only ten distinct outcomes; the intervals
are honest about that (they are wide when seeds disagree), not refined by it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (two-sided, ``z`` = 1.96 for 95 %).

    Raises:
        ValueError: n < 1 or k outside 0..n.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need n >= 1 and 0 <= k <= n, got k={k}, n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(groups: Mapping[str, np.ndarray], *, replicates: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    """Bootstrap replicates of each group's mean accuracy, resampling seeds and shared test examples.

    Args:
        groups: name → (S, E) array of 0/1 verdicts: S seeds (rows) answering the same E
            test examples (columns, in the same order for every group).
        replicates: bootstrap replicates B.
        seed: seed of the resampling.

    Returns:
        name → (B,) array of replicate means. Replicate b uses one draw of example columns for
        every group (the pairing) and an independent draw of seed rows per group.
    """
    if not groups:
        return {}
    widths = {a.shape[1] for a in groups.values()}
    if len(widths) != 1 or any(a.ndim != 2 or a.shape[0] < 1 for a in groups.values()):
        raise ValueError(f"every group must be (seeds >= 1, E) with one E, got {[a.shape for a in groups.values()]}")
    (width,) = widths
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, width, size=(replicates, width))  # (B, E), shared by every group
    out = {}
    for name, hits in groups.items():
        rows = rng.integers(0, hits.shape[0], size=(replicates, hits.shape[0]))  # (B, S)
        per_seed = hits.astype(np.float64)[rows[:, :, None], cols[:, None, :]]  # (B, S, E)
        out[name] = per_seed.mean(axis=(1, 2))
    return out


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates."""
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def compare(reps: Mapping[str, np.ndarray], level: float = 0.95) -> dict[tuple[str, str], dict[str, float | bool]]:
    """Paired-bootstrap difference of every ordered pair (a, b): mean a − b, its interval, significant or not."""
    out: dict[tuple[str, str], dict[str, float | bool]] = {}
    for a in reps:
        for b in reps:
            if a == b:
                continue
            diff = reps[a] - reps[b]
            lo, hi = interval(diff, level)
            out[(a, b)] = {"diff": float(diff.mean()), "low": lo, "high": hi, "significant": lo > 0 or hi < 0}
    return out


def rank(means: Mapping[str, float], pairs: Mapping[tuple[str, str], Mapping[str, float | bool]]) -> dict[str, int]:
    """Competition rank: 1 + the number of schemes significantly ahead (ties share a rank)."""
    return {a: 1 + sum(1 for b in means if b != a and pairs[(b, a)]["significant"] and pairs[(b, a)]["diff"] > 0)
            for a in means}
