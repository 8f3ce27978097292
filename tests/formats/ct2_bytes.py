"""Writers of CTranslate2 ``model.bin`` files, field by field from the format's description
(``posenc.formats.ctranslate2``'s module docstring), for the reader's and ``posenc inspect``'s tests."""

from __future__ import annotations

import struct
from pathlib import Path

import torch

CODES = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4}


def string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(path: Path, variables: dict[str, torch.Tensor], aliases: dict[str, str] | None = None, *,
              spec: str = "TestSpec") -> Path:
    """A version-6 model.bin holding ``variables`` (then ``aliases``: alias → stored name)."""
    out = struct.pack("<I", 6) + string(spec) + struct.pack("<II", 1, len(variables))
    for name, t in variables.items():
        data = t.contiguous().numpy().tobytes()
        out += string(name) + struct.pack("<B", t.dim()) + b"".join(struct.pack("<I", d) for d in t.shape)
        out += struct.pack("<BI", CODES[t.dtype], len(data)) + data
    aliases = aliases or {}
    out += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(n) for a, n in aliases.items())
    path.write_bytes(out)
    return path

