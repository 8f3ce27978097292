"""``posenc inspect`` on a CTranslate2 model folder: both of Whisper's position tables — the encoder's sinusoid
recognised by fit (layout, base, residual), the decoder's learned table measured — on a folder written here by
the format's rules and on the real Whisper tiny.en; corrupt and hostile folders refused in one line."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "formats"))
from ct2_bytes import string, write_ct2  # noqa: E402
from installed import WHISPER, missing  # noqa: E402
from installed import folder as installed  # noqa: E402
from posenc.cli import main  # noqa: E402
from posenc.formats import CheckpointError, load_checkpoint  # noqa: E402
from posenc.inspect import inspect_checkpoint  # noqa: E402
from posenc.positions.absolute import sinusoid_table  # noqa: E402

VOCAB, WIDTH, SOURCE, TARGET = 30, 16, 60, 24


def whisper_like(folder: Path, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A CTranslate2 Whisper-style folder: Whisper's encoder sinusoid in float16, a learned decoder table, a tied
    projection (an alias), decoding settings in config.json and a vocabulary.txt, as faster-whisper ships them."""
    folder.mkdir()
    tables = {"encoder/position_encodings/encodings": sinusoid_table(
                  torch.arange(SOURCE), WIDTH, layout="concatenated", denominator="half-minus-one").half(),
              "decoder/position_encodings/encodings": (0.02 * torch.randn(TARGET, WIDTH, generator=gen)).half(),
              "decoder/embeddings/weight": torch.randn(VOCAB, WIDTH, generator=gen).half(),
              "decoder/num_heads": torch.tensor(4, dtype=torch.int16),
              "decoder/layer_0/self_attention/linear_0/weight": torch.randn(3 * WIDTH, WIDTH, generator=gen).half()}
    write_ct2(folder / "model.bin", tables, {"decoder/projection/weight": "decoder/embeddings/weight"},
              spec="WhisperSpec")
    (folder / "config.json").write_text(json.dumps({"suppress_ids": [1, 2], "lang_ids": [50259]}))
    (folder / "vocabulary.txt").write_text("".join(f"tok{i}\n" for i in range(VOCAB)))
    return tables


def test_both_tables_are_measured(tmp_path, gen):
    tables = whisper_like(tmp_path / "ct2", gen)
    result = inspect_checkpoint(tmp_path / "ct2", sample=VOCAB)
    assert result["config"] == {"model_type": "whisper", "vocab_size": VOCAB, "hidden_size": WIDTH,
                                "num_attention_heads": 4}  # from model.bin; the decoding config.json is not read
    assert result["located"]["position"] == "decoder/position_encodings/encodings"
    assert result["located"]["token"] == "decoder/embeddings/weight"
    assert result["tying"]["status"] == "tied"  # the alias is the same bytes
    dec = result["position"]
    assert dec["kind"] == "learned" and not dec["sinusoid"]["is_sinusoid"]
    assert dec["analysis"]["shape"] == [TARGET, WIDTH]
    norms = tables["decoder/position_encodings/encodings"].double().norm(dim=1)
    assert dec["analysis"]["norms"]["norm_max"] == pytest.approx(float(norms.max()), rel=1e-9)
    (enc,) = result["more_positions"]
    fit = enc["sinusoid"]
    assert enc["tensor"] == "encoder/position_encodings/encodings" and enc["kind"] == "sinusoidal"
    assert (fit["layout"], fit["denominator"], fit["base"], fit["offset"]) == ("concatenated", "half-minus-one",
                                                                              10000.0, 0)
    assert 0 < fit["max_residual"] <= fit["tolerance"] == 2**-10  # float16's rounding, allowed as such
    assert enc["analysis"]["shape"] == [SOURCE, WIDTH] and enc["analysis"]["distance_r2"] > 0.999
    assert result["tokens"]["neighbours"][0]["token"].startswith("tok")  # CTranslate2's vocabulary.txt


