"""SmolLM3: the Llama layout with every fourth layer NoPE (no positions at all), RoPE base 2·10⁶ elsewhere.

config.json ``model_type`` "smollm3" (``SmolLM3ForCausalLM``: SmolLM3-3B).
Read: the Llama sizes, one RoPE for the RoPE layers (``rope_parameters`` /
``rope_scaling``; base 2,000,000 when unstated, HF's ``default_theta``; YaRN
in the long-context configs), ``attention_bias`` on all four projections,
``mlp_bias``, tied head by default.

The plan is HF's (``SmolLM3Config.__post_init__``):

* ``no_rope_layers`` — one 0/1 per layer, 1 = the layer rotates q and k; when
  absent, layer i rotates unless (i + 1) is a multiple of
  ``no_rope_layer_interval`` (4): layers 3, 7, 11, … are NoPE.
* windows — ``layer_types`` if given; else a layer is ``sliding_attention``
  when ``use_sliding_window`` is true, ``sliding_window`` is set and the
  layer is a *NoPE* layer (HF's rule: the NoPE layers are the ones that
  slide), ``full_attention`` otherwise. Released SmolLM3 configs have
  ``use_sliding_window: false``: every layer full.

Refused by name: a ``hidden_act`` other than silu; ``no_rope_layers`` entries
other than 0/1 or of the wrong length; ``layer_types`` other than
``full_attention`` / ``sliding_attention``; sliding layers without a window —
``use_sliding_window`` false or ``sliding_window`` null: HF's eager/SDPA masks
would slide (or its mask builder raise) while its flash-attention path would
not, so the config states no one model; RoPE types posenc lacks.

Reference used to verify: HF ``SmolLM3ForCausalLM`` on tiny random checkpoints
(full forward and cached decoding, through the window of the sliding NoPE
layers, both pairings; ``tests/families/test_smollm3.py``).
"""

from __future__ import annotations

from posenc.families import PROJECTION_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import HFConfig
from posenc.families.llama import single_rope
from posenc.families.qwen3 import FULL_ATTENTION, SLIDING, checked_types
from posenc.families.rope import plan_fields, with_defaults
from posenc.plan import FULL, LayerSpec, Window

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    **PROJECTION_NAMES,
}
#: HF ``SmolLM3Config``'s defaults where they differ from the generic reader's.
DEFAULTS = {"rope_theta": 2_000_000.0, "max_position_embeddings": 32768, "tie_word_embeddings": True}
DEFAULT_NOPE_INTERVAL = 4


def uses_rope(c: HFConfig, num_layers: int) -> list[bool]:
    """Per layer, whether it rotates: ``no_rope_layers`` (1 = RoPE), else NoPE every ``no_rope_layer_interval``-th."""
    flags = c.list("no_rope_layers", None, length=num_layers)
    if flags is None:
        interval = c.int("no_rope_layer_interval", DEFAULT_NOPE_INTERVAL)
        return [(i + 1) % interval != 0 for i in range(num_layers)]
    if any(isinstance(f, bool) or f not in (0, 1) for f in flags):
        raise ValueError(f"{c.source}: no_rope_layers must hold 0 (NoPE) or 1 (RoPE) per layer, got {flags!r}")
    return [f == 1 for f in flags]


def smollm3_layer_types(c: HFConfig, rope: list[bool], window: int | None) -> list[str]:
    """Each layer's type: ``layer_types`` if given, else sliding for the NoPE layers when windowed (HF's rule)."""
    types = layer_types(c, len(rope))
    if types is None:
        types = [SLIDING if window is not None and not r else FULL_ATTENTION for r in rope]
    return checked_types(c, types, window)


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; SmolLM3's SwiGLU uses 'silu'")
    c = with_defaults(c, **DEFAULTS)
    sizes = decoder_sizes(c)
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    name, options = single_rope(c, head_dim=head_dim, pairing=pairing)
    window = c.int("sliding_window", None) if c.bool("use_sliding_window", False) else None
    rope = uses_rope(c, sizes["num_layers"])
    plan = []
    for r, t in zip(rope, smollm3_layer_types(c, rope, window)):
        plan.append(LayerSpec(position=name if r else "none", position_options=options if r else {},
                              window=Window("sliding", window) if t == SLIDING else FULL))
    bias = c.bool("attention_bias", False)
    return DecoderConfig(
        **sizes, **plan_fields(plan), norm_eps=c.float("rms_norm_eps", 1e-6, above=0),
        qkv_bias=bias, out_bias=bias, ffn_bias=c.bool("mlp_bias", False), family="smollm3",
    )


FAMILY = Family(name="smollm3", model_types=("smollm3",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES)
