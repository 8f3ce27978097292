"""DeepSeek-V3 on posenc's parts (MLA with a decoupled rotary slice, YaRN with mscale, grouped-routing experts)
against HF ``DeepseekV3ForCausalLM``."""

from __future__ import annotations

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.models.mla import MultiHeadLatentAttention  # noqa: E402
from posenc.models.moe import MoEFFN  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 83
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}


def deepseek(**overrides):
    base = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=48, moe_intermediate_size=16,
                num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB, n_routed_experts=4,
                num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1, first_k_dense_replace=1,
                routed_scaling_factor=2.5, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                v_head_dim=12, max_position_embeddings=128, initializer_range=0.1, rope_parameters=dict(YARN))
    return transformers.DeepseekV3Config(**(base | overrides))


def hf_model(cfg):
    hf = transformers.DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():  # the routing bias is a buffer HF initialises to zeros: make it rank something
        for layer in hf.model.layers[cfg.first_k_dense_replace:]:
            layer.mlp.gate.e_score_correction_bias.normal_(0.0, 0.3)
    return randomise(hf)


@pytest.mark.parametrize("rope_interleave", [True, False])
@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_logits_equal_hf(pairing, rope_interleave, seed, tmp_path):
    hf = hf_model(deepseek(rope_interleave=rope_interleave))
    ids = torch.randint(0, VOCAB, (2, 15))
    pm = compare(hf, tmp_path, ids, pairing=pairing, prompt=5)
    attn = pm.model.layers[0].attn
    assert isinstance(attn, MultiHeadLatentAttention)
    assert attn.position.head_dim == 8 and attn.position.pairing == pairing  # the rotary slice only
    assert [isinstance(layer.ffn, MoEFFN) for layer in pm.model.layers] == [False, True, True]
    assert pm.model.describe()["layers"][0]["position"] == "rope-yarn"


def test_softmax_scale_carries_mscale_squared(tmp_path):
    """HF's yarn_apply_mscale: (Dn + R)^−½ · (0.1 · mscale_all_dim · ln factor + 1)²."""
    hf_model(deepseek()).save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    want = 16 ** -0.5 * (0.1 * 0.8 * math.log(4.0) + 1) ** 2
    assert pm.model.layers[0].attn.scale == pytest.approx(want, rel=1e-12)
    assert pm.model.layers[0].attn.scale == pytest.approx(hf_model(deepseek()).model.layers[0].self_attn.scaling)


def test_without_q_rank_and_with_biases(seed, tmp_path):
    hf = hf_model(deepseek(q_lora_rank=None, attention_bias=True))
    ids = torch.randint(0, VOCAB, (1, 12))
    pm = compare(hf, tmp_path, ids, prompt=4)
    assert hasattr(pm.model.layers[0].attn, "query_proj") and pm.model.layers[0].attn.kv_a_proj.bias is not None


def test_logits_equal_hf_at_offset_positions(seed, tmp_path):
    hf = hf_model(deepseek())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (2, 9))
    positions = torch.arange(9) + 100  # past YaRN's original 32 and the model's 128
    with torch.no_grad():
        ref = hf(ids, position_ids=positions[None].expand(2, -1)).logits
        torch.testing.assert_close(pm.model(ids, positions=positions), ref, **tolerance(ref))


def test_cache_holds_the_compressed_latent(seed, tmp_path):
    hf_model(deepseek()).save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    cache = pm.model.new_cache()
    with torch.no_grad():
        pm.model(torch.randint(0, VOCAB, (2, 10)), cache=cache)
    assert tuple(cache[0].k.shape) == (2, 1, 10, 8)  # the rotated shared k_pe
    assert tuple(cache[0].v.shape) == (2, 1, 10, 16)  # the normed latent: 24 numbers a token, not 4·(8+8+12)


def test_multi_token_prediction_layer_is_skipped(seed, tmp_path):
    from safetensors.torch import load_file, save_file

    hf = hf_model(deepseek())
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors |= {"model.layers.3.eh_proj.weight": torch.randn(64, 128), "model.layers.3.enorm.weight": torch.ones(64)}
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 6))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), hf(ids).logits, rtol=1e-4, atol=1e-5)


def test_softmax_routing_is_refused_by_name(tmp_path):
    transformers.DeepseekV3ForCausalLM(deepseek()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"scoring_func": "softmax"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="scoring_func"):
        load_pretrained(tmp_path)
