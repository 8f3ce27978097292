"""Marian (Junczys-Dowmunt et al., 2018; HF ``MarianMTModel``): a post-norm encoder–decoder on Marian's sinusoid.

config.json ``model_type`` "marian" (the Helsinki-NLP opus-mt translation
models). Positions are posenc's ``sinusoidal`` scheme in Marian's layout:
[sin | cos] halves (``layout="concatenated"``), ω_i = 10000^(−2i/D), from
position 0, in both stacks (HF ``MarianSinusoidalPositionalEmbedding``). HF
keeps the table as a non-saved weight of ``max_position_embeddings`` rows;
posenc computes it at any position (a stored copy is checked against the
scheme, then dropped). Parts: post-norm layers (x ← LN(x + f(x)), LayerNorm
ε 1e-5, no final norms), token vectors × √D when ``scale_embedding``, biases
everywhere, the MLP of ``activation_function`` ("swish" for opus-mt: ``silu-mlp``;
"gelu", "relu", "gelu_new"), one table for both stacks when
``share_encoder_decoder_embeddings`` (else a decoder table of
``decoder_vocab_size``), the head tied to the decoder's table when
``tie_word_embeddings``, plus ``final_logits_bias``. The decoder starts from
``decoder_start_token_id`` (the pad id).

Refused by name: the BART-era switches HF's Marian ignores — ``normalize_before``,
``add_final_layer_norm``, ``normalize_embedding`` set to true — since a
checkpoint that needs them is not the post-norm model HF (and posenc) runs.

Reference used to verify: HF ``MarianMTModel`` on tiny random checkpoints, full
forward and cached decoding (``tests/families/test_marian.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_VOCAB, HFConfig
from posenc.families.stacks import bart_family, bart_sizes, fixed_table, mlp_activation

#: Marian's sinusoid as posenc's scheme options.
POSITION_OPTIONS = {"layout": "concatenated"}
TOP_NAMES = {
    "model.shared.weight": "src_embed.token.weight",
    "model.encoder.embed_tokens.weight": "src_embed.token.weight",
    "model.decoder.embed_tokens.weight": "tgt_embed.token.weight",
    "model.encoder.embed_positions.weight": fixed_table("encoder"),
    "model.decoder.embed_positions.weight": fixed_table("decoder"),
    "lm_head.weight": "head.weight",
    "final_logits_bias": "head.bias",
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.seq2seq import Seq2SeqConfig

    for key in ("normalize_before", "add_final_layer_norm", "normalize_embedding"):
        if c.bool(key, False):
            raise ValueError(f"{c.source}: {key} = true is not supported; posenc runs Marian as HF's MarianMTModel "
                             "does: post-norm, no final or embedding LayerNorm")
    vocab = c.int("vocab_size", maximum=MAX_VOCAB)
    share = c.bool("share_encoder_decoder_embeddings", True)
    tgt_vocab = vocab if share else c.int("decoder_vocab_size", vocab, maximum=MAX_VOCAB)
    c.int("max_position_embeddings", 1024, maximum=MAX_CONTEXT)  # HF's table size; posenc's sinusoid has no end
    pad = c.int("pad_token_id", minimum=0, maximum=tgt_vocab - 1)
    return Seq2SeqConfig(
        vocab_size=vocab, tgt_vocab_size=None if share else tgt_vocab, **bart_sizes(c),
        encoder_position="sinusoidal", encoder_position_options=dict(POSITION_OPTIONS),
        decoder_position="sinusoidal", decoder_position_options=dict(POSITION_OPTIONS),
        norm="layernorm", norm_eps=1e-5, block="post", ffn=mlp_activation(c, "activation_function", "gelu"),
        ffn_bias=True, attn_bias="all", scale_embeddings=c.bool("scale_embedding", False), share_embeddings=share,
        tie_embeddings=c.bool("tie_word_embeddings", True), head_bias=True,
        decoder_start_token_id=c.int("decoder_start_token_id", pad, minimum=0, maximum=tgt_vocab - 1),
        eos_token_id=c.ids("eos_token_id", [0], below=tgt_vocab)[0], pad_token_id=pad, family="marian",
    )


FAMILY = bart_family("marian", ("marian",), config_from_hf, TOP_NAMES)
