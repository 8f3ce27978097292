"""The replication report's claims: verdicts from synthetic cells whose answer is known, intervals against mpmath."""

from __future__ import annotations

import math
import random

import mpmath
import pytest

from posenc.finetune.grid import ReplicationConfig
from posenc.finetune.report import BEYOND_TOLERANCE, claims, markdown, summarise

STEPS = (0, 50, 200, 400)
METHODS = ("rope", "rope-linear", "rope-yarn", "rope-longrope")


def _cfg(l0: int, seeds: tuple[int, ...]) -> ReplicationConfig:
    return ReplicationConfig(original_max_len=l0, methods=METHODS, factors=(4.0,), steps=STEPS, seeds=seeds,
                             eval_factor=16, documents=("bible",), passkey_factors=(), passkey_trials=0)


def _buckets(l0: int, ppl_in: float, ppl_to: float, ppl_beyond: float, rng: random.Random) -> list[dict]:
    """Buckets of width l0/2 over [0, 16·l0); each range's buckets share its perplexity up to a small wobble
    whose token-weighted log mean is zero (so the range's perplexity is exactly the one asked for)."""
    out, width = [], l0 // 2
    for lo, hi, ppl in ((0, l0, ppl_in), (l0, 4 * l0, ppl_to), (4 * l0, 16 * l0, ppl_beyond)):
        starts = list(range(lo, hi, width))
        wobble = [rng.uniform(-0.05, 0.05) for _ in starts]
        mean = sum(wobble) / len(wobble)
        for start, w in zip(starts, wobble):
            out.append({"start": start, "end": start + width, "tokens": width, "ppl": ppl * math.exp(w - mean)})
    return out


def _cells(l0: int, seeds: tuple[int, ...], table, rng: random.Random) -> list[dict]:
    """table(method, step, seed) -> (ppl on [0, L0), on [L0, 4·L0), beyond)."""
    cells = []
    for seed in seeds:
        for method in METHODS:
            measures = {str(step): {"loss": {"bible": {"buckets": _buckets(l0, *table(method, step, seed), rng)}},
                                    "passkey": {}} for step in STEPS}
            cells.append({"name": f"{method}-x4-seed{seed}", "method": method, "factor": 4.0, "seed": seed,
                          "measures": measures})
    return cells


