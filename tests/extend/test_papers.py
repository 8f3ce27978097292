"""The per-paper checks of the extension report: each verdict follows its rule, on cells whose answer is known."""

from __future__ import annotations

import itertools
import random

import pytest

from posenc.extend.papers import FAILS, HOLDS, UNDECIDED
from posenc.extend.report import markdown, summarise
from posenc.extend.stats import fisher_exact

L0 = 100


def _loss_cell(method, factor, ppls, doc="d"):
    edges = [i * L0 // 2 for i in range(len(ppls) + 1)]
    buckets = [{"start": a, "end": b, "tokens": b - a, "ppl": p} for a, b, p in zip(edges[:-1], edges[1:], ppls)]
    return {"kind": "loss", "document": doc, "source": "src", "method": method, "factor": factor,
            "original_max_len": L0, "length": edges[-1], "buckets": buckets, "seconds": 1.0,
            "sdpa": {"causal_path_only": True}, "curve": {"position": [1, 2], "ppl": [3, 4], "window": 1}}


def _passkey_cell(method, factor, length, found, task="passkey"):
    return {"kind": "passkey", "task": task, "method": method, "factor": factor, "length": length,
            "original_max_len": L0, "trials": [{"correct": bool(f), "prompt_tokens": length, "seconds": 1.0}
                                               for f in found]}


def _by_paper(summary, paper):
    return next(p for p in summary["papers"] if p["paper"] == paper)["checks"]


def _fisher_by_permutation(k1, n1, k2, n2):
    """Reference: every way to deal the pooled outcomes into groups of n1 and n2, counted directly."""
    pooled = [1] * (k1 + k2) + [0] * (n1 + n2 - k1 - k2)
    counts: dict[int, int] = {}
    for first in itertools.combinations(range(n1 + n2), n1):
        x = sum(pooled[i] for i in first)
        counts[x] = counts.get(x, 0) + 1
    total = sum(counts.values())
    return min(1.0, sum(c for c in counts.values() if c <= counts[k1]) / total)


def test_fisher_exact_equals_counting_every_split(seed):
    rng = random.Random(seed)
    for _ in range(25):
        n1, n2 = rng.randint(1, 8), rng.randint(1, 8)
        k1, k2 = rng.randint(0, n1), rng.randint(0, n2)
        assert fisher_exact(k1, n1, k2, n2) == pytest.approx(_fisher_by_permutation(k1, n1, k2, n2), rel=1e-12)
    assert fisher_exact(0, 0, 3, 5) == 1.0
    with pytest.raises(ValueError, match="successes must lie in"):
        fisher_exact(6, 5, 1, 5)


def test_self_extend_loss_checks_follow_their_rules(seed):
    rng = random.Random(seed)
    base = [rng.uniform(5, 6) for _ in range(2)]
    plain = _loss_cell("rope", None, base + [base[1] * 3, base[1] * 40])
    flat = _loss_cell("self-extend", 2.0, [base[0] * 1.01, base[1] * 1.01, base[1] * 1.1, base[1] * 1.15])
    checks = _by_paper(summarise([plain, flat]), "Self-Extend")
    assert [c["verdict"] for c in checks] == [HOLDS, HOLDS, HOLDS]  # flat, far below plain, in range ≤ 5 %
    assert checks[2]["values"][0] == pytest.approx(1.01)
    # costs 8 % in range and rises past L0 like plain RoPE: all three fail
    broken = _loss_cell("self-extend", 2.0, [base[0] * 1.08, base[1] * 1.08, base[1] * 3, base[1] * 40])
    checks = _by_paper(summarise([plain, broken]), "Self-Extend")
    assert [c["verdict"] for c in checks] == [FAILS, FAILS, FAILS]


def _outcomes(rng, n, **kinds):
    """n trials per method; kinds: method -> 'all', 'none' or a probability."""
    out = {}
    for m, kind in kinds.items():
        p = {"all": 1.0, "none": 0.0}.get(kind, kind)
        out[m] = [rng.random() < p for _ in range(n)]
    return out


def test_retrieval_checks_decide_only_when_significant(seed):
    rng = random.Random(seed)
    n = 20
    length = int(1.5 * L0)
    found = _outcomes(rng, n, rope="none", se="all")
    cells = [_passkey_cell("rope", None, length, found["rope"]), _passkey_cell("self-extend", 2.0, length, found["se"])]
    (check,) = _by_paper(summarise(cells), "Self-Extend")
    assert check["verdict"] == HOLDS and check["document"] == f"passkey at {length}"
    cells = [_passkey_cell("rope", None, length, found["se"]), _passkey_cell("self-extend", 2.0, length, found["rope"])]
    assert _by_paper(summarise(cells), "Self-Extend")[0]["verdict"] == FAILS
    # two discordant trials cannot decide (exact McNemar p = 0.5)
    few = [True, True] + [False] * (n - 2)
    cells = [_passkey_cell("rope", None, length, [False] * n), _passkey_cell("self-extend", 2.0, length, few)]
    assert _by_paper(summarise(cells), "Self-Extend")[0]["verdict"] == UNDECIDED
    # past s·L0 the claim is not made: no check
    cells = [_passkey_cell("rope", None, 3 * L0, found["rope"]), _passkey_cell("self-extend", 2.0, 3 * L0, found["se"])]
    assert _by_paper(summarise(cells), "Self-Extend") == []


def test_string_checks(seed):
    rng = random.Random(seed)
    n = 20
    short = [True] * n
    near = [rng.random() < 0.1 for _ in range(n)]  # plain RoPE fails near L0 ...
    fixed = [True] * n  # ... STRING does not
    cells = [_passkey_cell("rope", None, L0 // 2, short), _passkey_cell("rope", None, L0, near),
             _passkey_cell("string", None, L0, fixed), _passkey_cell("string", None, L0 // 2, short)]
    checks = _by_paper(summarise(cells), "STRING")
    premise, better = checks  # STRING at L0/2 is not in (L0/2, L0]: no check there
    assert premise["verdict"] == HOLDS
    expected = fisher_exact(sum(near), n, n, n)
    assert premise["values"][1] == f"p {expected:.3g}"
    assert better["verdict"] == HOLDS and better["document"] == f"passkey at {L0}"
    # no shortfall inside L0: the premise does not hold only if it is significantly the other way
    cells[0], cells[1] = _passkey_cell("rope", None, L0 // 2, near), _passkey_cell("rope", None, L0, short)
    cells[2] = _passkey_cell("string", None, L0, short)
    premise, better = _by_paper(summarise(cells), "STRING")
    assert premise["verdict"] == FAILS and better["verdict"] == UNDECIDED  # identical outcomes: no discordance


def test_markdown_lists_every_check(seed):
    rng = random.Random(seed)
    base = [rng.uniform(5, 6) for _ in range(4)]
    cells = [_loss_cell("rope", None, base), _loss_cell("rope-linear", 2.0, [b * 1.3 for b in base]),
             _loss_cell("rope-yarn", 2.0, [b * 1.01 for b in base]), _loss_cell("self-extend", 2.0, base)]
    summary = summarise(cells)
    text = markdown(summary, {"command": "test"})
    total = sum(len(p["checks"]) for p in summary["papers"])
    assert total == 2 + 3  # YaRN: YaRN beats PI, plain ≥ 2× best; Self-Extend: flat, ≥ 2× plain (fails), in range
    assert text.count("| YaRN |") + text.count("| Self-Extend |") == total
    assert "**does not hold**" in text  # plain RoPE is not 2× above Self-Extend here
    assert summary["yarn_paper"]["total"] == 2  # the key earlier reports' readers use
