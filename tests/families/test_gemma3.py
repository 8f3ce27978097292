"""Gemma 3 (text) on posenc's parts against HF ``Gemma3ForCausalLM`` on the same random weights."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131


def gemma3(**overrides):
    base = dict(num_hidden_layers=7, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, sliding_window=5, query_pre_attn_scalar=20,
                max_position_embeddings=128)
    cfg = transformers.Gemma3TextConfig(**(base | overrides))
    return cfg


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("global_rope", ["default", "linear"])
def test_logits_equal_hf_past_the_window(pairing, global_rope, seed, tmp_path):
    cfg = gemma3()
    if global_rope == "linear":  # the larger Gemma 3 sizes scale their global layers ×8
        cfg.rope_parameters["full_attention"] = {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}
    hf = randomise(transformers.Gemma3ForCausalLM(cfg))
    ids = torch.randint(0, VOCAB, (2, 23))  # 23 tokens through a window of 5
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    layers = pm.model.describe()["layers"]
    assert [r["window"] for r in layers] == ["sliding 5"] * 5 + ["full"] + ["sliding 5"]
    assert {r["position_options"]["base"] for r in layers} == {1e4, 1e6}
    assert pm.model.describe()["schemes_built"] == 2  # seven layers, two built schemes
    assert pm.model.layers[0].attn.position is pm.model.layers[6].attn.position


def test_sliding_cache_holds_the_window_only(seed, tmp_path):
    hf = randomise(transformers.Gemma3ForCausalLM(gemma3()))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    cache = pm.model.new_cache()
    with torch.no_grad():
        pm.model(torch.randint(0, VOCAB, (1, 40)), cache=cache)
    assert [c.stored for c in cache] == [4] * 5 + [40] + [4]  # W − 1 keys per sliding layer, all for the global
    assert {c.length for c in cache} == {40}


def test_transformers_4_style_config_reads_the_same_plan(seed, tmp_path):
    hf = randomise(transformers.Gemma3ForCausalLM(gemma3()))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    rope = data.pop("rope_parameters")
    data.pop("layer_types")
    data |= {"rope_theta": rope["full_attention"]["rope_theta"], "rope_local_base_freq": 10000.0,
             "sliding_window_pattern": 6}
    (tmp_path / "config.json").write_text(json.dumps(data))
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 17))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), hf(ids).logits, rtol=1e-4, atol=1e-5)


def test_attention_softcap_is_refused_by_name(seed, tmp_path):
    hf = transformers.Gemma3ForCausalLM(gemma3())
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"attn_logit_softcapping": 50.0}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        load_pretrained(tmp_path)


def test_inspect_shows_the_layer_plan_and_measures_the_global_layer(seed, tmp_path):
    from posenc.inspect import inspect_checkpoint
    from posenc.inspect.report import summary_lines

    transformers.Gemma3ForCausalLM(gemma3()).save_pretrained(tmp_path)
    result = inspect_checkpoint(tmp_path, max_positions=64)
    assert [r["window"] for r in result["layer_plan"]] == ["sliding 5"] * 5 + ["full", "sliding 5"]
    assert result["position"]["kind"] == "rotary" and result["position"]["settings"]["base"] == 1e6
    text = "\n".join(summary_lines(result))
    assert "0–4       rope" in text and "sliding 5" in text and "layer 5's scheme is measured" in text
