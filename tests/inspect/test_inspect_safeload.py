"""Safe loading: safetensors only, pickle refused without being opened, malformed files named with a fix."""

from __future__ import annotations

import json
import os
import pickle
import struct

import pytest
import torch
from safetensors.torch import save_file

from posenc.inspect import Checkpoint, CheckpointError, load_checkpoint
from inspect_helpers import write


class _Marker:
    """Unpickling this creates a file — proof that something unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _pickle_bytes(marker) -> bytes:
    return pickle.dumps({"wte.weight": _Marker(str(marker))}, protocol=4)


@pytest.mark.parametrize("suffix", [".bin", ".pt", ".pth", ".ckpt", ".pkl"])
def test_pickle_suffixes_are_refused_unopened(tmp_path, suffix):
    marker = tmp_path / "unpickled"
    path = tmp_path / f"weights{suffix}"
    path.write_bytes(_pickle_bytes(marker))
    with pytest.raises(CheckpointError, match="never unpickles") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value)
    assert not marker.exists()


def test_pickle_bytes_under_a_safetensors_name_are_refused(tmp_path):
    marker = tmp_path / "unpickled"
    path = tmp_path / "model.safetensors"
    path.write_bytes(_pickle_bytes(marker))
    with pytest.raises(CheckpointError, match="pickle stream"):
        load_checkpoint(path)
    assert not marker.exists()


def test_torch_save_zip_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    torch.save({"w": torch.ones(2)}, path)  # the zip format
    with pytest.raises(CheckpointError, match="zip archive"):
        load_checkpoint(path)


def test_folder_with_only_pickled_weights_is_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(_pickle_bytes(tmp_path / "unpickled"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="pytorch_model.bin"):
        load_checkpoint(tmp_path)
    assert not (tmp_path / "unpickled").exists()


def test_folder_prefers_safetensors_over_pickle(tmp_path, gen):
    write(tmp_path, {"wte.weight": torch.randn(4, 2, generator=gen)}, {"vocab_size": 4})
    (tmp_path / "pytorch_model.bin").write_bytes(_pickle_bytes(tmp_path / "unpickled"))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.names() == ["wte.weight"] and ckpt.config == {"vocab_size": 4}


def test_a_valid_file_round_trips(tmp_path, gen):
    tensors = {"a": torch.randn(3, 5, generator=gen), "b": torch.randn(7, generator=gen).to(torch.bfloat16)}
    save_file(tensors, str(tmp_path / "x.safetensors"))
    ckpt = load_checkpoint(tmp_path / "x.safetensors")
    assert ckpt.shape("a") == (3, 5) and ckpt.entries["b"].dtype == "BF16"
    torch.testing.assert_close(ckpt.tensor("a"), tensors["a"], rtol=0, atol=0)
    torch.testing.assert_close(ckpt.tensor("b"), tensors["b"], rtol=0, atol=0)


def _valid_bytes(gen) -> bytes:
    import safetensors.torch

    return safetensors.torch.save({"wte.weight": torch.randn(10, 4, generator=gen)})


def test_truncated_file_is_named(tmp_path, gen):
    path = tmp_path / "model.safetensors"
    path.write_bytes(_valid_bytes(gen)[:-12])
    with pytest.raises(CheckpointError, match="truncated") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value) and "wte.weight" in str(err.value)


@pytest.mark.parametrize("content, match", [
    (b"\x01\x02", "only 2 bytes"),
    (struct.pack("<Q", 10**9) + b"{}", "does not fit"),
    (struct.pack("<Q", 4) + b"{no}", "not valid JSON"),
    (struct.pack("<Q", 2) + b"[]", "JSON object"),
])
def test_malformed_headers(tmp_path, content, match):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(path)


@pytest.mark.parametrize("entry, match", [
    ({"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}, "unknown dtype"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, "needs 12 bytes"),
    ({"dtype": "F32", "shape": [2]}, "must have dtype, shape and data_offsets"),
    ({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}, "malformed shape"),
])
def test_malformed_entries(tmp_path, entry, match):
    header = json.dumps({"w": entry}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(CheckpointError, match=match) as err:
        load_checkpoint(path)
    assert "'w'" in str(err.value)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no .safetensors file"):
        load_checkpoint(tmp_path)


def test_missing_tensor_names_close_matches(tmp_path, gen):
    write(tmp_path, {"transformer.wte.weight": torch.randn(4, 2, generator=gen)})
    ckpt = load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="transformer.wte.weight"):
        ckpt.tensor("transformer.wte.weights")


def test_sharded_index(tmp_path, gen):
    a, b = torch.randn(4, 3, generator=gen), torch.randn(5, 3, generator=gen)
    save_file({"wte.weight": a}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"wpe.weight": b}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"metadata": {}, "weight_map": {"wte.weight": "model-00001-of-00002.safetensors",
                                            "wpe.weight": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = load_checkpoint(tmp_path)
    assert sorted(ckpt.names()) == ["wpe.weight", "wte.weight"]
    torch.testing.assert_close(ckpt.tensor("wpe.weight"), b, rtol=0, atol=0)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path)


def test_index_naming_a_tensor_its_shard_lacks(tmp_path, gen):
    save_file({"wte.weight": torch.randn(2, 2, generator=gen)}, str(tmp_path / "s1.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wpe.weight": "s1.safetensors"}}))
    with pytest.raises(CheckpointError, match="does not hold it"):
        load_checkpoint(tmp_path)


def test_vocab_from_tokenizer_json(tmp_path, gen):
    write(tmp_path, {"wte.weight": torch.randn(4, 2, generator=gen)})
    tok = {"model": {"type": "BPE", "vocab": {"a": 0, "Ġb": 2, "c": 1}},
           "added_tokens": [{"id": 3, "content": "<eos>"}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.vocab == ["a", "c", "Ġb", "<eos>"] and ckpt.vocab_source.endswith("tokenizer.json")


def test_from_tensors_checks_types():
    with pytest.raises(TypeError, match="'w'"):
        Checkpoint.from_tensors({"w": [1, 2]})
