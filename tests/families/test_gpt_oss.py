"""GPT-OSS on posenc's parts (sinks, alternating windows, YaRN, clamped-SwiGLU experts) against HF ``GptOssForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.models.moe import ClampedSwiGLU, MoEFFN  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 97


def gpt_oss(**overrides):
    base = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=32, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, num_local_experts=4, num_experts_per_tok=2,
                sliding_window=4, max_position_embeddings=256, initializer_range=0.1,
                # GPT-OSS's YaRN: at head_dim 16 its ramp bounds (2.02, 4.35) fall between pair indices,
                # so truncate=false (not rounding them to 2, 5) changes two frequencies
                rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                 "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096})
    return transformers.GptOssConfig(**(base | overrides))


def hf_model(cfg):
    hf = transformers.GptOssForCausalLM(cfg)
    with torch.no_grad():  # HF's swiglu_limit (7) never binds at these widths: widen the experts' outputs so it does
        for layer in hf.model.layers:
            layer.mlp.experts.gate_up_proj.mul_(40.0)
    return randomise(hf)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_logits_equal_hf_past_the_window(pairing, seed, tmp_path):
    hf = hf_model(gpt_oss())
    ids = torch.randint(0, VOCAB, (2, 19))  # 19 tokens through a window of 4
    pm = compare(hf, tmp_path, ids, pairing=pairing, prompt=5)
    layers = pm.model.describe()["layers"]
    assert [r["window"] for r in layers] == ["sliding 4", "full", "sliding 4"]
    assert layers[0]["position"] == "rope-yarn" and layers[0]["position_options"]["truncate"] is False
    assert pm.model.describe()["schemes_built"] == 1  # one YaRN shared by both window kinds
    ffn = pm.model.layers[1].ffn
    assert isinstance(ffn, MoEFFN) and len(ffn.experts) == 4 and isinstance(ffn.experts[0], ClampedSwiGLU)


def test_logits_equal_hf_at_far_positions(seed, tmp_path):
    """Positions 300 on: YaRN's scaled frequencies (and truncate=false's two) turn the keys far round.

    Not much farther: HF forms the angles p·θ in float32, posenc in float64; at p ≈ 3,000 that alone moves
    these logits by ~1e-3 (HF with float64 angles equals posenc there to 1e-5).
    """
    hf = hf_model(gpt_oss())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (2, 11))
    positions = torch.arange(11) + 300
    with torch.no_grad():
        ref = hf(ids, position_ids=positions[None].expand(2, -1)).logits
        torch.testing.assert_close(pm.model(ids, positions=positions), ref, **tolerance(ref))


def test_the_clamp_and_the_sinks_act(seed, tmp_path):
    """The test above would pass without sinks or clamps if they did nothing here: show that they matter."""
    hf = hf_model(gpt_oss())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        ref = pm.model(ids)
        for layer in pm.model.layers:
            layer.attn.sinks.fill_(-1e4)  # a sink nobody attends to
        assert (pm.model(ids) - ref).abs().max() > 1e-3
        pm = load_pretrained(tmp_path)
        for layer in pm.model.layers:
            for expert in layer.ffn.experts:
                expert.limit = 1e9
        assert (pm.model(ids) - ref).abs().max() > 1e-3


def test_sliding_cache_holds_the_window_only(seed, tmp_path):
    hf = hf_model(gpt_oss())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    cache = pm.model.new_cache()
    with torch.no_grad():
        pm.model(torch.randint(0, VOCAB, (1, 30)), cache=cache)
    assert [c.stored for c in cache] == [3, 30, 3]  # W − 1 keys in each sliding layer


def test_unknown_layer_type_is_refused_by_name(tmp_path):
    transformers.GptOssForCausalLM(gpt_oss()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["layer_types"] = ["sliding_attention", "chunked_attention", "full_attention"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="chunked_attention"):
        load_pretrained(tmp_path)
