"""SCAN (Lake & Baroni, ICML 2018): navigation commands → action sequences, from its grammar.

The grammar (their Fig. 6)::

    C → S and S | S after S | S
    S → V twice | V thrice | V
    V → D opposite D' | D around D' | D | U      (D' ∈ {left, right})
    D → U left | U right | turn left | turn right
    U → walk | look | run | jump

generates exactly 20,910 commands; we enumerate all of them once, interpret
each, and bucket them by the number of output actions — the *length* here, as
in SCAN's length split (train on ≤ 22 actions, test on 24–48). Sampling a
length draws uniformly from its bucket, so lengths are exact.

Reference: the semantics table of Lake & Baroni (2018), re-implemented; the
test checks the command count (20,910), the length range (1–48) and known pairs.
"""

from __future__ import annotations

from functools import cache
from typing import ClassVar

import torch

from posenc.tasks.base import Example, Task

PRIMITIVES = {"walk": "WALK", "look": "LOOK", "run": "RUN", "jump": "JUMP"}
TURN = {"left": "LTURN", "right": "RTURN"}


def _v_phrases() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Every V phrase and its actions."""
    out: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for verb in [*PRIMITIVES, "turn"]:
        act = () if verb == "turn" else (PRIMITIVES[verb],)
        for side, turn in TURN.items():
            out.append(((verb, side), (turn, *act)))                          # D
            out.append(((verb, "opposite", side), (turn, turn, *act)))        # D opposite
            out.append(((verb, "around", side), (turn, *act) * 4))            # D around
    out.extend(((verb,), (PRIMITIVES[verb],)) for verb in PRIMITIVES)         # U
    return out


@cache
def commands() -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """All 20,910 (command, actions) pairs, in a fixed order."""
    s_phrases = []
    for words, acts in _v_phrases():
        s_phrases += [(words, acts), ((*words, "twice"), acts * 2), ((*words, "thrice"), acts * 3)]
    out = list(s_phrases)
    for w1, a1 in s_phrases:
        for w2, a2 in s_phrases:
            out.append(((*w1, "and", *w2), a1 + a2))
            out.append(((*w1, "after", *w2), a2 + a1))
    return tuple(out)


@cache
def by_length() -> dict[int, tuple[int, ...]]:
    """Action count → indices into :func:`commands`."""
    buckets: dict[int, list[int]] = {}
    for i, (_, acts) in enumerate(commands()):
        buckets.setdefault(len(acts), []).append(i)
    return {n: tuple(ix) for n, ix in sorted(buckets.items())}


class Scan(Task):
    """SCAN commands, length = number of output actions (1–48; some lengths are empty)."""

    name: ClassVar[str] = "scan"
    length_unit: ClassVar[str] = "output actions"

    def symbols(self) -> list[str]:
        words = sorted({w for cmd, _ in commands() for w in cmd})
        actions = sorted({a for _, acts in commands() for a in acts})
        return [*words, *actions]

    def max_length(self) -> int:
        return max(by_length())

    def lengths(self) -> list[int]:
        """The lengths that have at least one command."""
        return list(by_length())

    def size_bound(self, length: int) -> tuple[int, int]:
        bucket = by_length().get(length, ())
        return max((len(commands()[i][0]) for i in bucket), default=0), length

    def make(self, length: int, gen: torch.Generator) -> Example:
        bucket = by_length().get(length)
        if not bucket:
            raise ValueError(f"SCAN has no command with {length} actions; lengths with commands: {self.lengths()}")
        cmd, acts = commands()[bucket[int(torch.randint(0, len(bucket), (1,), generator=gen))]]
        return Example(source=cmd, target=acts, length=length)
