"""Context extension on a model with a layer plan (Gemma 3: sliding RoPE layers at base 10⁴, global at 10⁶):
a Gemma 3 model gets the method on its global layers only by default (what the family does itself), any
model on every RoPE layer with layers="rotary", on the full-attention RoPE layers with layers="global"."""

from __future__ import annotations

import pytest
import torch

from posenc.extend.methods import build_variant, variant_config
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.plan import LayerSpec, Window

SLIDING = LayerSpec(position="rope", position_options={"base": 1e4, "pairing": "half"}, window=Window("sliding", 4))
GLOBAL = LayerSpec(position="rope", position_options={"base": 1e6, "pairing": "half"})
NOPE = LayerSpec(position="none")


def plan_model(plan, family: str = "gemma3") -> torch.nn.Module:
    cfg = DecoderConfig(vocab_size=50, dim=32, num_layers=len(plan), num_heads=2, ffn_dim=48, position="none",
                      layer_plan=[s.to_dict() for s in plan], max_position_embeddings=16, family=family)
    return build_decoder(cfg).eval()


def test_global_layers_only_by_default(seed) -> None:
    model = plan_model([SLIDING, SLIDING, GLOBAL, NOPE])
    variant = build_variant(model, "rope-linear", factor=4.0, original_max_len=16)
    plan = variant.config.plan
    assert plan[0] == plan[1] == SLIDING and plan[3] == NOPE
    assert plan[2].position == "rope-linear" and dict(plan[2].position_options) == {"base": 1e6, "pairing": "half",
                                                                                     "factor": 4.0}
    # the same weights, and the model a hand-written plan builds
    ref = plan_model([SLIDING, SLIDING, LayerSpec(position="rope-linear", position_options={
        "base": 1e6, "pairing": "half", "factor": 4.0}), NOPE])
    ref.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(variant(ids), ref(ids), rtol=0, atol=0)
        assert not torch.allclose(variant(ids), model(ids))


def test_every_rope_layer_on_request_and_by_default_outside_gemma() -> None:
    cfg = plan_model([SLIDING, GLOBAL, NOPE]).config
    plan = variant_config(cfg, "rope-yarn", factor=2.0, original_max_len=16, layers="rotary").plan
    assert plan == variant_config(plan_model([SLIDING, GLOBAL, NOPE], family="llama").config, "rope-yarn",
                                  factor=2.0, original_max_len=16).plan
    assert [s.position for s in plan] == ["rope-yarn", "rope-yarn", "none"]
    assert [s.position_options["base"] for s in plan[:2]] == [1e4, 1e6]
    assert plan[0].window == Window("sliding", 4)


def test_refusals_name_the_layer() -> None:
    only_sliding = plan_model([SLIDING, NOPE]).config
    with pytest.raises(ValueError, match=r"--layers global: no layer of this model is a global RoPE layer"):
        variant_config(only_sliding, "rope-linear", factor=2.0, original_max_len=16)
    with pytest.raises(ValueError, match=r"--layers all: layer\(s\) \[1\] use 'none', not plain RoPE"):
        variant_config(only_sliding, "rope-linear", factor=2.0, original_max_len=16, layers="all")
    with pytest.raises(ValueError, match=r"--layers 'sliding' is not one of all, global, rotary"):
        variant_config(only_sliding, "rope-linear", factor=2.0, original_max_len=16, layers="sliding")
