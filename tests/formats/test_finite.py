"""formats.finite.check_finite: NaN/inf and float16 overflow found anywhere in a tensor, read in chunks."""

from __future__ import annotations

import pytest
import torch

from posenc.formats import CheckpointError
from posenc.formats import finite


@pytest.mark.parametrize("chunk", [7, 64, 1 << 22])
def test_count_and_first_index_equal_a_whole_tensor_count(chunk, gen, monkeypatch):
    monkeypatch.setattr(finite, "CHUNK", chunk)
    t = torch.randn(13, 29, generator=gen)
    flat = t.view(-1)
    bad = torch.randperm(flat.numel(), generator=gen)[: int(torch.randint(1, 9, (), generator=gen))]
    flat[bad] = torch.tensor([float("nan"), float("inf"), -float("inf")])[torch.arange(bad.numel()) % 3]
    with pytest.raises(CheckpointError, match=f"holds {bad.numel():,} non-finite value.* at flat index "
                                              f"{int(bad.min()):,};"):
        finite.check_finite("w", t, source="m.safetensors")


@pytest.mark.parametrize("chunk", [5, 1 << 22])
def test_float16_overflow_found_in_any_chunk_and_its_sign(chunk, gen, monkeypatch):
    monkeypatch.setattr(finite, "CHUNK", chunk)
    t = torch.randn(301, generator=gen) * 100
    finite.check_finite("w", t, source="m", dtype=torch.float16)  # |x| ~ 1e2: fits
    at = int(torch.randint(0, 301, (), generator=gen))
    for value in (7e4, -7e4):
        t2 = t.clone()
        t2[at] = value
        with pytest.raises(CheckpointError, match="magnitude 7e\\+04"):
            finite.check_finite("w", t2, source="m", dtype=torch.float16)
        finite.check_finite("w", t2, source="m", dtype=torch.bfloat16)  # bfloat16 holds it


def test_non_float_and_empty_tensors_pass():
    finite.check_finite("ids", torch.arange(5), source="m")
    finite.check_finite("w", torch.empty(0, 3), source="m", dtype=torch.float16)
