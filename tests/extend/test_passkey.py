"""Passkey prompts: built to length with the key at its depth, scored exactly, and a copying oracle always finds it."""

from __future__ import annotations

import random
import re

import pytest
import torch

from posenc.extend.passkey import (
    FILLER,
    QUESTION,
    Trial,
    build_prompt,
    greedy_continuation,
    make_trial,
    score,
    wilson,
)


def copying_oracle(tokenizer, prompt_ids: list[int]) -> str:
    """Reads the prompt as text and answers with whatever number the needle sentence states."""
    found = re.search(r"The pass key is (\d+)\. Remember it\.", tokenizer.decode(prompt_ids))
    return " " + found.group(1) + ".\n" if found else " I do not know."


@pytest.mark.parametrize("length", [300, 1000, 4000])
def test_oracle_finds_the_key_at_every_depth(tokenizer, seed, length):
    rng = random.Random(seed)
    unit = len(tokenizer.encode(FILLER))
    for depth in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, rng.random()]:
        trial = Trial(key=str(rng.randint(10000, 99999)), depth=depth, length=length)
        prompt = build_prompt(tokenizer, trial)
        assert length - unit < len(prompt.ids) <= length
        text = tokenizer.decode(prompt.ids)
        assert text.count(trial.key) == 2 and text.endswith(QUESTION)  # the needle states it twice, nowhere else
        assert tokenizer.decode(prompt.ids[prompt.needle_start:prompt.needle_end]).startswith(
            f"The pass key is {trial.key}.")
        filler = len(prompt.ids) - (prompt.needle_end - prompt.needle_start)
        # the needle sits at `depth` of the prompt, to within one filler sentence (+ the intro)
        assert abs(prompt.needle_start - depth * filler) <= 2 * unit + 200
        assert score(copying_oracle(tokenizer, prompt.ids), trial.key)
        wrong = str((int(trial.key) - 10000 + 1) % 90000 + 10000)
        assert not score(copying_oracle(tokenizer, prompt.ids).replace(trial.key, wrong), trial.key)


def test_score_is_exact_match_on_the_first_five_digit_run():
    assert score(" 12345. Remember", "12345")
    assert score("12345", "12345")
    assert not score(" 1234", "12345")
    assert not score(" 54321 then 12345", "12345")
    assert not score("", "12345")
    assert score(" 123456", "12345")  # the first 5-digit run is 12345; the answer said more than asked, still found


def test_trials_are_reproducible_and_in_range(seed):
    a = [make_trial(random.Random(seed), 100) for _ in range(3)]
    b = [make_trial(random.Random(seed), 100) for _ in range(3)]
    assert a == b
    rng = random.Random(seed)
    for _ in range(200):
        t = make_trial(rng, 100)
        assert len(t.key) == 5 and 0 <= t.depth <= 1


def test_too_short_prompt_is_refused(tokenizer):
    with pytest.raises(ValueError, match="too short"):
        build_prompt(tokenizer, Trial(key="12345", depth=0.5, length=50))


def test_greedy_continuation_equals_the_models_own_generate(tiny_model, gen):
    prompt = torch.randint(0, 257, (1, 40), generator=gen)
    reference = tiny_model.generate(prompt, max_new_tokens=6)[0, 40:].tolist()
    assert greedy_continuation(tiny_model, prompt[0].tolist(), 6) == reference


def _wilson_by_bisection(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Reference: the p₀ where the score test |p̂ − p₀| = z·√(p₀(1 − p₀)/n) is exactly at the boundary."""
    phat = k / n

    def root(lo: float, hi: float) -> float:
        f = lambda p: (phat - p) ** 2 - z * z * p * (1 - p) / n  # noqa: E731
        for _ in range(200):
            mid = (lo + hi) / 2
            if (f(lo) > 0) == (f(mid) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else root(0.0, phat)
    upper = 1.0 if k == n else root(phat, 1.0)
    return lower, upper


@pytest.mark.parametrize("k,n", [(0, 5), (1, 5), (3, 7), (10, 10), (17, 40)])
def test_wilson_matches_score_test_inversion(k, n):
    lo, hi = wilson(k, n)
    ref = _wilson_by_bisection(k, n)
    assert lo == pytest.approx(ref[0], abs=1e-9) and hi == pytest.approx(ref[1], abs=1e-9)
    assert lo <= k / n <= hi
    assert wilson(0, 0) == (0.0, 1.0)
