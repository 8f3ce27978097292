"""Retrieval prompts (single key, multi-key, multi-value) and the statistics that rank methods on them."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import re

import pytest

from posenc.extend.passkey import FILLER
from posenc.extend.retrieval import (DEPTH_MODES, DEPTHS, MULTIKEY, MULTIVALUE, TASKS, Needle, answered_key,
                                     build_prompt, cell_trials, last_needle, make_trial, other_needle, score)
from posenc.extend.stats import compare_methods, holm, mcnemar_exact, paired


def oracle(tokenizer, trial, prompt_ids):
    """Reads the prompt as text and answers what the needles say, as a perfect reader would."""
    text = tokenizer.decode(prompt_ids)
    if trial.task == "multikey":
        found = re.search(rf"The pass key of the {trial.asked} door is (\d+)\.", text)
        return " " + found.group(1)
    if trial.task == "multivalue":
        return " " + ", ".join(re.findall(r"One of the pass keys is (\d+)\.", text))
    return " " + re.search(r"The pass key is (\d+)\.", text).group(1)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", [900, 3000])
@pytest.mark.parametrize("depths", DEPTH_MODES)
def test_prompts_have_the_length_and_the_needles_at_their_depths(tokenizer, seed, task, length, depths):
    rng = random.Random(seed)
    unit = len(tokenizer.encode(FILLER))
    for index in range(10):
        trial = make_trial(rng, task, length, index=index, depths=depths)
        if depths == "grid":
            assert trial.depth == DEPTHS[index % 5]
        else:  # in its fifth of [0, 1]
            assert (index % 5) / 5 <= trial.depth <= (index % 5 + 1) / 5
        prompt = build_prompt(tokenizer, trial)
        assert length - unit < len(prompt.ids) <= length
        text = tokenizer.decode(prompt.ids)
        count = {"passkey": 1, "multikey": MULTIKEY, "multivalue": MULTIVALUE}[task]
        assert len(trial.needles) == count and len({n.key for n in trial.needles}) == count
        for needle, (start, end) in zip(trial.needles, prompt.spans):
            assert needle.key in tokenizer.decode(prompt.ids[start:end])
        # the asked needle follows round(depth × filler sentences) of them, wherever the other needles fall
        # (a tolerance in tokens failed when three distractors of ~95 bytes all landed before it)
        units = text.count(FILLER)
        assert tokenizer.decode(prompt.ids[:prompt.spans[0][0]]).count(FILLER) == round(trial.depth * units)
        found, fraction = score(oracle(tokenizer, trial, prompt.ids), trial)
        assert found and fraction == 1.0
        if task == "multikey":  # a distractor's key is not the answer
            assert not score(" " + trial.needles[1].key, trial)[0]
            assert trial.asked not in [n.door for n in trial.needles[1:]]
        if task == "multivalue":  # some but not all values: not found, fraction recorded
            assert score(" " + trial.needles[0].key, trial) == (False, 1 / MULTIVALUE)
        assert text.count(trial.needles[0].key) == (1 if task == "multivalue" else 2)  # nowhere but its needle


def test_stratified_depths_are_distinct_seeded_and_keep_the_grids_keys(seed):
    """Stratified trials: every trial at its own depth, four per fifth of the filler in 20, the same for every
    method (seeded by seed, task and length); "grid" keeps the keys and depths cells before it were made with."""
    for task in TASKS:
        trials = cell_trials(seed, task, 4096, 20)
        assert trials == cell_trials(seed, task, 4096, 20)  # every method answers these very prompts
        assert len({t.depth for t in trials}) == 20
        assert [sum(int(t.depth * 5) == s for t in trials) for s in range(5)] == [4] * 5
        assert cell_trials(seed + 1, task, 4096, 20) != trials
        grid = cell_trials(seed, task, 4096, 10, depths="grid")
        assert [t.depth for t in grid] == list(DEPTHS) * 2
    old = random.Random("0-passkey-12288")  # the keys of the recorded grid cells (seed 0, 12,288 tokens)
    assert [t.needles[0].key for t in cell_trials(0, "passkey", 12288, 3, depths="grid")] == [
        str(old.randint(10000, 99999)) for _ in range(3)]
    with pytest.raises(ValueError, match="valid: strata, grid"):
        cell_trials(seed, "passkey", 4096, 5, depths="uniform")


def test_trials_are_seeded_and_too_short_is_refused(tokenizer, seed):
    a = [make_trial(random.Random(seed), "multikey", 500, index=i) for i in range(5)]
    b = [make_trial(random.Random(seed), "multikey", 500, index=i) for i in range(5)]
    assert a == b
    with pytest.raises(ValueError, match="too short"):
        build_prompt(tokenizer, make_trial(random.Random(0), "multivalue", 60, index=0))
    with pytest.raises(ValueError, match="valid tasks"):
        make_trial(random.Random(0), "haystack", 500, index=0)


def test_a_wrong_answer_is_told_apart_by_whether_it_names_another_needle(seed):
    """other_needle: a distractor's key (read, wrong door) against the asked key and against no needle's key."""
    rng = random.Random(seed)
    trial = make_trial(rng, "multikey", 4096, index=rng.randrange(5))
    needles = [[n.key, n.depth] for n in trial.needles]  # as a cell records them
    asked, distractor = trial.needles[0].key, rng.choice(trial.needles[1:]).key
    stranger = next(k for k in map(str, range(10000, 100000)) if k not in {n.key for n in trial.needles})
    assert score(f" {distractor}.", trial) == (False, 0.0) and other_needle(f" {distractor}.", needles, asked)
    assert score(f" {asked}", trial)[0] and not other_needle(f" {asked}", needles, asked)
    assert not other_needle(f" {stranger}", needles, asked) and not other_needle(" 1. 2. 3", needles, asked)
    # the first 5-digit run decides, as in score: a distractor named after the right key is no wrong door
    assert not other_needle(f" {asked} or {distractor}", needles, asked)
    assert other_needle(f" {distractor} or {asked}", needles, asked)


def test_the_last_needle_is_the_one_the_prompt_places_nearest_the_question(tokenizer, seed):
    """last_needle reads a trial's recorded (key, depth) pairs; the reference is the built prompt's token spans.
    Ties of depth (every needle at one depth here, half of them in the second case) go the way build_prompt
    places them."""
    rng = random.Random(seed)
    for index in range(6):
        trial = make_trial(rng, "multikey", 1200, index=index)
        tied = dataclasses.replace(trial, needles=tuple(dataclasses.replace(n, depth=trial.depth) for n in trial.needles))
        half = dataclasses.replace(trial, needles=tuple(
            dataclasses.replace(n, depth=0.9 if i % 2 else n.depth / 2) for i, n in enumerate(trial.needles)))
        for t in (trial, tied, half):
            spans = build_prompt(tokenizer, t).spans
            want = t.needles[max(range(len(spans)), key=lambda i: spans[i][0])].key
            assert last_needle([[n.key, n.depth] for n in t.needles]) == want
    assert last_needle([["11111", 0.5], ["22222", 0.5]]) == "22222"
    assert last_needle([[Needle("33333", 0.7).key, 0.7], ["44444", 0.2]]) == "33333"
    assert answered_key(" 12345 or 67890") == "12345" and answered_key(" one two") is None


def _enumerated_p(b: int, c: int) -> float:
    """Two-sided exact test by enumerating all 2^n ways the n discordant pairs could fall under H0."""
    n = b + c
    observed = abs(b - c)
    extreme = sum(1 for signs in itertools.product((0, 1), repeat=n) if abs(2 * sum(signs) - n) >= observed)
    return extreme / 2 ** n


@pytest.mark.parametrize("b, c", [(0, 0), (1, 7), (7, 1), (0, 6), (3, 3), (2, 9), (5, 0), (4, 10)])
def test_exact_mcnemar_equals_enumeration(b, c):
    assert mcnemar_exact(b, c) == pytest.approx(min(1.0, _enumerated_p(b, c)), rel=1e-12)
    assert mcnemar_exact(1, 7) == pytest.approx(2 * 9 / 256)  # textbook: 2·P(X ≤ 1), X ~ Bin(8, ½)


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([]) == []


def test_paired_comparison_ranks_methods_on_the_same_prompts():
    """20 trials: A finds 18, B finds 6, always on prompts A also found → b = 12, c = 0: significant; C = A: not."""
    a = [True] * 18 + [False] * 2
    b = [True] * 6 + [False] * 14
    c = list(a)
    assert paired(a, b) == {"trials": 20, "only_first": 12, "only_second": 0, "p": pytest.approx(2 / 2 ** 12)}
    rows = {(r["first"], r["second"]): r for r in compare_methods({"A": a, "B": b, "C": c})}
    assert rows[("A", "B")]["significant"] and rows[("A", "B")]["better"] == "A"
    assert rows[("B", "C")]["better"] == "C"
    assert not rows[("A", "C")]["significant"] and rows[("A", "C")]["p"] == 1.0
    assert rows[("A", "B")]["p_holm"] == pytest.approx(3 * 2 / 2 ** 12)  # the smallest of three p-values
    # unpaired, the same counts could still be insignificant with few trials; paired, discordance is what counts
    assert not compare_methods({"A": [True, False], "B": [False, True]})[0]["significant"]
    assert math.isclose(mcnemar_exact(0, 5), 2 / 32)
