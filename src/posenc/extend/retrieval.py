"""Needle retrieval that can rank methods: single- and multi-key passkeys and RULER's multi-value needle.

Every task hides 5-digit numbers in the passkey filler (``passkey.FILLER``:
Mohtashami & Jaggi, 2023) and asks for them at the end; prompts are built from
separately tokenised pieces, so their length in tokens is exact to one filler
sentence and every needle's token span is known.

=============  ===========================================================================================
task           what is hidden, what is asked, what counts as found
=============  ===========================================================================================
``passkey``    one key (Mohtashami & Jaggi, 2023) — the first 5-digit run of the answer is it
``multikey``   ``MULTIKEY`` keys, each for a named door; one door is asked (RULER's NIAH multi-key,
               Hsieh et al., 2024) — the first 5-digit run is that door's key, not a distractor's
``multivalue`` ``MULTIVALUE`` values of one key, the question asks for all (RULER's NIAH multi-value) —
               every value appears among the answer's 5-digit runs (the fraction is recorded too)
=============  ===========================================================================================

The asked needle's depth (fraction of the filler before it) is stratified by
default (``depths="strata"``): trial t draws a seeded depth inside stratum
t mod 5 of [0, 1] — [0, 0.2), [0.2, 0.4), … — so 20 trials cover the five
strata four times each, at 20 different depths. The older fixed grid
(``depths="grid"``: ``DEPTHS`` = 0, ¼, ½, ¾, 1, trial t at ``DEPTHS[t mod 5]``)
puts four trials on each of five identical filler layouts that differ only in
the key: on SmolLM2 a method then found all four or none at nearly every
depth, so its 20 trials were about 5 observations and a paired test that
counts 20 overstated the evidence. Distractors and extra values sit at seeded
random depths either way. Keys are seeded by (seed, task, length): every method answers the
very same prompts, which is what makes the paired comparison of
``posenc.extend.stats`` valid. Before its first needle
(``RetrievalPrompt.first_needle``) every prompt of a cell is the same intro
and filler: the grid's trials continue kept caches of those prefixes
(``passkey.PrefixCaches``), and ``shared_prefix_tokens`` counts the tokens
that saves.

Example::

    trial = make_trial(random.Random(0), "multikey", 4096, index=3)
    prompt = build_prompt(tokenizer, trial)
    found, fraction = score(tokenizer.decode(greedy_continuation(model, prompt.ids, answer_tokens(trial))), trial)
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from posenc.extend.passkey import FILLER, INTRO, PrefixCaches
from posenc.extend.texts import bos_prefix, encode_plain
from posenc.validation import did_you_mean

TASKS = ("passkey", "multikey", "multivalue")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: how the asked needle's depth is chosen: "strata" (a seeded depth in stratum t mod 5) or "grid" (``DEPTHS``)
DEPTH_MODES = ("strata", "grid")


def depth_setting(mode: str) -> str:
    """How a cell's settings name its depth mode ("strata-5", "grid-5": five strata or grid depths)."""
    return f"{mode}-{len(DEPTHS)}"

MULTIKEY = 4
MULTIVALUE = 3
DOORS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
_KEY = re.compile(r"\d{5}")

TEXT = {
    "passkey": ("The pass key is {key}. Remember it. {key} is the pass key.\n",
                "What is the pass key? The pass key is"),
    "multikey": ("The pass key of the {door} door is {key}. Remember it. {key} is the pass key of the {door} door.\n",
                 "What is the pass key of the {door} door? The pass key of the {door} door is"),
    "multivalue": ("One of the pass keys is {key}. Remember it.\n",
                   "What are all the pass keys? The pass keys are"),
}


@dataclass(frozen=True)
class Needle:
    key: str
    depth: float
    door: str | None = None


@dataclass(frozen=True)
class RetrievalTrial:
    """One question: the task, its needles (the first is the asked one), the prompt length and the grid depth."""

    task: str
    length: int
    depth: float
    needles: tuple[Needle, ...]
    asked: str | None = None  # the door asked about (multikey)

    @property
    def answers(self) -> tuple[str, ...]:
        """The keys a right answer contains: the asked needle's (passkey, multikey) or every value (multivalue)."""
        if self.task == "multivalue":
            return tuple(n.key for n in self.needles)
        return (self.needles[0].key,)


@dataclass(frozen=True)
class RetrievalPrompt:
    ids: list[int]
    #: (start, end) token span of each needle, in ``trial.needles`` order
    spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def first_needle(self) -> int:
        """Token index where the first needle (by depth) starts: every prompt of a cell is the same before it."""
        return min(start for start, _ in self.spans)


def _keys(rng: random.Random, n: int) -> list[str]:
    keys: list[str] = []
    while len(keys) < n:
        key = str(rng.randint(10000, 99999))
        if key not in keys:
            keys.append(key)
    return keys


def cell_trials(seed: int, task: str, length: int, count: int, *, depths: str = "strata") -> list[RetrievalTrial]:
    """The trials of a (task, length) cell: keys and depths seeded by (seed, task, length), trial t in depth
    stratum t mod 5 (``make_trial``); the same for every method."""
    rng = random.Random(f"{seed}-{task}-{length}")
    return [make_trial(rng, task, length, index=t, depths=depths) for t in range(count)]


