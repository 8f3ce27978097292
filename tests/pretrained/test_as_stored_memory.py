"""Loading a GGUF file as stored without a second copy: blocks put into the kernel's layout a chunk at a time,
and the memory map's pages given back once copied.

References: the whole tensor decoded at once (``decode_groups`` → ``kernels.pack`` / ``pack_scales``), and the
process's own page accounting (``/proc/self/smaps``) for what stays mapped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from posenc import kernels
from posenc.formats.gguf import BLOCK_BYTES, GROUP16_TYPES, GROUP_TYPES

#: Byte offsets of each block's float16 fields (scale, minimum); every other byte may hold any bits.
FP16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
               "Q5_K": (0, 2), "Q6_K": (208,)}


def random_blocks(kind: str, rows: int, blocks: int, gen: np.random.Generator) -> torch.Tensor:
    """(rows, blocks × block bytes) uint8: random bits with finite float16 scales, as a file would hold."""
    size = BLOCK_BYTES[kind][0]
    raw = gen.integers(0, 256, size=(rows, blocks, size), dtype=np.uint8)
    for at in FP16_FIELDS[kind]:
        scale = (gen.standard_normal((rows, blocks)) * 0.05).astype(np.float16)
        raw[..., at : at + 2] = scale.view(np.uint8).reshape(rows, blocks, 2)
    return torch.from_numpy(raw.reshape(rows, -1))


needs_kernel = pytest.mark.skipif(kernels.load() is None, reason=f"posenc's kernel is not built: {kernels.status()}")


@needs_kernel
@pytest.mark.parametrize("kind", [*GROUP_TYPES, *GROUP16_TYPES])
@pytest.mark.parametrize("ordered", [False, True])
def test_kernel_layout_in_chunks_equals_the_whole_decode(kind, ordered, monkeypatch, seed):
    from posenc.pretrained import as_stored

    gen = np.random.default_rng(seed)
    rows, blocks = int(gen.integers(5, 40)), int(gen.integers(1, 4))
    raw = random_blocks(kind, rows, blocks, gen)
    order = torch.from_numpy(gen.permutation(rows)) if ordered else None
    # a chunk of a few rows and a ragged last chunk
    monkeypatch.setattr(as_stored, "PACK_CHUNK_BYTES", raw.shape[1] * int(gen.integers(2, 5)) + 1)
    weight, scales, bits = as_stored._kernel_layout(raw, kind, order)

    gq = as_stored._groups(raw if order is None else raw[order], kind)
    assert bits == gq.bits
    assert torch.equal(weight, kernels.pack(gq.values, gq.bits))
    ref = kernels.pack_scales16(gq.scale) if kind in GROUP16_TYPES else kernels.pack_scales(gq.scale, gq.minimum)
    assert scales.dtype == ref.dtype and torch.equal(scales, ref)


@needs_kernel
def test_chunks_that_disagree_on_the_scale_width_all_take_float32(monkeypatch):
    """A chunk whose scale pairs are all float16 and one that needs float32 bits: the whole tensor in float32,
    the same values."""
    from posenc.pretrained import as_stored

    gen = np.random.default_rng(0)
    raw = random_blocks("Q5_0", 8, 2, gen)
    raw[4:, 0:2] = torch.from_numpy(np.full((4, 1), 60000.0, np.float16).view(np.uint8))  # d · −16 overflows fp16
    monkeypatch.setattr(as_stored, "PACK_CHUNK_BYTES", raw.shape[1] * 4)
    _, scales, _ = as_stored._kernel_layout(raw, "Q5_0")
    gq = as_stored._groups(raw, "Q5_0")
    assert scales.dtype == torch.int32
    pairs = scales.view(torch.float32)
    assert torch.equal(pairs[..., 0], gq.scale) and torch.equal(pairs[..., 1], gq.minimum)


MAPPED = r"""
import json, sys
import torch
from posenc.pretrained import load_pretrained
from posenc.formats.gguf import dequantize, open_mapped
path = sys.argv[1]
pm = load_pretrained(path)
def mapped_kib():
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            inside = line.rstrip().endswith(path)
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total
after_load = mapped_kib()
ids = torch.tensor([pm.tokenizer.encode("The capital of France is Paris.")])
rows = pm.model.embed(ids)[0]
after_lookup = mapped_kib()
table = next(t for t in open_mapped(path).tensors if t.name == "token_embd.weight")
ref = torch.from_numpy(dequantize(table, path)).float()[ids[0]]
print(json.dumps({"after_load_kib": after_load, "after_lookup_kib": after_lookup,
                  "rows_equal": bool(torch.equal(rows, ref)), "tokens": ids.shape[1]}))
"""


def test_a_loaded_gguf_keeps_almost_none_of_its_file_mapped(tmp_path):
    """Every quantised matrix lives in the kernel's layout after a load: the file's pages are given back (they
    counted twice in the process's memory), and a token lookup maps back just the rows it reads — exactly."""
    from gguf_helpers import smollm2_path

    if kernels.load() is None:
        pytest.skip(f"posenc's kernel is not built: {kernels.status()}")
    path = smollm2_path()
    # a cold page cache (as after an install): the kernel then reads the file into large folios, and a small
    # read (a norm's weights) maps megabytes around it — what a fresh CI machine saw, and a warm run hides
    if hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out = subprocess.run([sys.executable, "-c", MAPPED, str(path)], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    size_kib = path.stat().st_size / 1024
    assert res["rows_equal"]
    # the header is read, not mapped; of the tensors' bytes at most a few folios stay (none, on Linux)
    assert res["after_load_kib"] < 0.05 * size_kib, res  # was the whole file before
    # each token's row maps its page and the kernel's fault-around neighbours (64 KiB by default)
    assert res["after_lookup_kib"] - res["after_load_kib"] <= 72 * res["tokens"], res
