"""Llama 4 (text): iRoPE — chunked RoPE layers with QK-norm, and every fourth layer NoPE, full and temperature-tuned.

config.json ``model_type`` "llama4_text" (``Llama4ForCausalLM``: the text
tower of Llama 4 Scout / Maverick exported on its own). Per layer:

* ``no_rope_layers[i]`` = 1 (default: all but every ``no_rope_layer_interval``-th
  layer): RoPE in the **interleaved** (complex) pairing with ``rope_theta`` and
  llama3-type scaling, QK-norm without a gain (``rms-unit``, where
  ``use_qk_norm``), and — by ``layer_types`` (default: these layers) —
  chunked attention: a query sees the keys of its own ``attention_chunk_size``
  chunk only;
* the NoPE layers: no positions, full attention, no QK-norm, and (where
  ``attn_temperature_tuning``) queries × (ln(⌊(i + 1) / floor_scale⌋ + 1) ·
  attn_scale + 1) at sequence index i (``posenc.plan.QueryScale("llama4")``).
  HF counts i as the tokens its cache has seen (``past_seen_tokens`` +
  arange), not from ``position_ids``; posenc's attention does the same.

HF normalises q and k *after* the rotation, posenc before: a norm without a
gain commutes with a rotation (it keeps each vector's length), so the scores
are the same. Feed-forward: dense SwiGLU (``intermediate_size_mlp``) in the
layers outside ``moe_layers`` (default every ``interleave_moe_layer_step``-th),
elsewhere a mixture of experts whose router takes the top-k logits through a
sigmoid and scales each chosen expert's *input* by it, plus a shared expert
every token passes through.

Refused by name: activations other than SiLU, a ``layer_types`` entry other
than the two kinds, and a ``no_rope_layers`` entry other than 0 / 1. The
multimodal "llama4" type (vision tower, ``text_config``) is not read.

Reference used to verify: HF ``Llama4ForCausalLM`` on tiny random checkpoints
(4 experts, chunk 4, a NoPE layer with temperature tuning at floor_scale 4),
full forward and cached decoding through chunk boundaries, both pairings, and
at offset positions (``tests/families/test_llama4.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families import PROJECTION_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import MAX_WIDTH, HFConfig
from posenc.families.rope import rope_blocks, rope_scheme
from posenc.plan import LayerSpec, QueryScale, Window

CHUNKED, FULL_ATTENTION = "chunked_attention", "full_attention"
FUSED = ("gate_up_proj", "down_proj")

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    **{k: v for k, v in PROJECTION_NAMES.items() if k.startswith("self_attn.")},
    **{f"feed_forward.{p}_proj.weight": f"ffn.{p}_proj.weight" for p in ("gate", "up", "down")},
    **{f"feed_forward.shared_expert.{p}_proj.weight": f"ffn.shared.{p}_proj.weight" for p in ("gate", "up", "down")},
    "feed_forward.router.weight": "ffn.router.weight",
    **{f"feed_forward.experts.{name}": f"ffn.experts.{name}" for name in FUSED},
}


def rope_layers(c: HFConfig, num_layers: int) -> list[bool]:
    """Which layers rotate: ``no_rope_layers`` (1 = RoPE; at least one entry per layer), else all but every
    ``no_rope_layer_interval``-th."""
    flags = c.list("no_rope_layers", None)
    if not flags:  # HF treats an empty list as absent
        interval = c.int("no_rope_layer_interval", 4)
        return [(i + 1) % interval != 0 for i in range(num_layers)]
    if len(flags) < num_layers or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
        raise ValueError(f"{c.source}: no_rope_layers must hold a 0 (NoPE) or 1 (RoPE) for each of the "
                         f"{num_layers} layers, got {flags!r}")
    return [f == 1 for f in flags[:num_layers]]


def llama4_layer_types(c: HFConfig, rope: list[bool], chunk: int | None) -> list[str]:
    """``layer_types``, or HF's default: the RoPE layers chunked (where a chunk size is set), the rest full."""
    types = layer_types(c, len(rope))
    if types is None:
        types = [CHUNKED if r and chunk is not None else FULL_ATTENTION for r in rope]
    unknown = sorted(set(types) - {CHUNKED, FULL_ATTENTION})
    if unknown:
        raise ValueError(f"{c.source}: layer_types {unknown} are not Llama 4 layer types ({CHUNKED!r}, "
                         f"{FULL_ATTENTION!r})")
    if CHUNKED in types and chunk is None:
        raise ValueError(f"{c.source}: layer_types has chunked_attention layers but attention_chunk_size is not set")
    return types