def make_trial(rng: random.Random, task: str, length: int, *, index: int, depths: str = "strata") -> RetrievalTrial:
    """Trial ``index`` of a task: the asked needle in depth stratum ``index % 5`` — a random depth in
    [s/5, (s+1)/5) with ``depths="strata"``, exactly ``DEPTHS[s]`` with ``"grid"`` — the rest at random depths."""
    if task not in TASKS:
        raise ValueError(f"unknown retrieval task {task!r}{did_you_mean(task, TASKS)}; "
                         f"valid tasks: {', '.join(TASKS)}")
    if depths not in DEPTH_MODES:
        raise ValueError(f"unknown depth mode {depths!r}; valid: {', '.join(DEPTH_MODES)}")
    stratum = index % len(DEPTHS)
    if depths == "grid":
        depth = DEPTHS[stratum]
    else:  # drawn first, so that "grid" keeps the keys it always had; random() < 1 keeps it inside its stratum
        depth = (stratum + rng.random()) / len(DEPTHS)
    if task == "passkey":
        return RetrievalTrial(task, length, depth, (Needle(_keys(rng, 1)[0], depth),))
    count = MULTIKEY if task == "multikey" else MULTIVALUE
    keys = _keys(rng, count)
    depths = [depth] + [rng.random() for _ in range(count - 1)]
    if task == "multikey":
        doors = rng.sample(DOORS, count)
        return RetrievalTrial(task, length, depth, tuple(Needle(k, d, door) for k, d, door in zip(keys, depths, doors)),
                              asked=doors[0])
    return RetrievalTrial(task, length, depth, tuple(Needle(k, d) for k, d in zip(keys, depths)))


def build_prompt(tokenizer: Any, trial: RetrievalTrial) -> RetrievalPrompt:
    """INTRO + filler with every needle at its depth (whole filler sentences) + the question, ≤ ``trial.length``.

    Raises:
        ValueError: the length is too short for intro, needles and question alone.
    """
    needle_text, question_text = TEXT[trial.task]
    head = bos_prefix(tokenizer) + encode_plain(tokenizer, INTRO)
    needles = [encode_plain(tokenizer, needle_text.format(key=n.key, door=n.door)) for n in trial.needles]
    question = encode_plain(tokenizer, question_text.format(door=trial.asked))
    unit = encode_plain(tokenizer, FILLER)
    room = trial.length - len(head) - sum(map(len, needles)) - len(question)
    if room < 0:
        raise ValueError(f"{trial.task} length {trial.length} is too short: intro, needles and question alone take "
                         f"{trial.length - room} tokens")
    units = room // len(unit)
    order = placement([n.depth for n in trial.needles])
    ids, spans, placed = list(head), [(0, 0)] * len(needles), 0
    for n in order:
        at = round(trial.needles[n].depth * units)
        ids += unit * (at - placed)
        placed = at
        spans[n] = (len(ids), len(ids) + len(needles[n]))
        ids += needles[n]
    ids += unit * (units - placed) + question
    return RetrievalPrompt(ids=ids, spans=spans)


def answer_tokens(trial: RetrievalTrial, base: int = 8) -> int:
    """Greedy tokens to decode: ``base`` for one key, room for every value of a multi-value question."""
    return base if trial.task != "multivalue" else base + 6 * (MULTIVALUE - 1)


def score(answer: str, trial: RetrievalTrial) -> tuple[bool, float]:
    """(found, fraction of the answers found): passkey/multikey by the first 5-digit run, multivalue by all runs."""
    runs = _KEY.findall(answer)
    if trial.task == "multivalue":
        hit = sum(key in runs for key in trial.answers)
        return hit == len(trial.answers), hit / len(trial.answers)
    ok = answered_key(answer) == trial.answers[0]
    return ok, float(ok)


def placement(depths: Sequence[float]) -> list[int]:
    """Needle indices in the order a prompt places them: by depth, ties keeping needle order (the asked one first).
    ``build_prompt`` places by it; the report reads a recorded trial's order from it."""
    return sorted(range(len(depths)), key=lambda n: (depths[n], n))


def answered_key(answer: str) -> str | None:
    """The key an answer names: its first 5-digit run, as ``score`` reads it (None where it names none)."""
    runs = _KEY.findall(answer)
    return runs[0] if runs else None


def other_needle(answer: str, needles: Sequence[Sequence[Any]], asked: str) -> bool:
    """Whether a wrong answer names another needle's key (``needles``: (key, depth) pairs as a trial records them):
    the model read the haystack but took a distractor's key, not the asked one — a failure of binding, not of
    reaching the far tokens (an answer with no needle's key at all)."""
    key = answered_key(answer)
    return key is not None and key != asked and key in {str(n[0]) for n in needles}


def last_needle(needles: Sequence[Sequence[Any]]) -> str:
    """The key of the needle placed last in the prompt, nearest the question (``needles``: (key, depth) pairs as a
    trial records them, the asked one first): the last in ``placement``. An answer naming it where another door was
    asked is a reading by recency, not by door."""
    return str(needles[placement([n[1] for n in needles])[-1]][0])


def shared_prefix_tokens(tokenizer: Any, task: str, length: int, count: int, *, seed: int = 0,
                         budget: int | None = None, depths: str = "strata") -> tuple[int, int]:
    """(prompt tokens of a cell's ``count`` trials, tokens read when they share prefixes): what
    ``passkey.PrefixCaches`` saves, counted without a model (budget: 3 prompt lengths, as the grid keeps)."""
    prefixes = PrefixCaches(None, budget=3 * length if budget is None else budget)  # type: ignore[arg-type]
    whole = read = 0
    for trial in cell_trials(seed, task, length, count, depths=depths):
        prompt = build_prompt(tokenizer, trial)
        held, reused, keep = prefixes.plan(prompt.ids, prompt.first_needle)
        if keep:
            prefixes.kept[held] = (prompt.ids[:held], [])
        whole, read = whole + len(prompt.ids), read + len(prompt.ids) - reused
    return whole, read
