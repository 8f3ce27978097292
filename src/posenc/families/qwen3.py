"""Qwen3 (dense): the Llama layout with QK-norm, and sliding-window attention in the layers HF's plan names.

config.json ``model_type`` "qwen3" (``Qwen3ForCausalLM``: Qwen3 0.6B … 32B and
their YaRN-extended configs). Read: the Llama sizes (``head_dim`` stated apart
from the width, 128 by default as in HF), one RoPE for every layer
(``rope_parameters`` / ``rope_scaling``: default, linear, dynamic, yarn,
llama3, longrope — Qwen3's long-context recipe is YaRN with
``original_max_position_embeddings`` 32,768), an RMSNorm over each head's
queries and keys before the rotation (``q_norm`` / ``k_norm``, gains moved with
the q/k rows to posenc's pairing), ``attention_bias`` on all four projections,
SwiGLU, tied or untied head.

The window plan is HF's (``Qwen3Config.__post_init__``): ``sliding_window``
counts only when ``use_sliding_window`` is true (HF sets it to null
otherwise); without an explicit ``layer_types`` the layers from
``max_window_layers`` on are ``sliding_attention`` and the ones before it
``full_attention``; an explicit ``layer_types`` wins. Released Qwen3 configs
have ``use_sliding_window: false``, so every layer is full and the config has
no plan (one RoPE, as Llama); with sliding layers it gets a ``layer_plan``
(full and sliding layers share one built RoPE).

Refused by name: a ``hidden_act`` other than silu; ``layer_types`` other than
``full_attention`` / ``sliding_attention``; sliding layers without a window
(``use_sliding_window`` false or ``sliding_window`` null — HF's mask builder
raises there too); RoPE types posenc lacks; RoPE parameters nested per layer
type (Qwen3 has one RoPE).

Reference used to verify: HF ``Qwen3ForCausalLM`` on tiny random checkpoints
(full forward and cached decoding through the window, both pairings, a YaRN
config; ``tests/families/test_qwen3.py``).
"""

from __future__ import annotations

from posenc.families import PROJECTION_NAMES, QK_NORM_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import HFConfig
from posenc.families.llama import single_rope
from posenc.families.rope import plan_fields, with_defaults
from posenc.plan import LayerSpec, Window

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    **PROJECTION_NAMES,
    **QK_NORM_NAMES,
}
SLIDING, FULL_ATTENTION = "sliding_attention", "full_attention"
#: HF ``Qwen3Config``'s defaults where they differ from the generic reader's.
DEFAULT_HEAD_DIM, DEFAULT_MAX_POSITIONS, DEFAULT_MAX_WINDOW_LAYERS = 128, 32768, 28


def checked_types(c: HFConfig, types: list[str], window: int | None) -> list[str]:
    """``types`` with unknown names and sliding layers that have no window refused (naming the fields)."""
    unknown = sorted(set(types) - {SLIDING, FULL_ATTENTION})
    if unknown:
        raise ValueError(f"{c.source}: layer_types {unknown} are not {c.raw('model_type')} layer types "
                         f"({FULL_ATTENTION!r}, {SLIDING!r})")
    if SLIDING in types and window is None:
        raise ValueError(f"{c.source}: layer_types has {types.count(SLIDING)} {SLIDING!r} layer(s) but no window: "
                         f"use_sliding_window={c.raw('use_sliding_window', False)!r}, "
                         f"sliding_window={c.raw('sliding_window')!r} (HF refuses this too); set use_sliding_window "
                         "true with a sliding_window, or make those layers full_attention")
    return types


def qwen3_layer_types(c: HFConfig, num_layers: int, window: int | None) -> list[str]:
    """Each layer's type: ``layer_types`` if given, else sliding from ``max_window_layers`` on (when windowed)."""
    types = layer_types(c, num_layers)
    if types is None:
        first = c.int("max_window_layers", DEFAULT_MAX_WINDOW_LAYERS, minimum=0)
        types = [SLIDING if window is not None and i >= first else FULL_ATTENTION for i in range(num_layers)]
    return checked_types(c, types, window)


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; Qwen3's SwiGLU uses 'silu'")
    c = with_defaults(c, head_dim=DEFAULT_HEAD_DIM, max_position_embeddings=DEFAULT_MAX_POSITIONS)
    sizes = decoder_sizes(c)
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    name, options = single_rope(c, head_dim=head_dim, pairing=pairing)
    window = c.int("sliding_window", None) if c.bool("use_sliding_window", False) else None
    rope = LayerSpec(position=name, position_options=options)
    specs = {FULL_ATTENTION: rope, SLIDING: rope if window is None else
             LayerSpec(position=name, position_options=options, window=Window("sliding", window))}
    plan = [specs[t] for t in qwen3_layer_types(c, sizes["num_layers"], window)]
    bias = c.bool("attention_bias", False)
    return DecoderConfig(
        **sizes, **plan_fields(plan), norm_eps=c.float("rms_norm_eps", 1e-6, above=0), qk_norm="rms",
        qkv_bias=bias, out_bias=bias, family="qwen3",
    )


FAMILY = Family(name="qwen3", model_types=("qwen3",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES)
