"""Gemma 4 (text): sliding layers with RoPE base 10⁴, global layers with proportional RoPE, wider heads, PLE, KV sharing.

config.json ``model_type`` "gemma4_text" (``Gemma4ForCausalLM``). The decoder is
built from ``posenc.models.gemma4`` (Gemma 3's layout plus Gemma 4's parts);
this reader turns HF's config into its ``Gemma4Config``. Read:

* the plan — ``layer_types`` (default: every 6th layer ``full_attention``, the
  rest ``sliding_attention``), the last layer forced to ``full_attention`` as
  HF forces it; sliding layers see ``sliding_window`` keys.
* RoPE per layer type — ``rope_parameters`` nested by type (HF's default when
  absent: sliding ``default`` base 10⁴; full ``proportional`` base 10⁶ with
  ``partial_rotary_factor`` 0.25: the first quarter of each head's pairs rotate
  with a full-width head's frequencies, the rest carry no position —
  posenc's ``rope-proportional``). A ``default`` block ignores
  ``partial_rotary_factor``, as HF's Gemma 4 rotary does.
* per-layer attention widths — ``per_layer_config`` ({layer index: {"head_dim",
  "num_key_value_heads"}}, what transformers 5 writes), or, without it, HF's
  derivation: full layers get ``global_head_dim`` (512 by default) and, when
  ``attention_k_eq_v``, ``num_global_key_value_heads``. Layers of one type must
  share a width (HF builds one rotary table per type).
* values — ``attention_k_eq_v``: full layers have no ``v_proj`` and use the raw
  key projection as values; every layer RMS-normalises its values (no gain).
* KV sharing — ``num_kv_shared_layers``: the last N layers reuse the keys and
  values of the last earlier layer of their type (no k/v projections or
  norms in the checkpoint); ``use_double_wide_mlp`` doubles their FFN width.
* per-layer embeddings — ``hidden_size_per_layer_input`` (P; 256 when absent, as
  HF; 0 or null: none), ``vocab_size_per_layer_input`` rows.
* experts — ``enable_moe_block`` (26B-A4B): beside every layer's dense FFN,
  ``num_experts`` gated experts of width ``moe_intermediate_size``, ``top_k_experts``
  chosen per token by a router (softmax, top k renormalised, × a scale per
  expert); the two branches, each normed, are summed before the FFN post-norm.
* the rest — Gemma's sandwich norms (``rms-float``: HF ``Gemma4RMSNorm``,
  gains not zero-centred), QK-norm with gains, softmax scale 1, GeGLU
  (``hidden_activation`` gelu_pytorch_tanh), token vectors × √D,
  ``final_logit_softcapping``, ``attention_bias``, the tied head, a learned
  scalar per layer (``layer_scalar``).

Refused by name: ``use_bidirectional_attention="all"``
(non-causal attention; "vision" is accepted: it only changes image tokens, which
a text model never sees); ``num_kv_shared_layers`` covering every layer (Gemma 4
assistant/drafter models, whose keys come from another model); a KV-sharing
layer type no earlier layer produces (HF refuses it too); ``per_layer_config``
fields other than head_dim / num_key_value_heads; layers of one type with
different head widths; other activations; RoPE types posenc lacks; the
multimodal ``gemma4`` type (load its text decoder from a text-only export, as for
Gemma 3).

Reference used to verify: HF ``Gemma4ForCausalLM`` on tiny random checkpoints
with every part on, full forward and cached decoding past the window, both
pairings (``tests/families/test_gemma4.py``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from posenc.families import PROJECTION_NAMES, QK_NORM_NAMES, TOP_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import HFConfig
from posenc.families.rope import rope_blocks, rope_scheme, with_defaults
from posenc.plan import FULL, LayerSpec, Window
from posenc.positions import convert_qk_weight

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "attn_post_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "ffn_post_norm.weight",
    "per_layer_input_gate.weight": "ple_gate.weight",
    "per_layer_projection.weight": "ple_proj.weight",
    "post_per_layer_input_norm.weight": "ple_norm.weight",
    "layer_scalar": "layer_scalar",
    "router.proj.weight": "moe.router.proj.weight",
    "router.scale": "moe.router.scale",
    "router.per_expert_scale": "moe.router.per_expert_scale",
    "experts.gate_up_proj": "moe.experts.gate_up_proj",
    "experts.down_proj": "moe.experts.down_proj",
    "pre_feedforward_layernorm_2.weight": "moe.pre_norm.weight",
    "post_feedforward_layernorm_2.weight": "moe.post_norm.weight",
    "post_feedforward_layernorm_1.weight": "ffn_moe_norm.weight",
    **PROJECTION_NAMES,
    **QK_NORM_NAMES,
}
PLE_NAMES = {"model.embed_tokens_per_layer.weight": "ple.embed.weight",
             "model.per_layer_model_projection.weight": "ple.projection.weight",
             "model.per_layer_projection_norm.weight": "ple.norm.weight"}
SLIDING, FULL_ATTENTION = "sliding_attention", "full_attention"
#: HF ``Gemma4TextConfig``'s defaults where they differ from the generic reader's.
DEFAULTS = {"head_dim": 256, "max_position_embeddings": 131_072, "tie_word_embeddings": True, "sliding_window": 512,
            "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262_144}
DEFAULT_PATTERN, DEFAULT_GLOBAL_HEAD_DIM = 6, 512
#: HF's RoPE per layer type when a config states none.
DEFAULT_ROPE = {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                FULL_ATTENTION: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
PER_LAYER_FIELDS = ("head_dim", "num_key_value_heads")


def gemma4_layer_types(c: HFConfig, num_layers: int) -> list[str]:
    """Each layer's type: ``layer_types`` (last layer forced full, as HF does) or 5 sliding : 1 full."""
    types = layer_types(c, num_layers)
    if types is None:
        types = [FULL_ATTENTION if (i + 1) % DEFAULT_PATTERN == 0 else SLIDING for i in range(num_layers)]
    unknown = sorted(set(types) - {SLIDING, FULL_ATTENTION})
    if unknown:
        raise ValueError(f"{c.source}: layer_types {unknown} are not Gemma 4 layer types "
                         f"({SLIDING!r}, {FULL_ATTENTION!r})")
    return list(types[:-1]) + [FULL_ATTENTION]


