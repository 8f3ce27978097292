"""Fully sharded data parallel training (FSDP2) for :func:`posenc.train.train`, and its checkpoints.

Under ``torchrun`` with ``train(..., fsdp=True)`` every parameter, its gradient
and AdamW's two moments are split over the ranks
(``torch.distributed.fsdp.fully_shard``): each block of the model's ``layers``
list (an encoder–decoder's ``encoder`` and ``decoder`` lists) is one unit,
gathered just before it runs and freed after, and the embedding, final norm
and head belong to the root unit. A rank then
holds about 1/N of the 4 × the weights that training keeps, instead of all of
it under DDP. Gradients are averaged over the ranks as DDP averages them, so N
sharded processes train the model one process trains on the same global batch
(``tests/finetune/test_ddp.py``).

Checkpoints keep posenc's one format. At a save the full weights and
optimiser state are gathered to rank 0 (on the CPU) and written as a
single-process run writes them — optimiser state under integer parameter
indices, in the order of :func:`posenc.train.make_optimizer` — so a sharded run
resumes from the files of an unsharded one with the same number of processes
and vice versa. Rank 0 keeps one unsharded copy of the weights (``host``, 1 ×
the weights, no gradients or moments) into which each gather is loaded; the
checkpoint is written from it and evaluation runs on it, on rank 0 alone, as it
does without sharding. Everything else of the run (batches, the loss, Ctrl-C,
exact resume) is the training loop's, unchanged.

Limits, stated rather than hidden: the model is built whole on every rank
before it is sharded (no meta-device construction), so FSDP here saves the
memory of gradients and optimiser state during training, not of building the
model; and the gather at a save briefly holds the full optimiser state on rank
0's CPU.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

from posenc.checkpoint import OptimizerState

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
#: ModuleList attributes whose entries become one FSDP unit each (decoder-only and Llama-family `layers`,
#: an encoder–decoder's `encoder` and `decoder` stacks)
UNIT_LISTS = ("layers", "encoder", "decoder")


def units(model: nn.Module) -> list[nn.Module]:
    """The blocks sharded as units of their own: the entries of every ``UNIT_LISTS`` module list in ``model``."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in UNIT_LISTS:
            found.extend(module)
    return found


def _without_forward_overrides(model: nn.Module) -> nn.Module:
    """``model`` with instance-level ``forward`` attributes dropped (a loss forward, checkpointing wrappers).

    The training loop's callers point ``forward`` at a loss, or wrap a layer's ``forward`` in activation
    checkpointing, as instance attributes of the live model; the host copy that evaluation runs must be the
    plain model.
    """
    for module in model.modules():
        module.__dict__.pop("forward", None)
    return model


class Sharded:
    """A model sharded over the process group, with rank 0's full copy for checkpoints and evaluation.

    Args:
        model: the whole model, the same on every rank (weights already loaded when resuming); it is sharded in
            place (``fully_shard`` turns it and its units into FSDP modules).
        is_main: whether this is rank 0 (which keeps the host copy).
    """

    def __init__(self, model: nn.Module, *, is_main: bool) -> None:
        #: names of the trainable parameters in optimiser order (``make_optimizer``: ``parameters()`` order)
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.host = _without_forward_overrides(copy.deepcopy(model)).requires_grad_(False) if is_main else None
        for unit in units(model):
            fully_shard(unit)
        fully_shard(model)
        self.model = model
        self._gathered_step: int | None = None

    def gather(self, step: int) -> nn.Module | None:
        """Collective: the full weights after ``step`` updates into rank 0's host copy (returned there; None on
        other ranks). A second call for the same step gathers nothing: every rank skips it alike."""
        if step != self._gathered_step:
            full = get_model_state_dict(self.model, options=_FULL)
            if self.host is not None:
                self.host.load_state_dict(full, strict=True)
            self._gathered_step = step
        return self.host

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> OptimizerState | None:
        """Collective: the full optimiser state, keyed as an unsharded optimiser keys it (rank 0; else None)."""
        full = get_optimizer_state_dict(self.model, optimizer, options=_FULL)
        if self.host is None:
            return None
        index = {name: i for i, name in enumerate(self.names)}
        state = {index[name]: entry for name, entry in full["state"].items()}
        groups = [{**g, "params": [index[name] for name in g["params"]]} for g in full["param_groups"]]
        return OptimizerState(type(optimizer).__name__, {"state": state, "param_groups": groups})

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, saved: dict[str, object]) -> None:
        """Every rank: an unsharded optimiser ``state_dict()`` (integer indices) spread over the shards."""
        state = {self.names[int(i)]: entry for i, entry in saved["state"].items()}  # type: ignore[union-attr]
        groups = [{**g, "params": [self.names[int(i)] for i in g["params"]]}
                  for g in saved["param_groups"]]  # type: ignore[union-attr]
        set_optimizer_state_dict(self.model, optimizer, {"state": state, "param_groups": groups},
                                 options=StateDictOptions(full_state_dict=True))


__all__ = ["Sharded", "UNIT_LISTS", "units"]