def _t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with df degrees of freedom, from its CDF (regularised incomplete beta)."""
    cdf = lambda t: 1 - 0.5 * mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True)  # noqa: E731
    return float(mpmath.findroot(lambda t: cdf(t) - 0.975, 2.0))


def _by_id(result: list[dict], cid: str, **match) -> dict:
    found = [c for c in result if c["id"] == cid and all(c.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (cid, match, found)
    return found[0]


@pytest.mark.parametrize("yarn_reaches", [0, 50, 200, None])
def test_the_yarn_step_claim_reads_the_step_where_yarn_meets_pi(seed, yarn_reaches):
    rng = random.Random(seed)
    l0, seeds = rng.choice([16, 32, 64]), (0, 1, 2)
    pi_last = rng.uniform(5, 20)

    def table(method, step, s):
        if method == "rope-linear":
            return 3.0, pi_last * (1.5 if step < 400 else 1.0) * (1 + 0.01 * s), pi_last
        if method == "rope-yarn":
            below = yarn_reaches is not None and step >= yarn_reaches
            return 3.0, pi_last * (0.9 if below else 1.2), pi_last
        return 3.0, 9.0, 9.0

    summary = summarise(_cells(l0, seeds, table, rng), _cfg(l0, seeds))
    c = _by_id(summary["claims"], "yarn-fewer-steps", factor=4.0)
    expected = {0: "holds", 50: "holds", 200: "undecided", None: "does not hold"}[yarn_reaches]
    assert c["verdict"] == expected
    assert c["measured"]["yarn_step"] == yarn_reaches
    # PI's perplexity after 400 steps: the geometric mean over seeds of exactly what each seed was given
    want = math.exp(sum(math.log(pi_last * (1 + 0.01 * s)) for s in seeds) / len(seeds))
    assert c["measured"]["pi_ppl"]["ppl"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("shape", ["flat", "breaks", "noisy"])
def test_holds_beyond_is_a_per_seed_ratio_with_a_t_interval(seed, shape):
    rng = random.Random(seed)
    l0 = rng.choice([16, 32])
    seeds = tuple(range(rng.choice([3, 4, 5])))
    ratios = {"flat": [rng.uniform(0.95, 1.02) for _ in seeds], "breaks": [rng.uniform(1.5, 1.6) for _ in seeds],
              "noisy": [rng.choice([0.9, 1.4]) for _ in seeds]}[shape]
    if shape == "noisy":
        ratios[0], ratios[1] = 0.9, 1.4  # both sides of the tolerance: the interval straddles it
    to_target = {s: rng.uniform(4, 8) for s in seeds}

    def table(method, step, s):
        return 3.0, to_target[s], to_target[s] * ratios[s]

    summary = summarise(_cells(l0, seeds, table, rng), _cfg(l0, seeds))
    c = _by_id(summary["claims"], "holds-beyond", factor=4.0, method="rope-yarn")
    logs = [math.log(r) for r in ratios]
    n, mean = len(logs), sum(logs) / len(logs)
    half = _t975(n - 1) * math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1)) / math.sqrt(n)
    got = c["measured"]["ratio"]
    assert got["ppl"] == pytest.approx(math.exp(mean), rel=1e-9)
    assert got["lo"] == pytest.approx(math.exp(mean - half), rel=1e-3)  # the report's t table has 4 digits
    assert got["hi"] == pytest.approx(math.exp(mean + half), rel=1e-3)
    hi, lo = math.exp(mean + half), math.exp(mean - half)
    expected = "holds" if hi <= BEYOND_TOLERANCE else "does not hold" if lo > BEYOND_TOLERANCE else "undecided"
    assert c["verdict"] == expected
    assert c["verdict"] == {"flat": "holds", "breaks": "does not hold", "noisy": "undecided"}[shape]


def test_longrope_against_yarn_needs_intervals_apart_after_fine_tuning(seed):
    rng = random.Random(seed)
    l0, seeds = 32, (0, 1, 2)
    gap = rng.uniform(0.2, 0.4)

    def table(method, step, s):
        base = 6.0 + 0.01 * s
        if method == "rope-longrope":
            return 3.0, base * (1 - gap if step == 400 else 1.01), 8.0
        return 3.0, base, 8.0

    summary = summarise(_cells(l0, seeds, table, rng), _cfg(l0, seeds))
    assert _by_id(summary["claims"], "longrope-beats-yarn", factor=4.0, step=400)["verdict"] == "holds"
    assert _by_id(summary["claims"], "longrope-beats-yarn", factor=4.0, step=0)["verdict"] == "does not hold"
    # one seed: no interval, so no verdict after fine-tuning
    one = summarise([c for c in _cells(l0, seeds, table, rng) if c["seed"] == 0], _cfg(l0, (0,)))
    assert _by_id(one["claims"], "longrope-beats-yarn", factor=4.0, step=400)["verdict"] == "undecided"
    text = markdown(summary, _cfg(l0, seeds), {})
    assert "## The papers' claims" in text and "**holds**" in text


def test_claims_without_their_cells_say_not_measured(seed):
    cfg = _cfg(32, (0,))
    result = claims([], cfg)
    assert result == []
    rng = random.Random(seed)
    cells = [c for c in _cells(32, (0,), lambda m, st, s: (3.0, 6.0, 7.0), rng) if c["method"] == "rope"]
    summary = summarise(cells, cfg)
    assert _by_id(summary["claims"], "yarn-fewer-steps", factor=4.0)["verdict"] == "not measured"
    assert _by_id(summary["claims"], "holds-beyond", factor=4.0, method="rope")["verdict"] == "undecided"
    assert _by_id(summary["claims"], "holds-beyond", factor=4.0, method="rope-yarn")["verdict"] == "not measured"


def test_pairing_by_seed_decides_what_unpaired_intervals_cannot(seed):
    """Seeds that move every method alike (the same windows) hide a steady 2 % gap from unpaired intervals;
    the per-seed ratio finds it, and equals a direct computation of the paired t-interval."""
    rng = random.Random(seed)
    l0, seeds = 32, (0, 1, 2)
    level = {s: rng.uniform(4, 9) for s in seeds}  # the seed's own effect, shared by both methods
    gap = {s: rng.uniform(0.975, 0.985) for s in seeds}

    def table(method, step, s):
        if method == "rope-longrope" and step > 0:
            return 3.0, level[s] * gap[s], 8.0
        return 3.0, level[s] if step > 0 else 6.0, 8.0

    summary = summarise(_cells(l0, seeds, table, rng), _cfg(l0, seeds))
    c = _by_id(summary["claims"], "longrope-beats-yarn", factor=4.0, step=400)
    lr, y = c["measured"]["longrope_ppl"], c["measured"]["yarn_ppl"]
    assert lr["hi"] > y["lo"]  # unpaired, the intervals overlap ...
    assert c["verdict"] == "holds"  # ... paired, the gap is certain
    logs = [math.log(gap[s]) for s in seeds]
    mean = sum(logs) / 3
    half = _t975(2) * math.sqrt(sum((v - mean) ** 2 for v in logs) / 2) / math.sqrt(3)
    r = c["measured"]["ratio"]
    assert r["n"] == 3 and r["ppl"] == pytest.approx(math.exp(mean), rel=1e-9)
    assert r["hi"] == pytest.approx(math.exp(mean + half), rel=1e-3)


def test_the_measure_before_fine_tuning_pairs_with_every_seed(seed):
    """Step 0 is one model whatever the seed: YaRN training-free against PI after 400 steps pairs it with each
    of PI's seeds; YaRN that gets there only at step 400 does not hold the claim."""
    rng = random.Random(seed)
    l0, seeds = 32, (0, 1, 2)
    pi = {s: rng.uniform(5, 6) for s in seeds}
    yarn0 = rng.uniform(4, 4.5)  # training-free YaRN already below PI's 400-step perplexity, for every seed

    def table(method, step, s):
        if method == "rope-linear":
            return 3.0, pi[s] if step == 400 else 9.0, 9.0
        if method == "rope-yarn":
            return 3.0, yarn0 if step == 0 else 7.0, 9.0
        return 3.0, 9.0, 9.0

    summary = summarise(_cells(l0, seeds, table, rng), _cfg(l0, seeds))
    c = _by_id(summary["claims"], "yarn-fewer-steps", factor=4.0)
    assert c["verdict"] == "holds" and c["measured"]["yarn_step_sure"] == 0
    logs = [math.log(yarn0) - math.log(pi[s]) for s in seeds]
    assert c["measured"]["ratio"]["n"] == 3
    assert c["measured"]["ratio"]["ppl"] == pytest.approx(math.exp(sum(logs) / 3), rel=1e-9)

    def later(method, step, s):  # YaRN needs all 400 steps (surely above PI's 400-step level before)
        if method == "rope-yarn":
            return 3.0, {0: 9.0, 50: 8.0, 200: 7.0, 400: 4.0}[step], 9.0
        return table(method, step, s)

    summary = summarise(_cells(l0, seeds, later, rng), _cfg(l0, seeds))
    assert _by_id(summary["claims"], "yarn-fewer-steps", factor=4.0)["verdict"] == "does not hold"
