"""Whisper on posenc's parts (the conv front end, the encoder sinusoid as posenc's ``sinusoidal`` scheme in
Whisper's layout, the decoder's ``learned`` table) against HF ``WhisperForConditionalGeneration``: tiny
random checkpoints, full forward and cached decoding. The real tiny.en encoder table passes the same load
check in ``tests/formats/test_ctranslate2.py``."""

from __future__ import annotations

import json


import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import assert_refused, compare_seq2seq  # noqa: E402

from posenc.formats import CheckpointError  # noqa: E402
from posenc.positions import LearnedPositions, SinusoidalPositions  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB, MELS, SOURCE, TARGET = 83, 12, 16, 24


def whisper(**overrides):
    base = dict(vocab_size=VOCAB, num_mel_bins=MELS, d_model=32, encoder_layers=2, decoder_layers=3,
                encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=48,
                max_source_positions=SOURCE, max_target_positions=TARGET, pad_token_id=82, bos_token_id=82,
                eos_token_id=82, decoder_start_token_id=81, init_std=0.2)
    return transformers.WhisperConfig(**(base | overrides))


def features(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, MELS, 2 * SOURCE)  # (B, mel bins, frames)


@pytest.mark.parametrize("tie", [True, False])
def test_logits_equal_hf_full_and_cached(seed, tmp_path, tie):
    hf = perturb(transformers.WhisperForConditionalGeneration(whisper(tie_word_embeddings=tie)))
    pm = compare_seq2seq(hf, tmp_path, features(), torch.randint(0, VOCAB, (2, 20)), prompt=4)
    assert pm.model.head.tied == tie
    assert pm.model.encoder[0].attn.k_proj.bias is None and pm.model.encoder[0].attn.q_proj.bias is not None


def test_the_positions_that_run_are_posencs_schemes(seed, tmp_path):
    """The encoder's stored sinusoid is posenc's scheme (checked at load, then computed); the decoder's is its table."""
    hf = perturb(transformers.WhisperForConditionalGeneration(whisper()))
    hf.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path).model
    enc, dec = model.src_position, model.tgt_position
    assert type(enc) is SinusoidalPositions and (enc.layout, enc.denominator, enc.offset) == \
        ("concatenated", "half-minus-one", 0)
    torch.testing.assert_close(enc.encode(torch.arange(SOURCE)), hf.model.encoder.embed_positions.weight.double(),
                               rtol=0, atol=1e-6)
    assert type(dec) is LearnedPositions and dec.max_len == TARGET
    torch.testing.assert_close(dec.weight, hf.model.decoder.embed_positions.weight)
    d = model.describe()
    assert d["position"]["encoder"]["denominator"] == "half-minus-one" and d["position"]["decoder"]["name"] == "learned"
    assert d["source"].startswith("log-mel features")


def test_decoder_positions_past_the_table_are_refused(seed, tmp_path):
    hf = transformers.WhisperForConditionalGeneration(whisper())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    memory = pm.model.encode(features(1))
    pm.model.decode(torch.randint(0, VOCAB, (1, TARGET)), memory)  # the whole table: fine
    with pytest.raises(ValueError, match=rf"learned position table has {TARGET} rows .* position {TARGET} was asked"):
        pm.model.decode(torch.randint(0, VOCAB, (1, TARGET + 1)), memory)
    cache = pm.model.new_cache()
    pm.model.decode(torch.randint(0, VOCAB, (1, TARGET)), memory, cache=cache)
    with pytest.raises(ValueError, match=rf"position {TARGET} was asked for"):  # one cached step past it
        pm.model.decode(torch.randint(0, VOCAB, (1, 1)), memory, cache=cache)


def test_bad_features_are_refused_with_the_shape_expected(tmp_path):
    transformers.WhisperForConditionalGeneration(whisper()).save_pretrained(tmp_path)
    model = load_pretrained(tmp_path).model
    with pytest.raises(ValueError, match=rf"shape \(1, 80, {2 * SOURCE}\); the encoder takes \(B, {MELS}, "
                                         rf"{2 * SOURCE}\): {MELS} mel bins"):
        model.encode(torch.randn(1, 80, 2 * SOURCE))
    with pytest.raises(ValueError, match=rf"has 30 frames; the encoder takes exactly {2 * SOURCE}.*pad or trim"):
        model.encode(torch.randn(1, MELS, 30))
    with pytest.raises(TypeError, match="floating-point tensor of log-mel features"):
        model.encode(torch.randint(0, 5, (1, MELS, 2 * SOURCE)))
    with pytest.raises(ValueError, match=rf"token id {VOCAB} is outside the vocabulary"):
        model(features(1), torch.tensor([[81, VOCAB]]))


def test_a_changed_encoder_table_is_refused(seed, tmp_path):
    from safetensors.torch import load_file, save_file

    transformers.WhisperForConditionalGeneration(whisper()).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["model.encoder.embed_positions.weight"][7] *= 1.01
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model.encoder.embed_positions.weight' is not posenc's .* position 7"):
        load_pretrained(tmp_path)
    assert_refused(tmp_path, [("use_weighted_layer_sum", True, "use_weighted_layer_sum = true is not supported"),
                              ("num_mel_bins", 0, "num_mel_bins = 0 is out of range")])


def test_greedy_generation_equals_hf(seed, tmp_path):
    hf = perturb(transformers.WhisperForConditionalGeneration(whisper(decoder_layers=2)))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    feats = features()
    hf.generation_config.eos_token_id = None  # no EOS on either side (min_new_tokens would mask its logit)
    with torch.no_grad():
        ref = hf.generate(feats, max_new_tokens=8, do_sample=False, num_beams=1,
                          return_dict_in_generate=False)
    ours = pm.model.generate(feats, bos_id=pm.config.decoder_start_token_id, max_new_tokens=8)
    assert torch.equal(ours[:, 1:], ref)  # HF's Whisper returns the generated tokens without the start token


def test_inspect_reads_both_tables(seed, tmp_path, capsys):
    from posenc.cli import main

    perturb(transformers.WhisperForConditionalGeneration(whisper())).save_pretrained(tmp_path / "model")
    assert main(["inspect", str(tmp_path / "model"), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "stored table is a sinusoid: [sin | cos] halves" in out and "(as tensor2tensor / Whisper)" in out
    assert "Position scheme per stack" in (tmp_path / "report" / "index.html").read_text()
    result = json.loads((tmp_path / "report" / "inspect.json").read_text())
    enc, dec = result["stacks"]["encoder"], result["stacks"]["decoder"]
    assert enc["tensor"] == "model.encoder.embed_positions.weight" and enc["sinusoid"]["is_sinusoid"]
    fit = enc["sinusoid"]
    assert (fit["layout"], fit["denominator"], fit["base"], fit["offset"]) == \
        ("concatenated", "half-minus-one", 10000.0, 0)
    assert enc["scheme"]["denominator"] == "half-minus-one"
    assert dec["tensor"] == "model.decoder.embed_positions.weight" and not dec["sinusoid"]["is_sinusoid"]
    assert dec["scheme"] == {"name": "learned", "family": "additive", "dim": 32, "max_len": TARGET}
    from posenc.lab.measures import scheme_similarity

    learned = load_pretrained(tmp_path / "model").model.tgt_position  # what the lab measures: the loaded table
    table = learned.weight.detach().double()
    torch.testing.assert_close(scheme_similarity(learned, TARGET), table @ table.T)
