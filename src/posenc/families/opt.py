"""OPT (Zhang et al., 2022): learned absolute positions read two rows late, pre- or post-norm.

config.json ``model_type`` "opt" (``OPTForCausalLM``: opt-125m … opt-66b).
Positions are posenc's ``learned`` additive scheme with OPT's ``offset`` of 2:
the table has ``max_position_embeddings + 2`` rows and position p reads row
p + 2 (HF ``OPTLearnedPositionalEmbedding``, from fairseq's padding index).
Parts: LayerNorm, the ReLU MLP, biases (``enable_bias``), a tied head; with
``do_layer_norm_before`` (every OPT but 350m) pre-norm blocks and a final norm,
without it post-norm blocks (x ← n(x + attn(x)); x ← n(x + mlp(x))) and no
final norm.

Refused by name: ``word_embed_proj_dim`` ≠ ``hidden_size`` (opt-350m's
projections in and out of a narrower token table) and
``layer_norm_elementwise_affine`` false.

Reference used to verify: HF ``OPTForCausalLM`` on tiny random checkpoints,
pre- and post-norm, full forward and cached decoding (``tests/families/test_opt.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily, mlp_activation

#: OPT reads position p at row p + 2 of its table.
OPT_OFFSET = 2

TOP_NAMES = {"model.decoder.embed_tokens.weight": "embed.weight",
             "model.decoder.embed_positions.weight": "position.weight",
             **{f"model.decoder.final_layer_norm.{w}": f"norm.{w}" for w in ("weight", "bias")},
             "lm_head.weight": "head.weight"}
BLOCK_NAMES = {
    **{f"self_attn.{p}_proj.{w}": f"attn.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")},
    **{f"self_attn_layer_norm.{w}": f"attn_norm.{w}" for w in ("weight", "bias")},
    **{f"final_layer_norm.{w}": f"ffn_norm.{w}" for w in ("weight", "bias")},
    **{f"fc1.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"fc2.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    dim, heads = c.int("hidden_size", maximum=MAX_WIDTH), c.int("num_attention_heads", maximum=MAX_HEADS)
    if dim % heads:
        raise ValueError(f"{c.source}: hidden_size = {dim} is not divisible by num_attention_heads = {heads}")
    if c.int("word_embed_proj_dim", dim, maximum=MAX_WIDTH) != dim:
        raise ValueError(f"{c.source}: word_embed_proj_dim = {c.int('word_embed_proj_dim')} differs from hidden_size "
                         f"= {dim} (opt-350m's projected token table); posenc runs OPT with one width")
    if not c.bool("layer_norm_elementwise_affine", True):
        raise ValueError(f"{c.source}: layer_norm_elementwise_affine = false is not supported; posenc's OPT "
                         "LayerNorms have a gain and a bias")
    context = c.int("max_position_embeddings", maximum=MAX_CONTEXT)
    before = c.bool("do_layer_norm_before", True)
    bias = c.bool("enable_bias", True)
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim,
        num_layers=c.int("num_hidden_layers", maximum=MAX_LAYERS), num_heads=heads,
        ffn_dim=c.int("ffn_dim", maximum=MAX_WIDTH), norm_eps=1e-5, max_position_embeddings=context,
        position="learned", position_options={"max_len": context + OPT_OFFSET, "offset": OPT_OFFSET},
        qkv_bias=bias, out_bias=bias, ffn_bias=bias, tie_embeddings=c.bool("tie_word_embeddings", True),
        family="opt", block="pre" if before else "post", norm="layernorm",
        ffn=mlp_activation(c, "activation_function", "relu"),
        final_norm=before and not c.bool("_remove_final_layer_norm", False),
    )


FAMILY = StackFamily(name="opt", model_types=("opt",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="model.decoder", stack="layers")
