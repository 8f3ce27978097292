"""Every command that runs a pretrained model as a causal LM refuses an encoder (BERT, MiniLM) in one line,
before any weight is read, through one check (``posenc.pretrained.require_causal_lm``); decoders pass it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import posenc.pretrained
from installed import MINILM, folder, missing
from posenc.cli import main
from posenc.pretrained import require_causal_lm

REFUSAL = "is a BERT encoder (bidirectional, no LM head); {command} needs a causal LM"


@pytest.fixture
def tiny_bert(tmp_path: Path) -> Path:
    """A BERT folder saved by HF itself (config.json + model.safetensors)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=40,
                                     vocab_size=50, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(tmp_path / "bert")
    return tmp_path / "bert"


@pytest.fixture
def no_load(monkeypatch):
    """Any weight loading fails the test: the refusal must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("load_pretrained ran before the causal-LM check")

    monkeypatch.setattr(posenc.pretrained, "load_pretrained", refuse)


def _commands(model: Path, tmp_path: Path) -> dict[str, list[str]]:
    text = tmp_path / "text.txt"
    text.write_text("a few words to score\n")
    return {"generate": ["generate", str(model), "--prompt", "Hello"],
            "perplexity": ["perplexity", str(model), str(text)],
            "extend": ["extend", str(model), "--out", str(tmp_path / "extend")],
            "finetune run": ["finetune", "run", str(model), "--method", "rope", "--length", "32", "--steps", "1",
                             "--out", str(tmp_path / "ft")],
            "finetune search": ["finetune", "search", str(model), "--factor", "2", "--out", str(tmp_path / "fs")]}


@pytest.mark.parametrize("command", ["generate", "perplexity", "extend", "finetune run", "finetune search"])
def test_every_causal_lm_command_refuses_an_encoder(tiny_bert, tmp_path, capsys, no_load, command):
    assert main(_commands(tiny_bert, tmp_path)[command]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"posenc: error: {tiny_bert} ")
    assert REFUSAL.format(command=command.split()[0]) in err and f"use `posenc inspect {tiny_bert}`" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "extend").exists() and not (tmp_path / "ft").exists()  # nothing written


@pytest.mark.skipif(folder(MINILM) is None, reason=missing(MINILM))
@pytest.mark.parametrize("command", ["generate", "perplexity"])
def test_real_minilm_is_refused(tmp_path, capsys, command):
    assert main(_commands(folder(MINILM), tmp_path)[command]) == 2
    assert REFUSAL.format(command=command) in capsys.readouterr().err


def test_decoders_and_what_the_loader_reports_pass_the_check(tmp_path):
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    assert require_causal_lm(llama, command="generate") is None  # a decoder family
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert require_causal_lm(tmp_path / "model.gguf", command="generate") is None  # GGUF: the loader reads it
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert require_causal_lm(broken, command="generate") is None  # the loader names the bad file
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-family"}))
    assert require_causal_lm(broken, command="generate") is None  # the loader lists the families it knows
    assert require_causal_lm(tmp_path / "missing", command="generate") is None
