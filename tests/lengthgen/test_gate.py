"""The convergence gate: training stops once held-out in-range accuracy reaches the threshold, and a
cell that never does is reported as not learned and kept out of every beyond-range number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.lengthgen import QUICK, summarise, train_cell
from posenc.lengthgen.summary import cell_row
from posenc.train import TrainConfig, train


def fake_cell(scheme: str, seed: int, *, learned: bool, inside: float, beyond: float, rng, per_length: int = 40):
    """A finished cell of copy trained on 1–2, tested to 4, with verdicts drawn at the given accuracies."""
    def draw(p):
        return "".join("1" if x else "0" for x in rng.random(per_length) < p)

    hits = {"1": draw(inside), "2": draw(inside), "3": draw(beyond), "4": draw(beyond)}
    return {"task": "copy", "scheme": scheme, "seed": seed, "framing": "decoder", "length_unit": "symbols",
            "train_lengths": [1, 2], "test_max": 4, "hits": hits,
            "accuracy": {n: v.count("1") / len(v) for n, v in hits.items()}, "learned": learned,
            "gate": {"threshold": 0.99, "passed_at": 100 if learned else None, "accuracy": 1.0 if learned else 0.4,
                     "curve": []}, "steps": 100 if learned else 500, "budget": 500, "cpu_seconds": 1.0}


def test_a_cell_that_did_not_learn_is_excluded_not_averaged_as_zero(seed):
    rng = np.random.default_rng(seed)
    cells = [fake_cell("rope", s, learned=True, inside=1.0, beyond=0.5, rng=rng) for s in range(3)]
    cells += [fake_cell("none", s, learned=False, inside=0.4, beyond=0.0, rng=rng) for s in range(3)]
    # alibi: two seeds learned, one did not (its zeros must not pull the mean down)
    cells += [fake_cell("alibi", s, learned=True, inside=1.0, beyond=0.8, rng=rng) for s in range(2)]
    cells.append(fake_cell("alibi", 2, learned=False, inside=0.5, beyond=0.0, rng=rng))
    t = summarise(cells, replicates=300)["copy"]
    none, alibi = t["schemes"]["none"], t["schemes"]["alibi"]
    assert not none["learned"] and none["beyond"] is None and none["rank"] is None and none["by_length"] == {}
    assert all("none" not in pair for pair in t["pairs"])
    assert alibi["learned_seeds"] == [0, 1] and alibi["seeds"] == [0, 1, 2]
    learned_alibi = [c for c in cells if c["scheme"] == "alibi" and c["learned"]]
    expected = np.mean([c["hits"][n].count("1") / 40 for c in learned_alibi for n in ("3", "4")])
    assert alibi["beyond"] == pytest.approx(expected)
    assert t["order"][-1] == "none"  # not-learned schemes come last
    # the paper's pairs with NoPE cannot be tested, and say so
    reading = {(r["leader"], r["laggard"]): r for r in t["paper"]["pairs"]}
    assert reading[("none", "rope")]["reading"] == "not testable" and "none did not learn" in reading[("none", "rope")]["why"]


def test_cell_row_counts_hits_and_wilson():
    rng = np.random.default_rng(0)
    cell = fake_cell("rope", 0, learned=True, inside=1.0, beyond=0.0, rng=rng)
    cell["hits"]["3"] = "1" * 10 + "0" * 30
    row = cell_row(cell)
    assert row["beyond"] == pytest.approx(10 / 80) and row["in_range"] == 1.0
    lo, hi = row["beyond_ci"]
    assert lo < 10 / 80 < hi


def test_train_stops_at_the_first_evaluation_that_passes(seed):
    model = torch.nn.Linear(3, 1)
    data = torch.randn(8, 3, generator=torch.Generator().manual_seed(seed))
    seen = []

    def evaluate(m, step):
        seen.append(step)
        return {"gate": step / 100}

    def loss_fn(m, x):
        return m(x).pow(2).sum(), x.shape[0]

    result = train(model, loss_fn, lambda step, rank, world: data, TrainConfig(steps=100, eval_every=10, progress=False),
                   evaluate=evaluate, stop_when=lambda ev: ev["gate"] >= 0.3)
    assert result.stopped_early and result.step == 30 and seen == [10, 20, 30]  # no second look at step 30
    assert [e["step"] for e in result.evals] == [10, 20, 30]
    full = train(torch.nn.Linear(3, 1), loss_fn, lambda step, rank, world: data,
                 TrainConfig(steps=40, eval_every=10, progress=False), evaluate=evaluate,
                 stop_when=lambda ev: False)
    assert not full.stopped_early and full.step == 40


@pytest.mark.slow
def test_gate_stops_training_once_learned_and_reports_a_budget_that_ran_out():
    easy = QUICK.with_changes(task_options={"num_symbols": 3}, train_max=1, test_max=2, gate_examples=10, eval_examples=10, threshold=0.9,
                              model={"dim": 32, "num_heads": 2, "num_layers": 1},
                              train={"steps": 400, "eval_every": 20, "warmup_steps": 10, "lr": 1e-2})
    cell = train_cell("copy", "rope", seed=0, config=easy)
    assert cell["learned"] and cell["steps"] < 400  # stopped by the gate, not by the budget
    assert cell["gate"]["passed_at"] == cell["steps"] and cell["gate"]["accuracy"] >= 0.9
    steps, accs = zip(*cell["gate"]["curve"])
    assert list(steps) == list(range(20, cell["steps"] + 1, 20)) and all(a < 0.9 for a in accs[:-1])
    starved = easy.with_changes(train={"steps": 3, "eval_every": 0, "warmup_steps": 1})
    cell = train_cell("copy", "rope", seed=0, config=starved)
    assert not cell["learned"] and cell["gate"]["passed_at"] is None and cell["steps"] == 3
    assert cell["gate"]["curve"][-1][0] == 3  # the budget's end is gated too


def test_each_published_claim_is_read_against_its_own_baselines(seed):
    """FoPE far ahead of RoPE and ALiBi → its claim holds; PoPE far behind RoPE → contradicted; CoPE not run →
    its claim is absent; the verdict per task is in the markdown's claims table."""
    from posenc.lengthgen.report import claims_table

    rng = np.random.default_rng(seed)
    accuracy = {"fope": 0.9, "rope": 0.4, "alibi": 0.3, "pope": 0.05}
    cells = [fake_cell(s, k, learned=True, inside=1.0, beyond=p, rng=rng, per_length=60)
             for s, p in accuracy.items() for k in range(3)]
    t = summarise(cells, replicates=300)["copy"]
    claims = {c["source"].split(", ")[-1]: c for c in t["claims"]}
    assert set(claims) == {"FoPE", "PoPE"}  # CoPE's and Kazemnejad's leaders were not run
    assert claims["FoPE"]["verdict"] == "holds"
    assert {(r["leader"], r["laggard"]) for r in claims["FoPE"]["pairs"]} == {("fope", "rope"), ("fope", "alibi")}
    assert all(r["diff"] > 0 and r["ci"][0] > 0 for r in claims["FoPE"]["pairs"])
    assert claims["PoPE"]["verdict"] == "contradicted" and claims["PoPE"]["pairs"][0]["ci"][1] < 0
    assert t["paper"]["verdict"] == "not testable"  # the original paper's reading is kept, with no pair to test
    table = "\n".join(claims_table({"copy": t}))
    assert "| Hua et al. (2024), FoPE: fope ahead of rope, alibi | holds |" in table
    assert "| Gopalakrishnan et al. (2025), PoPE: pope ahead of rope | contradicted |" in table
