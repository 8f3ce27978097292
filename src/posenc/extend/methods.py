"""The context-extension methods compared: a checkpoint plus one position scheme, nothing else.

A method's model is built from the checkpoint's own config with only the
position scheme of the chosen layers replaced (``variant_config``), then given
the very same weights with a strict ``load_state_dict``. RoPE's tables are
non-persistent buffers and remapping schemes have no parameters, so the
weights carry no position information and load unchanged into every variant.

Methods are registered position schemes (``posenc.positions``), usable in any
posenc model; ``extend`` only chooses their options from L₀ and the factor s:

==========================  ===================================================================================
method                      scheme and the options chosen here
==========================  ===================================================================================
``rope``                    the checkpoint as trained (the baseline: no factor)
``rope-linear``             position interpolation, θ/s (Chen et al., 2023)
``rope-ntk``                NTK-aware base, base·s^(R/(R−2)) (bloc97, 2023)
``rope-dynamic-ntk``        dynamic NTK, **per position**: position p rotated as if the sequence were p + 1
                            long (what token-by-token decoding with HF's dynamic scaling sees; emozilla, 2023)
``rope-dynamic-ntk-fixed``  dynamic NTK, **fixed**: one base for every position, from the whole sequence's
                            length (prompt + answer): the YaRN paper's "Dynamic NTK" (``max_seq_len`` = T)
``rope-yarn``               ramp between interpolated and kept frequencies + attention factor
``rope-llama3``             Llama 3.1 wavelength bands (low 1, high 4)
``self-extend``             neighbour window W = L₀/4, group G = ⌈(s·L₀ − W)/(L₀ − W)⌉ (largest relative
                            position at s·L₀ tokens ≤ L₀; Jin et al., 2024)
``rerope``                  window W = L₀/2 (no factor: no relative position exceeds W at any length)
``rerope-leaky``            W = L₀/2, k = 2s − 1 (W + (s·L₀ − W)/k = L₀)
``string``                  S = L₀/3, W = 128 (the paper's setting; no factor — a method for the trained
                            length: past (4/3)·L₀ − 128 its shifted positions leave the trained range)
``dca``                     chunk_size = L₀, local_size = L₀/32 (Qwen2.5-1M's 262,144 / 8,192; no factor:
                            no relative position exceeds chunk_size at any length)
==========================  ===================================================================================

``rope-longrope`` is left out of the default set: its per-pair factors are found
by a search (and, in Phi-3, progressive fine-tuning) against the model itself;
the scheme's neutral default ramp is not LongRoPE's result, and measuring it
would attribute a stand-in to the method. Given the options a search wrote
(``searched=``; ``posenc finetune search``, ``posenc.finetune.longrope``), it is
built like every other method.

Caching: every method's rotation is a function of the positions alone, so
cached decoding equals the full pass (the schemes' tests check it).
``rope-dynamic-ntk-fixed`` is cacheable only because its length is fixed
before decoding starts: a model asked for it without a length is refused
(``needs_length``), since a cache cannot re-rotate keys when the sequence, and
with it the base, grows.

Which layers a method changes (``--layers``, ``selected_layers``): ``all``,
``global`` (full-window layers) or ``rotary`` (every RoPE layer); the default
is what the family does itself (``default_layers``: Gemma 3 scales its global
layers only; a model whose every layer is RoPE changes all of them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from posenc import positions
from posenc.validation import did_you_mean

PLAIN = "rope"
FIXED_NTK = "rope-dynamic-ntk-fixed"
#: frequency transforms (a factor s each)
SCALINGS = ("rope-linear", "rope-ntk", "rope-dynamic-ntk", FIXED_NTK, "rope-yarn", "rope-llama3")
#: position remapping (posenc.positions.remap)
REMAPS = ("self-extend", "rerope", "rerope-leaky", "string", "dca")
METHODS = (PLAIN, *SCALINGS, *REMAPS)
#: methods whose options do not depend on the factor: measured once, like plain RoPE
FACTORLESS = (PLAIN, "rerope", "string", "dca")
LEFT_OUT = {"rope-longrope": "needs per-pair factors found by a search against the model (and fine-tuning in "
                             "Phi-3); the scheme's neutral default ramp is not LongRoPE's result"}
#: plain-language label of each method, for reports
LABELS = {
    PLAIN: "RoPE as trained", "rope-linear": "position interpolation", "rope-ntk": "NTK-aware",
    "rope-dynamic-ntk": "dynamic NTK (per position)", FIXED_NTK: "dynamic NTK (fixed: base from the whole length)",
    "rope-yarn": "YaRN", "rope-llama3": "Llama 3.1 bands", "self-extend": "Self-Extend", "rerope": "ReRoPE",
    "rerope-leaky": "Leaky ReRoPE", "string": "STRING", "dca": "Dual Chunk Attention",
}

#: options of a plain RoPE that every variant keeps from the checkpoint (per layer)
ROPE_KEYS = ("base", "pairing", "rotary_dim")
LAYER_CHOICES = ("all", "global", "rotary")
#: what each family scales itself when its config asks for a scaling (HF transformers: Gemma 3 puts its
#: rope_scaling on the full_attention block only); a family not listed changes every RoPE layer
FAMILY_LAYERS = {"gemma3": "global"}


def canonical_name(name: str) -> str:
    """The registry's canonical name for ``name`` (aliases resolved); extend's own labels kept."""
    if name in METHODS or name in LEFT_OUT:
        return name
    try:
        return positions.canonical(name)
    except ValueError:
        return name


def scheme_name(method: str) -> str:
    """The registered scheme a method builds (``rope-dynamic-ntk-fixed`` is ``rope-dynamic-ntk`` with a length)."""
    return "rope-dynamic-ntk" if method == FIXED_NTK else method


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
            hint = did_you_mean(m, [*METHODS, *([SEARCHED] if searched else [])])
            raise ValueError(f"unknown method {m!r}{hint}; valid methods: {', '.join(METHODS)}")
        if name not in out:
            out.append(name)
    return out


def takes_factor(method: str) -> bool:
    return method not in FACTORLESS


def needs_length(method: str) -> bool:
    """Whether the method's scheme depends on the whole sequence's length (set per pass: ``set_sequence_length``)."""
    return method == FIXED_NTK


def self_extend_options(factor: float, l0: int) -> dict[str, Any]:
    """W = L₀/4 and the smallest G whose largest relative position at s·L₀ tokens stays within L₀."""
    window = max(1, l0 // 4)
    if l0 - window <= 0:
        raise ValueError(f"L0={l0} is too short for Self-Extend's neighbour window L0/4")
    return {"group_size": max(1, math.ceil((factor * l0 - window) / (l0 - window))), "neighbor_window": window}


def method_options(method: str, *, factor: float | None, original_max_len: int,
                   length: int | None = None, searched: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The scheme options a method adds on top of the checkpoint's RoPE (base, pairing, rotary width).

    ``factor`` is s, the extension factor (L₀ → s·L₀); ``original_max_len`` is L₀; ``length`` is the
    whole sequence's length, for ``rope-dynamic-ntk-fixed`` only. ``searched``: the ``rope-longrope``
    options a LongRoPE search wrote (short/long factors, …), used as they are.
    """
    if searched is not None and canonical_name(method) == SEARCHED:
        missing = [k for k in ("short_factor", "long_factor") if k not in searched]
        if missing:
            raise ValueError(f"searched LongRoPE options lack {missing}; give the options a search wrote "
                             "(posenc finetune search: OUT/result.json)")
        return dict(searched)
    method = check_methods([method])[0]
    l0 = int(original_max_len)
    if method in FACTORLESS:
        by_fixed: dict[str, dict[str, Any]] = {
            PLAIN: {},
            "rerope": {"window": max(1, l0 // 2)},
            "string": {"shift": max(2, l0 // 3), "local_window": min(128, max(1, l0 // 3) - 1)},
            "dca": {"chunk_size": l0, "local_size": max(1, l0 // 32)},
        }
        return by_fixed[method]
    if factor is None:
        raise ValueError(f"method {method!r} needs a factor (e.g. --factors 2)")
    if method == FIXED_NTK and length is None:
        raise ValueError(f"{FIXED_NTK} chooses its base once from the whole sequence's length, which a model "
                         "decoding with a KV cache does not know while the sequence grows (a cached key could "
                         "not be re-rotated with a new base): give length=T, the total tokens of the pass")
    by_method: dict[str, Callable[[], dict[str, Any]]] = {
        "rope-linear": lambda: {"factor": factor},
        "rope-ntk": lambda: {"factor": factor},
        "rope-dynamic-ntk": lambda: {"factor": factor, "original_max_len": l0},
        FIXED_NTK: lambda: {"factor": factor, "original_max_len": l0, "max_seq_len": int(length)},  # type: ignore[arg-type]
        "rope-yarn": lambda: {"factor": factor, "original_max_len": l0},
        "rope-llama3": lambda: {"factor": factor, "original_max_len": l0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0},
        "self-extend": lambda: self_extend_options(factor, l0),
        "rerope-leaky": lambda: {"window": max(1, l0 // 2), "leak_factor": max(1.0, 2 * factor - 1)},
    }
    return by_method[method]()


# -- which layers --------------------------------------------------------------------------------------------


def _layer_specs(config: Any) -> list[Any] | None:
    """The per-layer specs of a config with a layer plan (or a sliding window), else None (one scheme for all)."""
    if getattr(config, "layer_plan", None) is None and getattr(config, "sliding_window", None) is None:
        return None
    return list(config.plan)


def default_layers(config: Any) -> str:
    """What the model family itself scales: ``FAMILY_LAYERS`` by family, else ``all`` (``rotary`` when some
    layer has no RoPE)."""
    family = getattr(config, "family", None)
    if family in FAMILY_LAYERS:
        return FAMILY_LAYERS[family]
    specs = _layer_specs(config)
    if specs is not None and any(canonical_name(s.position) != PLAIN for s in specs):
        return "rotary"
    return "all"


def selected_layers(config: Any, layers: str | None = None) -> list[int] | None:
    """The indices of the layers a method changes, or None for a model with one scheme for every layer.

    Args:
        layers: ``all``, ``global`` (full-window layers), ``rotary`` (RoPE layers); None: ``default_layers``.

    Raises:
        ValueError: an unknown choice; ``all`` over a layer without plain RoPE (it would add a rotation
            the model never had); a choice that selects no layer.
    """
    choice = default_layers(config) if layers is None else layers
    if choice not in LAYER_CHOICES:
        raise ValueError(f"--layers {choice!r} is not one of {', '.join(LAYER_CHOICES)}")
    specs = _layer_specs(config)
    if specs is None:
        return None
    rope = [canonical_name(s.position) == PLAIN for s in specs]
    if choice == "all":
        other = [i for i, r in enumerate(rope) if not r]
        if other:
            raise ValueError(f"--layers all: layer(s) {other} use {specs[other[0]].position!r}, not plain RoPE; a "
                             "method there would add or stack a rotation; use --layers rotary or global")
        chosen = list(range(len(specs)))
    elif choice == "rotary":
        chosen = [i for i, r in enumerate(rope) if r]
    else:
        chosen = [i for i, (s, r) in enumerate(zip(specs, rope)) if r and s.window.full]
    if not chosen:
        scaled = sorted({s.position for s in specs if canonical_name(s.position) != PLAIN
                         and str(s.position).startswith("rope")})
        if not any(rope) and scaled:  # the real reason, whatever --layers said (or did not: finetune has none)
            raise ValueError(f"the checkpoint already carries a RoPE scaling ({', '.join(map(repr, scaled))} in its "
                             f"config, not plain '{PLAIN}'): context extension starts from plain RoPE, and a "
                             "method on top would stack two schemes; start from a checkpoint without one")
        raise ValueError(f"--layers {choice}: no layer of this model is a {choice} RoPE layer")
    return chosen


# -- the variant ----------------------------------------------------------------------------------------------


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
                   layers: str | None = None, length: int | None = None,
                   searched: Mapping[str, Any] | None = None) -> Any:
    """``config`` with only the position scheme of the selected layers replaced for ``method``.

    A model with one scheme for every layer gets ``position``/``position_options`` replaced; a model with a
    layer plan gets the plan's entries at ``selected_layers(config, layers)`` replaced, each keeping its own
    RoPE base, pairing and rotary width (Gemma 3's global layers: base 10⁶).
    """
    options = method_options(method, factor=factor, original_max_len=original_max_len, length=length,
                             searched=searched)
    chosen = selected_layers(config, layers)
    scheme = scheme_name(method)
    if chosen is None:
        return dataclasses.replace(config, position=scheme, position_options={**checkpoint_rope_options(config),
                                                                              **options})
    plan = [s.to_dict() for s in config.plan]
    for i in chosen:
        spec = plan[i]
        kept = {k: v for k, v in spec["position_options"].items() if k in ROPE_KEYS}
        plan[i] = {**spec, "position": scheme, "position_options": {**kept, **options}}
    return dataclasses.replace(config, layer_plan=plan, sliding_window=None)


def default_builder(model: nn.Module) -> Callable[[Any], nn.Module]:
    """The posenc builder that makes models of ``model``'s kind from a config."""
    from posenc.models import DecoderOnlyLM, build_decoder_only
    from posenc.models.decoder import Decoder, build_decoder

    for kind, builder in ((Decoder, build_decoder), (DecoderOnlyLM, build_decoder_only)):
        if isinstance(model, kind):
            return builder
    raise ValueError(f"no posenc builder known for {type(model).__name__}; pass builder=config → model")


def build_variant(model: nn.Module, method: str, *, factor: float | None, original_max_len: int,
                  builder: Callable[[Any], nn.Module] | None = None, layers: str | None = None,
                  length: int | None = None, searched: Mapping[str, Any] | None = None) -> nn.Module:
    """A new model: ``model``'s config with ``method``'s scheme, loaded with ``model``'s exact weights.

    Args:
        model: the checkpoint (a ``Decoder`` or any posenc model with a ``config`` dataclass).
        builder: config → model; default ``default_builder(model)`` (``build_decoder``, ``build_decoder_only``).
        layers: which layers change (``selected_layers``); None: what the family does.
        length: the whole sequence's length, for ``rope-dynamic-ntk-fixed`` (``set_sequence_length`` changes it).
        searched: ``rope-longrope`` options from a LongRoPE search (needed for that method only).
    Returns:
        The variant, in eval mode, on ``model``'s device and dtype. For ``rope`` it is ``model`` itself.
    """
    if method == PLAIN:
        return model
    config = variant_config(model.config, method, factor=factor, original_max_len=original_max_len,
                            layers=layers, length=length, searched=searched)
    first = next(model.parameters())
    variant = (builder or default_builder(model))(config).to(device=first.device, dtype=first.dtype)
    from posenc.pretrained.as_stored import share_quantised

    share_quantised(model, variant)  # weights kept as stored (posenc.models.quant) are shared, not rebuilt
    variant.load_state_dict(model.state_dict(), strict=True)
    return variant.eval()


def set_sequence_length(model: nn.Module, length: int) -> int:
    """Give every fixed-mode dynamic-NTK scheme of ``model`` the whole sequence's length; returns how many changed.

    The scheme's frequencies are read from ``max_seq_len`` at every call (its cos/sin are keyed on its
    options), so a new length takes effect at the next forward; the cache must start empty.
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, positions.DynamicNTKRoPE) and module.max_seq_len is not None:
            module.max_seq_len = int(length)
            changed += 1
    return changed


def trained_context(config: Any) -> int | None:
    """L₀ the checkpoint declares (``max_position_embeddings``), or None when it declares none."""
    value = getattr(config, "max_position_embeddings", None)
    return None if value is None else int(value)
