"""Passkey retrieval (Mohtashami & Jaggi, 2023; used by the PI and YaRN papers).

A random 5-digit key is hidden at a random depth inside repeated filler
sentences; the prompt ends by asking for it, and the model's greedy
continuation must contain it. The prompt is assembled from separately
tokenised pieces, so its length in tokens is controlled exactly (within one
filler sentence) and the key's depth is known in tokens.

Accuracy comes with a Wilson score interval (``wilson``), which stays inside
[0, 1] and is honest for the handful of trials a CPU allows.

Example::

    trial = make_trial(random.Random(0), length=4096)
    prompt = build_prompt(tokenizer, trial)
    ok = score(tokenizer.decode(greedy_continuation(model, prompt.ids, 8)), trial.key)
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from posenc.extend.forward import final_hidden
from posenc.extend.texts import bos_prefix, encode_plain

INTRO = ("There is an important piece of information hidden inside a lot of irrelevant text. "
         "Find it and memorize it. I will quiz you about the important information there.\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key.\n"
QUESTION = "What is the pass key? The pass key is"
_KEY = re.compile(r"\d{5}")


@dataclass(frozen=True)
class Trial:
    """One passkey question: the key, its depth (fraction of the filler before it) and the prompt length asked."""

    key: str
    depth: float
    length: int


@dataclass(frozen=True)
class Prompt:
    """A built prompt: token ids, and where the needle sits (token index of its first token)."""

    ids: list[int]
    needle_start: int
    needle_end: int


def make_trial(rng: random.Random, length: int) -> Trial:
    """A random key in 10000–99999 and a uniform random depth in [0, 1]."""
    return Trial(key=str(rng.randint(10000, 99999)), depth=rng.random(), length=length)


def build_prompt(tokenizer: Any, trial: Trial) -> Prompt:
    """INTRO + filler + NEEDLE (at ``trial.depth`` of the filler) + filler + QUESTION, ≤ ``trial.length`` tokens.

    Filler sentences are whole; the prompt is the longest such prompt that fits.

    Raises:
        ValueError: ``trial.length`` is too short for the intro, needle and question alone.
    """
    head = bos_prefix(tokenizer) + encode_plain(tokenizer, INTRO)
    needle = encode_plain(tokenizer, NEEDLE.format(key=trial.key))
    question = encode_plain(tokenizer, QUESTION)
    unit = encode_plain(tokenizer, FILLER)
    room = trial.length - len(head) - len(needle) - len(question)
    if room < 0:
        raise ValueError(f"passkey length {trial.length} is too short: intro, needle and question alone take "
                         f"{trial.length - room} tokens")
    units = room // len(unit)
    before = round(trial.depth * units)
    ids = head + unit * before
    start = len(ids)
    ids += needle
    end = len(ids)
    ids += unit * (units - before) + question
    return Prompt(ids=ids, needle_start=start, needle_end=end)


def score(answer: str, key: str) -> bool:
    """Exact match: the first 5-digit run in the model's answer is the key."""
    found = _KEY.search(answer)
    return found is not None and found.group(0) == key


class PrefixCaches:
    """KV caches of prompt beginnings that many prompts share, kept so that later prompts continue them.

    The retrieval trials of one (task, length) differ only from their first
    needle on: before it, every prompt is the same intro and the same filler
    sentences. ``start(ids, shared)`` returns a cache that holds ``ids[:shared]``:
    it forks the longest kept prefix that ``ids`` begins with (``KVCache.fork``:
    no copy, the kept cache is left as it is), reads only the tokens between
    that prefix and ``shared``, and keeps the new prefix for the prompts after
    it while the kept prefixes hold at most ``budget`` tokens in all. Passkey
    trials at the five grid depths 0, ¼, ½, ¾, 1 then read on average half of
    their filler (the five prefixes, each the intro and 0, ¼, … of the filler,
    fit a budget of 3 prompt lengths); the cost is their memory, ``budget``
    tokens of keys and values per layer.

    A kept prefix is reused only where ``ids`` begins with exactly its tokens,
    and only with the model it was computed by (make one per model). The
    result differs from one pass over the whole prompt only by float rounding
    (the same keys, computed in two calls instead of one); methods whose
    rotation depends on the whole sequence's length (``methods.needs_length``)
    must not share prefixes across prompts of different lengths.
    """

    def __init__(self, model: nn.Module, budget: int) -> None:
        self.model, self.budget = model, budget
        self.kept: dict[int, tuple[list[int], list[Any]]] = {}
        #: prompt tokens the last ``start`` took from a kept prefix (not read again)
        self.reused = 0

    def plan(self, ids: list[int], shared: int) -> tuple[int, int, bool]:
        """What ``start`` does for a prompt, decided without the model: (held, reused, keep) — the cache will hold
        ``ids[:held]`` (``shared``, kept below the prompt's length: its last token's pass gives the first answer
        token), ``reused`` of those come from a kept prefix, and whether the new prefix is kept."""
        held = max(0, min(shared, len(ids) - 1))
        reused = max((n for n, (tokens, _) in self.kept.items() if n <= held and ids[:n] == tokens), default=0)
        return held, reused, held > reused and held not in self.kept and sum(self.kept) + held <= self.budget

    def start(self, ids: list[int], shared: int) -> tuple[list[Any], int, int]:
        """(a cache holding ``ids[:held]``, held, how many of those came from a kept prefix): see ``plan``."""
        held, reused, keep = self.plan(ids, shared)
        cache = [c.fork() for c in self.kept[reused][1]] if reused else self.model.new_cache()
        if held > reused:
            device = next(self.model.parameters()).device
            final_hidden(self.model, torch.tensor([ids[reused:held]], dtype=torch.long, device=device), cache=cache)
        if keep:
            self.kept[held] = (ids[:held], [c.fork() for c in cache])
        self.reused = reused
        return cache, held, reused


@torch.no_grad()
def greedy_continuation(model: nn.Module, ids: list[int], max_new_tokens: int, *,
                        prefixes: PrefixCaches | None = None, shared: int = 0) -> list[int]:
    """Greedy decoding with the KV cache; logits only for the last position (no (T, V) tensor).

    With ``prefixes``, the first ``shared`` prompt tokens continue a kept prefix's cache where one fits
    (``PrefixCaches``); the answer is the same up to float rounding.
    """
    device = next(model.parameters()).device
    if prefixes is None:
        cache, shared = model.new_cache(), 0
    else:
        cache, shared, _ = prefixes.start(ids, shared)
    new = torch.tensor([ids[shared:]], dtype=torch.long, device=device)
    out: list[int] = []
    for _ in range(max_new_tokens):
        hidden = final_hidden(model, new, cache=cache)[:, -1]  # (1, D)
        token = int(model.head(hidden).argmax(-1))
        out.append(token)
        new = torch.tensor([[token]], dtype=torch.long, device=device)
    return out


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); (0, 1) with no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)
