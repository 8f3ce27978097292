"""Cohere 2 on posenc's parts against HF ``Cohere2ForCausalLM`` on the same random weights."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise  # noqa: E402

from posenc.families.cohere2 import FAMILY  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131


def cohere2(**overrides):
    base = dict(num_hidden_layers=6, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=128, sliding_window=5,
                logit_scale=0.25, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.Cohere2Config(**(base | overrides))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("bias", [False, True])
def test_logits_equal_hf_past_the_window(pairing, bias, seed, tmp_path):
    hf = randomise(transformers.Cohere2ForCausalLM(cohere2(attention_bias=bias)))
    ids = torch.randint(0, VOCAB, (2, 22))  # 22 tokens through a window of 5
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    rows = pm.model.describe()["layers"]
    assert [r["position"] for r in rows] == ["rope", "rope", "rope", "none"] * 1 + ["rope", "rope"]
    assert [r["window"] for r in rows] == ["sliding 5"] * 3 + ["full"] + ["sliding 5"] * 2
    assert pm.model.head.tied and pm.config.logit_scale == 0.25
    assert pm.config.block == "parallel" and pm.config.norm == "layer"


def test_checkpoint_rows_are_interleaved(seed, tmp_path):
    """HF's Cohere rotates adjacent pairs: loading for posenc's interleaved kernel leaves the rows as stored."""
    assert FAMILY.hf_pairing == "interleaved"
    hf = randomise(transformers.Cohere2ForCausalLM(cohere2()))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path, pairing="interleaved")
    torch.testing.assert_close(pm.model.layers[0].attn.q_proj.weight, hf.model.layers[0].self_attn.q_proj.weight,
                               rtol=0, atol=0)
    half = load_pretrained(tmp_path, pairing="half")
    assert not torch.equal(half.model.layers[0].attn.q_proj.weight, hf.model.layers[0].self_attn.q_proj.weight)
    # a NoPE layer's rows are never permuted
    torch.testing.assert_close(half.model.layers[3].attn.q_proj.weight, hf.model.layers[3].self_attn.q_proj.weight,
                               rtol=0, atol=0)


def test_pattern_without_layer_types(seed, tmp_path):
    """An older config with ``sliding_window_pattern`` and no ``layer_types`` gives HF's plan."""
    hf = randomise(transformers.Cohere2ForCausalLM(cohere2(num_hidden_layers=4, layer_types=None)))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data.pop("layer_types")
    data["sliding_window_pattern"] = 2
    (tmp_path / "config.json").write_text(json.dumps(data))
    pm = load_pretrained(tmp_path)
    assert [r["position"] for r in pm.model.describe()["layers"]] == ["rope", "none"] * 2
    reference = transformers.Cohere2ForCausalLM(transformers.Cohere2Config(**{k: v for k, v in data.items()
                                                                              if k != "architectures"})).eval()
    reference.load_state_dict(hf.state_dict())
    ids = torch.randint(0, VOCAB, (1, 14))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), reference(ids).logits, rtol=1e-4, atol=1e-5)


def test_no_window_is_refused(tmp_path):
    transformers.Cohere2ForCausalLM(cohere2()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"sliding_window": None}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="sliding_window is null"):
        load_pretrained(tmp_path)
