"""HFConfig: every getter hands out the declared type within bounds, or refuses naming file, field and value."""

from __future__ import annotations

import math

import pytest

from posenc.families.hf_config import MAX_LAYERS, HFConfig

SOURCE = "models/x/config.json"


def cfg(**fields) -> HFConfig:
    return HFConfig(fields, source=SOURCE)


def test_a_non_object_config_is_refused_by_file() -> None:
    for data in ([1, 2], "x", 3, None):
        with pytest.raises(ValueError, match=rf"{SOURCE}: must hold a JSON object"):
            HFConfig(data, source=SOURCE)


def test_missing_and_null_fields_take_the_default_or_are_named() -> None:
    c = cfg(head_dim=None)
    assert c.int("head_dim", 64) == 64 and "head_dim" not in c
    with pytest.raises(ValueError, match=rf"{SOURCE}: missing field 'hidden_size'"):
        c.int("hidden_size")


@pytest.mark.parametrize("value", [2048, 2048.0])
def test_integers_written_as_whole_floats_are_integers(value) -> None:
    assert cfg(n=value).int("n") == 2048


@pytest.mark.parametrize("value", [2048.5, "2048", True, math.nan, math.inf, [2048], {"n": 1}])
def test_non_integers_are_refused_with_the_value(value) -> None:
    with pytest.raises(ValueError, match=rf"{SOURCE}: n must be an integer, got"):
        cfg(n=value).int("n")


@pytest.mark.parametrize("value", [0, -1, 10**9, 1e300])
def test_integers_out_of_range_are_refused_with_the_range(value) -> None:
    with pytest.raises(ValueError, match=rf"num_hidden_layers = .* is out of range: it must be >= 1 and <= "
                                         rf"{MAX_LAYERS:,}"):
        cfg(num_hidden_layers=value).int("num_hidden_layers", maximum=MAX_LAYERS)


@pytest.mark.parametrize("value", ["abc", math.nan, -math.inf, True, None])
def test_floats_must_be_finite_numbers(value) -> None:
    c = cfg(rope_theta=value)
    if value is None:
        assert c.float("rope_theta", 10000.0) == 10000.0
        return
    with pytest.raises(ValueError, match=rf"{SOURCE}: rope_theta must be a finite number, got"):
        c.float("rope_theta")


def test_float_bounds_are_named() -> None:
    assert cfg(rms_norm_eps=1e-6).float("rms_norm_eps", above=0) == 1e-6
    for bad in (0, -1e-5):
        with pytest.raises(ValueError, match=r"rms_norm_eps = .* must be > 0"):
            cfg(rms_norm_eps=bad).float("rms_norm_eps", above=0)
    with pytest.raises(ValueError, match=r"factor = 0.5 must be >= 1"):
        cfg(factor=0.5).float("factor", minimum=1)


@pytest.mark.parametrize("value", ["false", "true", 0, 1, None])
def test_booleans_must_be_json_booleans(value) -> None:
    c = cfg(tie_word_embeddings=value)
    if value is None:
        assert c.bool("tie_word_embeddings", False) is False
        return
    with pytest.raises(ValueError, match=r"tie_word_embeddings must be true or false"):
        c.bool("tie_word_embeddings")
    assert cfg(tie_word_embeddings=False).bool("tie_word_embeddings") is False


def test_strings_lists_and_objects() -> None:
    c = cfg(model_type="llama", layer_types=["full", "full"], rope_scaling={"factor": 2.0})
    assert c.str("model_type", choices=("llama", "qwen2")) == "llama"
    with pytest.raises(ValueError, match=r"model_type = 'gpt2' is not supported; supported: llama, qwen2"):
        cfg(model_type="gpt2").str("model_type", choices=("llama", "qwen2"))
    with pytest.raises(ValueError, match=r"model_type must be a string, got 3"):
        cfg(model_type=3).str("model_type")
    assert c.list("layer_types", length=2) == ["full", "full"]
    with pytest.raises(ValueError, match=r"layer_types has 2 entries, expected 3"):
        c.list("layer_types", length=3)
    with pytest.raises(ValueError, match=r"rope_scaling must be an object, got \[1\]"):
        cfg(rope_scaling=[1]).dict("rope_scaling")
    nested = c.sub("rope_scaling", c.dict("rope_scaling"))
    assert nested.float("factor", above=0) == 2.0
    with pytest.raises(ValueError, match=rf"{SOURCE} \(rope_scaling\): factor = 0.0 must be > 0"):
        c.sub("rope_scaling", {"factor": 0.0}).float("factor", above=0)


@pytest.mark.parametrize("value, want", [(2, [2]), ([1, 2], [1, 2])])
def test_token_ids_are_one_id_or_a_list(value, want) -> None:
    assert cfg(eos_token_id=value).ids("eos_token_id", below=10) == want


@pytest.mark.parametrize("value", [10, -1, "2", [1, "x"], True, [True]])
def test_token_ids_outside_the_vocabulary_are_refused(value) -> None:
    with pytest.raises(ValueError, match=r"eos_token_id must be a token id or a list of token ids from 0 to 9"):
        cfg(eos_token_id=value).ids("eos_token_id", below=10)
