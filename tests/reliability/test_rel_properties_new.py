"""Property tests (Hypothesis) for the newer commands' option parsers and file readers (issue 63, part B).

Profiles as in conftest.py: ``HYPOTHESIS_PROFILE=ci`` (default, few examples) or ``long``. Each property: any
input gives a result or a ``ValueError`` naming what is wrong — never another exception, never a hang.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import posenc
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.ropecheck.audit import CALC_METHODS, calculator

NUMBER_TEXT = st.one_of(
    st.integers(-10**6, 10**6).map(str), st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["0", "1", "2", "3", "4", "128", "-128", "1e400", "nan", "inf", "-inf", "1.5", "", "x", "0x10"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr))


# -- posenc rope --calc --------------------------------------------------------------------------------------------
@given(method=st.sampled_from([*CALC_METHODS, "longrope", ""]), l0=NUMBER_TEXT, target=NUMBER_TEXT,
       base=NUMBER_TEXT, head_dim=NUMBER_TEXT)
def test_rope_calc_any_options_print_a_setting_or_one_refusal(method, l0, target, base, head_dim):
    result = posenc("rope", "--calc", method, "--original-max-len", l0, "--target-len", target, "--base", base,
                    "--head-dim", head_dim)
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err and "unexpected" not in result.err, result.err
    if result.code == 2:
        assert len([line for line in result.err.splitlines() if "error:" in line]) == 1, result.err


@given(method=st.sampled_from(CALC_METHODS), l0=st.integers(-5, 1 << 42), target=st.integers(-5, 1 << 42),
       base=st.floats(allow_nan=True, allow_infinity=True), head_dim=st.integers(-8, 1 << 21))
def test_calculator_gives_finite_settings_or_a_value_error(method, l0, target, base, head_dim):
    try:
        out = calculator(method, original_max_len=l0, target_len=target, base=base, head_dim=head_dim)
    except ValueError:
        return
    assert out["factor"] > 1 and math.isfinite(out["factor"])
    theta = out["hf_config"]["rope_parameters"]["rope_theta"]
    assert math.isfinite(theta) and theta > 1


# -- export --position-option -----------------------------------------------------------------------------------
OPTION_KEYS = st.sampled_from(["factor", "original_max_len", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                               "attention_factor", "truncate", "low_freq_factor", "high_freq_factor", "base",
                               "pairing", "x"])
OPTION_VALUES = st.one_of(NUMBER_TEXT, st.sampled_from(["true", "false", "null", "[]", "[1, 2]", "{}", '"s"',
                                                       "1e308", "-1e308", "1e-320"]))


@settings(max_examples=max(25, settings.default.max_examples))
@given(position=st.sampled_from(["rope-yarn", "rope-linear", "rope-ntk", "rope-llama3", "rope-longrope", "rope",
                                 "rope-dynamic"]),
       pairs=st.lists(st.tuples(OPTION_KEYS, OPTION_VALUES), max_size=4))
def test_export_position_options_are_spelled_or_refused(position, pairs):
    """The ``--position-option`` parser (``key_value``), then export's steps in its order (``export_model``: its
    checks, the scheme built from the options, the spelling of what was built): a block or a ValueError."""
    import argparse

    from posenc import positions
    from posenc.cli_options import key_value, key_values
    from posenc.extend.export import check_options, spelling

    try:
        options = key_values([key_value(f"{k}={v}") for k, v in pairs], "--position-option")
        check_options(options, l0=2048)
        if "original_max_len" in positions.option_names(position) and "original_max_len" not in options:
            options = {**options, "original_max_len": 2048}
        built = positions.build(position, dim=64, num_heads=1, base=10000.0, **options)
        given = {k: v for k, v in built.options().items() if k not in ("head_dim", "base", "pairing", "rotary_dim")}
        spelling(position, given, base=10000.0, rotary_dim=64, l0=2048)
    except (ValueError, argparse.ArgumentTypeError):
        pass
    except TypeError as err:  # the scheme's own "original_max_len must be a number, got True" (the CLI: exit 2)
        assert any(str(err).startswith(f"{key} must be") for key, _ in pairs), err


@pytest.mark.parametrize("key", ["base", "pairing", "head_dim", "rotary_dim"])
def test_export_refuses_an_option_the_checkpoint_sets(key):
    """Found by the property above: ``--position-option base=0`` reached ``positions.build(..., base=..., **options)``
    as a second ``base`` — a TypeError — instead of a refusal naming it."""
    from posenc.extend.export import check_options

    with pytest.raises(ValueError, match=f"--position-option {key}: set by the checkpoint"):
        check_options({"factor": 2, key: 0}, l0=2048)


# -- GGUF metadata → description --------------------------------------------------------------------------------
GGUF_VALUES = st.one_of(st.integers(-2, 1 << 20), st.integers(-(1 << 63), 1 << 64), st.just(0),
                        st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=8),
                        st.lists(st.integers(-3, 3), max_size=4))
GGUF_KEYS = ["context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
             "rope.freq_base", "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
             "attention.layer_norm_rms_epsilon", "vocab_size", "attention.sliding_window"]
SOUND = {"context_length": 256, "embedding_length": 64, "block_count": 2, "feed_forward_length": 128,
         "attention.head_count": 4, "attention.head_count_kv": 2, "rope.freq_base": 10000.0,
         "attention.layer_norm_rms_epsilon": 1e-5, "vocab_size": 100}


@st.composite
def gguf_metadata(draw):
    arch = draw(st.sampled_from(["llama", "qwen2", "gemma3", "phi3", "somearch"]))
    meta = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in SOUND.items()}}
    for key in draw(st.lists(st.sampled_from(GGUF_KEYS), max_size=4, unique=True)):
        if draw(st.booleans()):
            meta[f"{arch}.{key}"] = draw(GGUF_VALUES)
        else:
            meta.pop(f"{arch}.{key}", None)
    return meta


@settings(max_examples=max(25, settings.default.max_examples))
@given(meta=gguf_metadata())
def test_gguf_metadata_is_described_or_refused(meta):
    """Random small metadata through the reader ``posenc rope`` and the loader use: a description or a ValueError."""
    from posenc.formats.gguf import config_from_metadata
    from posenc.formats.gguf_arch import ARCHS
    from posenc.pretrained.description import describe_config, generic_gguf_config

    path = Path("model.gguf")
    try:
        if meta["general.architecture"] in ARCHS:
            hf = config_from_metadata(meta, path)
        else:
            hf = generic_gguf_config(meta, path)
        d = describe_config(hf, source=str(path), format="gguf")
    except ValueError as err:  # refused: one line saying what is wrong (the CLI prints it as `posenc: error: …`)
        assert str(err).strip() and "\n" not in str(err), repr(err)
        return
    # described: a plan per block for an architecture posenc loads, and a positive trained context
    assert d.trained_context is None or d.trained_context >= 1
    if meta["general.architecture"] in ARCHS:
        assert d.family is not None and len(d.plan) == hf["num_hidden_layers"]


# -- chat templates ---------------------------------------------------------------------------------------------
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% if m.tool_calls %}"
            "{{ m.tool_calls | tojson }}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>"
            "{% endif %}")
JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                       max_leaves=8)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]),
                           "content": st.one_of(st.text(max_size=40), st.none(), JSONISH)},
                          optional={"tool_calls": JSONISH, "reasoning_content": st.text(max_size=10)}),
    JSONISH)


@pytest.mark.parametrize("template", [TEMPLATE, "{% for m in messages %}{{ m.content | upper }}{% endfor %}",
                                      "{{ raise_exception('no system messages') if messages[0].role == 'system' }}"
                                      "{% for m in messages %}{{ m['content'] }}{% endfor %}"])
@settings(max_examples=max(25, settings.default.max_examples))
@given(messages=st.one_of(st.lists(MESSAGE, max_size=5), JSONISH), generation=st.booleans())
def test_any_message_list_renders_or_raises_value_error(template, messages, generation):
    from posenc.pretrained.chat_template import render_chat

    try:
        text = render_chat(template, messages, add_generation_prompt=generation, special_tokens={"bos_token": "<s>"})
    except ValueError:
        return
    assert isinstance(text, str)