def moe_layers(c: HFConfig, num_layers: int) -> list[int]:
    """``moe_layers``, or every ``interleave_moe_layer_step``-th layer (HF's default: all of them)."""
    layers = c.list("moe_layers", None)
    if layers is None:
        step = c.int("interleave_moe_layer_step", 1)
        return list(range(step - 1, num_layers, step))
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers for i in layers):
        raise ValueError(f"{c.source}: moe_layers must list layer indices in 0 … {num_layers - 1}, got {layers!r}")
    return sorted(set(layers))


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; Llama 4's SwiGLU uses 'silu'")
    sizes = decoder_sizes(c)
    num_layers = sizes["num_layers"]
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    expert_hidden = sizes["ffn_dim"]  # intermediate_size: each expert's (and the shared expert's) width
    sizes["ffn_dim"] = c.int("intermediate_size_mlp", 16384, maximum=MAX_WIDTH)  # the dense layers'
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: Llama 4 uses one RoPE; rope_parameters per layer type "
                         f"({', '.join(map(str, blocks))}) are not expected")
    name, options = rope_scheme(blocks[None], head_dim=head_dim, pairing=pairing, source=c.source,
                                max_position_embeddings=sizes["max_position_embeddings"])
    chunk = c.int("attention_chunk_size", None)
    rope = rope_layers(c, num_layers)
    types = llama4_layer_types(c, rope, chunk)
    temperature = None
    if c.bool("attn_temperature_tuning", True):
        temperature = QueryScale("llama4", {"floor_scale": c.float("floor_scale", 8192, above=0),
                                            "attn_scale": c.float("attn_scale", 0.1)})
    qk_norm = c.bool("use_qk_norm", True)
    plan = []
    for rotates, layer_type in zip(rope, types):
        window = Window("chunked", chunk) if layer_type == CHUNKED else Window()
        if rotates:
            plan.append(LayerSpec(position=name, position_options=options, window=window).to_dict())
        else:  # HF: no QK-norm and the temperature only where there is no rotation
            plan.append(LayerSpec(position="none", window=window, query_scale=temperature,
                                  qk_norm=False).to_dict())
    experts = c.int("num_local_experts", maximum=MAX_WIDTH)
    moe = {"router": "sigmoid-topk", "num_experts": experts,
           "top_k": c.int("num_experts_per_tok", 1, maximum=experts), "hidden": expert_hidden,
           "shared_hidden": expert_hidden, "layers": moe_layers(c, num_layers)}
    bias = c.bool("attention_bias", False)
    return DecoderConfig(
        **sizes, norm_eps=c.float("rms_norm_eps", 1e-5, above=0), position="none", layer_plan=plan,
        family="llama4", qk_norm="rms-unit" if qk_norm else "none", qkv_bias=bias, out_bias=bias, moe=moe,
    )


def split(name: str, tensor: Tensor, config) -> list[tuple[str, Tensor]]:
    """HF's fused experts → one tensor per expert: ``gate_up_proj`` (E, D, 2F) is [gate | up] along its last
    axis, ``down_proj`` (E, F, D); both transposed to nn.Linear's (out, in)."""
    prefix, _, part = name.rpartition(".")
    if not prefix.endswith("ffn.experts") or part not in FUSED:
        return [(name, tensor)]
    out = []
    for e in range(tensor.shape[0]):
        if part == "gate_up_proj":
            gate, up = tensor[e].chunk(2, dim=-1)  # (D, F) each
            out += [(f"{prefix}.{e}.gate_proj.weight", gate.T.contiguous()),
                    (f"{prefix}.{e}.up_proj.weight", up.T.contiguous())]
        else:
            out.append((f"{prefix}.{e}.down_proj.weight", tensor[e].T.contiguous()))
    return out


FAMILY = Family(name="llama4", model_types=("llama4_text",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                split=split, hf_pairing="interleaved")
