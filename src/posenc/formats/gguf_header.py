"""A bounded walk over a GGUF file's header, before the ``gguf`` package's reader sees it.

``gguf.GGUFReader`` believes the counts and lengths a file states: a 132-byte
file whose header claims an array of 2⁶² entries makes it build numpy views
until memory runs out. :func:`check_header` walks the same structure
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) with plain
``struct`` reads and checks every stated size against what the file can hold
and against the memory budget *before* anything is allocated:

- the key/value and tensor counts, each string's length and each array's
  length against the bytes left in the file (every entry takes at least one
  byte), nested arrays to depth :data:`MAX_ARRAY_DEPTH`;
- the reader's own cost — about :data:`READER_BYTES_PER_ELEMENT` bytes of
  Python objects per metadata element (measured on SmolLM2's 147,237
  elements) — against ``posenc.validation.memory_budget``;
- each tensor: 1–4 dimensions of at least 1, a known GGML type, whole blocks,
  and data lying inside the file (sizes in Python integers: no wrap-around);
- the metadata posenc reads as sizes and settings (:func:`check_metadata`):
  layer, width, head, vocabulary and context counts must be integers within
  ``posenc.families.hf_config``'s bounds, floats finite and in range, token
  lists lists of strings, merges ``"a b"`` strings, special ids inside the
  vocabulary.

Every refusal is a ``GGUFError`` naming the file, the key or tensor, the value
and the fix. Nothing here is a full parser: values are kept only for the
scalar keys :func:`check_metadata` reads.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.formats.gguf_error import GGUFError
from posenc.validation import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, format_bytes, memory_budget

#: GGUF versions read (the ``gguf`` package reads 2 and 3; version 1 had 32-bit counts).
VERSIONS = (2, 3)
#: GGML_MAX_DIMS.
MAX_DIMS = 4
#: Arrays of arrays deeper than this are refused (llama.cpp writes none deeper than 1).
MAX_ARRAY_DEPTH = 4
#: Python/numpy bytes ``GGUFReader`` spends per metadata element (one or two numpy views each; ~650 measured).
READER_BYTES_PER_ELEMENT = 1024
#: Value type → (struct code, size in bytes); 8 = string, 9 = array.
_SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4), 6: ("f", 4),
            7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
_STRING, _ARRAY = 8, 9
_INTEGER_TYPES = {0, 1, 2, 3, 4, 5, 10, 11}
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
               8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}
_REDOWNLOAD = "the file is truncated or corrupt. Download it again"
_BAD_VALUE = "the file is corrupt or was not written by llama.cpp's converter; download or convert it again"


def _error(message: str) -> GGUFError:
    return GGUFError(message)


@dataclass
class Value:
    """One metadata value as the header states it: its type, and the value (scalars, strings) or array facts."""

    type: int
    value: Any = None  # scalars and strings
    item_type: int | None = None  # arrays: element type
    length: int = 0  # arrays: number of elements
    items: list[Any] | None = None  # the elements of an array of strings or numbers (not of arrays)


@dataclass
class Header:
    """What :func:`check_header` read: version, metadata by key, tensors (name, GGML type, dims), sizes."""

    version: int
    metadata: dict[str, Value] = field(default_factory=dict)
    tensors: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)
    elements: int = 0  # metadata elements the reader will hold
    offsets: list[int] = field(default_factory=list)  # each tensor's data offset, relative to data_offset
    data_offset: int = 0


class _Walker:
    """Sequential little/big-endian reads from a buffer, each checked against the bytes left."""

    def __init__(self, buf: Any, path: Path, order: str) -> None:
        self.buf, self.path, self.order, self.pos, self.size = buf, path, order, 0, len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _error(f"{self.path}: {what} needs {n:,} bytes at offset {self.pos:,} but the file has "
                         f"{self.size - self.pos:,} left — {_REDOWNLOAD}")

    def scalar(self, code: str, size: int, what: str) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + code, self.buf, self.pos)
        self.pos += size
        return value

    def count(self, what: str, *, min_size: int) -> int:
        """A uint64 count whose entries take at least ``min_size`` bytes each: bounded by the bytes left."""
        n = self.scalar("Q", 8, what)
        left = self.size - self.pos
        if n * min_size > left:
            raise _error(f"{self.path}: {what} = {n:,}, but the {left:,} bytes left in the file hold at most "
                         f"{left // min_size:,} — {_REDOWNLOAD}")
        return n

    def string(self, what: str) -> str:
        n = self.count(f"the length of {what}", min_size=1)
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _error(f"{self.path}: {what} is not UTF-8 text ({err.reason} at byte {err.start}) — "
                         f"{_REDOWNLOAD}") from None


def check_header(path: str | Path) -> Header:
    """Walk ``path``'s GGUF header with every size checked; see the module docstring.

    Raises:
        GGUFError: a count, length or shape the file cannot hold, a reader cost above the memory
            budget, an unknown value or tensor type, or metadata :func:`check_metadata` refuses.
    """
    path = Path(path)
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise _error(f"{path}: {size} bytes is too short for a GGUF header (24 bytes at least) — {_REDOWNLOAD}")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            header = _walk(buf, path)
    check_metadata(header, path)
    return header


def _walk(buf: Any, path: Path) -> Header:
    if bytes(buf[:4]) != b"GGUF":
        raise _error(f"{path}: not a GGUF file (it starts with {bytes(buf[:4])!r})")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<"
    if version & 0xFFFF == 0:  # written on a big-endian machine (the reader swaps too)
        order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in VERSIONS:
        raise _error(f"{path}: GGUF version {version} is not supported (versions {list(VERSIONS)}); "
                     "re-convert the model with a current llama.cpp")
    w = _Walker(buf, path, order)
    w.pos = 8
    tensor_count = w.scalar("Q", 8, "the tensor count")
    kv_count = w.count("the metadata key count", min_size=8 + 4 + 1)  # key length, type, one byte of value
    if tensor_count * (8 + 1 + 4 + 8 + 4 + 8) > w.size - w.pos:  # name length, name, dims, one dim, type, offset
        raise _error(f"{path}: the tensor count {tensor_count:,} cannot fit in a {w.size:,}-byte file — "
                     f"{_REDOWNLOAD}")
    header = Header(version=version)
    for i in range(kv_count):
        key = w.string(f"metadata key #{i}")
        if key in header.metadata:
            raise _error(f"{path}: metadata key {key!r} appears twice — {_REDOWNLOAD}")
        kind = w.scalar("I", 4, f"the type of {key!r}")
        header.metadata[key] = _value(w, kind, key, header, depth=0)
    budget = memory_budget()
    if header.elements * READER_BYTES_PER_ELEMENT > budget:
        raise _error(f"{path}: the metadata holds {header.elements:,} values, which the gguf reader keeps as about "
                     f"{format_bytes(header.elements * READER_BYTES_PER_ELEMENT)} of Python objects, more than the "
                     f"memory budget of {format_bytes(budget)}; set POSENC_MEMORY_BUDGET (bytes) higher if the file "
                     "is genuine")
    from posenc.checks import require

    require("gguf", "reading .gguf files")
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    infos = []
    for i in range(tensor_count):
        name = w.string(f"the name of tensor #{i}")
        n_dims = w.scalar("I", 4, f"the dimension count of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise _error(f"{path}: tensor {name!r} has {n_dims:,} dimensions; GGUF tensors have 1 to {MAX_DIMS} — "
                         f"{_REDOWNLOAD}")
        dims = tuple(w.scalar("Q", 8, f"the dimensions of tensor {name!r}") for _ in range(n_dims))
        kind = w.scalar("I", 4, f"the type of tensor {name!r}")
        offset = w.scalar("Q", 8, f"the data offset of tensor {name!r}")
        if any(d < 1 for d in dims):
            raise _error(f"{path}: tensor {name!r} has dimensions {list(dims)}; every dimension must be >= 1 — "
                         f"{_REDOWNLOAD}")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise _error(f"{path}: tensor {name!r} has GGML type {kind}, which the gguf package does not know — "
                         "the file is corrupt or newer than the installed gguf package (pip install -U gguf)") \
                from None
        if dims[0] % block:
            raise _error(f"{path}: tensor {name!r}'s rows of {dims[0]:,} values are not whole blocks of {block} of "
                         f"its type {GGMLQuantizationType(kind).name} — {_REDOWNLOAD}")
        infos.append((name, kind, dims, offset, math.prod(dims) // block * type_size))
        header.tensors.append((name, kind, dims))
        header.offsets.append(offset)
    alignment = header.metadata.get("general.alignment")
    align = 32
    if alignment is not None:
        if alignment.type != 4 or alignment.value < 1 or alignment.value & (alignment.value - 1):
            raise _error(f"{path}: general.alignment must be a uint32 power of two, got {_shown(alignment)} — "
                         f"{_REDOWNLOAD}")
        align = alignment.value
    header.data_offset = -(-w.pos // align) * align
    for name, kind, dims, offset, nbytes in infos:
        end = header.data_offset + offset + nbytes
        if end > w.size:
            raise _error(f"{path}: tensor {name!r} ({list(dims)}) ends at byte {end:,} but the file has {w.size:,} "
                         "bytes — the file is truncated or corrupt. Download it again")
    return header


def _value(w: _Walker, kind: int, key: str, header: Header, *, depth: int) -> Value:
    header.elements += 1
    if kind in _SCALARS:
        code, size = _SCALARS[kind]
        return Value(kind, w.scalar(code, size, f"the value of {key!r}"))
    if kind == _STRING:
        return Value(kind, w.string(f"the value of {key!r}"))
    if kind != _ARRAY:
        raise _error(f"{w.path}: metadata {key!r} has value type {kind}, which GGUF does not define — {_REDOWNLOAD}")
    if depth >= MAX_ARRAY_DEPTH:
        raise _error(f"{w.path}: metadata {key!r} nests arrays more than {MAX_ARRAY_DEPTH} deep — {_REDOWNLOAD}")
    item = w.scalar("I", 4, f"the element type of {key!r}")
    if item not in _SCALARS and item not in (_STRING, _ARRAY):
        raise _error(f"{w.path}: metadata {key!r} is an array of value type {item}, which GGUF does not define — "
                     f"{_REDOWNLOAD}")
    min_size = _SCALARS[item][1] if item in _SCALARS else 8 if item == _STRING else 12
    n = w.count(f"the length of array {key!r}", min_size=min_size)
    value = Value(kind, item_type=item, length=n)
    if item in _SCALARS:
        code, size = _SCALARS[item]
        w.need(n * size, f"array {key!r}")
        value.items = list(struct.unpack_from(f"{w.order}{n}{code}", w.buf, w.pos))  # kept: the mapped reader
        w.pos += n * size
        header.elements += n
    elif item == _STRING:
        items = _strings(w, n, key)  # each decoded: the reader will
        value.items = items  # kept: check_metadata reads the merges, posenc.formats.gguf.open_mapped all
        header.elements += n
    else:
        for i in range(n):
            _value(w, _ARRAY, f"{key}[{i}]", header, depth=depth + 1)
    return value


def _strings(w: _Walker, n: int, key: str) -> list[str]:
    """``n`` strings, as ``w.string`` reads them (every length bounded), in one tight loop (98,000 for SmolLM2)."""
    buf, pos, size = w.buf, w.pos, w.size
    length_of = struct.Struct(w.order + "Q").unpack_from
    out: list[str] = []
    append = out.append
    for i in range(n):
        if pos + 8 > size or length_of(buf, pos)[0] > size - pos - 8:
            w.pos = pos
            return out + [w.string(f"element {i} of {key!r}")]  # raises the walker's own error
        (length,) = length_of(buf, pos)
        pos += 8
        try:
            append(buf[pos : pos + length].decode("utf-8"))
        except UnicodeDecodeError:
            w.pos = pos - 8
            w.string(f"element {i} of {key!r}")  # raises the walker's own error
        pos += length
    w.pos = pos
    return out


def _shown(v: Value) -> str:
    if v.type == _ARRAY:
        return f"an array of {v.length:,} {_TYPE_NAMES.get(v.item_type, '?')} values"
    return f"{v.value!r} ({_TYPE_NAMES[v.type]})"


# -- the metadata posenc reads ------------------------------------------------------------------------------------
#: ``{arch}.<key>`` → (lower, upper) for the integer sizes a llama-family file states.
INT_KEYS = {
    "block_count": (1, MAX_LAYERS),
    "embedding_length": (1, MAX_WIDTH),
    "feed_forward_length": (1, MAX_WIDTH),
    "attention.head_count": (1, MAX_HEADS),
    "attention.head_count_kv": (1, MAX_HEADS),
    "attention.key_length": (1, MAX_WIDTH),
    "attention.value_length": (1, MAX_WIDTH),
    "rope.dimension_count": (1, MAX_WIDTH),
    "context_length": (1, MAX_CONTEXT),
    "vocab_size": (1, MAX_VOCAB),
    "rope.scaling.original_context_length": (1, MAX_CONTEXT),
}
#: ``{arch}.<key>`` → (exclusive lower bound, what it is) for the float settings.
FLOAT_KEYS = {
    "attention.layer_norm_rms_epsilon": (0.0, "RMSNorm's epsilon"),
    "rope.freq_base": (1.0, "RoPE's base θ"),
    "rope.scaling.factor": (0.0, "the RoPE scaling factor"),
    "rope.scale_linear": (0.0, "the linear RoPE scaling factor"),
    "rope.scaling.yarn_beta_fast": (0.0, "YaRN's beta_fast"),
    "rope.scaling.yarn_beta_slow": (0.0, "YaRN's beta_slow"),
    "rope.scaling.attn_factor": (0.0, "the attention factor on the rotation (under YaRN: beyond its own)"),
}
_FLOAT_TYPES = {6, 12}


def check_values(meta: dict[str, Any], path: Path) -> None:
    """The rules of :func:`check_metadata` for the model keys, on metadata already read into Python values (a dict
    from ``open_mapped`` / ``read_metadata``, or one built in memory): every ``{arch}.`` key of :data:`INT_KEYS`
    an integer in its range, of :data:`FLOAT_KEYS` a finite number above its bound, and Gemma 3's window an
    integer ≥ 1 — so the config readers never meet an array, a string or a zero where they divide."""
    arch = meta.get("general.architecture")
    if arch is None:
        return
    if not isinstance(arch, str):
        raise _error(f"{path}: metadata general.architecture must be a string, got {arch!r} — {_BAD_VALUE}")
    ints = dict(INT_KEYS, **{"attention.sliding_window": (1, MAX_CONTEXT)})
    for name, (low, high) in ints.items():
        key = f"{arch}.{name}"
        v = meta.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high):
            raise _error(f"{path}: metadata {key} must be an integer from {low} to {high:,}, got {repr(v)[:60]} — "
                         f"{_BAD_VALUE}")
    for name, (above, what) in FLOAT_KEYS.items():
        key = f"{arch}.{name}"
        v = meta.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or not v > above):
            raise _error(f"{path}: metadata {key} must be {what}, a finite number > {above:g}, got {repr(v)[:60]} "
                         f"— {_BAD_VALUE}")
    kind = meta.get(f"{arch}.rope.scaling.type")
    if kind is not None and not isinstance(kind, str):
        raise _error(f"{path}: metadata {arch}.rope.scaling.type must be a string, got {repr(kind)[:60]} — "
                     f"{_BAD_VALUE}")


def check_metadata(header: Header, path: Path) -> None:
    """Refuse metadata posenc would misread: wrong types, sizes out of bounds, a malformed tokenizer.

    Only keys that are present are checked (a missing key is refused later, where it is needed).
    """
    meta = header.metadata

    def refuse(key: str, want: str) -> None:
        raise _error(f"{path}: metadata {key} must be {want}, got {_shown(meta[key])} — {_BAD_VALUE}")

    arch_value = meta.get("general.architecture")
    if arch_value is not None and arch_value.type != _STRING:
        refuse("general.architecture", "a string")
    arch = arch_value.value if arch_value is not None else None
    if arch is not None:
        for name, (low, high) in INT_KEYS.items():
            key = f"{arch}.{name}"
            v = meta.get(key)
            if v is not None and (v.type not in _INTEGER_TYPES or not low <= v.value <= high):
                refuse(key, f"an integer from {low} to {high:,}")
        for name, (above, what) in FLOAT_KEYS.items():
            key = f"{arch}.{name}"
            v = meta.get(key)
            if v is not None and (v.type not in _FLOAT_TYPES | _INTEGER_TYPES or not math.isfinite(v.value)
                                  or not v.value > above):
                refuse(key, f"{what}, a finite number > {above:g}")
        kind = meta.get(f"{arch}.rope.scaling.type")
        if kind is not None and kind.type != _STRING:
            refuse(f"{arch}.rope.scaling.type", "a string")
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is not None:
        if tokens.type != _ARRAY or tokens.item_type != _STRING:
            refuse("tokenizer.ggml.tokens", "an array of strings (the vocabulary)")
        if not 1 <= tokens.length <= MAX_VOCAB:
            refuse("tokenizer.ggml.tokens", f"an array of 1 to {MAX_VOCAB:,} strings")
    merges = meta.get("tokenizer.ggml.merges")
    if merges is not None:
        if merges.type != _ARRAY or merges.item_type != _STRING:
            refuse("tokenizer.ggml.merges", 'an array of "a b" strings')
        for i, m in enumerate(merges.items or []):
            parts = m.split(" ", 1)
            if len(parts) != 2 or not all(parts):
                raise _error(f"{path}: metadata tokenizer.ggml.merges[{i}] = {m[:40]!r} is not a merge "
                             f'"a b" (two tokens separated by one space) — {_BAD_VALUE}')
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None:
        if types.type != _ARRAY or types.item_type not in _INTEGER_TYPES:
            refuse("tokenizer.ggml.token_type", "an array of integers")
        if tokens is not None and types.length != tokens.length:
            refuse("tokenizer.ggml.token_type", f"an array of {tokens.length:,} integers, one per token")
    n_tokens = tokens.length if tokens is not None else MAX_VOCAB
    for name in ("bos", "eos", "unknown", "padding", "sep", "cls", "mask"):
        key = f"tokenizer.ggml.{name}_token_id"
        v = meta.get(key)
        if v is not None and (v.type not in _INTEGER_TYPES or not 0 <= v.value < n_tokens):
            refuse(key, f"a token id from 0 to {n_tokens - 1:,}")
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"):
        v = meta.get(key)
        if v is not None and v.type != _STRING:
            refuse(key, "a string")
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"):
        v = meta.get(key)
        if v is not None and v.type != 7:
            refuse(key, "a bool")
