"""An HF config's RoPE settings → posenc schemes: one block, or one per layer type.

transformers 4 wrote ``rope_scaling`` (+ ``rope_theta``, ``partial_rotary_factor``
beside it); transformers 5 writes ``rope_parameters``, which for models with a
layer plan is nested by layer type::

    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention":    {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}}

``rope_blocks`` returns {layer type or None: block}; ``rope_scheme`` turns one
block into (posenc scheme name, options), equal to HF's own
``ROPE_INIT_FUNCTIONS`` (``tests/pretrained``, ``tests/positions/test_rotary_hf.py``);
two helpers the readers share: ``plan_fields`` turns a family's per-layer specs into
the config's fields (a plan only where the layers differ), ``with_defaults`` gives a
family's own config defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc.families.hf_config import HFConfig

#: HF rope_type → posenc scheme.
ROPE_TYPES = {"default": "rope", "linear": "rope-linear", "dynamic": "rope-dynamic-ntk", "yarn": "rope-yarn",
              "llama3": "rope-llama3", "longrope": "rope-longrope", "proportional": "rope-proportional"}


def rope_blocks(c: HFConfig) -> dict[str | None, dict[str, Any]]:
    """{layer type: RoPE block} for a nested ``rope_parameters``, else {None: the one block}.

    Each block has ``rope_type`` and ``rope_theta`` filled in (from the top level where
    the block lacks them, as transformers does) and ``partial_rotary_factor`` where the
    config has one.
    """
    raw = c.raw("rope_parameters") or c.raw("rope_scaling") or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{c.source}: rope_scaling/rope_parameters must be an object, got {raw!r}")
    nested = {k: v for k, v in raw.items() if isinstance(v, dict)}
    if nested and len(nested) != len(raw):
        raise ValueError(f"{c.source}: rope_parameters mixes per-layer-type blocks {sorted(nested)} with plain keys "
                         f"{sorted(set(raw) - set(nested))}; give one or the other")
    blocks = nested if nested else {None: raw}
    out: dict[str | None, dict[str, Any]] = {}
    for layer_type, block in blocks.items():
        block = dict(block)
        if "rope_theta" not in block:
            block["rope_theta"] = c.float("rope_theta", 10000.0, above=0)
        if "partial_rotary_factor" in c and "partial_rotary_factor" not in block:
            block["partial_rotary_factor"] = c.float("partial_rotary_factor", above=0, maximum=1)
        block["rope_type"] = block.get("rope_type") or block.get("type") or "default"
        out[layer_type] = block
    return out


def rope_scheme(block: dict[str, Any], *, head_dim: int, max_position_embeddings: int, pairing: str,
                source: str = "config.json", types: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """(posenc scheme name, options) of one RoPE block.

    Args:
        types: rope_type → posenc scheme; default ``ROPE_TYPES`` (a family may add its own).

    Raises:
        ValueError: a RoPE type posenc lacks (named, with the supported list), or a malformed value.
    """
    types = ROPE_TYPES if types is None else types
    b = HFConfig(block, source=f"{source} (rope parameters)")
    rope_type = b.str("rope_type")
    if rope_type not in types:
        raise ValueError(f"{source}: RoPE type {rope_type!r} is not supported by posenc; "
                         f"supported: {', '.join(types)}")
    rotary_dim = int(head_dim * b.float("partial_rotary_factor", 1.0, above=0, maximum=1))
    options: dict[str, Any] = {"base": b.float("rope_theta", above=1), "pairing": pairing}
    if rotary_dim != head_dim and rope_type != "proportional":  # proportional RoPE reads the share itself
        options["rotary_dim"] = rotary_dim
    original = b.int("original_max_position_embeddings", max_position_embeddings)
    if rope_type == "linear":
        options["factor"] = b.float("factor", above=0)
    elif rope_type == "dynamic":  # HF's dynamic type measures lengths against max_position_embeddings
        options |= {"factor": b.float("factor", above=0), "original_max_len": max_position_embeddings}
    elif rope_type == "yarn":
        factor = b.float("factor", max_position_embeddings / original, above=0)
        options |= {"factor": factor, "original_max_len": original,
                    "beta_fast": b.float("beta_fast", 32.0), "beta_slow": b.float("beta_slow", 1.0),
                    "attention_factor": b.float("attention_factor", None, above=0),
                    "mscale": b.float("mscale", None), "mscale_all_dim": b.float("mscale_all_dim", None),
                    "truncate": b.bool("truncate", True)}
    elif rope_type == "llama3":
        options |= {"factor": b.float("factor", above=0), "low_freq_factor": b.float("low_freq_factor", above=0),
                    "high_freq_factor": b.float("high_freq_factor", above=0), "original_max_len": original}
    elif rope_type == "longrope":
        factor = b.float("factor", max_position_embeddings / original, above=0)
        options |= {"short_factor": list(b.list("short_factor")), "long_factor": list(b.list("long_factor")),
                    "factor": factor, "original_max_len": original,
                    "attention_factor": b.float("attention_factor", None, above=0)}
    elif rope_type == "proportional":  # HF: partial_rotary_factor is the share of pairs that rotate
        options |= {"proportion": b.float("partial_rotary_factor", 1.0, above=0, maximum=1),
                    "factor": b.float("factor", 1.0, above=0)}
    return types[rope_type], options


def plan_fields(specs: Sequence[Any]) -> dict[str, Any]:
    """``DecoderConfig`` fields for a list of ``LayerSpec``s, one per layer.

    Every layer alike (one scheme, one full or sliding window, nothing per layer): the plain
    fields ``position`` / ``position_options`` / ``sliding_window`` — what a Llama config states,
    and what ``posenc extend`` replaces. Layers that differ: ``layer_plan`` (and no input scheme).
    """
    first = specs[0]
    if (all(s == first for s in specs) and first.query_scale is None and first.qk_norm is None
            and first.window.kind != "chunked"):
        return {"position": first.position, "position_options": dict(first.position_options),
                "sliding_window": first.window.size}
    return {"position": "none", "layer_plan": [s.to_dict() for s in specs]}


def with_defaults(c: HFConfig, **defaults: Any) -> HFConfig:
    """``c`` with a family's own defaults for fields its config.json omits (HF's config class defaults
    where they differ from the generic reader's, e.g. Qwen3's ``head_dim`` 128); stated values win, and a
    stated null stays null (as in HF's config classes: ``"sliding_window": null`` is no window)."""
    data = {**defaults, **c.data}
    return HFConfig(data, source=c.source)
