"""``posenc inspect FILE.gguf``: the same analysis as a safetensors checkpoint, from the GGUF's metadata and tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gguf_helpers import tiny_llama, tokenizer_fields, train_tokenizer, write_gguf
from posenc.cli import main
from posenc.inspect import inspect_checkpoint, load_checkpoint


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


@pytest.mark.parametrize("tie", [False, True])
def test_gguf_goes_through_the_same_analysis(tmp_path: Path, tok, tie: bool, seed: int) -> None:
    hf = tiny_llama(tok.get_vocab_size(), tie=tie, rope_theta=50000.0)
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok), qtype="Q8_0")
    ckpt = load_checkpoint(path)
    assert ckpt.vocab == tokenizer_fields(tok)["tokens"]
    assert ckpt.entries["model.layers.0.self_attn.q_proj.weight"].dtype == "Q8_0"
    # the token table is dequantised on demand: Q8_0 of HF's table
    emb = hf.model.embed_tokens.weight.detach()
    table = ckpt.tensor("model.embed_tokens.weight")
    assert table.shape == emb.shape and 0 < (table - emb).abs().max() < emb.abs().max() / 100
    result = inspect_checkpoint(ckpt, sample=50, max_positions=64)
    assert result["position"]["kind"] == "rotary"
    assert result["position"]["settings"]["base"] == 50000.0 and result["position"]["settings"]["head_dim"] == 16
    assert result["located"]["token"] == "model.embed_tokens.weight"
    assert result["tying"]["status"] == ("tied" if tie else "untied")
    assert result["tokens"]["shape"] == list(emb.shape)


def test_cli_report_and_list(tmp_path: Path, tok, capsys) -> None:
    path = write_gguf(tmp_path / "m.gguf", tiny_llama(tok.get_vocab_size()), tokenizer_fields(tok), qtype="Q8_0")
    assert main(["inspect", str(path), "--json", "-", "--sample", "20", "--max-positions", "32"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["position"]["kind"] == "rotary" and data["config"]["model_type"] == "llama"
    assert main(["inspect", str(path), "--list-tensors"]) == 0
    out = capsys.readouterr().out
    assert "model.layers.1.mlp.down_proj.weight" in out and "Q8_0" in out and "F32" in out


def test_cli_bad_gguf_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 8)
    assert main(["inspect", str(bad)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken.gguf" in err and "Download it again" in err
