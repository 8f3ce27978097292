"""GPT-J on posenc's parts (partial RoPE with interleaved pairs, parallel residual, head bias)
against HF ``GPTJForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 83


def gptj(**overrides):
    return transformers.GPTJConfig(**(dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=48,
                                           vocab_size=VOCAB) | overrides))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("rotary_dim", [8, 16])  # half of each head, and all of it
def test_logits_equal_hf(pairing, rotary_dim, seed, tmp_path):
    hf = perturb(transformers.GPTJForCausalLM(gptj(rotary_dim=rotary_dim)))
    ids = torch.randint(0, VOCAB, (2, 17))
    pm = compare(hf, tmp_path, ids, pairing=pairing)
    assert pm.model.head.bias is not None and pm.config.block == "parallel"
    assert pm.config.position_options.get("rotary_dim", 16) == rotary_dim


def test_null_rotary_dim_is_refused(tmp_path):
    transformers.GPTJForCausalLM(gptj()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"rotary_dim": None}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="rotary_dim"):
        load_pretrained(tmp_path)
