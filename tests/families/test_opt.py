"""OPT on posenc's parts (learned positions at an offset of 2, pre- and post-norm) against HF ``OPTForCausalLM``."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from hf_compare import compare  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 79


def opt(**overrides):
    base = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, vocab_size=VOCAB,
                max_position_embeddings=30, word_embed_proj_dim=48, pad_token_id=1)
    return transformers.OPTConfig(**(base | overrides))


@pytest.mark.parametrize("before", [True, False])
def test_logits_equal_hf(before, seed, tmp_path):
    hf = perturb(transformers.OPTForCausalLM(opt(do_layer_norm_before=before)))
    ids = torch.randint(2, VOCAB, (2, 18))  # no padding token: HF would count positions past it
    pm = compare(hf, tmp_path, ids)
    d = pm.model.describe()["position"]
    assert d["name"] == "learned" and d["offset"] == 2 and d["max_len"] == 32
    assert pm.model.position.max_position() == 29
    assert pm.config.block == ("pre" if before else "post") and pm.config.final_norm is before


def test_the_offset_is_what_hf_reads(seed, tmp_path):
    """Position p is row p + 2 of HF's table: the first two rows never reach the logits."""
    hf = perturb(transformers.OPTForCausalLM(opt()))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    with torch.no_grad():
        p = torch.arange(5)
        torch.testing.assert_close(pm.model.position.encode(p), hf.model.decoder.embed_positions.weight[p + 2])
        with pytest.raises(ValueError, match=r"positions 0\.\.29"):
            pm.model(torch.full((1, 31), 3))


def test_projected_token_table_is_refused(tmp_path):
    transformers.OPTForCausalLM(opt()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"word_embed_proj_dim": 32}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="word_embed_proj_dim"):
        load_pretrained(tmp_path)
