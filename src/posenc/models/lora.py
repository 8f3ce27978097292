"""LoRA: a frozen linear layer plus a trainable low-rank update (Hu et al., 2021, "LoRA: Low-Rank Adaptation").

``y = x Wᵀ + b + (α / r) · dropout(x) Aᵀ Bᵀ`` with A (r, in) and B (out, r).
A starts as ``nn.Linear`` initialises a weight (Kaiming-uniform, a = √5) and B
at zero, so a freshly wrapped model computes exactly what it did before (as in
the paper and in HF ``peft``'s default ``init_lora_weights=True``).

``LoRALinear`` *is* an ``nn.Linear`` (same ``weight`` and ``bias``), so the
wrapped model's state dict keeps every original key and adds
``<name>.lora_a`` / ``<name>.lora_b``; ``merge_lora`` folds ``(α/r)·B A`` into
the weight and turns each layer back into a plain ``nn.Linear``.

Why not ``peft``: it installs from PyPI (0.21.2, needs transformers and
accelerate) and wraps posenc's projections cleanly — same outputs at
initialisation — but importing it imports transformers (≈ 30 s on the shared
CPU machine), for what is a few lines here. ``tests/finetune/test_lora.py``
checks this module against ``peft``'s own LoRA layer when peft is installed.

Example::

    names = apply_lora(model, targets=("q_proj", "v_proj"), rank=8, alpha=16)
    ...train...
    merge_lora(model)    # a plain model again, the update folded in
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LoRALinear(nn.Linear):
    """``nn.Linear`` with a low-rank update; the base ``weight``/``bias`` are frozen by ``apply_lora``.

    Args:
        base: the layer to adapt (its weight and bias are shared, not copied).
        rank: r ≥ 1.
        alpha: the update is scaled by α / r.
        dropout: dropout on the update's input (LoRA's ``lora_dropout``).
        generator: draws A (default torch's global generator).
    """

    def __init__(self, base: nn.Linear, *, rank: int, alpha: float, dropout: float = 0.0,
                 generator: torch.Generator | None = None) -> None:
        nn.Module.__init__(self)  # not nn.Linear.__init__: the base's parameters are taken over, not re-made
        if not (isinstance(rank, int) and rank >= 1):
            raise ValueError(f"LoRA rank must be an integer >= 1, got {rank!r}")
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"LoRA alpha must be a positive number, got {alpha!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout!r}")
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.alpha = rank, float(alpha)
        self.scale = self.alpha / rank
        w = base.weight
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, dtype=w.dtype, device=w.device))
        self.lora_b = nn.Parameter(torch.zeros(self.out_features, rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5), generator=generator)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) → (..., out)."""
        update = F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b)  # (..., out)
        return F.linear(x, self.weight, self.bias) + update * self.scale

    def delta(self) -> Tensor:
        """(α/r)·B A, the (out, in) change the update makes to the weight."""
        return (self.lora_b @ self.lora_a) * self.scale

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with W + (α/r)·B A (and the same bias)."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                        device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.weight + self.delta().to(self.weight.dtype))
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, rank={self.rank}, alpha={self.alpha:g}"


def linear_names(model: nn.Module) -> list[str]:
    """The last name part of every ``nn.Linear`` in ``model`` (e.g. q_proj, v_proj, up_proj), each once, sorted."""
    return sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, nn.Linear)
                   and name})


def apply_lora(model: nn.Module, *, targets: Sequence[str] = ("q_proj", "v_proj"), rank: int = 8,
               alpha: float = 16.0, dropout: float = 0.0, train: Sequence[str] = (),
               generator: torch.Generator | None = None) -> list[str]:
    """Replace every ``nn.Linear`` whose last name part is in ``targets`` by a ``LoRALinear``; freeze the rest.

    Args:
        targets: projection names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, ``gate_proj``, ``up_proj``,
            ``down_proj`` in posenc's decoders).
        train: substrings of parameter names that stay trainable besides the LoRA factors (LongLoRA trains
            the embeddings and norms: ``("embed", "norm")``).
        generator: draws every A, in module order (seed it for a run that every process starts alike).

    Returns:
        The full names of the wrapped layers, in module order.

    Raises:
        ValueError: a target matches no linear layer (the message lists the names there are).
    """
    targets = list(dict.fromkeys(targets))
    if not targets:
        raise ValueError("LoRA needs at least one target projection (e.g. q_proj,v_proj)")
    found = linear_names(model)
    missing = [t for t in targets if t not in found]
    if missing:
        raise ValueError(f"LoRA target(s) {missing} match no linear layer of {type(model).__name__}; "
                         f"its linear layers are named {found}")
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and type(child) is nn.Linear:
                lora = LoRALinear(child, rank=rank, alpha=alpha, dropout=dropout, generator=generator)
                setattr(module, child_name, lora)
                wrapped.append(f"{name}.{child_name}" if name else child_name)
    for pname, p in model.named_parameters():
        if pname.endswith((".lora_a", ".lora_b")) or any(s in pname for s in train):
            p.requires_grad_(True)
    return wrapped


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every ``LoRALinear``'s update into its weight, in place; returns ``model`` (plain linears only)."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, LoRALinear):
                setattr(module, child_name, child.merged())
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def lora_parameters(model: nn.Module) -> dict[str, Tensor]:
    """The adapter tensors only (``…lora_a``, ``…lora_b``), by parameter name."""
    return {n: p for n, p in model.named_parameters() if n.endswith((".lora_a", ".lora_b"))}


__all__ = ["LoRALinear", "apply_lora", "linear_names", "lora_parameters", "merge_lora"]
