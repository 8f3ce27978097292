"""Gemma 4 (text) on posenc's parts against HF ``Gemma4ForCausalLM`` on the same random weights.

Every Gemma 4 part is on in the main test: proportional RoPE on wider global
heads with fewer kv heads, values from the keys, the value norm, KV sharing
between layers (with a double-wide FFN), per-layer embeddings, a learned scalar
per layer, the final soft cap — full forward and cached decoding through the
sliding window, both pairings; and the mixture-of-experts branch of 26B-A4B.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131
S, F = "sliding_attention", "full_attention"
#: two producers (layer 2 full, layer 4 sliding) and three consumers (5 full, 6 sliding, 7 full)
TYPES = [S, S, F, S, S, F, S, F]


def gemma4(**overrides):
    base = dict(num_hidden_layers=8, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
                attention_k_eq_v=True, vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB,
                hidden_size_per_layer_input=8, sliding_window=5, max_position_embeddings=128, num_kv_shared_layers=3,
                use_double_wide_mlp=True, layer_types=TYPES, final_logit_softcapping=30.0)
    return transformers.Gemma4TextConfig(**(base | overrides))


def random_model(config):
    hf = randomise(transformers.Gemma4ForCausalLM(config))
    with torch.no_grad():  # the per-layer scalars are buffers (ones): perturb them too
        for name, buffer in hf.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.add_(torch.randn_like(buffer) * 0.3)
    return hf


def hf_rope_tolerance(ref: torch.Tensor) -> dict[str, float]:
    """float32 logits, loosened for HF's float32 RoPE frequencies: Gemma 4's softmax scale is 1 on RMS-normed
    q and k, so the 1e-7 relative error of HF's float32 inv_freq reaches the logits as ~1e-5 (posenc forms
    frequencies in float64). ``test_float64_equals_hf_exactly`` shows that this is all the difference."""
    return {"rtol": 1e-4, "atol": 1e-4 * max(1.0, float(ref.abs().max()))}


PLAIN = dict(num_kv_shared_layers=0, hidden_size_per_layer_input=0, attention_k_eq_v=False,
             use_double_wide_mlp=False, final_logit_softcapping=None)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("variant", ["every-part", "plain"])
def test_logits_equal_hf_past_the_window(variant, pairing, seed, tmp_path):
    hf = random_model(gemma4(**(PLAIN if variant == "plain" else {})))
    ids = torch.randint(0, VOCAB, (2, 23))  # 23 tokens through a window of 5
    pm = compare(hf, tmp_path, ids, pairing=pairing, tol=hf_rope_tolerance)
    rows = pm.model.describe()["layers"]
    assert [r["window"] for r in rows] == ["full" if t == F else "sliding 5" for t in TYPES]
    assert [r["position"] for r in rows] == ["rope-proportional" if t == F else "rope" for t in TYPES]
    assert [r["head_dim"] for r in rows] == [32 if t == F else 16 for t in TYPES]
    assert pm.model.describe()["schemes_built"] == 2
    if variant == "every-part":
        assert [r["kv_heads"] for r in rows] == [1 if t == F else 2 for t in TYPES]
        assert [r["kv_sharing"] for r in rows] == [None, None, "store", None, "store", "reuse", "reuse", "reuse"]
        assert [r["values"] for r in rows[:5]] == ["v_proj", "v_proj", "keys", "v_proj", "v_proj"]
        assert pm.model.describe()["per_layer_embedding"] == 8
        assert pm.model.layers[5].ffn.gate_proj.weight.shape == (192, 64)  # double-wide in the consumers
        assert pm.model.layers[6].attn.k_proj is None  # consumers have no key/value projections


def hf_frequencies_float64(config, layer_type):
    """HF's Gemma 4 RoPE frequencies (``compute_default_rope_parameters``, ``_compute_proportional_rope_parameters``)
    restated in float64: base^(−2i/Dh) for every pair, or for the first ⌊p·Dh/2⌋ pairs and 0 for the rest."""
    block = config.rope_parameters[layer_type]
    width = config.per_layer_config[layer_type].head_dim
    theta = torch.zeros(width // 2, dtype=torch.float64)
    rotated = int(block.get("partial_rotary_factor", 1.0) * width // 2) if block["rope_type"] == "proportional" \
        else width // 2
    theta[:rotated] = block["rope_theta"] ** (-torch.arange(0, 2 * rotated, 2, dtype=torch.float64) / width)
    return theta / block.get("factor", 1.0)


def test_float64_equals_hf_exactly(seed, tmp_path, monkeypatch):
    """In float64, with HF's rotary frequencies (and its √D, √P embedding scales, float32 buffers) formed in float64
    too, posenc and HF agree to float64 round-off: the float32 tolerance above is HF's float32 RoPE, not a
    difference in the model. (Both run their norms in float32 whatever the model's dtype, as HF does: in the
    half pairing the coordinates are HF's and those sums round alike.)"""
    from transformers.models.gemma4 import modeling_gemma4

    hf = random_model(gemma4())
    hf.save_pretrained(tmp_path)

    def forward(self, x, position_ids, layer_type):
        angles = position_ids[..., None].double() * hf_frequencies_float64(self.config, layer_type)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    monkeypatch.setattr(modeling_gemma4.Gemma4TextRotaryEmbedding, "forward", forward)
    hf = hf.double()
    for table in (hf.model.embed_tokens, hf.model.embed_tokens_per_layer):  # √D, √P: float32 buffers in HF
        table.embed_scale.fill_(table.embedding_dim ** 0.5 if table is hf.model.embed_tokens else 8 ** 0.5)
    pm = load_pretrained(tmp_path, pairing="half")  # HF's coordinate order: its float32 norms sum in the same order
    pm.model.double()
    ids = torch.randint(0, VOCAB, (2, 23))
    with torch.no_grad():
        ref = hf(ids).logits
        torch.testing.assert_close(pm.model(ids), ref, rtol=1e-10, atol=1e-12)
        cache = pm.model.new_cache()
        steps = [pm.model(ids[:, :7], cache=cache)] + [pm.model(ids[:, i:i + 1], cache=cache) for i in range(7, 23)]
        torch.testing.assert_close(torch.cat(steps, dim=1), ref, rtol=1e-10, atol=1e-12)


def test_consumers_keep_no_cache(seed, tmp_path):
    """KV-sharing layers read their producer's cache; their own stays empty, the sliding ones hold W − 1 keys."""
    hf = random_model(gemma4())
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    cache = pm.model.new_cache()
    with torch.no_grad():
        pm.model(torch.randint(0, VOCAB, (1, 30)), cache=cache)
        pm.model(torch.randint(0, VOCAB, (1, 1)), cache=cache)
    assert [c.stored for c in cache] == [4, 4, 31, 4, 4, 0, 0, 0]


def test_derived_widths_and_default_rope(seed, tmp_path):
    """A config without ``per_layer_config`` or ``rope_parameters``: HF's derivation (global_head_dim, the
    global kv heads under attention_k_eq_v) and HF's default RoPE per type give the same model."""
    hf = random_model(gemma4())
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["per_layer_config"], data["rope_parameters"]
    data |= {"global_head_dim": 32, "num_global_key_value_heads": 1}
    (tmp_path / "config.json").write_text(json.dumps(data))
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 17))
    with torch.no_grad():
        ref = reference(ids).logits
        torch.testing.assert_close(pm.model(ids), ref, **tolerance(ref))
        torch.testing.assert_close(ref, hf(ids).logits, **tolerance(ref))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_experts_beside_the_dense_ffn(pairing, seed, tmp_path):
    """26B-A4B's mixture-of-experts branch: a router picks 2 of 5 experts per token, beside every dense FFN."""
    hf = random_model(gemma4(num_hidden_layers=4, layer_types=[S, S, F, F], num_kv_shared_layers=0,
                             hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=5, top_k_experts=2,
                             moe_intermediate_size=24))
    with torch.no_grad():  # HF starts the router's scales at ones: perturb them so they are tested
        for name, p in hf.named_parameters():
            if name.endswith(("router.scale", "per_expert_scale")):
                p.add_(torch.randn_like(p) * 0.3)
    pm = compare(hf, tmp_path, torch.randint(0, VOCAB, (2, 19)), pairing=pairing, tol=hf_rope_tolerance)
    assert pm.model.layers[0].moe.experts.gate_up_proj.shape == (5, 48, 64)


@pytest.mark.parametrize("change, message", [
    ({"enable_moe_block": True, "num_experts": 4, "top_k_experts": 5, "moe_intermediate_size": 32},
     "top_k_experts"),
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"num_kv_shared_layers": 8}, "assistant"),
    ({"per_layer_config": {"2": {"head_dim": 32, "intermediate_size": 64}}}, "intermediate_size"),
    ({"per_layer_config": {"2": {"head_dim": 32}, "5": {"head_dim": 48}}}, "share one width"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "nested by layer type"),
])
def test_refusals_name_the_field(change, message, tmp_path):
    transformers.Gemma4ForCausalLM(gemma4()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | change
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_pretrained(tmp_path)


def test_inspect_measures_the_global_layer_at_its_own_width(seed, tmp_path):
    from posenc.inspect import inspect_checkpoint

    transformers.Gemma4ForCausalLM(gemma4()).save_pretrained(tmp_path)
    result = inspect_checkpoint(tmp_path, max_positions=32)
    assert [r["position"] for r in result["layer_plan"]] == ["rope-proportional" if t == F else "rope" for t in TYPES]
    settings = result["position"]["settings"]
    assert settings["scheme"] == "rope-proportional" and settings["head_dim"] == 32 and settings["base"] == 1e6
