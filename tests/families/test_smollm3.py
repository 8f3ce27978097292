"""SmolLM3 on posenc's parts against HF ``SmolLM3ForCausalLM`` on the same random weights."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131


def smollm3(**overrides):
    base = dict(num_hidden_layers=8, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128, pad_token_id=0,
                bos_token_id=1, eos_token_id=2)
    return transformers.SmolLM3Config(**(base | overrides))


ROPE = "rope"
VARIANTS = {
    # SmolLM3-3B's plan: every fourth layer NoPE, all full, base 2e6
    "released": ({}, [ROPE] * 3 + ["none"] + [ROPE] * 3 + ["none"], ["full"] * 8),
    # HF's sliding rule: with use_sliding_window the NoPE layers are the ones that slide
    "sliding": ({"use_sliding_window": True, "sliding_window": 5},
                [ROPE] * 3 + ["none"] + [ROPE] * 3 + ["none"], (["full"] * 3 + ["sliding 5"]) * 2),
    # an explicit no_rope_layers list, YaRN on the RoPE layers, biases, untied head
    "explicit": ({"no_rope_layers": [1, 0, 1, 1, 0, 1, 1, 1], "attention_bias": True, "mlp_bias": True,
                  "tie_word_embeddings": False,
                  "rope_parameters": {"rope_type": "yarn", "rope_theta": 5e5, "factor": 2.0,
                                      "original_max_position_embeddings": 64}},
                 ["rope-yarn", "none", "rope-yarn", "rope-yarn", "none", "rope-yarn", "rope-yarn", "rope-yarn"],
                 ["full"] * 8),
}


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_equal_hf_full_and_cached(variant, pairing, seed, tmp_path):
    overrides, positions, windows = VARIANTS[variant]
    hf = randomise(transformers.SmolLM3ForCausalLM(smollm3(**overrides)))
    ids = torch.randint(0, VOCAB, (2, 21))
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    rows = pm.model.describe()["layers"]
    assert [r["position"] for r in rows] == positions
    assert [r["window"] for r in rows] == windows
    assert pm.model.describe()["schemes_built"] == 2  # one RoPE, one NoPE for all eight layers
    rope_rows = [r for r in rows if r["position"] != "none"]
    assert {r["position_options"]["base"] for r in rope_rows} == {5e5 if variant == "explicit" else 2e6}


def test_plan_from_an_interval(seed, tmp_path):
    """``no_rope_layer_interval`` without a list: NoPE at every interval-th layer."""
    hf = randomise(transformers.SmolLM3ForCausalLM(smollm3(num_hidden_layers=6, no_rope_layer_interval=3)))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["no_rope_layers"], data["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    pm = load_pretrained(tmp_path)
    assert [r["position"] for r in pm.model.describe()["layers"]] == ["rope", "rope", "none"] * 2
    ids = torch.randint(0, VOCAB, (1, 13))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), hf(ids).logits, rtol=1e-4, atol=1e-5)


def test_refusals_name_the_field(tmp_path):
    hf = transformers.SmolLM3ForCausalLM(smollm3())
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    cases = [({"no_rope_layers": [1, 2, 1, 1, 1, 1, 1, 1]}, "no_rope_layers"),
             ({"layer_types": ["sliding_attention"] + ["full_attention"] * 7}, "use_sliding_window=False"),
             ({"hidden_act": "gelu"}, "hidden_act")]
    for change, message in cases:
        (tmp_path / "config.json").write_text(json.dumps(data | change))
        with pytest.raises(ValueError, match=message):
            load_pretrained(tmp_path)
