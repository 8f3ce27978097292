"""Gemma 3 (text): five sliding-window layers with RoPE base 10⁴, then one global layer with base 10⁶.

config.json ``model_type`` "gemma3_text" (``Gemma3ForCausalLM``: Gemma 3 270M
and 1B). The plan comes from ``layer_types`` (or, in older configs, every
``sliding_window_pattern``-th layer global); the RoPE of each layer type from
the nested ``rope_parameters`` (transformers 5) or from ``rope_theta`` +
``rope_scaling`` for the global layers and ``rope_local_base_freq`` for the
sliding ones (transformers 4). Parts: sandwich blocks (a norm before and after
attention and FFN), Gemma's zero-centred RMSNorm, QK-norm, tanh-GELU gated FFN,
token vectors × √D, softmax scale ``query_pre_attn_scalar``^−½, tied head.

Refused by name: ``attn_logit_softcapping`` (Gemma 2's attention soft cap,
which posenc's SDPA attention does not apply), and the multimodal
``gemma3`` type (its text tower loads from a text-only export).

Reference used to verify: HF ``Gemma3ForCausalLM`` on tiny random
checkpoints, full forward and cached decoding past the window (``tests/families/test_gemma3.py``).
"""

from __future__ import annotations

from posenc.families import PROJECTION_NAMES, QK_NORM_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import HFConfig
from posenc.families.rope import rope_blocks, rope_scheme
from posenc.formats.gguf_arch import GEMMA3_GLOBAL as FULL_ATTENTION
from posenc.formats.gguf_arch import GEMMA3_LOCAL_BASE as DEFAULT_LOCAL_BASE
from posenc.formats.gguf_arch import GEMMA3_PATTERN as DEFAULT_PATTERN
from posenc.formats.gguf_arch import GEMMA3_SLIDING as SLIDING
from posenc.formats.gguf_arch import gemma3_plan as patterned_plan
from posenc.plan import LayerSpec, Window

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "attn_post_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "ffn_post_norm.weight",
    **PROJECTION_NAMES,
    **QK_NORM_NAMES,
}
# The layer types, and what a config may leave out — every DEFAULT_PATTERN-th layer global, the sliding layers'
# base DEFAULT_LOCAL_BASE — are HF's and llama.cpp's same defaults, stated once in posenc.formats.gguf_arch (the
# GGUF reader supplies them too); imported above under the family's own names.


def gemma3_layer_types(c: HFConfig, num_layers: int) -> list[str]:
    """Each layer's type: ``layer_types`` if given, else every ``sliding_window_pattern``-th layer global."""
    types = layer_types(c, num_layers)
    if types is None:
        pattern = c.int("sliding_window_pattern", c.int("_sliding_window_pattern", DEFAULT_PATTERN))
        types = patterned_plan(num_layers, pattern)
    unknown = sorted(set(types) - {SLIDING, FULL_ATTENTION})
    if unknown:
        raise ValueError(f"{c.source}: layer_types {unknown} are not Gemma 3 layer types "
                         f"({SLIDING!r}, {FULL_ATTENTION!r})")
    return types


def layer_ropes(c: HFConfig) -> dict[str, dict]:
    """{layer type: RoPE block}: the nested transformers-5 form, or the global block + the local base."""
    blocks = rope_blocks(c)
    if None in blocks:  # transformers 4: rope_theta/rope_scaling are the global layers'
        local = {"rope_type": "default", "rope_theta": c.float("rope_local_base_freq", DEFAULT_LOCAL_BASE, above=1)}
        return {FULL_ATTENTION: blocks[None], SLIDING: local}
    missing = sorted({SLIDING, FULL_ATTENTION} - set(blocks))
    if missing:
        raise ValueError(f"{c.source}: rope_parameters has no block for layer type(s) {missing}")
    return blocks


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_activation", c.str("hidden_act", "gelu_pytorch_tanh"))
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(f"{c.source}: hidden_activation {act!r} is not supported; Gemma 3 uses gelu_pytorch_tanh")
    if c.raw("attn_logit_softcapping") is not None:
        raise ValueError(f"{c.source}: attn_logit_softcapping = {c.raw('attn_logit_softcapping')} (Gemma 2's "
                         "attention soft cap) is not supported; Gemma 3 configs leave it null")
    sizes = decoder_sizes(c) | {"tie_embeddings": c.bool("tie_word_embeddings", True)}
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    max_pos = sizes["max_position_embeddings"]
    window = Window("sliding", c.int("sliding_window"))
    specs = {}
    for layer_type, block in layer_ropes(c).items():
        name, options = rope_scheme(block, head_dim=head_dim, pairing=pairing, source=c.source,
                                    max_position_embeddings=max_pos)
        specs[layer_type] = LayerSpec(position=name, position_options=options,
                                      window=window if layer_type == SLIDING else Window())
    plan = [specs[t].to_dict() for t in gemma3_layer_types(c, sizes["num_layers"])]
    softcap = c.float("final_logit_softcapping", None, above=0)
    return DecoderConfig(
        **sizes, norm_eps=c.float("rms_norm_eps", 1e-6, above=0),
        position="none", layer_plan=plan, family="gemma3", block="sandwich", norm="rms-offset", ffn="geglu",
        qk_norm="rms-offset", attn_scale=c.float("query_pre_attn_scalar", head_dim, above=0) ** -0.5,
        embed_scale=True, final_softcap=softcap, qkv_bias=c.bool("attention_bias", False),
        out_bias=c.bool("attention_bias", False),
    )


FAMILY = Family(name="gemma3", model_types=("gemma3_text",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES)