def layer_widths(c: HFConfig, types: list[str], *, head_dim: int, kv_heads: int) -> tuple[list[int], list[int]]:
    """Each layer's (head width, kv heads): ``per_layer_config``, else HF's global-layer derivation."""
    raw = c.raw("per_layer_config")
    overrides: dict[int, dict[str, Any]] = {}
    if raw is None:
        wide = {"head_dim": c.int("global_head_dim", DEFAULT_GLOBAL_HEAD_DIM)}
        if c.bool("attention_k_eq_v", False) and c.raw("num_global_key_value_heads") is not None:
            wide["num_key_value_heads"] = c.int("num_global_key_value_heads")
        overrides = {i: wide for i, t in enumerate(types) if t == FULL_ATTENTION}
    else:
        if not isinstance(raw, dict):
            raise ValueError(f"{c.source}: per_layer_config must be an object {{layer index: fields}}, got {raw!r}")
        for key, fields in raw.items():
            if not str(key).isdigit() or int(key) >= len(types):
                raise ValueError(f"{c.source}: per_layer_config key {key!r} is not a layer index 0 … {len(types) - 1}")
            sub = c.sub(f"per_layer_config.{key}", fields)
            unknown = sorted(set(sub.data) - set(PER_LAYER_FIELDS))
            if unknown:
                raise ValueError(f"{c.source}: per_layer_config[{key}] sets {unknown}; posenc reads only "
                                 f"{list(PER_LAYER_FIELDS)} per layer")
            overrides[int(key)] = {f: sub.int(f) for f in PER_LAYER_FIELDS if f in sub}
    widths = [overrides.get(i, {}).get("head_dim", head_dim) for i in range(len(types))]
    kvs = [overrides.get(i, {}).get("num_key_value_heads", kv_heads) for i in range(len(types))]
    for t in set(types):
        seen = sorted({w for w, tt in zip(widths, types) if tt == t})
        if len(seen) > 1:
            raise ValueError(f"{c.source}: {t} layers have head widths {seen}; HF builds one rotary table per layer "
                             "type, so the layers of a type must share one width")
    return widths, kvs


