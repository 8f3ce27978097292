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


@torch.no_grad()
def greedy_continuation(model: nn.Module, ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy decoding with the KV cache; logits only for the last position (no (T, V) tensor)."""
    device = next(model.parameters()).device
    cache = model.new_cache()
    new = torch.tensor([ids], dtype=torch.long, device=device)
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
