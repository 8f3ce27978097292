"""``Seq2SeqConfig`` and ``build_seq2seq``: bounded plain data, one scheme per stack, cached decoding = full decoding.

The families built on them are checked against HF in ``tests/families/test_t5.py``, ``test_marian.py`` and
``test_whisper.py``; this file checks the builder on its own, without transformers.
"""

from __future__ import annotations

import json

import pytest
import torch

from posenc.models import EncoderDecoder, Seq2SeqConfig, build_seq2seq

T5_LIKE = dict(vocab_size=50, dim=24, encoder_layers=2, decoder_layers=2, encoder_heads=4, decoder_heads=4,
               encoder_ffn_dim=32, decoder_ffn_dim=40, encoder_position="t5", decoder_position="t5", norm="rms",
               ffn="geglu", ffn_bias=False, attn_bias="none", attn_scale=1.0, output_scale=24 ** -0.5)
WHISPER_LIKE = dict(vocab_size=40, dim=16, encoder_heads=2, decoder_heads=4, encoder_ffn_dim=20, decoder_ffn_dim=24,
                    encoder_position="sinusoidal",
                    encoder_position_options={"layout": "concatenated", "denominator": "half-minus-one"},
                    decoder_position="learned", decoder_position_options={"max_len": 12}, attn_bias="no-key",
                    share_embeddings=False, front_end="audio", num_mel_bins=6, source_length=5)


def test_json_round_trip_and_the_docstring_example():
    cfg = Seq2SeqConfig(**T5_LIKE)
    assert Seq2SeqConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    model = build_seq2seq(cfg)
    assert isinstance(model, EncoderDecoder)
    assert model(torch.tensor([[5, 6, 7]]), torch.tensor([[0, 5]])).shape == (1, 2, 50)


@pytest.mark.parametrize("config", [T5_LIKE, WHISPER_LIKE], ids=["t5-like", "whisper-like"])
def test_cached_decoding_equals_full_decoding(seed, config):
    model = build_seq2seq(Seq2SeqConfig(**config)).eval()
    src = torch.randint(0, 50, (2, 9)) if config.get("front_end") != "audio" else torch.randn(2, 6, 10)
    tgt = torch.randint(0, 40, (2, 11))
    with torch.no_grad():
        full = model(src, tgt)
        memory, cache = model.encode(src), model.new_cache()
        steps = [model.decode(tgt[:, :3], memory, cache=cache)]
        steps += [model.decode(tgt[:, i:i + 1], memory, cache=cache) for i in range(3, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)


def test_one_scheme_per_stack_and_its_shared_names():
    model = build_seq2seq(Seq2SeqConfig(**T5_LIKE))
    assert all(layer.attn.position is model.src_position for layer in model.encoder)
    assert all(layer.self_attn.position is model.tgt_position for layer in model.decoder)
    assert model.src_position.bidirectional and not model.tgt_position.bidirectional
    tied = model.tied_names()
    assert tied["encoder.1.attn.position.table.weight"] == "src_position.table.weight"
    assert tied["tgt_embed.token.weight"] == "src_embed.token.weight" == tied["head.weight"]
    assert model.head.input_scale == pytest.approx(24 ** -0.5)
    whisper = build_seq2seq(Seq2SeqConfig(**WHISPER_LIKE))
    assert whisper.encoder[0].attn.k_proj.bias is None and whisper.encoder[0].attn.v_proj.bias is not None
    assert whisper.describe()["position"]["decoder"]["max_len"] == 12


@pytest.mark.parametrize("change, message", [
    ({"encoder_heads": 0}, "encoder_heads must be a positive integer"),
    ({"norm": "batchnorm"}, "norm must be one of"),
    ({"ffn": "tanh-mlp"}, "ffn must be one of"),
    ({"encoder_position": "sinusoidial"}, "unknown position scheme 'sinusoidial'"),
    ({"tgt_vocab_size": 60}, "share_embeddings needs one vocabulary"),
    ({"decoder_start_token_id": 50}, r"decoder_start_token_id must be a token id in \[0, 50\)"),
    ({"output_scale": 0.0}, "output_scale"),
    ({"front_end": "audio"}, "an audio front end needs num_mel_bins and source_length"),
    ({"encoder_heads": 5}, "dim=24 is not divisible by 5 heads"),
])
def test_bad_values_are_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        Seq2SeqConfig(**(T5_LIKE | change))
