"""Issue 25, model files and settings: each hostile case is refused by name, or loads correctly.

Memory bombs run in a capped child process (``model_files.capped``): before the fix they end in a
MemoryError or a timeout there, so the test fails without taking the machine. Config fields
are read by the family readers through ``posenc.families.hf_config.HFConfig``: typed and bounded, named
with the file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from model_files import hf_folder, load_outcome

from posenc.pretrained import load_pretrained

def assert_refused(path: Path, *fragments: str, kind: type = ValueError) -> str:
    with pytest.raises(kind) as err:
        load_pretrained(path)
    message = str(err.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# -- 1. memory bombs -----------------------------------------------------------------------------------------
def test_num_hidden_layers_of_1e9_is_refused_before_any_module_is_built(tmp_path: Path) -> None:
    outcome = load_outcome(hf_folder(tmp_path / "m", config={"num_hidden_layers": 10**9}))
    assert outcome.startswith("ValueError: ") and "num_hidden_layers" in outcome and "config.json" in outcome, outcome
    assert "1,000,000,000" in outcome and "4,096" in outcome, outcome  # the value and the bound


def test_a_model_beyond_the_memory_budget_is_refused_with_the_figure(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(64 << 20))
    path = hf_folder(tmp_path / "m", config={"hidden_size": 4096, "intermediate_size": 11008,
                                             "num_hidden_layers": 32, "num_attention_heads": 32,
                                             "num_key_value_heads": 32, "vocab_size": 32000})
    assert_refused(path, "parameters", "memory budget", "POSENC_MEMORY_BUDGET")


def _readers():
    from posenc.extend.export import read_source as export_source
    from posenc.formats import load_checkpoint
    from posenc.ropecheck.audit import read_source as rope_source

    return {"load_pretrained": load_pretrained, "posenc rope": rope_source, "posenc inspect": load_checkpoint,
            "posenc export": export_source}


@pytest.mark.parametrize("name, reader", [
    *(("config.json", r) for r in ("load_pretrained", "posenc rope", "posenc inspect", "posenc export")),
    *(("tokenizer_config.json", r) for r in ("load_pretrained", "posenc export")),
])
def test_a_200_mb_settings_file_is_refused_without_being_read(tmp_path: Path, name: str, reader: str) -> None:
    """Every reader of a model folder's settings files goes through the bounded reader
    (``posenc.formats.safetensors.read_json``): refused at once, with the file, its size and the bound."""
    import time
    import tracemalloc

    path = hf_folder(tmp_path / "m", tokenizer_config={"bos_token": "a"})
    _readers()[reader](path)  # once whole: what it imports is not counted below
    with (path / name).open("r+b") as f:
        f.truncate(200_000_000)  # sparse: 200 MB as the file system states it, no disk used
    tracemalloc.start()
    began = time.perf_counter()
    try:
        with pytest.raises(ValueError) as err:
            _readers()[reader](path)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    message = str(err.value)
    assert str(path / name) in message and "200,000,000 bytes" in message and "67,108,864" in message, message
    assert peak < 32 << 20 and time.perf_counter() - began < 30, (peak, time.perf_counter() - began)


def test_the_bounded_reader_reads_no_more_than_its_bound(tmp_path: Path) -> None:
    """A file whose stated size is 0 (as in /proc) is still read only up to the bound; NaN and a repeated key read
    as Python's json reads them (the field readers bound the value: a NaN rope_theta is refused by name)."""
    from posenc.formats.safetensors import read_json

    proc = Path("/proc/self/mountinfo")
    if proc.is_file() and proc.stat().st_size == 0:
        with pytest.raises(ValueError, match=r"mountinfo: more than the 16 bytes read for a mountinfo"):
            read_json(proc, limit=16)
    path = tmp_path / "config.json"
    path.write_text('{"a": NaN, "a": 2, "b": NaN}')
    data = read_json(path, limit=64)
    assert data["a"] == 2 and math.isnan(data["b"])
    with pytest.raises(ValueError, match=r"config.json: 28 bytes is more than the 27 read for a config.json"):
        read_json(path, limit=27)
    assert_refused(hf_folder(tmp_path / "m", config={"rope_theta": math.nan}), "config.json", "rope_theta")


# -- 3. config values that silently change the model ------------------------------------------------------------
def _nan_in(name: str):
    def edit(tensors: dict[str, torch.Tensor]) -> None:
        tensors[name][0, 3] = math.nan
    return edit


