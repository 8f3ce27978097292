"""Freed large buffers go back to the system: glibc's mmap threshold pinned for training.

glibc serves an allocation above its mmap threshold (128 KiB at start) with
``mmap`` and unmaps it when freed — but on the first such free it raises the
threshold to that buffer's size (up to 32 MiB), so later buffers of that size
come from the heap, where a small block allocated after one keeps the freed
space resident. A training step makes and frees many such buffers (each layer's
activations, recomputed under gradient checkpointing; each chunk's logits), and
the process's peak memory then grows with the sequence length although autograd
holds only the checkpointed inputs (576 floats per token and layer for
SmolLM2). Measured with a 4-layer model of SmolLM2's widths, one LoRA step with
checkpointing at 4,096 tokens: peak RSS 1,630 MiB as glibc leaves it, 1,294 MiB
with the threshold pinned at 1 MiB (+15 MiB per 1,024 tokens instead of ≈ 85),
in the same time (``benchmarks/finetune/README.md``).

:func:`pin_mmap_threshold` sets ``M_MMAP_THRESHOLD`` with ``mallopt``, which
also turns the raising off. ``posenc train`` and ``posenc finetune`` call it;
``POSENC_MMAP_THRESHOLD`` sets the size in bytes (``0`` leaves glibc as it is).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
DEFAULT_THRESHOLD = 1 << 20


def pin_mmap_threshold(threshold: int | None = None) -> bool:
    """Serve every allocation of at least ``threshold`` bytes (default 1 MiB) by mmap, returned when freed.

    Returns whether the setting took effect: False off glibc (macOS, musl), when ``POSENC_MMAP_THRESHOLD`` is 0,
    or when glibc refuses the value (it takes at most 32 MiB on 64-bit systems).

    Raises:
        ValueError: ``POSENC_MMAP_THRESHOLD`` (or ``threshold``) is not a non-negative integer.
    """
    if threshold is None:
        text = os.environ.get("POSENC_MMAP_THRESHOLD", str(DEFAULT_THRESHOLD))
        try:
            threshold = int(text)
        except ValueError:
            raise ValueError(f"POSENC_MMAP_THRESHOLD must be a size in bytes (0: off), got {text!r}") from None
    if threshold < 0:
        raise ValueError(f"the mmap threshold must be >= 0 bytes (0: leave glibc's), got {threshold}")
    if threshold == 0:
        return False
    libc = _glibc("mallopt")  # mallopt's parameter numbers are glibc's
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold)))


def _glibc(function: str):
    """The C library, if it is glibc and has ``function``; else None (macOS, musl, no libc found)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, function) and hasattr(libc, "gnu_get_libc_version") else None


def trim_heap() -> bool:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``); False off glibc.

    For after a one-off burst of small allocations that are freed together — building a GGUF file's tokenizer
    makes ≈ 500,000 Python tuples of merges (Gemma 3) that the BPE model copies and drops: without a trim their
    freed pages stay in the process (``benchmarks/llamacpp/memory-profile.md`` shows where a load's memory goes).
    """
    libc = _glibc("malloc_trim")
    return libc is not None and bool(libc.malloc_trim(0))


__all__ = ["pin_mmap_threshold", "trim_heap"]
