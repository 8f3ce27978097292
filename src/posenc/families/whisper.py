"""Whisper (Radford et al., 2022; HF ``WhisperForConditionalGeneration``): speech encoder, text decoder.

config.json ``model_type`` "whisper". The encoder takes log-mel features
(B, ``num_mel_bins``, 2·``max_source_positions``) through two convolutions with
GELU (``posenc.models.parts.AudioFrontEnd``) and adds a fixed sinusoid —
posenc's ``sinusoidal`` scheme with Whisper's layout: [sin | cos] halves
(``layout="concatenated"``) and ω_i = 10000^(−i/(D/2 − 1))
(``denominator="half-minus-one"``), HF's ``sinusoids``. HF stores that table as
``model.encoder.embed_positions.weight``; posenc checks the stored table
equals its scheme (to float32 rounding of the angles) and computes it, so the
scheme that runs is posenc's. The decoder adds a ``learned`` table of
``max_target_positions`` rows: a position past it is refused, naming the
table's size. Parts: pre-norm layers with LayerNorm (ε 1e-5) and final norms
in both stacks, attention with q, v and output biases but none on k
(``attn_bias="no-key"``), the MLP of ``activation_function`` (GELU), the
head tied to the decoder's token table (``proj_out``). ``scale_embedding`` is
read but, as in HF's code, never applied.

Refused by name: ``use_weighted_layer_sum`` (a classification model's).

Reference used to verify: HF ``WhisperForConditionalGeneration`` on tiny random
checkpoints, full forward and cached decoding (``tests/families/test_whisper.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import bart_family, bart_sizes, fixed_table, mlp_activation

#: Whisper's encoder sinusoid as posenc's scheme options.
POSITION_OPTIONS = {"layout": "concatenated", "denominator": "half-minus-one"}
TOP_NAMES = {
    **{f"model.encoder.conv{i}.{w}": f"src_embed.conv{i}.{w}" for i in (1, 2) for w in ("weight", "bias")},
    "model.encoder.embed_positions.weight": fixed_table("encoder"),
    **{f"model.encoder.layer_norm.{w}": f"encoder_norm.{w}" for w in ("weight", "bias")},
    "model.decoder.embed_tokens.weight": "tgt_embed.token.weight",
    "model.decoder.embed_positions.weight": "tgt_position.weight",
    **{f"model.decoder.layer_norm.{w}": f"decoder_norm.{w}" for w in ("weight", "bias")},
    "proj_out.weight": "head.weight",
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.seq2seq import Seq2SeqConfig

    if c.bool("use_weighted_layer_sum", False):
        raise ValueError(f"{c.source}: use_weighted_layer_sum = true is not supported; posenc runs "
                         "WhisperForConditionalGeneration (speech to text), not the audio classifier")
    vocab = c.int("vocab_size", maximum=MAX_VOCAB)
    c.bool("scale_embedding", False)  # read (typed) but never applied, as in HF's WhisperDecoder
    pad = c.int("pad_token_id", None, minimum=0, maximum=vocab - 1)
    return Seq2SeqConfig(
        vocab_size=vocab, **bart_sizes(c),
        encoder_position="sinusoidal", encoder_position_options=dict(POSITION_OPTIONS),
        decoder_position="learned",
        decoder_position_options={"max_len": c.int("max_target_positions", 448, maximum=MAX_CONTEXT)},
        norm="layernorm", norm_eps=1e-5, block="pre", ffn=mlp_activation(c, "activation_function", "gelu"),
        ffn_bias=True, attn_bias="no-key", scale_embeddings=False, share_embeddings=False,
        tie_embeddings=c.bool("tie_word_embeddings", True), head_bias=False, front_end="audio",
        num_mel_bins=c.int("num_mel_bins", 80, maximum=MAX_WIDTH),
        source_length=c.int("max_source_positions", 1500, maximum=MAX_CONTEXT),
        decoder_start_token_id=c.int("decoder_start_token_id", minimum=0, maximum=vocab - 1),
        eos_token_id=c.ids("eos_token_id", [vocab - 1], below=vocab)[0], pad_token_id=pad, family="whisper",
    )


FAMILY = bart_family("whisper", ("whisper",), config_from_hf, TOP_NAMES)
