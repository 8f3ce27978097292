"""GPT-2 on posenc's parts (learned positions, LayerNorm, GELU MLP, Conv1D q/k/v) against HF ``GPT2LMHeadModel``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.formats import CheckpointError  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 97


def gpt2(**overrides):
    return transformers.GPT2Config(**(dict(n_embd=48, n_layer=2, n_head=4, n_positions=40, vocab_size=VOCAB)
                                      | overrides))


@pytest.mark.parametrize("overrides", [{}, {"activation_function": "gelu", "scale_attn_weights": False},
                                       {"n_inner": 80, "tie_word_embeddings": False}])
def test_logits_equal_hf(overrides, seed, tmp_path):
    hf = perturb(transformers.GPT2LMHeadModel(gpt2(**overrides)))
    ids = torch.randint(0, VOCAB, (2, 19))
    pm = compare(hf, tmp_path, ids)
    d = pm.model.describe()
    assert d["position"]["name"] == "learned" and d["position"]["max_len"] == 40
    assert {r["position"] for r in d["layers"]} == {"learned"}  # the input's scheme; layers add nothing
    # the learned table is HF's wpe, row for row
    torch.testing.assert_close(pm.model.position.weight, hf.transformer.wpe.weight, rtol=0, atol=0)


def test_positions_past_the_table_are_refused(seed, tmp_path):
    hf = perturb(transformers.GPT2LMHeadModel(gpt2()))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    with pytest.raises(ValueError, match="40 rows"):
        pm.model(torch.zeros(1, 41, dtype=torch.long))


def test_bare_model_names_and_mask_buffers_load(seed, tmp_path):
    """The original GPT-2 upload: names without ``transformer.`` and causal-mask buffers beside the weights."""
    from safetensors.torch import load_file, save_file

    hf = perturb(transformers.GPT2LMHeadModel(gpt2()))
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    bare = {k.removeprefix("transformer."): v for k, v in tensors.items() if k != "lm_head.weight"}
    bare |= {f"h.{i}.attn.bias": torch.tril(torch.ones(1, 1, 40, 40)) for i in range(2)}
    save_file(bare, tmp_path / "model.safetensors")
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), hf(ids).logits, rtol=1e-4, atol=1e-5)


def test_unknown_tensor_is_named(seed, tmp_path):
    from safetensors.torch import load_file, save_file

    hf = transformers.GPT2LMHeadModel(gpt2())
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors") | {"transformer.h.0.attn.q_attn.weight": torch.zeros(48, 48)}
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="q_attn"):
        load_pretrained(tmp_path)


@pytest.mark.parametrize("key", ["scale_attn_by_inverse_layer_idx", "add_cross_attention"])
def test_unsupported_switches_are_refused_by_name(key, tmp_path):
    transformers.GPT2LMHeadModel(gpt2()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {key: True}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=key):
        load_pretrained(tmp_path)
