"""Issue 14, items 2, 7 (API) and 8: non-finite, zero and negative values are refused where they enter."""

from __future__ import annotations

import inspect
import math
import re

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


# -- extreme but finite option values (issue 14 review, item 1) ---------------------------------------------
@pytest.mark.parametrize("name, option, value", [
    ("fire", "init_c", 1e300), ("shaw", "init_std", 3.5e38), ("t5", "init_std", 3.5e38), ("xpos", "gamma", 1e300),
    ("xpos", "scale_base", 1e39), ("rope-ntk", "factor", 1e300), ("learned", "init_std", 1e20),
    ("scaled-sinusoidal", "init_scale", 1e20), ("naive", "scale", 1e20), ("fire", "init_L", 1e39),
    ("fire", "eps", 1e-300), ("rope-yarn", "attention_factor", 1e20), ("rope-longrope", "attention_factor", 1e20),
    ("rope-linear", "factor", 5e-324), ("rope-yarn", "beta_slow", 1e-320), ("rope-dynamic-ntk", "original_max_len", 2**63),
])
def test_extreme_finite_options_are_refused_with_the_bound(name, option, value):
    with pytest.raises(ValueError, match=re.escape(f"{option}={value!r} must be") + ".*(at most|at least|between|below|>=|<=)"):
        build(name, dim=32, num_heads=2, **{option: value})


@pytest.mark.parametrize("argv", [
    ("--position", "fire", "--position-option", "init_c=1e300"),
    ("--position", "shaw", "--position-option", "init_std=3.5e38"),
    ("--position", "xpos", "--position-option", "gamma=1e300"),
    ("--position", "xpos", "--position-option", "scale_base=1e39"),
    ("--position", "rope-ntk", "--position-option", "factor=1e300"),
])
def test_the_demo_refuses_them_as_usage_errors(argv):
    option = argv[-1].split("=")[0]
    assert_refused(posenc("demo", *argv), option)


EXTREMES = [1e300, -1e300, 1e39, 3.5e38, 1e20, 1e-300, 5e-324, 2**63]


def _attend(scheme, length: int) -> torch.Tensor:
    from posenc.attention import MultiHeadAttention

    x = torch.randn(2, length, 16)
    if scheme.family == "additive":  # what a model does first: add, then attend (the extra column dropped)
        x = scheme.add(x, torch.arange(length))[..., :16]
    out, _ = MultiHeadAttention(dim=16, num_heads=2, position=scheme)(x, q_pos=torch.arange(length), causal=True)
    return out


@pytest.mark.parametrize("name", names())
def test_every_numeric_option_at_an_extreme_is_refused_or_attends_finitely(name, monkeypatch):
    """The sweep that found the holes: each number option of each scheme at extremes of the float range."""
    from posenc.positions import options

    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 28))
    for spec in options(name):
        if spec["type"] not in ("int", "float"):
            continue
        for value in EXTREMES:
            if spec["type"] == "int":
                value = int(value) if abs(value) >= 1 else 0
            try:
                scheme = build(name, dim=16, num_heads=2, **{spec["name"]: value})
            except (ValueError, TypeError):
                continue
            for length in (1, 12):
                try:
                    out = _attend(scheme, length)
                except (ValueError, TypeError):
                    break
                assert torch.isfinite(out).all(), f"{name} {spec['name']}={value!r} built, but attention gave non-finite"


@pytest.mark.parametrize("name, option, value", [
    ("fire", "init_c", 2.0e31), ("shaw", "init_std", 7e17), ("t5", "init_std", 1e37), ("xpos", "scale_base", 9e25),
    ("xpos", "gamma", 1e15), ("rope-ntk", "factor", 1e228), ("rope-yarn", "attention_factor", 4e18),
    ("learned", "init_std", 5e17), ("scaled-sinusoidal", "init_scale", 4e18), ("naive", "scale", 1e12),
])
def test_values_just_inside_the_bounds_still_attend_finitely(name, option, value):
    scheme = build(name, dim=16, num_heads=2, **{option: value})
    assert torch.isfinite(_attend(scheme, 12)).all()
