"""BLOOM on posenc's parts (ALiBi in every layer, embedding LayerNorm, per-head fused q/k/v) against HF ``BloomForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.positions import alibi_slopes  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 89


def bloom(**overrides):
    return transformers.BloomConfig(**(dict(hidden_size=48, n_layer=2, n_head=6, vocab_size=VOCAB) | overrides))


@pytest.mark.parametrize("heads", [4, 6])  # a power of two, and not (the slopes' second sequence)
def test_logits_equal_hf(heads, seed, tmp_path):
    hf = perturb(transformers.BloomForCausalLM(bloom(n_head=heads)))
    ids = torch.randint(0, VOCAB, (2, 21))
    pm = compare(hf, tmp_path, ids)
    layers = pm.model.describe()["layers"]
    assert {r["position"] for r in layers} == {"alibi"} and pm.model.describe()["schemes_built"] == 1
    assert pm.model.embed_norm is not None


@pytest.mark.parametrize("heads", [1, 3, 4, 6, 8, 12, 16, 20])
def test_slopes_are_blooms(heads):
    """posenc's slopes times the key position are BLOOM's ``build_alibi_tensor`` (all-ones mask)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    ref = build_alibi_tensor(torch.ones(1, 5, dtype=torch.long), heads, torch.float32)  # (H, 1, T) = m_h · j
    ours = alibi_slopes(heads).float()[:, None, None] * torch.arange(5).float()
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)


def test_residual_after_the_norm_is_refused(tmp_path):
    transformers.BloomForCausalLM(bloom()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"apply_residual_connection_post_layernorm": True}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm"):
        load_pretrained(tmp_path)
