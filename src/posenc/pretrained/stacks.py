"""Loading the families that are not ``Decoder`` decoders (BERT-style encoders, encoder–decoders).

Such a family (``posenc.families.stacks.StackFamily`` with a ``builder``) reads
config.json into its own config, builds its model on the ``meta`` device and
is filled here tensor by tensor through the family's names — the same
discipline as ``posenc.pretrained.hf.load_llama_weights``: each tensor read,
renamed (fused ones split), shape-checked, cast and placed before the next is
read; an unknown, missing or wrongly shaped tensor is an error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc.families import config_from_hf, family_for
from posenc.formats import CheckpointError, load_checkpoint

#: Tensors some checkpoints carry that are buffers, not weights.
_IGNORED_SUFFIXES = ("position_ids", "rotary_emb.inv_freq")


def load_named(model: nn.Module, tensors: Iterable[tuple[str, Tensor]], family: Any, *, source: str,
               dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
               tied: dict[str, str] | None = None) -> nn.Module:
    """Fill ``model`` (built on ``meta``) from HF-named tensors through ``family``'s names.

    Args:
        tied: posenc name → the posenc name it shares its tensor with (a tied head, shared
            encoder/decoder tables); a tied tensor saved anyway is skipped, and filled by the tie.

    Raises:
        CheckpointError: an unknown, missing or wrongly shaped tensor — naming it, ``source`` and the fix.
    """
    tied = tied or {}
    expected = dict(model.named_parameters(remove_duplicate=False))
    filled: set[str] = set()
    for hf_name, stored in tensors:
        if hf_name.endswith(_IGNORED_SUFFIXES):
            continue
        fused = family.posenc_name(hf_name)
        if fused is None:
            raise CheckpointError(f"{source}: tensor {hf_name!r} has no place in this {family.name}-family model; "
                                  "are the config and the weights from the same model?")
        for name, tensor in family.tensors(fused, stored, model.config):
            if name in tied:
                continue
            if name not in expected:
                raise CheckpointError(f"{source}: tensor {hf_name!r} (posenc {name!r}) has no place in this "
                                      f"{family.name}-family model; are the config and the weights from the same "
                                      "model?")
            want = tuple(expected[name].shape)
            if tuple(tensor.shape) != want:
                raise CheckpointError(f"{source}: tensor {hf_name!r} has shape {tuple(tensor.shape)}, the config "
                                      f"implies {want}; config.json and the weights disagree — use the files of one "
                                      "model")
            module_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(module_name), attr,
                    nn.Parameter(tensor.to(dtype=dtype, device=device), requires_grad=False))
            filled.add(name)
    for name, source_name in tied.items():
        if source_name in filled:
            module_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(module_name), attr, model.get_parameter(source_name))
            filled.add(name)
    missing = sorted(set(expected) - filled)
    if missing:
        raise CheckpointError(f"{source}: missing tensor(s) {missing[:5]}{' …' if len(missing) > 5 else ''} "
                              f"({len(missing)} in all); the checkpoint is incomplete — download every file")
    return model.to(device)


def load_stack_folder(folder: Path, hf: dict[str, Any], *, dtype: torch.dtype = torch.float32,
                      device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """(model, config.json dict) of an HF folder whose family has a ``builder`` (see the module docstring)."""
    family = family_for(hf, source=str(folder / "config.json"))
    config = config_from_hf(hf, source=str(folder / "config.json"))
    model = family.builder(config, device="meta")
    ckpt = load_checkpoint(folder)
    load_named(model, ((n, ckpt.tensor(n)) for n in ckpt.names()), family, source=str(folder), dtype=dtype,
               device=device, tied=getattr(model, "tied_names", lambda: {})())
    return model.eval(), hf


def is_stack_family(hf: dict[str, Any]) -> bool:
    """Whether config.json's model type is read by a family with its own builder (not a ``Decoder`` decoder)."""
    try:
        return getattr(family_for(hf), "builder", None) is not None
    except ValueError:
        return False