def layer_ropes(c: HFConfig, types: list[str]) -> dict[str, dict]:
    """{layer type: RoPE block}: ``rope_parameters`` nested by type, or HF's Gemma 4 default."""
    if c.raw("rope_parameters") is None and c.raw("rope_scaling") is None:
        return {t: dict(DEFAULT_ROPE[t]) for t in set(types)}
    blocks = rope_blocks(c)
    if None in blocks:
        raise ValueError(f"{c.source}: Gemma 4's rope_parameters must be nested by layer type "
                         f"({{{SLIDING!r}: …, {FULL_ATTENTION!r}: …}}), got one block")
    missing = sorted(set(types) - set(blocks))
    if missing:
        raise ValueError(f"{c.source}: rope_parameters has no block for layer type(s) {missing}")
    out = {}
    for t in set(types):
        block = dict(blocks[t])
        if block["rope_type"] == "default":  # HF's Gemma 4 default rotary rotates the whole head
            block.pop("partial_rotary_factor", None)
        out[t] = block
    return out


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.gemma4 import Gemma4Config

    act = c.str("hidden_activation", c.str("hidden_act", "gelu_pytorch_tanh"))
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(f"{c.source}: hidden_activation {act!r} is not supported; Gemma 4 uses gelu_pytorch_tanh")
    if c.raw("use_bidirectional_attention") == "all":
        raise ValueError(f"{c.source}: use_bidirectional_attention='all' (non-causal attention) is not supported; "
                         "posenc's Gemma 4 decoder is causal")
    c = with_defaults(c, **DEFAULTS)
    sizes = decoder_sizes(c)
    num_layers, heads = sizes["num_layers"], sizes["num_heads"]
    shared = c.int("num_kv_shared_layers", 0, minimum=0, maximum=num_layers)
    if shared == num_layers:
        raise ValueError(f"{c.source}: num_kv_shared_layers={shared} shares every layer's keys (a Gemma 4 assistant "
                         "model, whose keys come from its target model); posenc runs models that produce their own")
    head_dim = sizes["head_dim"] or sizes["dim"] // heads
    types = gemma4_layer_types(c, num_layers)
    widths, kvs = layer_widths(c, types, head_dim=head_dim, kv_heads=sizes["num_kv_heads"] or heads)
    width_of = dict(zip(types, widths))
    window = Window("sliding", c.int("sliding_window"))
    specs = {}
    for t, block in layer_ropes(c, types).items():
        name, options = rope_scheme(block, head_dim=width_of[t], pairing=pairing, source=c.source,
                                    max_position_embeddings=sizes["max_position_embeddings"])
        specs[t] = LayerSpec(position=name, position_options=options, window=window if t == SLIDING else FULL)
    bias = c.bool("attention_bias", False)
    ple_dim = c.int("hidden_size_per_layer_input", 0, minimum=0)
    experts = {}
    if c.bool("enable_moe_block", False):
        experts = {"num_experts": c.int("num_experts", maximum=1 << 16),
                   "top_k_experts": c.int("top_k_experts", maximum=c.int("num_experts", maximum=1 << 16)),
                   "moe_ffn_dim": c.int("moe_intermediate_size", maximum=1 << 20)}
    return Gemma4Config(
        **sizes, norm_eps=c.float("rms_norm_eps", 1e-6, above=0), position="none",
        layer_plan=[specs[t].to_dict() for t in types], family="gemma4", block="sandwich", norm="rms-float",
        ffn="geglu", qk_norm="rms-float", attn_scale=1.0, embed_scale=True,
        final_softcap=c.float("final_logit_softcapping", None, above=0), qkv_bias=bias, out_bias=bias,
        layer_head_dims=widths if set(widths) != {head_dim} else None,
        layer_kv_heads=kvs if set(kvs) != {sizes["num_kv_heads"] or heads} else None,
        k_eq_v=c.bool("attention_k_eq_v", False), v_norm=True, kv_shared_layers=shared,
        double_wide_ffn=c.bool("use_double_wide_mlp", False), ple_dim=ple_dim,
        ple_vocab=c.int("vocab_size_per_layer_input") if ple_dim else None, layer_scalar=True, **experts,
    )


def split(name: str, tensor: Tensor, config: Any) -> list[tuple[str, Tensor]]:
    """Values taken from the keys follow the keys' pairing: the output projection's columns move with them.

    With ``attention_k_eq_v`` a full layer's values are its key projection, so when the loader
    permutes the k rows to another pairing the values come out permuted per head the same way
    (the value norm does not mind); the full layers' ``o_proj`` columns — producers' and the
    KV-sharing consumers' alike — are permuted to match, and the output is unchanged.
    """
    if not (config.k_eq_v and name.endswith("attn.out_proj.weight")):
        return [(name, tensor)]
    index = int(name.split(".")[1])
    spec = config.plan[index]
    pairing = spec.position_options.get("pairing")
    if not spec.window.full or pairing is None or pairing == FAMILY.hf_pairing:
        return [(name, tensor)]
    columns = convert_qk_weight(tensor.T, num_heads=config.num_heads, head_dim=config.head_dims()[index],
                                source=FAMILY.hf_pairing, target=pairing,
                                rotary_dim=spec.position_options.get("rotary_dim"))
    return [(name, columns.T.contiguous())]


FAMILY = Family(name="gemma4", model_types=("gemma4_text",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                top_names={**TOP_NAMES, **PLE_NAMES}, split=split)
