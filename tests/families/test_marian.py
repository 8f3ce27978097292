"""Marian on posenc's parts (the ``sinusoidal`` scheme in Marian's [sin | cos] layout, post-norm layers,
×√D tokens, the logit bias) against HF ``MarianMTModel``: tiny random checkpoints, full forward and cached decoding."""

from __future__ import annotations

import json


import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import assert_mask_hides_only_padded_rows, assert_refused, compare_seq2seq  # noqa: E402

from posenc.formats import CheckpointError  # noqa: E402
from posenc.positions import SinusoidalPositions  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB, PAD = 71, 70


def marian(**overrides):
    """An opus-mt-like config: SiLU ("swish") MLPs, scaled embeddings, other head counts and widths per stack."""
    base = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=48, max_position_embeddings=64,
                activation_function="swish", scale_embedding=True, pad_token_id=PAD, decoder_start_token_id=PAD,
                eos_token_id=0)
    return transformers.MarianConfig(**(base | overrides))


def random_marian(config):
    hf = transformers.MarianMTModel(config)
    with torch.no_grad():
        hf.final_logits_bias.normal_()  # a buffer HF starts at zero
    return perturb(hf)


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("activation", ["swish", "gelu"])
def test_logits_equal_hf_full_and_cached(seed, tmp_path, scale, activation):
    hf = random_marian(marian(scale_embedding=scale, activation_function=activation))
    src, tgt = torch.randint(0, VOCAB, (2, 23)), torch.randint(0, VOCAB, (2, 17))
    pm = compare_seq2seq(hf, tmp_path, src, tgt, prompt=5)
    assert pm.model.tgt_embed.token.multiplier == (32 ** 0.5 if scale else 1.0)
    assert pm.model.src_embed.token is pm.model.tgt_embed.token and pm.model.head.tied
    torch.testing.assert_close(pm.model.head.bias, hf.final_logits_bias[0])


def test_separate_tables_and_vocabularies(seed, tmp_path):
    """share_encoder_decoder_embeddings false: a source table of vocab_size, a target table of decoder_vocab_size."""
    hf = random_marian(marian(share_encoder_decoder_embeddings=False, decoder_vocab_size=53, pad_token_id=50,
                              decoder_start_token_id=50))
    pm = compare_seq2seq(hf, tmp_path, torch.randint(0, VOCAB, (2, 13)), torch.randint(0, 53, (2, 9)))
    assert pm.model.src_embed.token.vocab_size == VOCAB and pm.model.head.vocab_size == 53
    assert pm.model.src_embed.token is not pm.model.tgt_embed.token


def test_source_padding(seed, tmp_path):
    """Padded source tokens are hidden from the encoder and every cross-attention (HF's attention_mask)."""
    src, mask = torch.randint(0, VOCAB - 1, (3, 12)), torch.ones(3, 12, dtype=torch.long)
    mask[0, 8:], mask[2, 2:] = 0, 0
    src[mask == 0] = PAD
    tgt = torch.randint(0, VOCAB, (3, 7))
    pm = compare_seq2seq(random_marian(marian()), tmp_path, src, tgt, src_mask=mask)
    assert_mask_hides_only_padded_rows(pm, src, tgt, mask)


def test_the_positions_that_run_are_marians_table(seed, tmp_path):
    """posenc's scheme in both stacks, equal to the table HF builds (``MarianSinusoidalPositionalEmbedding``)."""
    hf = random_marian(marian())
    hf.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path).model
    for scheme, hf_stack in ((model.src_position, hf.model.encoder), (model.tgt_position, hf.model.decoder)):
        assert type(scheme) is SinusoidalPositions and scheme.layout == "concatenated"
        assert (scheme.denominator, scheme.offset) == ("half", 0)
        torch.testing.assert_close(scheme.encode(torch.arange(64)), hf_stack.embed_positions.weight.double(),
                                   rtol=0, atol=1e-6)  # HF's table is float32
    assert model.describe()["position"]["decoder"]["layout"] == "concatenated"


def test_a_stored_table_must_be_the_sinusoid(seed, tmp_path):
    """HF does not save the table; a checkpoint that carries one is checked against posenc's scheme."""
    from safetensors.torch import load_file, save_file

    hf = random_marian(marian())
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    table = hf.model.encoder.embed_positions.weight.detach().clone()
    save_file(tensors | {"model.encoder.embed_positions.weight": table}, tmp_path / "model.safetensors")
    load_pretrained(tmp_path)  # the sinusoid itself: accepted, and computed rather than loaded
    table[5, 3] += 0.01
    save_file(tensors | {"model.encoder.embed_positions.weight": table}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"is not posenc's .*sinusoidal.* at position 5"):
        load_pretrained(tmp_path)


def test_greedy_generation_equals_hf(seed, tmp_path):
    hf = random_marian(marian(decoder_layers=2))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    src = torch.randint(1, VOCAB - 1, (2, 9))
    # No EOS on either side: `min_new_tokens` would mask EOS's logit, which posenc's generate without eos_id
    # still picks where it is the argmax (seed 1731909428: EOS id 0 wins the first step).
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        ref = hf.generate(src, max_new_tokens=8, do_sample=False, num_beams=1, bad_words_ids=None,
                          forced_eos_token_id=None)
    ours = pm.model.generate(src, bos_id=pm.config.decoder_start_token_id, max_new_tokens=8)
    assert torch.equal(ours, ref)


def test_bad_input_and_refused_configs(tmp_path):
    transformers.MarianMTModel(marian()).save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"token id {VOCAB + 3} is outside the vocabulary \[0, {VOCAB}\)"):
        pm.model(torch.tensor([[1, 2]]), torch.tensor([[PAD, VOCAB + 3]]))
    assert_refused(tmp_path, [("normalize_before", True, "normalize_before = true is not supported"),
                              ("activation_function", "tanh", "activation_function 'tanh' is not supported"),
                              ("scale_embedding", "true", "scale_embedding must be true or false")])


def test_inspect_and_lab_read_the_sinusoid(seed, tmp_path, capsys):
    from posenc.cli import main
    from posenc.lab.measures import scheme_similarity

    hf = random_marian(marian())
    hf.save_pretrained(tmp_path)
    assert main(["inspect", str(tmp_path), "--json", str(tmp_path / "inspect.json")]) == 0
    assert "\nencoder     sinusoidal (dim=32, base=10000.0, layout=concatenated)" in capsys.readouterr().out
    result = json.loads((tmp_path / "inspect.json").read_text())
    assert result["position"]["kind"] == "sinusoidal" and result["position"]["scheme"]["layout"] == "concatenated"
    for stack in ("encoder", "decoder"):
        assert result["stacks"][stack]["tensor"] is None and "computed by the scheme" in result["stacks"][stack]["note"]
    assert result["tying"]["status"] == "tied"
    table = hf.model.encoder.embed_positions.weight.detach().double()[:20]
    torch.testing.assert_close(scheme_similarity(load_pretrained(tmp_path).model.src_position, 20), table @ table.T,
                               rtol=0, atol=1e-5)
