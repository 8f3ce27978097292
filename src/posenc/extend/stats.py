"""Statistics for retrieval: Wilson intervals per cell and exact paired comparisons between methods.

Every method answers the very same prompts (``retrieval``), so two methods are
compared on their *paired* outcomes: of the trials where they disagree, b had
method A right and B wrong, c the reverse. The exact McNemar test asks
whether b and c could be one Binomial(b + c, ½) draw: the two-sided p-value is
min(1, 2·P[X ≤ min(b, c)]), X ~ Binomial(b + c, ½) (McNemar, 1947; the exact
form of Fagerland, Lydersen & Laake, 2013). Trials both get right or both get
wrong say nothing about the difference and are not counted — which is why a
paired test separates methods that unpaired intervals would call overlapping.

Within one (task, length) every pair of methods is tested, and the p-values
are adjusted by Holm's step-down method (Holm, 1979), so "significant at 0.05"
holds for the whole family of comparisons at that length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from posenc.extend.passkey import wilson

ALPHA = 0.05


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b and c (1.0 when there are none)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (monotone, capped at 1)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def paired(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Discordant counts of two methods on the same trials (the first min(len) of each) and the exact test."""
    n = min(len(a), len(b))
    only_a = sum(1 for x, y in zip(a[:n], b[:n]) if x and not y)
    only_b = sum(1 for x, y in zip(a[:n], b[:n]) if y and not x)
    return {"trials": n, "only_first": only_a, "only_second": only_b, "p": mcnemar_exact(only_a, only_b)}


def compare_methods(outcomes: dict[str, Sequence[bool]]) -> list[dict[str, Any]]:
    """Every pair of methods at one (task, length): discordant counts, exact p, Holm-adjusted p, significant.

    Args:
        outcomes: label → per-trial found/not, in trial order (the same prompts for every label).
    """
    rows = []
    for first, second in combinations(outcomes, 2):
        rows.append({"first": first, "second": second, **paired(outcomes[first], outcomes[second])})
    for row, adj in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = adj
        row["significant"] = adj < ALPHA
        row["better"] = (row["first"] if row["only_first"] > row["only_second"] else row["second"]) \
            if row["significant"] else None
    return rows


def interval(successes: int, trials: int) -> dict[str, Any]:
    lo, hi = wilson(successes, trials)
    return {"correct": successes, "trials": trials, "accuracy": successes / trials if trials else None,
            "wilson_low": lo, "wilson_high": hi}


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided exact p-value of Fisher's test that k1/n1 and k2/n2 share one success rate (unpaired trials).

    Given the k1 + k2 successes, the count in the first group is hypergeometric; the p-value sums the
    probability of every split no more likely than the observed one (Fisher, 1935; a relative tolerance of
    1e-9 keeps ties exact in floating point). 1.0 when either group has no trials.
    """
    for k, n in ((k1, n1), (k2, n2)):
        if not 0 <= k <= n:
            raise ValueError(f"successes must lie in [0, trials], got {k} of {n}")
    if n1 == 0 or n2 == 0:
        return 1.0
    k = k1 + k2
    total = math.comb(n1 + n2, k)
    prob = {x: math.comb(n1, x) * math.comb(n2, k - x) / total for x in range(max(0, k - n2), min(k, n1) + 1)}
    observed = prob[k1]
    return min(1.0, math.fsum(p for p in prob.values() if p <= observed * (1 + 1e-9)))
