"""BLOOM (BigScience, 2022): ALiBi in every layer — the largest model trained with linear attention biases.

config.json ``model_type`` "bloom" (``BloomForCausalLM``: bloom-560m … bloom).
Positions are posenc's ``alibi`` bias scheme, shared by every layer: bias
−m_h·|i − j| with the paper's slopes, which are BLOOM's (``build_alibi_tensor``
gives m_h·j; the two differ by a constant per query row, which softmax
ignores — ``tests/families/test_bloom.py`` checks the slopes and the logits).
No position touches the token vectors. Parts: a LayerNorm right after the token
table (``word_embeddings_layernorm``), pre-norm blocks with LayerNorm, BLOOM's
tanh-GELU MLP (4·D), biases everywhere, a tied head.

Checkpoint layout: the fused ``query_key_value`` (D → 3·D) is per head —
BLOOM's forward views it as (H, 3, Dh) — and is split that way.

Refused by name: ``apply_residual_connection_post_layernorm`` (the residual
taken after the norm; no released BLOOM uses it).

Reference used to verify: HF ``BloomForCausalLM`` on tiny random checkpoints,
full forward and cached decoding (``tests/families/test_bloom.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily, fused_prefix, split_qkv_per_head

TOP_NAMES = {"transformer.word_embeddings.weight": "embed.weight",
             **{f"transformer.word_embeddings_layernorm.{w}": f"embed_norm.{w}" for w in ("weight", "bias")},
             **{f"transformer.ln_f.{w}": f"norm.{w}" for w in ("weight", "bias")},
             "lm_head.weight": "head.weight"}
BLOCK_NAMES = {
    **{f"input_layernorm.{w}": f"attn_norm.{w}" for w in ("weight", "bias")},
    **{f"post_attention_layernorm.{w}": f"ffn_norm.{w}" for w in ("weight", "bias")},
    **{f"self_attention.query_key_value.{w}": f"attn.query_key_value.{w}" for w in ("weight", "bias")},
    **{f"self_attention.dense.{w}": f"attn.out_proj.{w}" for w in ("weight", "bias")},
    **{f"mlp.dense_h_to_4h.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"mlp.dense_4h_to_h.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    if c.bool("apply_residual_connection_post_layernorm", False):
        raise ValueError(f"{c.source}: apply_residual_connection_post_layernorm = true is not supported; posenc runs "
                         "BLOOM with the residual taken before each norm (every released BLOOM sets it false)")
    dim = c.int("hidden_size", c.int("n_embed", None, maximum=MAX_WIDTH), maximum=MAX_WIDTH)
    if dim is None:
        raise ValueError(f"{c.source}: missing field 'hidden_size' (or 'n_embed'); use the config.json of the weights")
    heads = c.int("n_head", maximum=MAX_HEADS)
    if dim % heads:
        raise ValueError(f"{c.source}: hidden_size = {dim} is not divisible by n_head = {heads}")
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim, num_layers=c.int("n_layer", maximum=MAX_LAYERS),
        num_heads=heads, ffn_dim=4 * dim, norm_eps=c.float("layer_norm_epsilon", 1e-5, above=0),
        max_position_embeddings=c.int("seq_length", 2048, maximum=MAX_CONTEXT), position="alibi",
        qkv_bias=True, out_bias=True, ffn_bias=True, tie_embeddings=c.bool("tie_word_embeddings", True),
        family="bloom", block="pre", norm="layernorm", ffn="gelu-tanh-mlp", embed_norm=True,
    )


def split(name: str, tensor: Tensor, cfg) -> list[tuple[str, Tensor]]:
    """The per-head fused query_key_value → q, k, v."""
    prefix = fused_prefix(name, "query_key_value")
    return [(name, tensor)] if prefix is None else split_qkv_per_head(prefix, tensor, num_heads=cfg.num_heads)


FAMILY = StackFamily(name="bloom", model_types=("bloom",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="transformer", stack="h", split=split)
