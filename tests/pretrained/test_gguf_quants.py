"""Every GGML type read_gguf accepts dequantises correctly, checked against independent references."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gguf_helpers import gguf
from posenc.formats.gguf import dequantize, open_gguf

#: K-quant layouts (ggml-common.h): where each block's float16 scale(s) lie, in a block of this many bytes.
K_FP16 = {"Q2_K": (84, [80, 82]), "Q3_K": (110, [108]), "Q4_K": (144, [0, 2]), "Q5_K": (176, [0, 2]),
          "Q6_K": (210, [208])}
#: Bits per value of the block types gguf.quants can write; the error bound is one quantisation step.
BITS = {"Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q5_1": 5, "Q8_0": 8}


def write_one(path: Path, name: str, array: np.ndarray, kind: str) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    qtype = gguf.GGMLQuantizationType[kind]
    w.add_tensor(name, array, raw_dtype=qtype if array.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def read_one(path: Path) -> torch.Tensor:
    (t,) = open_gguf(path).tensors
    return torch.from_numpy(dequantize(t, path))


@pytest.mark.parametrize("kind", ["F16", "BF16"])
def test_half_floats_exact(tmp_path: Path, kind: str, gen: torch.Generator) -> None:
    x = torch.randn(24, 64, generator=gen)
    stored = x.to(torch.float16 if kind == "F16" else torch.bfloat16)
    raw = stored.view(torch.int16).numpy().view(np.uint8).reshape(24, -1) if kind == "BF16" else stored.numpy()
    got = read_one(write_one(tmp_path / "t.gguf", "w", raw, kind))
    assert got.dtype == torch.float32 and got.shape == (24, 64)
    torch.testing.assert_close(got, stored.float(), rtol=0, atol=0)


@pytest.mark.parametrize("kind", sorted(BITS))
def test_block_types_within_one_step(tmp_path: Path, kind: str, gen: torch.Generator) -> None:
    x = torch.randn(16, 256, generator=gen) * torch.rand(16, 1, generator=gen) * 3
    arr = x.numpy()
    got = read_one(write_one(tmp_path / "t.gguf", "w", gguf.quants.quantize(arr, gguf.GGMLQuantizationType[kind]),
                             kind)).double()
    blocks = x.double().reshape(16, -1, 32)  # every one of these types has blocks of 32
    step = (blocks.amax(-1) - blocks.amin(-1)) / (2 ** BITS[kind] - 1)  # (rows, blocks)
    err = (got.reshape(16, -1, 32) - blocks).abs()
    assert (err <= step.unsqueeze(-1) * 1.01 + 1e-7).all(), f"{kind}: error beyond one quantisation step"
    assert err.max() > 0


@pytest.mark.parametrize("kind", sorted(K_FP16))
def test_k_quants_equal_transformers_dequantiser(tmp_path: Path, kind: str, seed: int) -> None:
    """gguf's numpy K-quant decoders (used by read_gguf) against transformers' own torch decoders,
    on random blocks whose float16 scales are set to finite values."""
    dequant = pytest.importorskip("transformers.integrations.gguf.dequant")
    rng = np.random.default_rng(seed)
    block_bytes, fp16_at = K_FP16[kind]
    rows, blocks_per_row = 4, 2  # 512 values per row
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, block_bytes), dtype=np.uint8)
    for at in fp16_at:
        raw[:, at : at + 2] = rng.uniform(-1, 1, size=(len(raw), 1)).astype(np.float16).view(np.uint8)
    raw = raw.reshape(rows, -1)
    got = read_one(write_one(tmp_path / "t.gguf", "w", raw, kind))
    ref = dequant.dequantize(torch.from_numpy(raw.copy()).reshape(-1), int(gguf.GGMLQuantizationType[kind]))
    assert got.shape == (rows, 256 * blocks_per_row)
    torch.testing.assert_close(got.reshape(-1), ref.float(), rtol=1e-6, atol=1e-6)

