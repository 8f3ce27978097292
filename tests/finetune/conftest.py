"""Tiny models and texts for the fine-tuning tests (width 32, two layers, byte tokens: each test runs in seconds)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from posenc.models.decoder import DecoderConfig, build_decoder

WORDS = ("the of and to in is was that for on with as by at from his her they were be this which an or had "
         "not are but have one all their there been has who will more no if out so up said what its about into "
         "than them can only other new some could time these two may then do first any my now such like our").split()


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a shared, loaded machine a second thread's barrier makes tiny matmuls 20× slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(l0: int = 16, **kw) -> DecoderConfig:
    return DecoderConfig(vocab_size=256, dim=32, num_layers=2, num_heads=4, ffn_dim=64, max_position_embeddings=l0,
                       position_options={"pairing": "interleaved"}, **kw)


def tiny_model(seed: int, l0: int = 16, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_decoder(tiny_config(l0, **kw)).eval()


def text(seed: int, words: int = 3000) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "\n"


@pytest.fixture
def text_file(tmp_path: Path, seed: int) -> Path:
    path = tmp_path / "train.txt"
    path.write_text(text(seed), encoding="utf-8")
    return path


def save_start(directory: Path, model: torch.nn.Module) -> Path:
    """A posenc run directory holding ``model`` (step 0) that ``load_start`` reads, byte tokenizer."""
    from posenc.checkpoint import save_checkpoint

    save_checkpoint(directory, model=model, step=0, state={"tokenizer": "bytes"})
    return directory
