"""MPT on posenc's parts (ALiBi with MPT's slope scale, no biases, clip_qkv) against HF ``MptForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.positions import alibi_slopes, build  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 71


def mpt(heads=4, **attn):
    return transformers.MptConfig(d_model=48, n_heads=heads, n_layers=2, max_seq_len=32, vocab_size=VOCAB,
                                  attn_config=attn)


@pytest.mark.parametrize("heads,attn", [(4, {}), (6, {"clip_qkv": 0.5}), (3, {"softmax_scale": 0.3})])
def test_logits_equal_hf(heads, attn, seed, tmp_path):
    hf = perturb(transformers.MptForCausalLM(mpt(heads, **attn)))
    ids = torch.randint(0, VOCAB, (2, 20))
    pm = compare(hf, tmp_path, ids)
    assert pm.config.clip_qkv == attn.get("clip_qkv") and pm.config.attn_scale == attn.get("softmax_scale")
    assert {r["position"] for r in pm.model.describe()["layers"]} == {"alibi"}


def test_clipping_binds(seed, tmp_path):
    """With clip_qkv small enough to bind, the clipped model differs from the unclipped one (the clamp acts)."""
    hf = perturb(transformers.MptForCausalLM(mpt(4, clip_qkv=0.05)))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        clipped = pm.model(ids)
        for layer in pm.model.layers:
            for p in ("q_proj", "k_proj", "v_proj"):
                getattr(layer.attn, p).clip = 1e9
        assert not torch.allclose(clipped, pm.model(ids), atol=1e-3)


@pytest.mark.parametrize("heads", [1, 3, 4, 6, 8, 12])
@pytest.mark.parametrize("max_bias", [8, 16, 4.5])
def test_slopes_are_mpts(heads, max_bias):
    """posenc's ALiBi with max_bias equals MPT's ``build_mpt_alibi_tensor`` up to a constant per query row."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    t = 6
    ref = build_mpt_alibi_tensor(heads, t, alibi_bias_max=max_bias)  # (H, 1, T): m_h · (j − (T − 1))
    slopes = alibi_slopes(heads, max_bias).float()
    torch.testing.assert_close(slopes, -ref[:, 0, 0] / (t - 1), rtol=1e-6, atol=0)
    bias = build("alibi", dim=4 * heads, num_heads=heads, max_bias=max_bias).attention_bias(torch.tensor([t - 1]), torch.arange(t))
    torch.testing.assert_close(bias[:, 0], ref[:, 0], rtol=1e-6, atol=1e-7)  # the last query row: equal exactly


def test_alibi_bias_max_is_read(seed, tmp_path):
    transformers.MptForCausalLM(mpt(4, alibi_bias_max=16)).save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    assert pm.model.layers[0].attn.position.describe()["max_bias"] == 16.0


@pytest.mark.parametrize("key", ["qk_ln", "prefix_lm"])
def test_unsupported_switches_are_refused_by_name(key, tmp_path):
    transformers.MptForCausalLM(mpt()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["attn_config"][key] = True
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=key):
        load_pretrained(tmp_path)