def test_a_nan_weight_is_refused_by_tensor_name(tmp_path: Path) -> None:
    path = hf_folder(tmp_path / "m", edit=_nan_in("model.layers.1.mlp.up_proj.weight"))
    assert_refused(path, "model.layers.1.mlp.up_proj.weight", "1 non-finite", str(tmp_path / "m"))


def test_a_weight_that_overflows_float16_is_refused_when_loaded_as_float16(tmp_path: Path) -> None:
    def edit(tensors):
        tensors["model.layers.0.mlp.down_proj.weight"][0, 0] = 1e6
    path = hf_folder(tmp_path / "m", edit=edit)
    with pytest.raises(ValueError, match=r"down_proj\.weight.*float16.*bfloat16"):
        load_pretrained(path, dtype="float16")
    load_pretrained(path, dtype="bfloat16")  # in range there


@pytest.mark.parametrize("eps", [math.nan, -1e-5, 0.0])
def test_a_nan_zero_or_negative_rms_norm_eps_is_refused(tmp_path: Path, eps: float) -> None:
    path = hf_folder(tmp_path / "m", raw_config=json.dumps({**json.loads((hf_folder(tmp_path / "b")
                                                                          / "config.json").read_text()),
                                                            "rms_norm_eps": eps}).encode())
    assert_refused(path, "norm_eps", repr(eps))


def test_tie_word_embeddings_as_the_string_false_is_refused(tmp_path: Path) -> None:
    assert_refused(hf_folder(tmp_path / "m", config={"tie_word_embeddings": "false"}), "config.json",
            "tie_word_embeddings", "'false'")


def test_a_yarn_factor_of_0_is_refused_not_run_as_plain_rope(tmp_path: Path) -> None:
    path = hf_folder(tmp_path / "m", config={"rope_scaling": {"rope_type": "yarn", "factor": 0,
                                                              "original_max_position_embeddings": 32}})
    assert_refused(path, "factor", "0")


@pytest.mark.parametrize("field, value", [("rope_theta", "abc"), ("num_attention_heads", 0),
                                          ("hidden_size", 32.5), ("num_hidden_layers", "2")])
def test_hostile_config_fields_are_named_with_the_file(tmp_path: Path, field: str, value) -> None:
    assert_refused(hf_folder(tmp_path / "m", config={field: value}), "config.json", field)


# -- 8. files of the wrong shape ----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, fragment", [(b"[1, 2]", "must hold a JSON object"),
                                           (b'{"model_type": "llama\xff"}', "not UTF-8"),
                                           (b"{", "not valid JSON")])
def test_config_json_of_the_wrong_shape_or_encoding_is_named(tmp_path: Path, raw: bytes, fragment: str) -> None:
    assert_refused(hf_folder(tmp_path / "m", raw_config=raw), "config.json", fragment)


@pytest.mark.parametrize("content, fragment", [([1, 2], "must hold a JSON object"), ("{", "not valid JSON"),
                                               ({"chat_template": 7}, "chat_template must be a string"),
                                               ({"chat_template": ["x"]}, "chat_template must be a string")])
def test_tokenizer_config_of_the_wrong_shape_is_named(tmp_path: Path, content, fragment: str) -> None:
    assert_refused(hf_folder(tmp_path / "m", tokenizer_config=content), "tokenizer_config.json", fragment)


@pytest.mark.parametrize("ids", ["1", [1, "x"], 10**9, -1, True])
def test_special_token_ids_outside_the_vocabulary_are_named(tmp_path: Path, ids) -> None:
    assert_refused(hf_folder(tmp_path / "m", config={"eos_token_id": ids}), "eos_token_id")


@pytest.mark.parametrize("key", ["bos_token", "eos_token"])
@pytest.mark.parametrize("value", [-1, 10**9, True])
def test_special_token_ids_in_tokenizer_config_outside_the_vocabulary_are_named(tmp_path: Path, key: str,
                                                                              value) -> None:
    assert_refused(hf_folder(tmp_path / "m", tokenizer_config={key: value}), key, repr(value))


# -- 7. special files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_a_fifo_in_a_model_folder_is_refused_not_read_or_called_missing(tmp_path: Path, name: str) -> None:
    path = hf_folder(tmp_path / "m")
    (path / name).unlink()
    os.mkfifo(path / name)
    message = assert_refused(path, name, "FIFO")
    assert "missing" not in message
