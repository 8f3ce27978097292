"""``posenc rope --pairing-check``: the pairing read from the weights (a short text's loss under each), checked on
the real SmolLM2 — right as declared, and a file whose rows were permuted to the other pairing caught."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from posenc.ropecheck import weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))


@pytest.fixture(scope="module")
def smollm2():
    from gguf_helpers import smollm2_path

    from posenc.pretrained import load_pretrained

    pm = load_pretrained(smollm2_path(), weights="dequantised")
    return pm.model, pm.tokenizer.encode(weights.text())[:128]


def test_the_declared_pairing_wins_by_far_on_the_real_model(smollm2):
    model, ids = smollm2
    out = weights.check_model(model, ids)
    assert out["finding"] is None and out["layers"] == 30
    assert min(out["loss_if_half_rows"], out["loss_if_interleaved_rows"]) > out["loss_as_declared"] + 1.0, out


@pytest.mark.parametrize("stored", [("half", "interleaved"), ("interleaved", "half")])
def test_rows_in_the_other_pairing_are_reported(smollm2, stored):
    """The same weights with every q/k row permuted per head as a converter that skipped (or repeated) the
    permutation leaves them: the check names the pairing that restores the model, and the weights come back."""
    model, ids = smollm2
    before = model.layers[3].attn.q_proj.weight.clone()
    with weights.permuted(model, *stored):
        out = weights.check_model(model, ids)
    assert torch.equal(model.layers[3].attn.q_proj.weight, before)
    finding = out["finding"]
    assert finding is not None and finding["rule"] == "pairing-from-weights" and finding["severity"] == "error"
    assert finding["numbers"]["loss_other"] < out["loss_as_declared"] - 1.0


def test_a_model_without_rotary_layers_is_refused(seed):
    from posenc.models.decoder import DecoderConfig, build_decoder

    model = build_decoder(DecoderConfig(vocab_size=40, dim=16, num_layers=1, num_heads=2, ffn_dim=16,
                                        position="alibi")).eval()
    with pytest.raises(ValueError, match="no rotary layer"):
        weights.check_model(model, list(range(20)))
