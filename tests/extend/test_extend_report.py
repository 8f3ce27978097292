"""The report reads cells correctly: where plain RoPE breaks, flatness, in-range cost, the YaRN-paper checks."""

from __future__ import annotations

import json
import math
import random

import pytest

from posenc.extend.cells import CellStore
from posenc.extend.grid import Grid, GridConfig
from posenc.extend.report import summarise, write_report


def _loss_cell(method, factor, ppls, l0=100, doc="d"):
    edges = [i * l0 // 2 for i in range(len(ppls) + 1)]
    buckets = [{"start": a, "end": b, "tokens": b - a, "ppl": p} for a, b, p in zip(edges[:-1], edges[1:], ppls)]
    return {"kind": "loss", "document": doc, "source": "src", "method": method, "factor": factor,
            "original_max_len": l0, "length": edges[-1], "buckets": buckets, "seconds": 1.0,
            "sdpa": {"causal_path_only": True}, "curve": {"position": [1, 2], "ppl": [3, 4], "window": 1}}


def test_summary_reads_the_numbers(seed):
    rng = random.Random(seed)
    base = [rng.uniform(5, 6) for _ in range(2)]  # 1.5 × base[1] stays below 2 × the in-range perplexity
    cells = [_loss_cell("rope", None, base + [base[1] * 1.5, base[1] * 40]),
             _loss_cell("rope-linear", 2.0, [base[0] * 1.3, base[1] * 1.3, base[1] * 1.6, base[1] * 1.8]),
             _loss_cell("rope-yarn", 2.0, [base[0] * 1.01, base[1] * 1.01, base[1] * 1.05, base[1] * 1.1]),
             _loss_cell("rope-dynamic-ntk", 2.0, base + [base[1] * 1.1, base[1] * 1.2])]
    s = summarise(cells)
    doc = s["loss"]["d"]
    assert doc["plain_breaks_at"] == 150  # the 4th bucket is the first above BREAK_RATIO × in-range
    rows = {r["label"]: r for r in doc["rows"]}
    in_range = math.exp((math.log(base[0]) + math.log(base[1])) / 2)
    assert rows["rope"]["in_range_ppl"] == pytest.approx(in_range)
    assert rows["rope-linear ×2"]["in_range_vs_plain"] == pytest.approx(1.3)
    assert rows["rope-dynamic-ntk ×2"]["in_range_vs_plain"] == pytest.approx(1.0)
    assert rows["rope-yarn ×2"]["flat_past_l0"] and not rows["rope"]["flat_past_l0"]
    assert s["yarn_paper"]["agrees"] and s["yarn_paper"]["total"] == 3
    # dynamic NTK in its fixed mode (one pass at its length) is checked against PI too, labelled as its own method
    fixed = summarise([*cells, _loss_cell("rope-dynamic-ntk-fixed", 2.0, [p * 2 for p in base] * 2)])["yarn_paper"]
    assert fixed["total"] == 4 and fixed["held"] == 3
    assert [c["claim"] for c in fixed["checks"] if not c["holds"]] == [
        "rope-dynamic-ntk-fixed ×2 beats rope-linear ×2 past L₀"]
    # with a control (the same tokens read in range), "flat" compares with it instead
    control = {"kind": "control", "document": "d", "offset": 100, "buckets": [
        {"start": 100, "end": 150, "tokens": 50, "ppl": base[1] * 1.5}, {"start": 150, "end": 200, "tokens": 50,
                                                                         "ppl": base[1] * 1.5}]}
    with_control = summarise([*cells, control])["loss"]["d"]
    rows = {r["label"]: r for r in with_control["rows"]}
    assert with_control["control"]["beyond_ppl"] == pytest.approx(base[1] * 1.5)
    assert rows["rope-linear ×2"]["beyond_vs_control"] == pytest.approx(math.sqrt(1.6 * 1.8) / 1.5)
    assert rows["rope-linear ×2"]["flat_past_l0"] and not rows["rope"]["flat_past_l0"]
    # give PI YaRN's numbers and YaRN PI's: now neither YaRN nor dynamic NTK beats PI; only plain's check holds
    pi, yarn = ([b["ppl"] for b in c["buckets"]] for c in cells[1:3])
    cells[1], cells[2] = _loss_cell("rope-linear", 2.0, yarn), _loss_cell("rope-yarn", 2.0, pi)
    flipped = summarise(cells)["yarn_paper"]
    assert not flipped["agrees"] and flipped["held"] == 1
    assert "plain" in [c for c in flipped["checks"] if c["holds"]][0]["claim"]


def test_report_files_from_a_real_grid(tiny_model, tokenizer, tmp_path, l0):
    cfg = GridConfig(methods=("rope", "rope-linear", "rope-yarn"), factors=(2.0,), documents=("licenses",),
                     loss_length=2 * l0, passkey_lengths=(300,), passkey_trials=2, original_max_len=l0,
                     answer_tokens=2)
    cells = Grid(tiny_model, tokenizer, cfg, CellStore(tmp_path), model_id="tiny", progress=False,
                 log=lambda _: None).run()
    paths = write_report(cells, tmp_path, {"command": "test"})
    data = json.loads(paths["json"].read_text())
    assert len(data["cells"]) == 7 and all("nll" not in c for c in data["cells"])  # 3 loss + control + 3 passkey
    assert {p.name for p in tmp_path.glob("*.png")} == {"loss-licenses-x2.png", "passkey.png"}
    page = paths["html"].read_text()
    assert "loss-licenses-x2.png" in page and "rope-yarn ×2" in page and "passkey" in page
    assert "| rope-linear ×2 |" in paths["markdown"].read_text()


def test_first_break_window(seed):
    rng = random.Random(seed)
    nll = [math.log(rng.uniform(4, 6)) for _ in range(300)] + [math.log(50.0)] * 40
    from posenc.extend.report import first_break

    assert first_break(nll, 5.0, 20) == 301  # entry 300 is the loss of the token at position 301
    assert first_break(nll[:300], 5.0, 20) is None


def _nll_cell(nll, l0, method="rope", factor=None, doc="d"):
    """A loss cell whose buckets are computed from ``nll`` as the grid computes them."""
    import torch

    from posenc.extend.loss import bucket_edges, bucket_perplexity

    length = len(nll) + 1
    buckets = bucket_perplexity(torch.tensor(nll, dtype=torch.float64), bucket_edges(length, l0))
    return {"kind": "loss", "document": doc, "source": "src", "method": method, "factor": factor,
            "original_max_len": l0, "length": length, "buckets": buckets, "seconds": 1.0, "nll": list(nll),
            "sdpa": {"causal_path_only": True}, "curve": {"position": [1, 2], "ppl": [3, 4], "window": 1}}


def test_break_statements_cannot_contradict_on_a_synthetic_curve(seed):
    """A text whose first tokens (no context yet) are far above the in-range level, flat to 2·L₀ but for
    one spike past L₀ too short to lift its bucket: the report must neither put a break at position 1
    nor say a bucket breaks where no window does (quick runs printed "never exceeds 2×" beside
    "the first above 2× starts at position 1")."""
    rng = random.Random(seed)
    l0 = 256
    nll = [math.log(rng.uniform(4.5, 5.5)) for _ in range(2 * l0 - 1)]  # targets 1 … 2·L₀ − 1
    nll[:10] = [math.log(400.0)] * 10  # the start of the text: no context
    doc = summarise([_nll_cell(nll, l0)])["loss"]["d"]
    assert doc["plain_breaks_at"] is None and doc["plain_breaks_window"] == {"window": 16, "at": None}
    line = summarise([_nll_cell(nll, l0)])["reading"][0]
    assert "has no 128-token bucket past L₀ above 2×" in line and "nor does any window of 16 tokens" in line
    assert "position 1 " not in line
    # one 16-token spike past L₀: the window sees it, the bucket's average does not; both said without conflict
    spiky = nll[:]
    spiky[300 - 1:316 - 1] = [math.log(60.0)] * 16  # targets 300 … 315
    doc = summarise([_nll_cell(spiky, l0)])["loss"]["d"]
    assert doc["plain_breaks_at"] is None and doc["plain_breaks_window"]["at"] in (288, 304)
    line = summarise([_nll_cell(spiky, l0)])["reading"][0]
    assert "has no 128-token bucket past L₀" in line and "the first above 2× starts at position" in line
    # a real break past 1.5·L₀: the bucket breaks there and the first window above is inside it
    broken = nll[:]
    broken[384 - 1:] = [math.log(rng.uniform(20, 30)) for _ in range(len(nll) - 383)]
    doc = summarise([_nll_cell(broken, l0)])["loss"]["d"]
    assert doc["plain_breaks_at"] == 384 and doc["plain_breaks_window"]["at"] == 384
    assert "breaks from position 384" in summarise([_nll_cell(broken, l0)])["reading"][0]


@pytest.mark.parametrize("l0", [100, 256, 90])
def test_a_breaking_bucket_always_holds_a_breaking_window(l0, seed):
    """The windows tile the buckets past L₀ (cut at their edges, also when L₀/16 does not divide L₀/2), so a
    bucket above the threshold always has a window above it, starting inside that bucket or earlier."""
    from posenc.extend.report import first_break

    rng = random.Random(seed)
    for _ in range(200):
        nll = [rng.uniform(0.5, 3.5) for _ in range(rng.randint(l0 + 1, 3 * l0))]
        doc = summarise([_nll_cell(nll, l0)])["loss"]["d"]
        at, fine = doc["plain_breaks_at"], doc["plain_breaks_window"]["at"]
        assert fine is None or fine >= l0  # never before L₀
        if at is not None:
            assert fine is not None and fine < at + l0 // 2
        in_range = summarise([_nll_cell(nll, l0)])["loss"]["d"]["rows"][0]["in_range_ppl"]
        assert first_break(nll, in_range, max(1, l0 // 16), start=l0) in (None, *range(l0, len(nll) + 1))


def test_paired_tests_in_the_summary_and_the_pages(tmp_path):
    from posenc.extend.report import markdown, summarise, write_report

    def cell(method, factor, found, task="multikey"):
        return {"kind": "passkey", "task": task, "method": method, "factor": factor, "length": 128,
                "original_max_len": 64, "name": f"{task}-{method}",
                "trials": [{"correct": f, "prompt_tokens": 120, "seconds": 0.1} for f in found]}

    cells = [cell("rope", None, [False] * 20), cell("rope-yarn", 2.0, [True] * 15 + [False] * 5),
             cell("dca", None, [True] * 2 + [False] * 18), cell("rope", None, [True] * 3, task="passkey")]
    summary = summarise(cells)
    (group,) = summary["paired_tests"]  # the passkey task has one method: nothing to compare
    assert group["task"] == "multikey" and len(group["comparisons"]) == 3
    sig = {(c["first"], c["second"]): c["better"] for c in group["comparisons"] if c["significant"]}
    assert sig == {("rope", "rope-yarn ×2"): "rope-yarn ×2", ("dca", "rope-yarn ×2"): "rope-yarn ×2"}
    assert any("significant at 0.05: rope-yarn ×2 > rope" in s for s in summary["reading"])
    text = markdown(summary, {"command": "test"})
    assert "## Paired comparisons" in text and "**rope-yarn ×2 better**" in text
    paths = write_report(cells, tmp_path, {"command": "test"})
    assert "Paired comparisons" in paths["html"].read_text() and (tmp_path / "passkey.png").exists()


def test_retrieval_rows_count_by_fifth_of_depth_and_flag_grid_depths(tmp_path, gen):
    """The retrieval table shows found / trials per fifth of the needle depth (the clustering a reader must see),
    and a note where the cells used the fixed grid depths."""
    import torch

    from posenc.extend.report import GRID_DEPTHS_NOTE, by_fifth, markdown, summarise

    depths = torch.rand(23, generator=gen).tolist() + [0.0, 1.0]
    found = (torch.rand(25, generator=gen) < 0.5).tolist()
    trials = [{"depth": d, "correct": f, "prompt_tokens": 100, "seconds": 0.1} for d, f in zip(depths, found)]
    want = [(sum(f for d, f in zip(depths, found) if min(int(d * 5), 4) == i),
             sum(min(int(d * 5), 4) == i for d in depths)) for i in range(5)]
    assert by_fifth(trials) == " ".join(f"{k}/{n}" for k, n in want)
    assert by_fifth([{"correct": True}]) == ""  # cells without depths (the earliest) show nothing

    def cell(mode):
        return {"kind": "passkey", "task": "passkey", "method": "rope", "factor": None, "length": 128,
                "original_max_len": 64, "name": "passkey-rope", "trials": trials, "settings": {"depths": mode}}

    grid = markdown(summarise([cell("grid-5")]), {"command": "test"})
    assert by_fifth(trials) in grid and GRID_DEPTHS_NOTE in grid
    assert GRID_DEPTHS_NOTE not in markdown(summarise([cell("strata-5")]), {"command": "test"})


def test_multikey_rows_count_wrong_answers_that_took_another_needles_key(gen):
    """With distractors, the table and the reading say how many wrong answers named another door's key (counted
    here naively from the recorded answers); single-key rows leave the column out."""
    import torch

    from posenc.extend.report import OTHER_KEY_NOTE, markdown, summarise

    n = 17
    kinds = torch.randint(0, 3, (n,), generator=gen).tolist()  # 0 right, 1 a distractor's key, 2 no needle's key
    trials = []
    for t, kind in enumerate(kinds):
        keys = [str(10000 + 4 * t + i) for i in range(4)]
        answer = {0: keys[0], 1: keys[1 + t % 3], 2: "99999"}[kind]
        trials.append({"key": keys[0], "needles": [[k, i / 4] for i, k in enumerate(keys)], "asked": "red",
                       "answer": f" {answer}.", "correct": kind == 0, "depth": t / n, "prompt_tokens": 100,
                       "seconds": 0.1})
    cell = {"kind": "passkey", "task": "multikey", "method": "rope", "factor": None, "length": 128,
            "original_max_len": 64, "name": "multikey-rope", "trials": trials, "settings": {"depths": "strata-5"}}
    summary = summarise([cell])
    (row,) = summary["passkey"]
    wrong = n - kinds.count(0)
    assert row["other_key"] == kinds.count(1) and row["correct"] == kinds.count(0)
    text = markdown(summary, {"command": "test"})
    assert f"| {kinds.count(1)}/{wrong} |" in text and OTHER_KEY_NOTE in text
    if wrong:
        assert any(f"rope {kinds.count(1)}/{wrong}" in line for line in summary["reading"])
    single = dict(cell, task="passkey", trials=[dict(t, needles=t["needles"][:1], asked=None) for t in trials])
    assert summarise([single])["passkey"][0]["other_key"] is None
    assert "another key" not in markdown(summarise([single]), {"command": "test"})


def test_multikey_rows_say_whether_answers_follow_the_needle_nearest_the_question(gen):
    """recency: found when the asked needle is last against when another follows it, with Fisher's p (checked by
    enumerating the hypergeometric splits), and the wrong answers naming the last needle against the count
    expected if the wrong door were drawn at random — all counted here naively from random trials."""
    import torch

    from posenc.extend.report import PLACE_NOTE, markdown, summarise

    n, needles = 23, 4
    trials = []
    for t in range(n):
        keys = [str(20000 + needles * t + i) for i in range(needles)]
        depths = torch.rand(needles, generator=gen).tolist()
        pick = int(torch.randint(0, needles + 1, (1,), generator=gen))  # needles: a key in no needle
        answer = keys[pick] if pick < needles else "99999"
        trials.append({"key": keys[0], "needles": [[k, d] for k, d in zip(keys, depths)], "asked": "red",
                       "answer": f" {answer}.", "correct": pick == 0, "depth": depths[0], "prompt_tokens": 100,
                       "seconds": 0.1})
    last = [t["needles"][max(range(needles), key=lambda i: t["needles"][i][1])][0] for t in trials]
    at_last = [t["key"] == k for t, k in zip(trials, last)]
    k1 = sum(t["correct"] for t, a in zip(trials, at_last) if a)
    n1 = sum(at_last)
    k2 = sum(t["correct"] for t, a in zip(trials, at_last) if not a)
    took = [(t, k, a) for t, k, a in zip(trials, last, at_last)
            if not t["correct"] and t["answer"].strip(" .") in {x[0] for x in t["needles"]}]
    cell = {"kind": "passkey", "task": "multikey", "method": "rope", "factor": None, "length": 128,
            "original_max_len": 64, "name": "multikey-rope", "trials": trials, "settings": {"depths": "strata-5"}}
    summary = summarise([cell])
    r = summary["passkey"][0]["recency"]
    assert (r["last"], r["found_last"], r["earlier"], r["found_earlier"]) == (n1, k1, n - n1, k2)
    assert r["other"] == len(took) and r["other_last"] == sum(t["answer"].strip(" .") == k for t, k, _ in took)
    assert r["other_chance"] == pytest.approx(sum(0 if a else 1 / (needles - 1) for _, _, a in took))
    # Fisher by enumeration: every table with the same margins no more likely than the observed one
    k, m = k1 + k2, n - n1
    prob = {x: math.comb(n1, x) * math.comb(m, k - x) / math.comb(n, k) for x in range(max(0, k - m), min(k, n1) + 1)}
    assert r["p"] == pytest.approx(sum(q for q in prob.values() if q <= prob[k1] * (1 + 1e-9)))
    # by place: the asked needle's rank among the needles, counted from the depths' order
    place = [sorted(t["needles"], key=lambda x: x[1]).index(t["needles"][0]) for t in trials]
    want = [[sum(t["correct"] for t, q in zip(trials, place) if q == i), place.count(i)] for i in range(needles)]
    assert r["by_place"] == want and want[-1] == [k1, n1]
    text = markdown(summary, {"command": "test"})
    assert " | " + " ".join(f"{a}/{b}" for a, b in want) + " | " in text and PLACE_NOTE in text
    assert any(f"rope {k1}/{n1} · {k2}/{n - n1} ({r['p']:.2g})" in line for line in summary["reading"])
    single = dict(cell, task="passkey", trials=[dict(t, needles=t["needles"][:1], asked=None) for t in trials])
    assert summarise([single])["passkey"][0]["recency"] is None


def test_multikey_methods_are_paired_with_plain_rope_on_whether_they_reach_any_needle(gen):
    """reach_tests: per method, the prompts where it named some needle's key (either door) and plain RoPE named
    none, and the reverse, with the exact McNemar p (binomial tail summed here) and Holm over the methods — all
    counted naively from random answers; a method that reaches on every prompt where plain never does is apart."""
    import torch

    from posenc.extend.report import summarise

    n, needles = 20, 3

    def cell(method, factor, kinds):  # 0 right, 1 a distractor's key, 2 no needle's key
        trials = []
        for t, kind in enumerate(kinds):
            keys = [str(30000 + needles * t + i) for i in range(needles)]
            answer = {0: keys[0], 1: keys[1 + t % (needles - 1)], 2: "1000000"}[kind]
            trials.append({"key": keys[0], "needles": [[k, (i + 1) / (needles + 1)] for i, k in enumerate(keys)],
                           "asked": "red", "answer": f" {answer}.", "correct": kind == 0, "depth": 0.5,
                           "prompt_tokens": 100, "seconds": 0.1})
        return {"kind": "passkey", "task": "multikey", "method": method, "factor": factor, "length": 128,
                "original_max_len": 64, "name": f"multikey-{method}", "trials": trials,
                "settings": {"depths": "strata-5"}}

    plain = torch.randint(0, 3, (n,), generator=gen).tolist()
    methods = {"rope-yarn": torch.randint(0, 3, (n,), generator=gen).tolist(),
               "rope-ntk": torch.randint(0, 3, (n,), generator=gen).tolist(),
               "dca": torch.randint(0, 2, (n,), generator=gen).tolist()}  # dca always reaches some needle
    plain_none = [2] * n  # plain RoPE naming no needle on any prompt
    for base in (plain, plain_none):
        cells = [cell("rope", None, base)] + [cell(m, None if m == "dca" else 2.0, k) for m, k in methods.items()]
        (group,) = summarise(cells)["reach_tests"]
        assert group["plain"] == [sum(k < 2 for k in base), n]
        rows = {r["label"]: r for r in group["methods"]}
        assert set(rows) == {"dca", "rope-ntk ×2", "rope-yarn ×2"}
        naive = {}
        for name, m in [("dca", "dca"), ("rope-ntk ×2", "rope-ntk"), ("rope-yarn ×2", "rope-yarn")]:
            b = sum(x < 2 and y == 2 for x, y in zip(methods[m], base))
            c = sum(x == 2 and y < 2 for x, y in zip(methods[m], base))
            tail = sum(math.comb(b + c, i) for i in range(min(b, c) + 1)) / 2 ** (b + c)
            naive[name] = min(1.0, 2 * tail)
            r = rows[name]
            assert (r["only_first"], r["only_second"], r["reached"]) == (b, c, sum(x < 2 for x in methods[m]))
            assert r["p"] == pytest.approx(naive[name])
        ranked = sorted(naive, key=naive.get)  # Holm: k-th smallest × (3 − k), running maximum, capped at 1
        holm, running = {}, 0.0
        for i, name in enumerate(ranked):
            running = max(running, min(1.0, (3 - i) * naive[name]))
            holm[name] = running
        for name, r in rows.items():
            assert r["p_holm"] == pytest.approx(holm[name]) and r["significant"] == (holm[name] < 0.05)
    # against plain_none, dca reaches on all 20 prompts plain misses: 2 · 2⁻²⁰ · 3 is far below 0.05
    assert rows["dca"]["significant"] and rows["dca"]["only_first"] == n
    line = next(s for s in summarise(cells)["reading"] if "answers naming some needle's key" in s)
    assert f"plain RoPE 0/{n}; dca {n}/{n} ({n} · 0," in line and "significant at 0.05: dca" in line
    # single-key cells have no doors: nothing to test
    single = [dict(c, task="passkey", trials=[dict(t, needles=t["needles"][:1], asked=None) for t in c["trials"]])
              for c in cells]
    assert summarise(single)["reach_tests"] == []
