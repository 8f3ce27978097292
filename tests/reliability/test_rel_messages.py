"""Issue 63 (part B, items 11–14): no unexpected exception, and every refusal names the right flag or thing.

An ``OverflowError`` / ``RuntimeError`` / ``AttributeError`` / ``RecursionError`` is a bug: each input
below must give one line naming the option or file. A FIFO, directory or device is said to be one
(not "no such file", not "pickle-based"); ``--train-text`` errors name ``--train-text``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import assert_refused, posenc
from model_files import hf_folder

from posenc.formats import CheckpointError, load_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return hf_folder(tmp_path_factory.mktemp("m") / "hf")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("t") / "train.txt"
    path.write_text("the quick brown fox jumps over the lazy dog " * 200)
    return path


def _not_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """A FIFO, a directory and a device, each with the word a refusal must use for it."""
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.txt"
    folder.mkdir()
    return {"fifo": (fifo, "FIFO"), "directory": (folder, "directory"), "device": (Path("/dev/zero"), "device")}


# -- 12: --train-text is named, and what the path is -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_train_text_that_is_no_file_is_named_for_what_it_is(tmp_path, kind):
    from posenc.finetune.data import training_document

    path, word = _not_files(tmp_path)[kind]
    with pytest.raises(ValueError) as err:
        training_document(str(path))  # before: "--text '…': not 'bible', 'licenses' or an existing file"
    message = str(err.value)
    assert message.startswith("--train-text") and word in message and "existing file" not in message


def test_missing_train_text_names_train_text_and_its_choices(tmp_path):
    from posenc.finetune.data import training_document

    with pytest.raises(FileNotFoundError, match=r"^--train-text '.*nothing\.txt': not 'bible-rest', 'bible', "
                                                r"'licenses' or an existing file"):
        training_document(str(tmp_path / "nothing.txt"))


def test_text_of_the_measures_still_names_text(tmp_path):
    from posenc.extend.texts import load_document

    fifo, _ = _not_files(tmp_path)["fifo"]
    with pytest.raises(ValueError, match=r"^--text '.*' is a FIFO"):
        load_document(str(fifo))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    with pytest.raises(ValueError, match=r"^--text '.*': not UTF-8 text \(byte 3\)"):
        load_document(str(bad))


def test_finetune_cli_names_train_text(model, tmp_path):
    fifo, _ = _not_files(tmp_path)["fifo"]
    result = posenc("finetune", "run", model, "--method", "rope-yarn", "--factor", "2", "--length", "32",
                    "--steps", "1", "--eval-length", "0", "--train-text", fifo)
    assert_refused(result, "--train-text", "FIFO")


# -- 14: a negative n̂ is refused by name ---------------------------------------------------------------------------
@pytest.mark.parametrize("starts", [(-1,), (0, -4, 8)])
def test_negative_start_tokens_are_refused_by_name(starts):
    from posenc.finetune.longrope import SearchConfig

    with pytest.raises(ValueError, match=r"^--start-tokens -\d+: n̂ .* must be an integer >= 0") as err:
        SearchConfig(factor=2.0, original_max_len=24, start_tokens=starts)
    assert "below the length" not in str(err.value)
    assert SearchConfig(factor=2.0, original_max_len=24, start_tokens=(0, 4, 100)).start_tokens == (0, 4)


# -- 11: unexpected exceptions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("lr", [1e300, 11.0, 0.0, -1e-5, float("nan")])
def test_finetune_lr_out_of_range_is_refused_before_training(lr):
    """--lr 1e300 reached torch's Adam update: RuntimeError "value cannot be converted to type float"."""
    from posenc.finetune.run import FinetuneConfig

    with pytest.raises(ValueError, match="--lr"):
        FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=64, length=128, steps=1, lr=lr)
    FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=64, length=128, steps=1, lr=1e-3)


def test_train_lr_out_of_range_is_refused():
    from posenc.train import TrainConfig

    with pytest.raises(ValueError, match="lr"):
        TrainConfig(steps=1, lr=1e300)


def test_finetune_cli_lr_1e300_is_one_line(model, text, tmp_path):
    result = posenc("finetune", "run", model, "--method", "rope-yarn", "--factor", "2", "--length", "32",
                    "--steps", "1", "--eval-length", "0", "--lr", "1e300", "--train-text", text)
    assert_refused(result, "--lr")


def test_finetune_from_a_folder_without_a_tokenizer_names_it(model, tmp_path):
    """Before: AttributeError 'NoneType' object has no attribute 'encode'."""
    import shutil

    from posenc.finetune.model import load_start

    folder = Path(shutil.copytree(model, tmp_path / "no-tokenizer"))
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="no tokenizer found.*tokenizer.json"):
        load_start(folder)


def _deep(n: int = 100_000) -> str:
    return '{"model_type": "llama", "x": ' + "[" * n + "]" * n + "}"


def test_a_100000_deep_config_is_refused_by_rope_and_inspect(model, tmp_path):
    """A RecursionError in Python's json is a refusal naming the file, on every command that reads config.json."""
    import shutil

    folder = Path(shutil.copytree(model, tmp_path / "deep"))
    (folder / "config.json").write_text(_deep())
    for argv in (("rope", folder, "--no-hf"), ("rope", folder / "config.json", "--no-hf"), ("inspect", folder)):
        result = posenc(*argv)
        assert result.code in (1, 2) and "Traceback" not in result.err and "Recursion" not in result.err, argv
        assert "config.json" in result.err and "nests too deeply" in result.err, (argv, result.err)


def test_config_max_position_embeddings_1e20_is_refused_not_an_overflow(model, tmp_path):
    """A model type posenc does not run (the generic RoPE path) with max_position_embeddings 1e20."""
    cfg = json.loads((model / "config.json").read_text()) | {"model_type": "newthing", "max_position_embeddings": 1e20}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert_refused(posenc("rope", path, "--no-hf"), "max_position_embeddings")


# -- 12: a CTranslate2 model.bin that is no file is not "pickle-based" ------------------------------------------------
def _model_bin(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    target = folder / "model.bin"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target.symlink_to("/dev/zero")
    else:
        target.write_bytes(b"abc")
    return folder


@pytest.mark.parametrize("kind, word", [("directory", "a directory"), ("fifo", "a FIFO"), ("device", "a device"),
                                        ("short", "only 3 bytes")])
def test_a_model_bin_that_is_no_weights_file_is_named_not_called_pickle(tmp_path, kind, word):
    folder = _model_bin(tmp_path, kind)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(folder)
    message = str(err.value)
    assert f"model.bin is {word}" in message and "pickle-based" not in message and "pickle stream" not in message
    result = posenc("inspect", folder)
    assert result.code in (1, 2) and word in result.err and "pickle-based" not in result.err


def test_a_3_byte_model_bin_named_directly_is_not_called_pickle(tmp_path):
    from posenc.formats.safetensors import refuse_pickle

    path = _model_bin(tmp_path, "short") / "model.bin"
    with pytest.raises(CheckpointError, match="only 3 bytes"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="only 3 bytes"):
        refuse_pickle(path)
    real = tmp_path / "weights.bin"
    real.write_bytes(b"\x80\x04" + b"\0" * 30)
    with pytest.raises(CheckpointError, match="refusing a .bin file"):  # a real pickle is still refused as one
        refuse_pickle(real)
