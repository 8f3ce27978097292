"""Final hidden states of a causal LM, and a spy that says which SDPA path attention took.

Real models (``posenc.models.decoder.Decoder``) expose ``hidden(ids, cache=...)``
→ (B, T, D) after the final norm and a separate ``head``; measuring from the
hidden states lets the loss be computed a chunk of positions at a time, so no
(T, V) logits tensor is ever held (16k × 49k floats would be 3 GB).

posenc's small ``DecoderOnlyLM`` has no ``hidden``; for it the input of its
``head`` is captured with a forward pre-hook (the full logits are then still
computed — fine for the tiny models it is used with).

Shape legend: B batch, T length, D width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def final_hidden(model: nn.Module, ids: Tensor, *, cache: Any = None) -> Tensor:
    """ids (B, T) → hidden states after the final norm (B, T, D); with ``cache``, ids are the new tokens only."""
    if hasattr(model, "hidden"):
        return model.hidden(ids, cache=cache)
    captured: list[Tensor] = []
    hook = model.head.register_forward_pre_hook(lambda _module, args: captured.append(args[0]))
    try:
        model(ids, cache=cache)
    finally:
        hook.remove()
    return captured[-1]


@dataclass
class SDPACalls:
    """What ``F.scaled_dot_product_attention`` was asked during a pass: causal-kernel calls vs masked calls."""

    causal: int = 0
    masked: int = 0
    other: int = 0
    largest_mask: list[int] = field(default_factory=list)

    @property
    def causal_path_only(self) -> bool:
        """Every call used SDPA's own causal kernel (no (Tq, Tk) mask materialised)."""
        return self.causal > 0 and self.masked == 0 and self.other == 0

    def to_dict(self) -> dict[str, Any]:
        return {"causal_kernel_calls": self.causal, "masked_calls": self.masked, "unmasked_calls": self.other,
                "largest_mask_shape": self.largest_mask, "causal_path_only": self.causal_path_only}


@contextmanager
def sdpa_spy() -> Iterator[SDPACalls]:
    """Count how attention calls ``torch.nn.functional.scaled_dot_product_attention`` inside the block.

    posenc's attention takes SDPA's ``is_causal=True`` path for square causal
    self-attention with nothing else to mask; this records whether a long pass
    stayed on it (a materialised (T, T) mask at 16k would be 1 GB per head).
    """
    calls = SDPACalls()
    original = F.scaled_dot_product_attention

    def spy(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, *args: Any, **kwargs: Any) -> Tensor:
        if attn_mask is not None:
            calls.masked += 1
            if attn_mask.numel() > (torch.Size(calls.largest_mask).numel() if calls.largest_mask else 0):
                calls.largest_mask = list(attn_mask.shape)
        elif kwargs.get("is_causal", False) or (len(args) >= 2 and args[1]):
            calls.causal += 1
        else:
            calls.other += 1
        return original(q, k, v, attn_mask, *args, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = original
