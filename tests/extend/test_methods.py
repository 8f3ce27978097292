"""Each method's model is exactly the checkpoint plus that scaling scheme: same weights, same modules, same config."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.extend.methods import (
    FIXED_NTK,
    REMAPS,
    SCALINGS,
    build_variant,
    check_methods,
    method_options,
    variant_config,
)
from posenc.positions import RemapScheme, RoPE, ScaledRoPE
from posenc.transformer import ModelConfig, build_decoder_only

SCALED = [m for m in SCALINGS if m != FIXED_NTK]


@pytest.mark.parametrize("method", SCALED)
def test_variant_is_checkpoint_plus_scheme(tiny_model, l0, method):
    variant = build_variant(tiny_model, method, factor=4.0, original_max_len=l0)
    assert variant is not tiny_model
    # config: only the position fields differ, and the checkpoint's RoPE base is kept
    changed = {f.name for f in dataclasses.fields(tiny_model.config)
               if getattr(tiny_model.config, f.name) != getattr(variant.config, f.name)}
    assert changed == {"position", "position_options"}
    assert variant.config.position == method
    assert variant.config.position_options["base"] == tiny_model.config.position_options["base"]
    # weights: the same names, bit-identical values
    mine, theirs = tiny_model.state_dict(), variant.state_dict()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.equal(mine[name], theirs[name]), name
    # modules: the same tree; only the position scheme's class differs, and it is the asked-for scheme
    before, after = dict(tiny_model.named_modules()), dict(variant.named_modules())
    assert before.keys() == after.keys()
    for name, module in after.items():
        if isinstance(module, ScaledRoPE):
            assert module.name == method and module.factor == 4.0 and type(before[name]) is RoPE
            assert module.base == before[name].base and module.pairing == before[name].pairing
        else:
            assert type(module) is type(before[name]), name


def test_plain_is_the_checkpoint_itself(tiny_model, l0):
    assert build_variant(tiny_model, "rope", factor=None, original_max_len=l0) is tiny_model


def test_schemes_that_leave_short_range_alone_give_identical_outputs(tiny_model, gen, l0):
    # dynamic NTK is plain RoPE below L₀ (per-position frequencies); a different output would mean something
    # besides the scheme changed
    ids = torch.randint(0, 257, (1, l0), generator=gen)
    dynamic = build_variant(tiny_model, "rope-dynamic-ntk", factor=2.0, original_max_len=l0)
    torch.testing.assert_close(dynamic(ids), tiny_model(ids), rtol=0, atol=0)
    linear = build_variant(tiny_model, "rope-linear", factor=2.0, original_max_len=l0)
    assert not torch.allclose(linear(ids), tiny_model(ids))


def test_options_per_method(l0):
    assert method_options("rope-yarn", factor=2.0, original_max_len=l0) == {"factor": 2.0, "original_max_len": l0}
    assert method_options("rope-linear", factor=3.0, original_max_len=l0) == {"factor": 3.0}
    assert method_options("rope-llama3", factor=2.0, original_max_len=l0)["high_freq_factor"] == 4.0
    assert method_options("rope", factor=None, original_max_len=l0) == {}
    with pytest.raises(ValueError, match="needs a factor"):
        method_options("rope-ntk", factor=None, original_max_len=l0)


def test_bad_methods_and_checkpoints(l0):
    with pytest.raises(ValueError, match="searched|search"):
        check_methods(["rope-longrope"])
    with pytest.raises(ValueError, match="valid methods"):
        check_methods(["alibi"])
    assert check_methods(["rope-yarn", "rope", "rope-yarn"]) == ["rope-yarn", "rope"]
    scaled = ModelConfig(vocab_size=10, dim=16, num_heads=2, position="rope-linear", position_options={"factor": 2})
    with pytest.raises(ValueError, match="two schemes"):
        variant_config(scaled, "rope-yarn", factor=2.0, original_max_len=l0)
    build_decoder_only(scaled)  # the config itself is valid; only stacking is refused


# -- the remapping methods, the fixed dynamic NTK, and which layers change ---------------------------------


@pytest.mark.parametrize("method", REMAPS)
def test_remapping_methods_are_the_registered_schemes(tiny_model, l0, method):
    variant = build_variant(tiny_model, method, factor=2.0, original_max_len=l0)
    schemes = [m for m in variant.modules() if isinstance(m, RemapScheme)]
    assert schemes and all(s.name == method and s.base == tiny_model.config.position_options["base"] for s in schemes)
    for name, value in tiny_model.state_dict().items():
        assert torch.equal(variant.state_dict()[name], value)


@pytest.mark.parametrize("factor", [2.0, 4.0])
@pytest.mark.parametrize("l0", [64, 8192])
def test_chosen_options_keep_relative_positions_in_range_at_s_times_l0(factor, l0):
    """Self-Extend's G and Leaky ReRoPE's k are chosen so that s·L₀ tokens use relative positions < L₀."""
    from posenc.positions import build

    for method in ("self-extend", "rerope-leaky", "rerope", "dca"):
        opts = method_options(method, factor=factor, original_max_len=l0)
        scheme = build(method, dim=16, num_heads=2, **opts)
        length = int(factor * l0) if l0 <= 64 else 1024  # the closed form at L₀ = 8192, checked at its ends below
        if l0 <= 64:
            assert scheme.largest_relative_position(length) <= l0, (method, opts)
        i, j = torch.tensor([int(factor * l0) - 1]), torch.tensor([0])
        assert float(scheme.relative_position(i, j)) <= l0, (method, opts)
    assert method_options("string", factor=None, original_max_len=8192) == {"shift": 2730, "local_window": 128}
    assert method_options("dca", factor=None, original_max_len=8192) == {"chunk_size": 8192, "local_size": 256}


def test_fixed_dynamic_ntk_needs_the_length_and_takes_it_per_pass(tiny_model, gen, l0):
    from posenc.extend.methods import set_sequence_length
    from posenc.positions import DynamicNTKRoPE

    with pytest.raises(ValueError, match="whole sequence's length.*KV cache"):
        build_variant(tiny_model, FIXED_NTK, factor=2.0, original_max_len=l0)
    ids = torch.randint(0, 257, (1, 3 * l0), generator=gen)
    fixed = build_variant(tiny_model, FIXED_NTK, factor=2.0, original_max_len=l0, length=3 * l0)
    # one base for every position: the static NTK formula at α = s·(T − L₀)/L₀ + 1, i.e. HF's full forward at T
    alpha = 2.0 * (3 * l0 - l0) / l0 + 1
    static = build_variant(tiny_model, "rope-ntk", factor=alpha, original_max_len=l0)
    torch.testing.assert_close(fixed(ids), static(ids), rtol=1e-5, atol=1e-5)
    # a new length changes the base at the next pass; within L₀ it is plain RoPE
    assert set_sequence_length(fixed, l0) == sum(isinstance(m, DynamicNTKRoPE) for m in fixed.modules())
    torch.testing.assert_close(fixed(ids[:, :l0]), tiny_model(ids[:, :l0]), rtol=1e-5, atol=1e-5)
    per_position = build_variant(tiny_model, "rope-dynamic-ntk", factor=2.0, original_max_len=l0)
    assert not torch.allclose(per_position(ids), static(ids), atol=1e-3)


def _gemma_like(**changes):
    from posenc.models.decoder import DecoderConfig

    sliding = {"position": "rope", "position_options": {"base": 10000.0}, "window": {"kind": "sliding", "size": 16}}
    full = {"position": "rope", "position_options": {"base": 1e6}}
    plan = [sliding, sliding, full, {"position": "none"}, sliding, full]
    return DecoderConfig(vocab_size=50, dim=32, num_heads=4, num_kv_heads=2, ffn_dim=48, num_layers=6,
                       layer_plan=plan, **changes)


def test_layers_all_global_rotary_and_the_family_default():
    from posenc.extend.methods import default_layers, selected_layers

    cfg = _gemma_like(family="gemma3")
    assert default_layers(cfg) == "global" and selected_layers(cfg) == [2, 5]
    assert selected_layers(cfg, "rotary") == [0, 1, 2, 4, 5]
    with pytest.raises(ValueError, match="layer\\(s\\) \\[3\\].*'none'.*--layers rotary"):
        selected_layers(cfg, "all")
    assert default_layers(_gemma_like()) == "rotary"  # a family not listed, with a NoPE layer: every RoPE layer
    assert selected_layers(ModelConfig(vocab_size=10, dim=16, num_heads=2)) is None  # one scheme for all
    new = variant_config(cfg, "rope-yarn", factor=2.0, original_max_len=64)
    plan = new.plan
    assert [p.position for p in plan] == ["rope", "rope", "rope-yarn", "none", "rope", "rope-yarn"]
    assert plan[2].position_options == {"base": 1e6, "factor": 2.0, "original_max_len": 64}
    assert plan[0].position_options == {"base": 10000.0} and plan[0].window.kind == "sliding"
    rotary = variant_config(cfg, "self-extend", factor=2.0, original_max_len=64, layers="rotary").plan
    assert [p.position for p in rotary] == ["self-extend"] * 3 + ["none", "self-extend", "self-extend"]
    assert rotary[1].window.kind == "sliding" and rotary[1].position_options["base"] == 10000.0
    with pytest.raises(ValueError, match="not one of"):
        selected_layers(cfg, "odd")


def test_global_layers_variant_runs_and_caches(seed):
    from posenc.extend.methods import build_variant
    from posenc.models.decoder import build_decoder

    model = build_decoder(_gemma_like(family="gemma3")).double().eval()
    variant = build_variant(model, "dca", factor=None, original_max_len=24).double()
    ids = torch.randint(0, 50, (1, 60))
    with torch.no_grad():
        full = variant(ids)
        cache = variant.new_cache()
        steps = torch.cat([variant(ids[:, :20], cache=cache)] + [variant(ids[:, t:t + 1], cache=cache)
                                                                  for t in range(20, 60)], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-9, atol=1e-9)
    assert not torch.allclose(full, model(ids))  # the global layers changed
