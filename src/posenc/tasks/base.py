"""What a synthetic task is: examples of an exact length, drawn from a seeded generator.

A task maps a *length* (the quantity length generalisation is about: symbols
to copy, digits per operand, actions to output) and a ``torch.Generator`` to an
:class:`Example` — a source token sequence and the target the model must
produce. Tokens are strings; :class:`Vocab` turns them into ids. Framings
(prompt + answer for decoder-only models, source → target for
encoder–decoders) live in :mod:`posenc.tasks.framing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

PAD, BOS, EOS, SEP = "<pad>", "<bos>", "<eos>", "<sep>"
SPECIALS = (PAD, BOS, EOS, SEP)


@dataclass(frozen=True)
class Example:
    """One input/answer pair; ``length`` is the task's length of it."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    length: int


class Vocab:
    """Token strings ↔ ids; the four specials come first (``<pad>`` is 0)."""

    def __init__(self, symbols: Iterable[str]) -> None:
        symbols = list(symbols)
        clash = sorted(set(symbols) & set(SPECIALS))
        if clash:
            raise ValueError(f"task symbols {clash} collide with the special tokens {SPECIALS}")
        if len(set(symbols)) != len(symbols):
            raise ValueError("task symbols must be distinct")
        self.tokens: list[str] = [*SPECIALS, *symbols]
        self.index = {tok: i for i, tok in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad(self) -> int:
        return self.index[PAD]

    @property
    def bos(self) -> int:
        return self.index[BOS]

    @property
    def eos(self) -> int:
        return self.index[EOS]

    @property
    def sep(self) -> int:
        return self.index[SEP]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        try:
            return [self.index[t] for t in tokens]
        except KeyError as err:
            raise ValueError(f"token {err.args[0]!r} is not in this vocabulary") from None

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]


class Task(ABC):
    """A synthetic sequence task with exact length control.

    Subclasses set ``name`` and implement ``symbols``, ``min_length``/``max_length``
    and ``make`` (one example of a given length from a generator).
    """

    name: ClassVar[str]
    #: What "length" counts, for tables and plots.
    length_unit: ClassVar[str] = "symbols"

    @abstractmethod
    def symbols(self) -> list[str]:
        """Every token that can appear in a source or target."""

    def min_length(self) -> int:
        return 1

    def max_length(self) -> int | None:
        """Largest length the task can produce (None: unbounded)."""
        return None

    @abstractmethod
    def make(self, length: int, gen: torch.Generator) -> Example:
        """One example of exactly ``length``."""

    def size_bound(self, length: int) -> tuple[int, int]:
        """Longest possible (source, target) in tokens for examples of ``length`` (default: both ``length``)."""
        return length, length

    def options(self) -> dict[str, Any]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "length_unit": self.length_unit, **self.options()}

    def vocab(self) -> Vocab:
        return Vocab(self.symbols())

    def sample(self, length: int, gen: torch.Generator) -> Example:
        """``make`` with the length checked against the task's range."""
        if not isinstance(length, int) or isinstance(length, bool):
            raise TypeError(f"length must be an int, got {type(length).__name__}")
        hi = self.max_length()
        if length < self.min_length() or (hi is not None and length > hi):
            raise ValueError(
                f"task {self.name!r} has lengths {self.min_length()}..{hi if hi is not None else '∞'}, got {length}")
        return self.make(length, gen)

    def examples(self, lengths: Sequence[int], gen: torch.Generator) -> list[Example]:
        return [self.sample(int(n), gen) for n in lengths]
