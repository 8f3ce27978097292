"""Locating tables by their usual names, tying detection and RoPE settings from config.json."""

from __future__ import annotations

import math

import pytest
import torch

from inspect_helpers import gpt2_like, write
from posenc.inspect import Checkpoint, CheckpointError, detect_tying, load_checkpoint, locate, rope_from_config
from posenc.lab.measures import scheme_similarity


def test_gpt2_names_and_tied_by_absent_head(tmp_path, gen):
    gpt2_like(tmp_path, gen)
    ckpt = load_checkpoint(tmp_path)
    found = locate(ckpt)
    assert (found.position, found.token, found.head) == ("transformer.wpe.weight", "transformer.wte.weight", None)
    tying = detect_tying(ckpt, found)
    assert tying["status"] == "tied" and "stores none" in tying["evidence"]


def test_tied_by_equal_values(tmp_path, gen):
    gpt2_like(tmp_path, gen, head="copy")
    ckpt = load_checkpoint(tmp_path)
    tying = detect_tying(ckpt, locate(ckpt))
    assert tying == {"status": "tied", "evidence": "separate copies with identical values", "max_abs_diff": 0.0}


def test_untied_reports_the_largest_difference(tmp_path, gen):
    tensors = gpt2_like(tmp_path, gen, head="own")
    ckpt = load_checkpoint(tmp_path)
    tying = detect_tying(ckpt, locate(ckpt))
    expected = (tensors["lm_head.weight"].double() - tensors["transformer.wte.weight"].double()).abs().max()
    assert tying["status"] == "untied" and tying["max_abs_diff"] == pytest.approx(float(expected), rel=1e-12)


def test_shared_storage_in_memory(gen):
    w = torch.randn(6, 4, generator=gen)
    shared = Checkpoint.from_tensors({"model.embed_tokens.weight": w, "lm_head.weight": w})
    assert detect_tying(shared, locate(shared))["evidence"] == "head and token table share storage"
    copied = Checkpoint.from_tensors({"model.embed_tokens.weight": w, "lm_head.weight": w.clone()})
    assert detect_tying(copied, locate(copied))["evidence"] == "separate copies with identical values"
    nudged = w.clone()
    nudged[2, 1] += 0.25
    untied = Checkpoint.from_tensors({"model.embed_tokens.weight": w, "lm_head.weight": nudged})
    assert detect_tying(untied, locate(untied))["max_abs_diff"] == pytest.approx(0.25, rel=1e-6)


def test_bert_mlm_names_with_prefix(gen):
    d = 8
    ckpt = Checkpoint.from_tensors({
        "bert.embeddings.word_embeddings.weight": torch.randn(30, d, generator=gen),
        "bert.embeddings.position_embeddings.weight": torch.randn(20, d, generator=gen),
        "bert.embeddings.token_type_embeddings.weight": torch.randn(2, d, generator=gen),
        "cls.predictions.decoder.weight": torch.randn(30, d, generator=gen),
    }, config={"architectures": ["BertForMaskedLM"], "max_position_embeddings": 20, "vocab_size": 30})
    found = locate(ckpt)
    assert found.position == "bert.embeddings.position_embeddings.weight"
    assert found.token == "bert.embeddings.word_embeddings.weight"
    assert found.head == "cls.predictions.decoder.weight"
    assert detect_tying(ckpt, found)["status"] == "untied"


def test_bare_encoder_has_no_head(gen):
    ckpt = Checkpoint.from_tensors({"embeddings.word_embeddings.weight": torch.randn(5, 4, generator=gen)},
                                   config={"architectures": ["BertModel"]})
    assert detect_tying(ckpt, locate(ckpt))["status"] == "no-head"


def test_opt_offset_of_two(gen):
    length, d = 16, 8
    ckpt = Checkpoint.from_tensors({
        "model.decoder.embed_tokens.weight": torch.randn(40, d, generator=gen),
        "model.decoder.embed_positions.weight": torch.randn(length + 2, d, generator=gen),
    }, config={"model_type": "opt", "max_position_embeddings": length, "architectures": ["OPTForCausalLM"]})
    found = locate(ckpt)
    assert found.position_offset == 2 and any("offset" in n for n in found.notes)
    with pytest.raises(CheckpointError, match="max_position_embeddings=16"):
        locate(ckpt, position_offset=0)


def test_roberta_positions_start_after_padding(gen):
    length, d = 16, 8
    ckpt = Checkpoint.from_tensors({
        "roberta.embeddings.word_embeddings.weight": torch.randn(40, d, generator=gen),
        "roberta.embeddings.position_embeddings.weight": torch.randn(length + 2, d, generator=gen),
    }, config={"model_type": "roberta", "max_position_embeddings": length + 2, "pad_token_id": 1})
    assert locate(ckpt).position_offset == 2


