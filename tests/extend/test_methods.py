"""Each method's model is exactly the checkpoint plus that scaling scheme: same weights, same modules, same config."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.extend.methods import METHODS, build_variant, check_methods, method_options, variant_config
from posenc.positions import RoPE, ScaledRoPE
from posenc.transformer import ModelConfig, build_decoder_only

SCALED = [m for m in METHODS if m != "rope"]


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
