"""Issue 14, items 5, 7 and 9 for ``posenc inspect``: no hang, no unbounded allocation, no traceback,
strict JSON, and an all-zero table that does not score like a sinusoid."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from posenc.inspect import inspect_checkpoint, load_checkpoint
from posenc.inspect.analysis import distance_r2
from posenc.formats.safetensors import CheckpointError

from conftest import assert_refused, posenc


def strict_json(text: str):
    """Parse as a strict parser would: NaN / Infinity are errors."""
    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def gpt2(folder: Path, gen: torch.Generator, *, rows: int = 32, dim: int = 8, vocab: int = 20,
         table: torch.Tensor | None = None, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wpe = torch.randn(rows, dim, generator=gen) if table is None else table
    save_file({"transformer.wte.weight": torch.randn(vocab, dim, generator=gen), "transformer.wpe.weight": wpe},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "gpt2", "n_positions": wpe.shape[0]}))
    return folder


@pytest.mark.timeout(60)
def test_a_fifo_named_safetensors_is_refused_not_read(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    assert_refused(posenc("inspect", str(fifo)), "is a FIFO (named pipe)", "regular files")
    assert_refused(posenc("inspect", str(tmp_path)), "is a FIFO")


def test_a_tokenizer_with_a_huge_id_is_refused_without_allocating(tmp_path, gen):
    folder = gpt2(tmp_path / "m", gen)
    (folder / "tokenizer.json").write_text('{"model":{"vocab":{"a":1000000000000}}}')  # 40 bytes
    with pytest.raises(CheckpointError, match="token id 1000000000000 for only 1 tokens"):
        load_checkpoint(folder)


def test_a_tokenizer_with_non_integer_ids_is_refused(tmp_path, gen):
    folder = gpt2(tmp_path / "m", gen)
    (folder / "tokenizer.json").write_text('{"model":{"vocab":{"a":"x"}}}')
    with pytest.raises(CheckpointError, match="malformed vocabulary"):
        load_checkpoint(folder)


def test_a_table_too_large_for_the_memory_budget_is_refused_with_the_figure(tmp_path, gen, monkeypatch):
    folder = gpt2(tmp_path / "m", gen, rows=20_000, dim=4)
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 30))
    result = posenc("inspect", str(folder))
    assert_refused(result, "measuring 20000 positions", "GiB", "memory budget of 1 GiB", "--rows")
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 30))
    assert posenc("inspect", str(folder), "--rows", "0:512").code == 0  # the fix the message names works


def test_a_nan_table_is_refused_naming_the_row(tmp_path, gen):
    table = torch.randn(16, 8, generator=gen)
    table[5, 3] = math.nan
    assert_refused(posenc("inspect", str(gpt2(tmp_path / "m", gen, rows=16, table=table))),
                   "non-finite entries", "first at row 5")


def test_a_nan_rope_theta_is_refused_naming_the_config(tmp_path, gen):
    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"model.embed_tokens.weight": torch.randn(20, 8, generator=gen)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "llama", "rope_theta": NaN, "hidden_size": 8, '
                                        '"num_attention_heads": 2, "vocab_size": 20}')
    assert_refused(posenc("inspect", str(folder)), "config.json", "base=nan")


def test_a_deeply_nested_header_is_refused(tmp_path):
    header = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / "deep.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    assert_refused(posenc("inspect", str(path)), "nests too deeply")


def test_a_symlink_loop_is_refused(tmp_path):
    (tmp_path / "a.safetensors").symlink_to(tmp_path / "b.safetensors")
    (tmp_path / "b.safetensors").symlink_to(tmp_path / "a.safetensors")
    assert_refused(posenc("inspect", str(tmp_path / "a.safetensors")), "symbolic links")


@pytest.mark.parametrize("flag, value", [("--max-positions", "0"), ("--neighbours", "0"), ("--sample", "-1"),
                                         ("--seed", "-3"), ("--position-offset", "-1")])
def test_bad_numbers_are_usage_errors(tmp_path, gen, flag, value):
    result = posenc("inspect", str(gpt2(tmp_path / "m", gen)), flag, value)
    assert result.code == 2 and flag in result.err and "Traceback" not in result.err


def test_an_all_zero_table_has_no_distance_score_and_json_is_strict(tmp_path, gen):
    assert math.isnan(distance_r2(torch.zeros(32, 8, dtype=torch.float64)))
    assert distance_r2(torch.ones(32, 8, dtype=torch.float64) * 3) != 1.0
    folder = gpt2(tmp_path / "m", gen, table=torch.zeros(32, 8))
    result = posenc("inspect", str(folder), "--json", "-")
    assert result.code == 0, result.err
    data = strict_json(result.out)  # a NaN anywhere would raise here
    assert data["position"]["analysis"]["distance_r2"] is None
    assert data["position"]["analysis"]["baselines"]["sinusoid"]["distance_r2"] > 0.5  # the sinusoid still scores


def test_out_under_a_file_is_refused_before_measuring(tmp_path, gen):
    (tmp_path / "file").write_text("x")
    assert_refused(posenc("inspect", str(gpt2(tmp_path / "m", gen)), "--out", str(tmp_path / "file" / "report")),
                   "is a file")
