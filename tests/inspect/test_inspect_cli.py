"""``posenc inspect`` end to end: synthetic checkpoints, refusals, and the real all-MiniLM-L6-v2."""

from __future__ import annotations

import json
import math

import pytest
import torch

from inspect_helpers import gpt2_like, write
from installed import MINILM, folder, missing
from posenc.cli import main
from posenc.inspect import inspect_checkpoint


def test_gpt2_like_report(tmp_path, gen, capsys):
    gpt2_like(tmp_path / "ckpt", gen, vocab=30, length=40, dim=8)
    out = tmp_path / "report"
    assert main(["inspect", str(tmp_path / "ckpt"), "--out", str(out), "--sample", "30"]) == 0
    text = capsys.readouterr().out
    assert "transformer.wpe.weight" in text and "tied" in text
    for name in ("index.html", "inspect.json", "norms.png", "profile.png", "gram.png", "shift.png", "pca.png",
                 "token_norms.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "inspect.json").read_text())
    table = data["position"]["analysis"]
    assert table["shape"] == [40, 8] and table["norms"]["norm"] == pytest.approx(2.0, abs=1e-6)  # √(8/2)
    assert max(table["shift"]["relative_residual"]) < 1e-5  # the float32-stored sinusoid
    assert "pca.png" in (out / "index.html").read_text()


def test_json_and_list_tensors(tmp_path, gen, capsys):
    gpt2_like(tmp_path, gen, vocab=20, length=16, dim=8, head="own")
    assert main(["inspect", str(tmp_path), "--json", "-", "--sample", "20"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tying"]["status"] == "untied" and data["located"]["head"] == "lm_head.weight"
    assert main(["inspect", str(tmp_path), "--list-tensors"]) == 0
    assert "transformer.h.0.attn.c_attn.weight" in capsys.readouterr().out


def test_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04junk")
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc: error:") and "never unpickles" in err
    assert main(["inspect", str(tmp_path / "missing")]) == 2


def test_llama_like_rotary_report(tmp_path, gen):
    write(tmp_path / "ckpt", {"model.embed_tokens.weight": torch.randn(40, 64, generator=gen),
                              "lm_head.weight": torch.randn(40, 64, generator=gen)},
          {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
           "num_attention_heads": 4, "rope_theta": 500000.0, "max_position_embeddings": 64, "vocab_size": 40,
           "tie_word_embeddings": False})
    result = inspect_checkpoint(tmp_path / "ckpt", sample=40)
    pos = result["position"]
    assert pos["kind"] == "rotary" and pos["translation_invariant"] and pos["length"] == 64
    theta = [500000.0 ** (-2 * i / 16) for i in range(8)]
    for delta in (0, 1, 5, 63):
        assert pos["similarity_profile"][delta] == pytest.approx(sum(2 * math.cos(delta * t) for t in theta), abs=1e-9)
    assert max(pos["analysis"]["shift"]["relative_residual"]) < 1e-10
    assert result["tying"]["status"] == "untied"
    from posenc.inspect.report import write_report

    page = write_report(result, tmp_path / "report")
    assert (tmp_path / "report" / "rotary.png").exists() and "Rotary positions" in page.read_text()


@pytest.mark.slow
@pytest.mark.skipif(folder(MINILM) is None, reason=missing(MINILM))
def test_real_minilm_end_to_end(tmp_path, capsys):
    from safetensors.numpy import load_file

    path = folder(MINILM)
    assert main(["inspect", str(path), "--out", str(tmp_path), "--sample", "200", "--tokens", "king,paris"]) == 0
    data = json.loads((tmp_path / "inspect.json").read_text())
    assert data["located"]["position"] == "embeddings.position_embeddings.weight"
    assert data["located"]["token"] == "embeddings.word_embeddings.weight"
    assert data["tying"]["status"] == "no-head"  # BertModel: an encoder without an LM head
    table = data["position"]["analysis"]
    assert table["shape"] == [512, 384] and data["tokens"]["shape"] == [30522, 384]
    # norms against an independent read of the same file (safetensors' numpy loader)
    raw = load_file(str(path / "model.safetensors"))["embeddings.position_embeddings.weight"]
    norms = (raw.astype("float64") ** 2).sum(1) ** 0.5
    assert table["norms"]["norm_max"] == pytest.approx(float(norms.max()), rel=1e-12)
    # a learned table: between the sinusoid (exactly linear shifts) and noise
    for mine, sin, rnd in zip(table["shift_centred"]["relative_residual"],
                              table["baselines"]["sinusoid"]["shift"]["relative_residual"],
                              table["baselines"]["random"]["shift"]["relative_residual"]):
        assert sin < 1e-10 < mine < rnd
    assert not table["profile"]["translation_invariant"]
    king = data["tokens"]["neighbours"][0]
    assert king["token"] == "king" and "queen" in [n["token"] for n in king["cosine"]]  # vocab.txt lines up
    assert (tmp_path / "index.html").exists() and (tmp_path / "pca.png").exists()


def test_t5_like_bf16_relative_bias(tmp_path, gen):
    bias = torch.randn(32, 4, generator=gen)
    write(tmp_path / "ckpt", {"shared.weight": torch.randn(30, 8, generator=gen).to(torch.bfloat16),
                              "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": bias},
          {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": 30})
    result = inspect_checkpoint(tmp_path / "ckpt", sample=30)
    assert result["position"]["kind"] == "relative-bias" and result["tying"]["status"] == "tied"
    torch.testing.assert_close(torch.tensor(result["relative"][0]["bias_by_bucket"], dtype=torch.float64),
                               bias.T.double(), rtol=0, atol=0)
    assert result["tokens"]["shape"] == [30, 8]
    from posenc.inspect.report import write_report

    write_report(result, tmp_path / "report")
    figure = "relative_encoder_block_0_layer_0_SelfAttention_relative_attention_bias_weight.png"
    assert (tmp_path / "report" / figure).exists()


def test_rows_option(tmp_path, gen, capsys):
    gpt2_like(tmp_path, gen, vocab=20, length=32, dim=8)
    assert main(["inspect", str(tmp_path), "--rows", "4:20", "--json", "-", "--sample", "5"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["position"]["rows"] == [4, 20] and data["position"]["analysis"]["shape"] == [16, 8]
    assert main(["inspect", str(tmp_path), "--rows", "a:b"]) == 2
    assert "START:STOP" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path), "--rows", "30:40"]) == 2


def test_out_dash_writes_no_files(tmp_path, gen, monkeypatch, capsys):
    """`--out -` means "no files" here as in every command (it once made a folder named '-')."""
    ckpt = tmp_path / "ckpt"
    gpt2_like(ckpt, gen, vocab=20, length=16, dim=8)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["inspect", str(ckpt), "--out", "-", "--json", "-", "--sample", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["located"]["position"] == "transformer.wpe.weight"
    assert list(work.iterdir()) == []


def test_an_encoder_decoder_has_both_tables_measured(tmp_path, gen):
    """BART keeps one learned table per stack, each with fairseq's 2 offset rows: the decoder's is the position
    table, the encoder's is measured alike (``more_positions``), offset included."""
    from inspect_helpers import naive_sinusoid

    write(tmp_path / "bart", {"model.shared.weight": torch.randn(30, 8, generator=gen),
                              "model.decoder.embed_positions.weight": torch.randn(34, 8, generator=gen),
                              "model.encoder.embed_positions.weight": torch.cat(
                                  (torch.zeros(2, 8), naive_sinusoid(32, 8).float()))},
          {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "vocab_size": 30,
           "max_position_embeddings": 32})
    result = inspect_checkpoint(tmp_path / "bart", sample=30)
    assert result["position"]["tensor"] == "model.decoder.embed_positions.weight"
    assert result["position"]["kind"] == "learned" and result["position"]["offset"] == 2
    (enc,) = result["more_positions"]
    assert enc["tensor"] == "model.encoder.embed_positions.weight" and enc["offset"] == 2
    assert enc["kind"] == "sinusoidal" and enc["analysis"]["shape"] == [32, 8]  # the padding rows left out
