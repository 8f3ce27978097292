"""T5 (Raffel et al., 2020): relative-position buckets in an encoder–decoder, RMS norms, no logit scaling.

config.json ``model_type`` "t5" (``T5ForConditionalGeneration``: t5-small …,
T5 v1.1, flan-t5). Positions are posenc's ``t5`` bias scheme — a learned scalar per
(bucket, head), ``relative_attention_num_buckets`` buckets up to
``relative_attention_max_distance`` — bidirectional in the encoder, causal in
the decoder; each stack's table sits in its first layer and serves every layer
(one scheme instance per stack), cross-attention has none. Parts: pre-norm
blocks with T5's RMS norm (no mean, no bias, variance in float32: ``rms``),
no biases anywhere, q·k unscaled (``attn_scale=1``: T5 folds 1/√d into its
initialisation), the feed-forward ``feed_forward_proj`` names: "relu" (T5
v1.0: ``relu-mlp``), "gated-gelu" (v1.1 / flan: ``geglu``, tanh GELU as HF's
``gelu_new``), "gelu", "gated-silu". One token table for both stacks.

The head: with ``tie_word_embeddings`` (T5 v1.0) it is the token table and the
decoder output is first scaled by d_model^(−1/2); v1.1 and flan-t5 checkpoints
say ``tie_word_embeddings: false`` and store ``lm_head.weight``, unscaled.
transformers 5 writes ``scale_decoder_outputs`` explicitly (and always true
``tie_word_embeddings``); when present it decides the scaling. The decoder
starts from ``decoder_start_token_id`` (the pad id, 0).

Refused by name: ``feed_forward_proj`` other than the four above, a
``num_heads · d_kv`` that is not a whole number of heads.

Reference used to verify: HF ``T5ForConditionalGeneration`` on tiny random
checkpoints, full forward and cached decoding (``tests/families/test_t5.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import Seq2SeqFamily, seq2seq_builder

#: ``feed_forward_proj`` → posenc's feed-forward (``posenc.models.decoder_parts``).
FEED_FORWARDS = {"relu": "relu-mlp", "gelu": "gelu-mlp", "gated-gelu": "geglu", "gated-silu": "swiglu"}


def _attention_names(hf: str, ours: str) -> dict[str, str]:
    return {f"{hf}.{p}.weight": f"{ours}.{q}_proj.weight" for p, q in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "out"))}


def _ffn_names(layer: int) -> dict[str, str]:
    hf = f"layer.{layer}.DenseReluDense"
    return {f"{hf}.wi.weight": "ffn.fc_in.weight", f"{hf}.wo.weight": "ffn.fc_out.weight",  # relu / gelu: an MLP
            f"{hf}.wi_0.weight": "ffn.gate_proj.weight", f"{hf}.wi_1.weight": "ffn.up_proj.weight"}  # gated


def _gated_wo(name: str, tensor, config):
    """``wo`` is the MLP's ``fc_out`` or the gated FFN's ``down_proj``, as the config's feed-forward is."""
    if name.endswith(".ffn.fc_out.weight") and config.ffn in ("geglu", "swiglu"):
        name = name.replace(".ffn.fc_out.weight", ".ffn.down_proj.weight")
    return [(name, tensor)]


TOP_NAMES = {
    "shared.weight": "src_embed.token.weight",
    "encoder.embed_tokens.weight": "src_embed.token.weight",
    "decoder.embed_tokens.weight": "tgt_embed.token.weight",
    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "src_position.table.weight",
    "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "tgt_position.table.weight",
    "encoder.final_layer_norm.weight": "encoder_norm.weight",
    "decoder.final_layer_norm.weight": "decoder_norm.weight",
    "lm_head.weight": "head.weight",
}
ENCODER_NAMES = {**_attention_names("layer.0.SelfAttention", "attn"), "layer.0.layer_norm.weight": "attn_res.norm.weight",
                 **_ffn_names(1), "layer.1.layer_norm.weight": "ffn_res.norm.weight"}
DECODER_NAMES = {**_attention_names("layer.0.SelfAttention", "self_attn"),
                 "layer.0.layer_norm.weight": "self_res.norm.weight",
                 **_attention_names("layer.1.EncDecAttention", "cross_attn"),
                 "layer.1.layer_norm.weight": "cross_res.norm.weight",
                 **_ffn_names(2), "layer.2.layer_norm.weight": "ffn_res.norm.weight"}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.seq2seq import Seq2SeqConfig

    proj = c.str("feed_forward_proj", "relu")
    if proj not in FEED_FORWARDS:
        raise ValueError(f"{c.source}: feed_forward_proj {proj!r} is not supported; posenc runs T5 with "
                         f"{', '.join(FEED_FORWARDS)}")
    dim, heads = c.int("d_model", maximum=MAX_WIDTH), c.int("num_heads", maximum=MAX_HEADS)
    d_kv = c.int("d_kv", dim // heads, maximum=MAX_WIDTH)
    layers = c.int("num_layers", maximum=MAX_LAYERS)
    vocab = c.int("vocab_size", maximum=MAX_VOCAB)
    buckets = {"num_buckets": c.int("relative_attention_num_buckets", 32, minimum=2, maximum=MAX_CONTEXT),
               "max_distance": c.int("relative_attention_max_distance", 128, maximum=MAX_CONTEXT)}
    tie = c.bool("tie_word_embeddings", True)
    scale = c.bool("scale_decoder_outputs", tie)  # transformers 5 states it; older configs: scaled iff tied
    ffn = c.int("d_ff", maximum=MAX_WIDTH)
    pad = c.int("pad_token_id", 0, minimum=0, maximum=vocab - 1)
    return Seq2SeqConfig(
        vocab_size=vocab, dim=dim, encoder_layers=layers,
        decoder_layers=c.int("num_decoder_layers", layers, maximum=MAX_LAYERS), encoder_heads=heads,
        decoder_heads=heads, head_dim=None if d_kv * heads == dim else d_kv, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        encoder_position="t5", encoder_position_options=buckets, decoder_position="t5",
        decoder_position_options=buckets, norm="rms", norm_eps=c.float("layer_norm_epsilon", 1e-6, above=0),
        block="pre", ffn=FEED_FORWARDS[proj], ffn_bias=False, attn_bias="none", attn_scale=1.0,
        scale_embeddings=False, share_embeddings=True, tie_embeddings=tie, head_bias=False,
        output_scale=dim ** -0.5 if scale else 1.0,
        decoder_start_token_id=c.int("decoder_start_token_id", pad, minimum=0, maximum=vocab - 1),
        eos_token_id=c.ids("eos_token_id", [1], below=vocab)[0], pad_token_id=pad, family="t5",
    )


FAMILY = Seq2SeqFamily(name="t5", model_types=("t5",), config_from_hf=config_from_hf, block_names=ENCODER_NAMES,
                       top_names=TOP_NAMES, prefix="encoder", stack="block", decoder_stack="decoder.block",
                       decoder_names=DECODER_NAMES, split=_gated_wo, builder=seq2seq_builder,
                       # old checkpoints carry a never-used bias table in the first cross-attention
                       dropped=("EncDecAttention.relative_attention_bias.weight",))
