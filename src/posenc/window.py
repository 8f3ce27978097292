"""Attention windows: which keys a query may see, counted in sequence order, and the mask that states it.

A layer's window (``posenc.plan.LayerSpec.window``) is one of

* ``full`` — query i sees keys 0 … i;
* ``sliding(W)`` — query i sees keys i − W + 1 … i (W keys, itself included);
* ``chunked(C)`` — query i sees the keys of its own chunk up to itself:
  ⌊j / C⌋ = ⌊i / C⌋ and j ≤ i (Llama 4's chunked attention).

Windows count tokens in sequence order (what a KV cache holds), not position
values, exactly as HF's masks do. :func:`window_mask` is the one statement of
each window's rule as a mask; ``posenc.attention`` and the remapping schemes'
blockwise attention (``posenc.positions.remap``) both use it. The module imports
nothing of posenc: it sits on the ground floor, below the schemes and attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

WindowKind = Literal["full", "sliding", "chunked"]
WINDOW_KINDS: tuple[str, ...] = ("full", "sliding", "chunked")


@dataclass(frozen=True)
class Window:
    """Which keys a query may see: ``full``, ``sliding`` (size W keys) or ``chunked`` (chunk size C).

    Raises:
        ValueError: an unknown kind, a size on ``full`` or none on the others.
    """

    kind: WindowKind = "full"
    size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in WINDOW_KINDS:
            raise ValueError(f"window kind must be one of {WINDOW_KINDS}, got {self.kind!r}")
        if self.kind == "full":
            if self.size is not None:
                raise ValueError(f"a full window takes no size, got size={self.size}")
        elif isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"a {self.kind} window needs a positive integer size, got {self.size!r}")

    @property
    def full(self) -> bool:
        return self.kind == "full"

    def first_visible(self, index: Any) -> Any:
        """The sequence index of the first key the query at sequence index ``index`` sees (an int, or an int64
        tensor of indices: a tensor of the same shape)."""
        if self.kind == "sliding":
            first = index - self.size + 1  # type: ignore[operator]
            return first.clamp(min=0) if hasattr(first, "clamp") else max(0, first)
        if self.kind == "chunked":
            return index // self.size * self.size  # type: ignore[operator]
        return index * 0  # 0, or zeros shaped like a tensor of indices

    def binds(self, first_key: int, last_query: int) -> bool:
        """Whether the window hides some key from some query when keys from sequence index ``first_key`` are
        held and the last query is at ``last_query`` (causal attention otherwise)."""
        if self.kind == "sliding":
            return last_query - first_key >= self.size  # type: ignore[operator]
        if self.kind == "chunked":
            return first_key // self.size != last_query // self.size  # type: ignore[operator]
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind} if self.full else {"kind": self.kind, "size": self.size}

    def __str__(self) -> str:
        return "full" if self.full else f"{self.kind} {self.size:,}"


FULL = Window()


def window_mask(window: Window, *, q_index: int, k_index: int, q_len: int, k_len: int,
                device: torch.device | None = None) -> Tensor:
    """(Tq, Tk) bool "may attend" of a causal window: queries at sequence indices q_index …, keys at k_index ….

    The one statement of each window's rule (``Window``'s docstring); the blockwise
    attention and the tests' naive reference both use it.
    """
    qi = torch.arange(q_index, q_index + q_len, device=device)[:, None]
    kj = torch.arange(k_index, k_index + k_len, device=device)[None, :]
    allowed = kj <= qi
    if window.kind == "sliding":
        allowed &= kj > qi - window.size
    elif window.kind == "chunked":
        allowed &= kj // window.size == qi // window.size
    return allowed
