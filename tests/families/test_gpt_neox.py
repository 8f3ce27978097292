"""GPT-NeoX / Pythia on posenc's parts (partial RoPE in half pairing, parallel residual with two norms)
against HF ``GPTNeoXForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 101


def neox(**overrides):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, vocab_size=VOCAB,
                max_position_embeddings=64)
    return transformers.GPTNeoXConfig(**(base | overrides))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("parallel", [True, False])
def test_logits_equal_hf(pairing, parallel, seed, tmp_path):
    cfg = neox(use_parallel_residual=parallel)
    cfg.rope_parameters["partial_rotary_factor"] = 0.25  # 4 of 16 coordinates rotate
    hf = perturb(transformers.GPTNeoXForCausalLM(cfg))
    ids = torch.randint(0, VOCAB, (2, 19))
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    row = pm.model.describe()["layers"][0]
    assert row["position"] == "rope" and row["position_options"]["rotary_dim"] == 4
    assert pm.config.block == ("parallel-two" if parallel else "pre")


def test_original_config_style_reads_the_same(seed, tmp_path):
    """Pythia's own config.json: ``rotary_pct`` and ``rotary_emb_base`` at the top level."""
    cfg = neox()
    cfg.rope_parameters |= {"partial_rotary_factor": 0.5, "rope_theta": 500.0}
    hf = perturb(transformers.GPTNeoXForCausalLM(cfg))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data.pop("rope_parameters")
    data |= {"rotary_pct": 0.5, "rotary_emb_base": 500}
    (tmp_path / "config.json").write_text(json.dumps(data))
    pm = load_pretrained(tmp_path)
    assert pm.config.position_options == {"base": 500.0, "pairing": "interleaved", "rotary_dim": 8}
    ids = torch.randint(0, VOCAB, (1, 13))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), hf(ids).logits, rtol=1e-4, atol=1e-5)
