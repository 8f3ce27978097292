"""T5 on posenc's parts (the ``t5`` bucket scheme in each stack, RMS norms, unscaled q·k) against HF
``T5ForConditionalGeneration``: tiny random checkpoints, full forward and cached decoding."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import assert_mask_hides_only_padded_rows, assert_refused, compare_seq2seq  # noqa: E402

from posenc.positions import T5RelativeBias  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 61


def t5(**overrides):
    """Few buckets and a short max_distance, so that 30-token sequences reach the log bins and the last bucket."""
    base = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=3, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=20, decoder_start_token_id=0)
    return transformers.T5Config(**(base | overrides))


def random_t5(config):
    """HF's model with every norm gain off 1 and bucket tables of a visible size (HF draws them small)."""
    hf = transformers.T5ForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "relative_attention_bias" in name:
                p.normal_()
    return perturb(hf)


@pytest.mark.parametrize("proj", ["relu", "gated-gelu", "gelu", "gated-silu"])
def test_logits_equal_hf_full_and_cached(seed, tmp_path, proj):
    """T5 v1.0's ReLU (tied head, output × d_model^−½) and v1.1's gated GELU, each in both stacks."""
    hf = random_t5(t5(feed_forward_proj=proj))
    src, tgt = torch.randint(0, VOCAB, (2, 30)), torch.randint(0, VOCAB, (2, 26))
    pm = compare_seq2seq(hf, tmp_path, src, tgt, prompt=7)
    assert pm.config.ffn == {"relu": "relu-mlp", "gelu": "gelu-mlp", "gated-gelu": "geglu",
                             "gated-silu": "swiglu"}[proj]
    assert pm.config.output_scale == pytest.approx(32 ** -0.5) and pm.model.head.tied


def test_head_width_other_than_model_width(seed, tmp_path):
    """d_kv · num_heads ≠ d_model: the heads are their own width."""
    pm = compare_seq2seq(random_t5(t5(d_kv=5, num_heads=3)), tmp_path, torch.randint(0, VOCAB, (2, 11)),
                         torch.randint(0, VOCAB, (2, 9)))
    assert pm.model.encoder[0].attn.q_proj.weight.shape == (15, 32)  # 3 heads of 5, not d_model's 32


def test_untied_head_as_t5_v1_1_stores_it(seed, tmp_path):
    """flan-t5 / v1.1: config.json says tie_word_embeddings false, lm_head.weight is stored, no output scaling.

    transformers 5 always ties T5's head in memory (and writes ``tie_word_embeddings: true``), so the
    reference here is HF's model with its head untied by hand and the config.json of a v1.1 checkpoint.
    """
    hf = random_t5(t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False))
    assert not hf.config.scale_decoder_outputs
    hf.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, 32))
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    (tmp_path / "config.json").write_text(json.dumps(config | {"tie_word_embeddings": False}))
    pm = compare_seq2seq(hf, tmp_path, torch.randint(0, VOCAB, (2, 12)), torch.randint(0, VOCAB, (2, 10)), save=False)
    assert not pm.model.head.tied and pm.config.output_scale == 1.0
    torch.testing.assert_close(pm.model.head.weight, hf.lm_head.weight)


def test_source_padding(seed, tmp_path):
    """Padded source tokens are hidden from the encoder and every cross-attention (HF's attention_mask)."""
    mask = torch.ones(3, 14, dtype=torch.long)
    mask[1, 9:], mask[2, 3:] = 0, 0
    src, tgt = torch.randint(0, VOCAB, (3, 14)), torch.randint(0, VOCAB, (3, 8))
    pm = compare_seq2seq(random_t5(t5()), tmp_path, src, tgt, src_mask=mask)
    assert_mask_hides_only_padded_rows(pm, src, tgt, mask)