def test_t5_relative_bias_is_found(gen):
    ckpt = Checkpoint.from_tensors({
        "shared.weight": torch.randn(30, 8, generator=gen),
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": torch.randn(32, 4, generator=gen),
        "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": torch.randn(32, 4, generator=gen),
    })
    found = locate(ckpt)
    assert found.token == "shared.weight" and found.position is None and len(found.relative) == 2


def test_explicit_names_override_and_are_checked(gen):
    ckpt = Checkpoint.from_tensors({"emb": torch.randn(10, 4, generator=gen), "pos": torch.randn(6, 4, generator=gen),
                                    "bias": torch.randn(4, generator=gen),
                                    "wpe.weight": torch.randn(6, 4, generator=gen)})
    found = locate(ckpt, position="pos", token="emb")
    assert (found.position, found.token) == ("pos", "emb")
    with pytest.raises(CheckpointError, match="no tensor named 'posx'.*'pos'"):
        locate(ckpt, position="posx")
    with pytest.raises(CheckpointError, match=r"shape \[4\].*--position-tensor"):
        locate(ckpt, position="bias", token="emb")


def test_width_and_config_mismatches_are_errors(gen):
    ckpt = Checkpoint.from_tensors({"wte.weight": torch.randn(10, 4, generator=gen),
                                    "wpe.weight": torch.randn(6, 5, generator=gen)})
    with pytest.raises(CheckpointError, match="5 wide.*4 wide"):
        locate(ckpt)
    ckpt = Checkpoint.from_tensors({"wte.weight": torch.randn(10, 4, generator=gen)}, config={"vocab_size": 12})
    with pytest.raises(CheckpointError, match="vocab_size=12.*10 rows"):
        locate(ckpt)


# -- RoPE from config ---------------------------------------------------------------------------------------
def test_llama_config_matches_transformers(tmp_path, gen):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    theta = float(torch.randint(1000, 1_000_000, (1,), generator=gen))
    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, intermediate_size=96,
                                   vocab_size=40, max_position_embeddings=128, rope_theta=theta)
    scheme, settings = rope_from_config(cfg.to_dict())
    assert settings["base"] == theta and settings["head_dim"] == 16 and settings["pairing"] == "half"
    torch.testing.assert_close(scheme.inv_freq().float(), LlamaRotaryEmbedding(cfg).inv_freq, rtol=1e-6, atol=0)


def test_rotary_similarity_is_the_cosine_sum(gen):
    """Rotated all-ones q·k = Σ_i 2·cos((m − n)·θ_i) + (Dh − R): an independent float64 formula."""
    base, head_dim, factor = 5000.0, 32, 0.5
    cfg = {"model_type": "phi", "hidden_size": 128, "num_attention_heads": 4, "rope_theta": base,
           "partial_rotary_factor": factor}
    scheme, settings = rope_from_config(cfg)
    rot = int(head_dim * factor)
    assert settings["rotary_dim"] == rot
    sim = scheme_similarity(scheme, 40)
    for m, n in torch.randint(0, 40, (20, 2), generator=gen).tolist():
        expected = sum(2 * math.cos((m - n) * base ** (-2 * i / rot)) for i in range(rot // 2)) + head_dim - rot
        assert float(sim[m, n]) == pytest.approx(expected, abs=1e-9)


def test_rope_settings_variants():
    assert rope_from_config({"hidden_size": 64, "num_attention_heads": 4}) is None
    _, s = rope_from_config({"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8})
    assert (s["pairing"], s["rotary_dim"], s["base"]) == ("interleaved", 8, 10000.0)
    _, s = rope_from_config({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32,
                             "rope_parameters": {"rope_theta": 77.0, "rope_type": "default"}})
    assert (s["base"], s["head_dim"], s["scheme"]) == (77.0, 32, "rope")
    _, s = rope_from_config({"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1e4,
                             "rope_scaling": {"rope_type": "no-such-scaling", "factor": 4.0}})
    assert s["scaling"] == {"factor": 4.0} and "UNSCALED" in s["note"]
    with pytest.raises(CheckpointError, match="head_dim"):
        rope_from_config({"rope_theta": 1e4})


def test_llama_like_checkpoint_without_table(tmp_path, gen):
    write(tmp_path, {"model.embed_tokens.weight": torch.randn(40, 64, generator=gen),
                     "lm_head.weight": torch.randn(40, 64, generator=gen)},
          {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
           "num_attention_heads": 4, "rope_theta": 500000.0, "max_position_embeddings": 64, "vocab_size": 40,
           "tie_word_embeddings": False})
    ckpt = load_checkpoint(tmp_path)
    found = locate(ckpt)
    assert found.position is None and found.head == "lm_head.weight"
    assert rope_from_config(ckpt.config)[1]["base"] == 500000.0
