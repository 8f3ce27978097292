"""The context-extension methods compared: a checkpoint plus one RoPE scaling scheme, nothing else.

A method's model is built from the checkpoint's own config with only the
position scheme replaced (``dataclasses.replace(config, position=...,
position_options=...)``), then given the very same weights with a strict
``load_state_dict``. RoPE's tables are non-persistent buffers, so the weights
carry no position information and load unchanged into every variant.

Methods (the registered schemes of ``posenc.positions.rotary_scaling``):

=====================  ==================================================================
``rope``               the checkpoint as trained (the baseline: no factor)
``rope-linear``        position interpolation, θ/s (Chen et al., 2023)
``rope-ntk``           NTK-aware base, base·s^(R/(R−2)) (bloc97, 2023)
``rope-dynamic-ntk``   NTK whose base grows with the length beyond L₀ (emozilla, 2023)
``rope-yarn``          ramp between interpolated and kept frequencies + attention factor
``rope-llama3``        Llama 3.1 wavelength bands (low 1, high 4)
=====================  ==================================================================

``rope-longrope`` is left out of the default set: its per-pair factors are found
by a search (and, in Phi-3, progressive fine-tuning) against the model itself;
the scheme's neutral default ramp is not LongRoPE's result, and measuring it
would attribute a stand-in to the method. Given the options a search wrote
(``searched=``; ``posenc finetune search``, ``posenc.finetune.longrope``), it is
built like every other method.

Dynamic NTK uses the scheme's default per-position frequencies: position p
is rotated as if the sequence were p + 1 tokens long, which is what a model
decoding token by token with HF's dynamic scaling and a KV cache sees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from posenc import positions

PLAIN = "rope"
METHODS = ("rope", "rope-linear", "rope-ntk", "rope-dynamic-ntk", "rope-yarn", "rope-llama3")
LEFT_OUT = {"rope-longrope": "needs per-pair factors found by a search against the model (and fine-tuning in "
                             "Phi-3); the scheme's neutral default ramp is not LongRoPE's result"}

#: options of a plain RoPE that every scaled variant keeps from the checkpoint
ROPE_KEYS = ("base", "pairing", "rotary_dim")


def canonical_name(name: str) -> str:
    """The registry's canonical name for ``name`` (aliases resolved where the registry has them)."""
    resolve = getattr(positions, "canonical", None)
    return resolve(name) if resolve is not None else name


#: the method a search result stands in for (accepted by ``check_methods(..., searched=True)``)
SEARCHED = "rope-longrope"


def check_methods(methods: Sequence[str], *, searched: bool = False) -> list[str]:
    """Canonical method names, in order, duplicates dropped; unknown or left-out names raise.

    ``searched=True``: searched LongRoPE factors are at hand, so ``rope-longrope`` is accepted.
    """
    out: list[str] = []
    for m in methods:
        name = canonical_name(m)
        if searched and name == SEARCHED:
            if name not in out:
                out.append(name)
            continue
        if name in LEFT_OUT:
            raise ValueError(f"method {m!r} is not measured: {LEFT_OUT[name]}; valid methods: {', '.join(METHODS)}")
        if name not in METHODS:
            raise ValueError(f"unknown method {m!r}; valid methods: {', '.join(METHODS)}")
        if name not in out:
            out.append(name)
    return out


def method_options(method: str, *, factor: float | None, original_max_len: int,
                   searched: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The scheme options a method adds on top of the checkpoint's RoPE (base, pairing, rotary width).

    ``factor`` is s, the extension factor (L₀ → s·L₀); ``original_max_len`` is L₀. ``searched``: the
    ``rope-longrope`` options a LongRoPE search wrote (short/long factors, …), used as they are.
    """
    if method == PLAIN:
        return {}
    if searched is not None and canonical_name(method) == SEARCHED:
        missing = [k for k in ("short_factor", "long_factor") if k not in searched]
        if missing:
            raise ValueError(f"searched LongRoPE options lack {missing}; give the options a search wrote "
                             "(posenc finetune search: OUT/result.json)")
        return dict(searched)
    if factor is None:
        raise ValueError(f"method {method!r} needs a factor (e.g. --factors 2)")
    by_method: dict[str, dict[str, Any]] = {
        "rope-linear": {"factor": factor},
        "rope-ntk": {"factor": factor},
        "rope-dynamic-ntk": {"factor": factor, "original_max_len": original_max_len},
        "rope-yarn": {"factor": factor, "original_max_len": original_max_len},
        "rope-llama3": {"factor": factor, "original_max_len": original_max_len,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    }
    return by_method[check_methods([method])[0]]


def checkpoint_rope_options(config: Any) -> dict[str, Any]:
    """The checkpoint's RoPE settings (base, pairing, rotary width) that every variant keeps.

    Raises:
        ValueError: the checkpoint does not use plain RoPE (scaling it again would stack two schemes).
    """
    if canonical_name(config.position) != PLAIN:
        raise ValueError(f"the checkpoint uses position={config.position!r}; context extension starts from "
                         f"plain '{PLAIN}' (a checkpoint already scaled would get two schemes at once)")
    return {k: v for k, v in dict(config.position_options).items() if k in ROPE_KEYS}


def variant_config(config: Any, method: str, *, factor: float | None, original_max_len: int,
                   searched: Mapping[str, Any] | None = None) -> Any:
    """``config`` with only ``position`` and ``position_options`` replaced for ``method``."""
    options = {**checkpoint_rope_options(config),
               **method_options(method, factor=factor, original_max_len=original_max_len, searched=searched)}
    return dataclasses.replace(config, position=method, position_options=options)


def default_builder(model: nn.Module) -> Callable[[Any], nn.Module]:
    """The posenc builder that makes models of ``model``'s kind from a config."""
    from posenc.models import DecoderOnlyLM, build_decoder_only
    from posenc.models.llama import LlamaLM, build_llama

    for kind, builder in ((LlamaLM, build_llama), (DecoderOnlyLM, build_decoder_only)):
        if isinstance(model, kind):
            return builder
    raise ValueError(f"no posenc builder known for {type(model).__name__}; pass builder=config → model")


def build_variant(model: nn.Module, method: str, *, factor: float | None, original_max_len: int,
                  builder: Callable[[Any], nn.Module] | None = None,
                  searched: Mapping[str, Any] | None = None) -> nn.Module:
    """A new model: ``model``'s config with ``method``'s scheme, loaded with ``model``'s exact weights.

    Args:
        model: the checkpoint (a ``LlamaLM`` or any posenc model with a ``config`` dataclass).
        builder: config → model; default ``default_builder(model)`` (``build_llama``, ``build_decoder_only``).
        searched: ``rope-longrope`` options from a LongRoPE search (needed for that method only).
    Returns:
        The variant, in eval mode, on ``model``'s device and dtype. For ``rope`` it is ``model`` itself.
    """
    if method == PLAIN:
        return model
    config = variant_config(model.config, method, factor=factor, original_max_len=original_max_len, searched=searched)
    first = next(model.parameters())
    variant = (builder or default_builder(model))(config).to(device=first.device, dtype=first.dtype)
    variant.load_state_dict(model.state_dict(), strict=True)
    return variant.eval()


def trained_context(config: Any) -> int | None:
    """L₀ the checkpoint declares (``max_position_embeddings``), or None when it declares none."""
    value = getattr(config, "max_position_embeddings", None)
    return None if value is None else int(value)
