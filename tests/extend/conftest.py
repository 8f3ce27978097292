"""A tiny random RoPE language model and a byte-level tokenizer: the real code paths at CPU-test size."""

from __future__ import annotations

import pytest
import torch

from posenc.transformer import ModelConfig, build_decoder_only

L0 = 64  # the "trained context" the tests give the schemes


class ByteTokenizer:
    """UTF-8 bytes as ids 0–255, BOS = 256: a real (lossless) tokenizer with no files."""

    bos_id = 256
    eos_id = None
    add_bos = True

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


@pytest.fixture
def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture
def tiny_model(seed: int) -> torch.nn.Module:
    cfg = ModelConfig(vocab_size=257, dim=32, num_heads=4, num_layers=2, position="rope",
                      position_options={"base": 10000.0})
    return build_decoder_only(cfg).eval()


@pytest.fixture
def l0() -> int:
    return L0
