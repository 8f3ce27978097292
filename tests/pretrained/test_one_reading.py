"""One reading of a model: ``posenc rope`` shows the plan the loader runs, checked against HF's *own* reading.

GGUF files are written like llama.cpp's converter (gguf_helpers.py beside this file) from tiny random HF models;
the reference is transformers' GGUF loader reading the same file, never posenc's reading of it.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0", reason="the HF comparison needs transformers 5")
pytest.importorskip("gguf")

from gguf_helpers import tiny_hf, tokenizer_fields, train_tokenizer, write_gguf  # noqa: E402

from posenc.cli import main  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402
from posenc.pretrained.description import ModelDescription, describe  # noqa: E402
from posenc.ropecheck.audit import audit, read_source  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


def _gguf(tmp_path, tok, arch: str, **overrides):
    hf = tiny_hf(arch, tok.get_vocab_size(), **overrides)
    return write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch), hf


def _plan_by_layer(report: dict) -> dict[int, tuple[str, dict, dict]]:
    out = {}
    for entry in report["layer_types"]:
        for i in entry["layer_indices"]:
            out[i] = (entry["scheme"], entry["options"], entry.get("window") or {"kind": "full"})
    return out


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma3"])
def test_rope_json_is_the_loaded_plan_and_hf_agrees(tmp_path, tok, capsys, arch):
    path, hf = _gguf(tmp_path, tok, arch)
    assert main(["rope", str(path), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["hf_checked"] and report["hf_reading"] == "transformers' GGUF loader"
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    pm = load_pretrained(path, pairing="half", weights="dequantised")
    loaded = {i: (s.position, dict(s.position_options), s.window.to_dict()) for i, s in enumerate(pm.config.plan)}
    assert _plan_by_layer(report) == loaded  # every layer: the scheme, options and window the model runs
    assert pm.description == describe(path)  # the loader kept the one reading
    types = getattr(hf.config, "layer_types", None)
    if arch == "gemma3":  # HF's own layer types name posenc's groups
        assert {e["layer_type"] for e in report["layer_types"]} == set(types)
        for e in report["layer_types"]:
            assert [types[i] for i in e["layer_indices"]] == [e["layer_type"]] * e["layers"]
            assert e["hf"]["hf_layer_types"] == [e["layer_type"]]


def test_a_misread_plan_is_caught_not_confirmed(tmp_path, tok, monkeypatch, capsys):
    """If posenc read Gemma 3's GGUF as every layer sliding at the local base, HF's own reading says otherwise."""
    path, _ = _gguf(tmp_path, tok, "gemma3")
    import posenc.formats.gguf_arch as arch

    monkeypatch.setattr(arch, "gemma3_plan", lambda n, pattern=6: [arch.GEMMA3_SLIDING] * n)
    report = audit(read_source(path))
    errors = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert any("sliding window differs from HF's reading on layers [5]" in m for m in errors), errors
    assert any("inv_freq differs from HF's own reading" in m and "[5]" in m for m in errors), errors
    monkeypatch.undo()
    assert not [f for f in audit(read_source(path))["findings"] if f["severity"] == "error"]


def test_the_description_round_trips_through_json_and_names_what_it_supplied(tmp_path, tok):
    path, _ = _gguf(tmp_path, tok, "gemma3")
    d = describe(path)
    again = ModelDescription.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again == d
    assert d.family == "gemma3" and d.format == "gguf" and d.trained_context == 256
    assert any("every 6th layer" in s for s in d.supplied)
    assert d.tokenizer.bos_id == 1 and d.tokenizer.eos_ids == (2,) and d.tokenizer.chat_template.startswith("{% for")
    assert d.weights["types"] == {"F32": len(gguf_tensor_names(path))}
    folder = tmp_path / "holder"
    folder.mkdir()
    path.rename(folder / path.name)
    assert describe(folder) == ModelDescription(**{**d.__dict__, "source": str(folder / path.name)})  # a folder opens its one .gguf


def gguf_tensor_names(path) -> list[str]:
    from posenc.formats.gguf import open_mapped

    return [t.name for t in open_mapped(path).tensors]


def test_a_bare_config_is_read_by_the_family_reader_as_the_loader_reads_it(tmp_path, capsys):
    """A value the loader refuses is refused by rope too: one reader, one message."""
    from transformers import Qwen3Config

    cfg = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                      intermediate_size=128, vocab_size=100, head_dim=16).to_dict()
    cfg["num_hidden_layers"] = 10**6
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["rope", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "num_hidden_layers = 1,000,000 is out of range" in err
    with pytest.raises(ValueError, match="num_hidden_layers = 1,000,000 is out of range"):
        load_pretrained(tmp_path)


def test_real_smollm2_plan_equals_the_loaded_model():
    from gguf_helpers import smollm2_path

    path = smollm2_path()
    report = audit(read_source(path))
    pm = load_pretrained(path, pairing="half")
    loaded = {i: (s.position, dict(s.position_options), s.window.to_dict()) for i, s in enumerate(pm.config.plan)}
    assert _plan_by_layer(report) == loaded and report["hf_checked"]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    theta = pm.model.layers[0].attn.position.inv_freq().double()  # the printed θ are the loaded model's own
    torch.testing.assert_close(torch.tensor(report["layer_types"][0]["inv_freq"], dtype=torch.float64), theta)
