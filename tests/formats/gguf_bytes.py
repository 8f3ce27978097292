"""GGUF files byte by byte, for hostile-header tests: whatever counts and lengths a test wants to claim.

Written from the spec (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), independent of
posenc and of the ``gguf`` package: little-endian, version 3, strings as uint64 length + UTF-8 bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, FLOAT64 = 4, 5, 6, 7, 8, 9, 10, 12
_CODES = {0: "B", 1: "b", 2: "H", 3: "h", UINT32: "I", INT32: "i", FLOAT32: "f", BOOL: "?", UINT64: "Q", 11: "q",
          FLOAT64: "d"}


def string(text: str | bytes, *, claimed: int | None = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if claimed is None else claimed) + raw


def value(kind: int, v: Any) -> bytes:
    """The bytes of one value of GGUF type ``kind`` (an array: ``(item_kind, items)``)."""
    if kind == STRING:
        return string(v)
    if kind == ARRAY:
        item, items = v
        return struct.pack("<IQ", item, len(items)) + b"".join(value(item, x) for x in items)
    return struct.pack("<" + _CODES[kind], v)


def kv(key: str, kind: int, v: Any) -> bytes:
    return string(key) + struct.pack("<I", kind) + value(kind, v)


def tensor_info(name: str, dims: tuple[int, ...], ggml_type: int = 0, offset: int = 0) -> bytes:
    return string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + \
        struct.pack("<IQ", ggml_type, offset)


def gguf(kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"", *, tensor_count: int | None = None,
         kv_count: int | None = None) -> bytes:
    """A whole file: header (counts as given or true), metadata, tensor infos, padding to 32, data."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if tensor_count is None else tensor_count,
                                 len(kvs) if kv_count is None else kv_count)
    body = head + b"".join(kvs) + b"".join(tensors)
    return body + b"\0" * (-len(body) % 32) + data


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