def test_cli_summary_names_both_tables(tmp_path, gen, capsys):
    whisper_like(tmp_path / "ct2", gen)
    assert main(["inspect", str(tmp_path / "ct2"), "--sample", str(VOCAB), "--out", str(tmp_path / "report")]) == 0
    text = capsys.readouterr().out
    assert "position    learned  decoder/position_encodings/encodings" in text
    assert "position    sinusoidal  encoder/position_encodings/encodings" in text
    assert "sinusoid    yes: [sin | cos] halves, ω_i = b^(−i/(D/2 − 1)) with b = 10000, offset 0" in text
    assert "CTranslate2 model (WhisperSpec" in text
    page = (tmp_path / "report" / "index.html").read_text()
    assert "encoder/position_encodings/encodings" in page and "[sin | cos] halves" in page
    assert main(["inspect", str(tmp_path / "ct2"), "--list-tensors"]) == 0
    assert "decoder/projection/weight" in capsys.readouterr().out


def _corrupt(folder: Path, how: str) -> None:
    whole = (folder / "model.bin").read_bytes()
    if how == "truncated":
        data = whole[: len(whole) // 2]
    elif how == "version":
        data = struct.pack("<I", 7) + whole[4:]
    elif how == "count":  # 2³² − 1 variables claimed after the spec name and revision
        at = 4 + len(string("WhisperSpec")) + 4
        data = whole[:at] + struct.pack("<I", 2**32 - 1) + whole[at + 4:]
    elif how == "shape":  # the first variable claims 2³² − 1 rows: its bytes no longer match, nor fit the file
        at = 4 + len(string("WhisperSpec")) + 8 + len(string("encoder/position_encodings/encodings")) + 1
        data = whole[:at] + struct.pack("<I", 2**32 - 1) + whole[at + 4:]
    else:  # a name without its NUL
        at = 4 + len(string("WhisperSpec")) + 8 + 2 + len("encoder/position_encodings/encodings")
        data = whole[:at] + b"X" + whole[at + 1:]
    (folder / "model.bin").write_bytes(data)


@pytest.mark.parametrize("how,message", [("truncated", "truncated or corrupt"), ("version", "version 7 is not"),
                                         ("count", "variables"), ("shape", "bytes but"),
                                         ("nul", "NUL terminator")])
def test_corrupt_folders_are_refused_in_one_line(tmp_path, gen, capsys, how, message):
    whisper_like(tmp_path / "ct2", gen)
    _corrupt(tmp_path / "ct2", how)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path / "ct2")
    assert main(["inspect", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc: error:") and str(tmp_path / "ct2" / "model.bin") in err and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_pickle_named_model_bin_is_still_refused(tmp_path, capsys):
    (tmp_path / "model.bin").write_bytes(b"\x80\x04\x95junk")  # a pickle stream, not a CTranslate2 file
    assert main(["inspect", str(tmp_path)]) == 2
    assert "never unpickles" in capsys.readouterr().err


def test_a_non_utf8_vocabulary_is_refused_by_name(tmp_path, gen):
    whisper_like(tmp_path / "ct2", gen)
    (tmp_path / "ct2" / "vocabulary.txt").write_bytes(b"\xff\xfe\n")
    with pytest.raises(CheckpointError, match="vocabulary.txt: not UTF-8"):
        load_checkpoint(tmp_path / "ct2")


@pytest.mark.skipif(installed(WHISPER) is None, reason=missing(WHISPER))
def test_real_whisper_tiny_en(capsys):
    result = inspect_checkpoint(installed(WHISPER), sample=200)
    dec, (enc,) = result["position"], result["more_positions"]
    assert dec["tensor"] == "decoder/position_encodings/encodings" and dec["kind"] == "learned"
    assert dec["analysis"]["shape"] == [448, 384] and 0.5 < dec["analysis"]["distance_r2"] < 0.95
    fit = enc["sinusoid"]
    assert enc["kind"] == "sinusoidal" and enc["analysis"]["shape"] == [1500, 384]
    assert (fit["layout"], fit["denominator"], fit["base"], fit["offset"]) == ("concatenated", "half-minus-one",
                                                                              10000.0, 0)
    assert fit["max_residual"] <= 2**-10
    assert result["tying"]["status"] == "tied" and result["tokens"]["shape"] == [51864, 384]
