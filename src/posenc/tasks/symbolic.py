"""Copy, reverse, sort and multi-digit addition (Kazemnejad et al., NeurIPS 2023, §3).

The reference for each target is a one-line Python statement (``list``,
``reversed``, ``sorted``, ``int`` addition), which the tests re-check.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

import torch

from posenc.tasks.base import Example, Task


class _SymbolTask(Task):
    """A random string of ``length`` symbols from an alphabet of ``num_symbols`` letters."""

    def __init__(self, *, num_symbols: int = 10) -> None:
        if not 2 <= num_symbols <= 26:
            raise ValueError(f"num_symbols must be in 2..26, got {num_symbols}")
        self.num_symbols = num_symbols

    def symbols(self) -> list[str]:
        return list(string.ascii_lowercase[: self.num_symbols])

    def options(self) -> dict[str, Any]:
        return {"num_symbols": self.num_symbols}

    def _draw(self, length: int, gen: torch.Generator) -> tuple[str, ...]:
        letters = self.symbols()
        return tuple(letters[i] for i in torch.randint(0, self.num_symbols, (length,), generator=gen).tolist())

    def answer(self, source: tuple[str, ...]) -> tuple[str, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def make(self, length: int, gen: torch.Generator) -> Example:
        source = self._draw(length, gen)
        return Example(source=source, target=self.answer(source), length=length)


class Copy(_SymbolTask):
    """Output the input unchanged."""

    name: ClassVar[str] = "copy"

    def answer(self, source: tuple[str, ...]) -> tuple[str, ...]:
        return source


class Reverse(_SymbolTask):
    """Output the input backwards."""

    name: ClassVar[str] = "reverse"

    def answer(self, source: tuple[str, ...]) -> tuple[str, ...]:
        return source[::-1]


class Sort(_SymbolTask):
    """Output the input's symbols in alphabetical order (repeats kept)."""

    name: ClassVar[str] = "sort"

    def answer(self, source: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(source))


class Addition(Task):
    """``a + b`` → the digits of a + b, where a and b both have exactly ``length`` digits.

    The operands are written in ``operand_order``, the answer in ``answer_order``, each
    ``"msd"`` (most-significant digit first, as people write numbers) or ``"lsd"``:

    * answer ``"msd"`` (default) is the harder direction for a left-to-right model: its
      first output digit depends on every carry, which it must work out before writing
      anything.
    * answer ``"lsd"`` (the "reversed" format of Lee et al. 2023, also used by Zhou et
      al. 2024): each output digit depends on one digit of each operand and the carry
      just written, the order in which people add.
    * operands ``"lsd"`` as well: every answer digit then sits the same distance after
      the operand digits it adds (a distance that grows with the length), which a model
      can find by one relative offset per length instead of a mirrored one.

    The answer has ``length`` or ``length + 1`` digits.
    """

    name: ClassVar[str] = "addition"
    length_unit: ClassVar[str] = "digits per operand"
    ORDERS: ClassVar[tuple[str, ...]] = ("msd", "lsd")

    def __init__(self, *, answer_order: str = "msd", operand_order: str = "msd") -> None:
        for name, value in (("answer_order", answer_order), ("operand_order", operand_order)):
            if value not in self.ORDERS:
                raise ValueError(f"{name} must be one of {', '.join(self.ORDERS)}, got {value!r} "
                                 "(msd: most-significant digit first; lsd: least-significant first)")
        self.answer_order, self.operand_order = answer_order, operand_order

    def options(self) -> dict[str, Any]:
        return {"answer_order": self.answer_order, "operand_order": self.operand_order}

    def symbols(self) -> list[str]:
        return [*"0123456789", "+"]

    def _number(self, length: int, gen: torch.Generator) -> int:
        """Uniform over the numbers with exactly ``length`` digits (no leading zero unless length 1)."""
        digits = torch.randint(0, 10, (length,), generator=gen).tolist()
        if length > 1:
            digits[0] = 1 + int(torch.randint(0, 9, (1,), generator=gen))
        return int("".join(map(str, digits)))

    def size_bound(self, length: int) -> tuple[int, int]:
        return 2 * length + 1, length + 1

    def make(self, length: int, gen: torch.Generator) -> Example:
        def written(n: int, order: str) -> tuple[str, ...]:
            return tuple(str(n) if order == "msd" else str(n)[::-1])

        a, b = self._number(length, gen), self._number(length, gen)
        return Example(source=(*written(a, self.operand_order), "+", *written(b, self.operand_order)),
                       target=written(a + b, self.answer_order), length=length)