def test_the_bias_that_runs_is_posencs_t5_scheme(seed, tmp_path):
    """One registry ``t5`` scheme per stack, held by every self-attention, equal to HF's ``compute_bias``."""
    hf = random_t5(t5())
    hf.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path).model
    for stack, scheme, layers, attn in (("encoder", model.src_position, model.encoder, "attn"),
                                        ("decoder", model.tgt_position, model.decoder, "self_attn")):
        assert type(scheme) is T5RelativeBias and scheme.bidirectional == (stack == "encoder")
        assert (scheme.num_buckets, scheme.max_distance) == (8, 20)
        assert all(getattr(layer, attn).position is scheme for layer in layers)
        hf_attn = getattr(hf, stack).block[0].layer[0].SelfAttention
        with torch.no_grad():
            ref = hf_attn.compute_bias(40, 40)[0]  # (H, Tq, Tk)
            ours = scheme.attention_bias(torch.arange(40), torch.arange(40))
        torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    assert all(layer.cross_attn.position.name == "none" for layer in model.decoder)
    d = model.describe()["position"]
    assert d["encoder"]["bidirectional"] and not d["decoder"]["bidirectional"] and d["cross_attention"] == "none"


def test_greedy_generation_equals_hf(seed, tmp_path):
    # as many decoder layers as encoder layers: HF's generate sizes its cache by num_layers
    hf = random_t5(t5(eos_token_id=1, num_decoder_layers=2))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    src = torch.randint(2, VOCAB, (2, 9))
    hf.generation_config.eos_token_id = None  # no EOS on either side (min_new_tokens would mask its logit)
    with torch.no_grad():
        ref = hf.generate(src, max_new_tokens=8, do_sample=False, num_beams=1)
    ours = pm.model.generate(src, bos_id=pm.config.decoder_start_token_id, max_new_tokens=8)
    assert torch.equal(ours, ref)


def test_config_round_trip_and_bad_input(tmp_path):
    from posenc.models.seq2seq import Seq2SeqConfig

    transformers.T5ForConditionalGeneration(t5()).save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    assert Seq2SeqConfig.from_dict(json.loads(json.dumps(pm.config.to_dict()))) == pm.config
    with pytest.raises(ValueError, match=rf"token id {VOCAB} is outside the vocabulary \[0, {VOCAB}\)"):
        pm.model(torch.tensor([[1, VOCAB]]), torch.tensor([[0]]))
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        pm.model(torch.randn(1, 3), torch.tensor([[0]]))
    with pytest.raises(ValueError, match="encoder_layers must be a positive integer"):
        Seq2SeqConfig.from_dict(pm.config.to_dict() | {"encoder_layers": 0})
    assert_refused(tmp_path, [("feed_forward_proj", "gated-relu", "feed_forward_proj 'gated-relu' is not supported"),
                              ("relative_attention_num_buckets", 1, "relative_attention_num_buckets = 1 is out"),
                              ("d_model", 2.5, "d_model must be an integer")])


def test_inspect_and_lab_read_the_bucket_tables(seed, tmp_path, capsys):
    from posenc.cli import main
    from posenc.lab.measures import scheme_similarity

    hf = random_t5(t5())
    hf.save_pretrained(tmp_path)
    assert main(["inspect", str(tmp_path), "--json", str(tmp_path / "inspect.json")]) == 0
    assert "\nencoder     t5 (num_heads=4, num_buckets=8, max_distance=20, bidirectional=True)" in capsys.readouterr().out
    result = json.loads((tmp_path / "inspect.json").read_text())
    stacks = result["stacks"]
    assert stacks["encoder"]["scheme"] == {"name": "t5", "family": "bias", "num_heads": 4, "num_buckets": 8,
                                           "max_distance": 20, "bidirectional": True}
    assert stacks["decoder"]["tensor"] == "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    assert result["position"]["kind"] == "relative-bias" and len(result["relative"]) == 2
    model = load_pretrained(tmp_path).model
    sim = scheme_similarity(model.src_position, 12)  # (H, L, L): each head's bias between positions
    table = hf.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().double()
    buckets = model.src_position.buckets(torch.arange(12), torch.arange(12))
    torch.testing.assert_close(sim, table[buckets].permute(2, 0, 1))
