"""Llama 4 (text) on posenc's parts (iRoPE: chunked RoPE layers with QK-norm, temperature-tuned NoPE layers; a shared
expert and sigmoid-routed experts) against HF ``Llama4ForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.models.moe import MoEFFN  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 89


def llama4(**overrides):
    base = dict(num_hidden_layers=4, hidden_size=64, intermediate_size=32, intermediate_size_mlp=48,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, num_local_experts=4,
                num_experts_per_tok=2, interleave_moe_layer_step=2, no_rope_layer_interval=4, attention_chunk_size=4,
                floor_scale=4, attn_scale=0.5, max_position_embeddings=256, initializer_range=0.1,
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 16})
    return transformers.Llama4TextConfig(**(base | overrides))


def hf_model(cfg):
    return randomise(transformers.Llama4ForCausalLM(cfg))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_logits_equal_hf_through_chunk_boundaries(pairing, seed, tmp_path):
    hf = hf_model(llama4())
    ids = torch.randint(0, VOCAB, (2, 18))  # 18 tokens: four chunk boundaries, the prompt ends mid-chunk
    pm = compare(hf, tmp_path, ids, pairing=pairing, prompt=6)
    layers = pm.model.describe()["layers"]
    assert [r["window"] for r in layers] == ["chunked 4"] * 3 + ["full"]
    assert [r["position"] for r in layers] == ["rope-llama3"] * 3 + ["none"]
    assert [r["query_scale"] for r in layers] == [None] * 3 + ["llama4(floor_scale=4, attn_scale=0.5)"]
    assert [layer.attn.q_norm is not None for layer in pm.model.layers] == [True, True, True, False]
    assert [isinstance(layer.ffn, MoEFFN) for layer in pm.model.layers] == [False, True, False, True]
    assert pm.model.layers[1].ffn.shared is not None


def test_temperature_counts_tokens_not_position_ids(seed, tmp_path):
    """HF scales the NoPE queries by the number of tokens before them, whatever position_ids say; so does posenc."""
    hf = hf_model(llama4())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 13))
    positions = torch.arange(13) + 40  # far from 0: a temperature read from positions would be ~1.6×, not 1–1.5×
    with torch.no_grad():
        ref = hf(ids, position_ids=positions[None]).logits
        torch.testing.assert_close(pm.model(ids, positions=positions), ref, **tolerance(ref))
        cache = pm.model.new_cache()
        parts = [pm.model(ids[:, :5], positions=positions[:5], cache=cache)]
        parts += [pm.model(ids[:, i:i + 1], positions=positions[i:i + 1], cache=cache) for i in range(5, 13)]
        torch.testing.assert_close(torch.cat(parts, dim=1), ref, **tolerance(ref))


def test_temperature_acts(seed, tmp_path):
    """Without the temperature the logits move: the tests above see it."""
    hf = hf_model(llama4())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 16))
    with torch.no_grad():
        ref = pm.model(ids)
        pm.model.layers[3].attn.query_scale = None
        assert (pm.model(ids) - ref).abs().max() > 1e-3


def test_chunked_cache_holds_the_current_chunk_only(seed, tmp_path):
    hf = hf_model(llama4())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    cache = pm.model.new_cache()
    with torch.no_grad():
        pm.model(torch.randint(0, VOCAB, (1, 22)), cache=cache)
    assert [c.stored for c in cache] == [2, 2, 2, 22]  # tokens 20, 21 of the chunk 20 … 23; the NoPE layer keeps all


def test_config_without_temperature_or_qk_norm(seed, tmp_path):
    hf = hf_model(llama4(attn_temperature_tuning=False, use_qk_norm=False, attention_chunk_size=None,
                         no_rope_layers=[1, 0, 1, 0]))
    ids = torch.randint(0, VOCAB, (1, 11))
    pm = compare(hf, tmp_path, ids, prompt=4)
    layers = pm.model.describe()["layers"]
    assert [r["window"] for r in layers] == ["full"] * 4
    assert [r["position"] for r in layers] == ["rope-llama3", "none"] * 2
    assert all(r["query_scale"] is None for r in layers)
    assert all(layer.attn.q_norm is None for layer in pm.model.layers)


def test_bad_no_rope_layers_is_refused_by_name(tmp_path):
    transformers.Llama4ForCausalLM(llama4()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"no_rope_layers": [1, 1, 2, 0]}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no_rope_layers"):
        load_pretrained(tmp_path)
