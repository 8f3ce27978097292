"""Qwen3 on posenc's parts against HF ``Qwen3ForCausalLM`` on the same random weights."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131


def qwen3(**overrides):
    base = dict(num_hidden_layers=4, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, head_dim=24, vocab_size=VOCAB, max_position_embeddings=128)
    return transformers.Qwen3Config(**(base | overrides))


VARIANTS = {
    # released Qwen3 configs: use_sliding_window false, every layer full, one RoPE (no plan)
    "full": ({}, ["full"] * 4),
    # HF's plan: sliding from max_window_layers on
    "sliding": ({"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 2},
                ["full"] * 2 + ["sliding 5"] * 2),
    # Qwen3's long-context recipe: YaRN ×4 over the original 32 positions, tied head, biases
    "yarn": ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                  "original_max_position_embeddings": 32},
              "tie_word_embeddings": True, "attention_bias": True, "use_sliding_window": True, "sliding_window": 6,
              "max_window_layers": 3}, ["full"] * 3 + ["sliding 6"]),
}


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_equal_hf_full_and_cached(variant, pairing, seed, tmp_path):
    overrides, windows = VARIANTS[variant]
    hf = randomise(transformers.Qwen3ForCausalLM(qwen3(**overrides)))
    ids = torch.randint(0, VOCAB, (2, 23))  # 23 tokens through windows of 5 and 6
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    assert [r["window"] for r in pm.model.describe()["layers"]] == windows
    assert pm.model.describe()["schemes_built"] == 1  # full and sliding layers share the one RoPE
    assert (pm.config.layer_plan is None) == (variant == "full")
    if variant == "yarn":
        assert pm.config.position == "rope-yarn" or pm.config.plan[0].position == "rope-yarn"
        assert pm.model.head.tied


def test_the_window_binds(seed, tmp_path):
    """The sliding layers change the logits past the window: the same weights with every layer full differ."""
    hf = randomise(transformers.Qwen3ForCausalLM(qwen3(use_sliding_window=True, sliding_window=4,
                                                       max_window_layers=1)))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data |= {"use_sliding_window": False, "layer_types": None}
    (tmp_path / "config.json").write_text(json.dumps(data))
    full = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 20))
    with torch.no_grad():
        ref = hf(ids).logits
        out = full.model(ids)
    torch.testing.assert_close(out[:, :4], ref[:, :4], **tolerance(ref))  # inside the window: the same
    assert not torch.allclose(out[:, 4:], ref[:, 4:], **tolerance(ref))


def test_explicit_layer_types_win_over_max_window_layers(seed, tmp_path):
    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    hf = randomise(transformers.Qwen3ForCausalLM(qwen3(use_sliding_window=True, sliding_window=5,
                                                       max_window_layers=3, layer_types=types)))
    pm = compare(hf, tmp_path, torch.randint(0, VOCAB, (1, 19)))
    assert [r["window"] for r in pm.model.describe()["layers"]] == ["sliding 5", "full"] * 2


def test_sliding_layers_without_a_window_are_refused(tmp_path):
    hf = transformers.Qwen3ForCausalLM(qwen3())
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["layer_types"] = ["full_attention", "sliding_attention"] * 2  # use_sliding_window stays false
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="use_sliding_window=False"):
        load_pretrained(tmp_path)
    data["layer_types"] = ["full_attention", "chunked_attention"] * 2
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="chunked_attention"):
        load_pretrained(tmp_path)
