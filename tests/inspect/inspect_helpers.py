"""Writers of small synthetic checkpoints (through the safetensors library itself) for the inspect tests."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def naive_sinusoid(length: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """PE[p, 2i] = sin(p·base^(−2i/d)), PE[p, 2i+1] = cos(…), by plain loops (float64)."""
    rows = []
    for p in range(length):
        row = []
        for i in range(dim // 2):
            w = base ** (-2 * i / dim)
            row += [math.sin(p * w), math.cos(p * w)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def write(folder: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any] | None = None,
          vocab: list[str] | None = None, name: str = "model.safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / name))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    if vocab is not None:
        (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return folder


def gpt2_like(folder: Path, gen: torch.Generator, *, vocab: int = 50, length: int = 64, dim: int = 16,
              head: str | None = None) -> dict[str, torch.Tensor]:
    """GPT-2 layout: transformer.wte / transformer.wpe (a sinusoid here: known answers) and a block weight.

    head: None (tied: no lm_head stored), "copy" (lm_head = a copy of wte) or "own" (a different matrix).
    """
    wte = torch.randn(vocab, dim, generator=gen)
    tensors = {"transformer.wte.weight": wte, "transformer.wpe.weight": naive_sinusoid(length, dim).float(),
               "transformer.h.0.attn.c_attn.weight": torch.randn(dim, 3 * dim, generator=gen)}
    if head == "copy":
        tensors["lm_head.weight"] = wte.clone()
    elif head == "own":
        tensors["lm_head.weight"] = torch.randn(vocab, dim, generator=gen)
    write(folder, tensors, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_positions": length,
                            "vocab_size": vocab, "n_embd": dim, "n_head": 2,
                            "tie_word_embeddings": head != "own"})
    return tensors
