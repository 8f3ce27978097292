"""Issue 14, items 2, 7 (API) and 8: non-finite, zero and negative values are refused where they enter."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from posenc import ModelConfig, build_decoder_only, build_encoder_decoder
from posenc.lab.core import LabConfig
from posenc.positions import build, lookup, names

from conftest import assert_refused, posenc

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("name, option, value", [
    ("rope", "base", NAN), ("sinusoidal", "base", NAN), ("scaled-sinusoidal", "base", NAN),
    ("rope-ntk", "base", NAN), ("randomized", "base", NAN), ("randomized", "base", 0.0),
    ("naive", "scale", NAN), ("kerple-log", "eps", INF), ("kerple-power", "eps", INF),
    ("t5", "max_distance", INF), ("rope-yarn", "mscale", NAN), ("rope", "base", INF),
    ("xpos", "gamma", INF), ("rope-yarn", "base", INF),
])
def test_the_reported_non_finite_options_are_refused_naming_the_value(name, option, value):
    with pytest.raises(ValueError, match=rf"{option}={value!r}"):
        build(name, dim=32, num_heads=2, **{option: value})


def _float_options(name: str) -> list[str]:
    params = inspect.signature(lookup(name).__init__).parameters
    return [p for p, v in params.items() if isinstance(v.default, float) and not isinstance(v.default, bool)]


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_every_float_option_of_every_scheme_refuses_non_finite(name, value):
    for option in _float_options(name):
        with pytest.raises(ValueError, match=rf"{option}="):
            build(name, dim=32, num_heads=2, **{option: value})


@pytest.mark.parametrize("field, value", [
    ("ffn_dim", 0), ("num_decoder_layers", 0), ("tgt_vocab_size", 0), ("num_layers", -1), ("num_layers", 0),
    ("vocab_size", 0), ("dim", -8), ("num_heads", 0), ("dropout", NAN), ("dropout", 1.0), ("ffn_dim", 2.5),
])
def test_model_config_refuses_zero_negative_and_non_finite_instead_of_reinterpreting(field, value):
    with pytest.raises(ValueError, match=rf"{field}={value!r}"):
        ModelConfig(**{"vocab_size": 11, "dim": 16, "num_heads": 2, field: value})


def test_none_still_means_the_default(seed):
    model = build_encoder_decoder(ModelConfig(vocab_size=11, dim=16, num_heads=2, num_layers=1))
    assert len(model.decoder) == 1 and model.encoder[0].ffn.up.out_features == 64


@pytest.mark.parametrize("base", [NAN, INF, 1.0])
def test_lab_base_must_be_finite_above_one(base):
    with pytest.raises(ValueError, match=r"--base="):
        LabConfig(base=base)
    assert_refused(posenc("lab", "--only", "distance-only", "--base", str(base), "--out", "-"), "--base")


@pytest.fixture
def lm(seed):
    return build_decoder_only(ModelConfig(vocab_size=13, dim=16, num_heads=2, num_layers=2, position="rope"))


def test_model_inputs_of_the_wrong_shape_or_kind_are_refused(lm):
    ids = torch.randint(0, 13, (2, 5))
    with pytest.raises(ValueError, match="positions has batch 3 but the ids have batch 2"):
        lm(ids, positions=torch.arange(5).repeat(3, 1))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T\), got \(5,\); add a batch dimension"):
        lm(ids[0])
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        lm([[1, 2, 3]])
    with pytest.raises(TypeError, match="integer token ids"):
        lm(ids.float())
    with pytest.raises(ValueError, match="prompt has shape \\(2, 0\\)"):
        lm.generate(ids[:, :0], max_new_tokens=2)
    with pytest.raises(ValueError, match="cache has 1 layer entries but the model has 2 layers"):
        lm(ids, cache=lm.new_cache()[:1])


def test_valid_inputs_still_work_and_match_the_uncached_model(lm):
    lm.eval()
    ids = torch.randint(0, 13, (2, 6))
    full = lm(ids)
    cache = lm.new_cache()
    first, rest = lm(ids[:, :4], cache=cache), lm(ids[:, 4:], cache=cache)
    torch.testing.assert_close(torch.cat((first, rest), dim=1), full, rtol=1e-5, atol=1e-5)
    # one row of positions broadcast over the batch equals the default positions
    torch.testing.assert_close(lm(ids, positions=torch.arange(6)[None]), full)
