"""Safe reading of a checkpoint: safetensors only, never unpickle.

A checkpoint is a ``.safetensors`` file, a sharded set described by a
``*.safetensors.index.json`` file, or a folder holding either (plus, usually,
``config.json`` and a vocabulary file). Anything that would need ``pickle`` —
``pytorch_model.bin``, ``.pt``/``.pth``/``.ckpt`` files, ``torch.save`` zip
archives, raw pickle streams — is refused: unpickling a downloaded file can run
arbitrary code, so posenc never unpickles what a user downloaded.

Every header is validated here, before the ``safetensors`` library maps the
file, so that a truncated download, a malformed header or a missing tensor gets
one clear message naming the file and what to do about it.

Format reference: the safetensors specification
(https://github.com/huggingface/safetensors, "Format"): an 8-byte little-endian
header length N, N bytes of JSON ``{name: {dtype, shape, data_offsets}}`` (plus
an optional ``__metadata__`` of strings), then the tensors' bytes, contiguous.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc.validation import regular_file

#: Bytes per element of each safetensors dtype.
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
#: File suffixes whose loaders unpickle.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".th", ".tar")
MAX_HEADER_BYTES = 100_000_000
#: Largest tokenizer.json / vocab / shard index file read (real tokenizers are a few MiB).
MAX_JSON_BYTES = 500_000_000
#: Largest settings file read: config.json, tokenizer_config.json, generation_config.json (real ones are KiB; a
#: tokenizer_config.json listing every added token a few MiB).
MAX_CONFIG_BYTES = 64 << 20
_CONVERT_HINT = (
    "posenc reads safetensors only and never unpickles a file (unpickling can run arbitrary code). "
    "Download the model's .safetensors weights instead, or convert this file to safetensors yourself "
    "in an environment you trust (torch.load, then safetensors.torch.save_file)"
)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read safely or is malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as described by a safetensors header (nothing read yet)."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int]


@dataclass
class Checkpoint:
    """Tensor entries, config and vocabulary of a checkpoint; tensors are read on demand.

    Build it with :func:`load_checkpoint` (files) or :meth:`from_tensors` (tensors
    already in memory, e.g. a model's ``state_dict()``).
    """

    source: str
    entries: dict[str, TensorEntry] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    vocab: list[str] | None = None
    vocab_source: str | None = None
    notes: list[str] = field(default_factory=list)
    _memory: dict[str, Tensor] | None = None

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], *, config: dict[str, Any] | None = None,
                     vocab: list[str] | None = None, source: str = "<tensors>") -> Checkpoint:
        """A checkpoint over tensors in memory (shared storage between them is kept and detectable)."""
        for name, t in tensors.items():
            if not isinstance(t, Tensor):
                raise TypeError(f"tensor {name!r} is a {type(t).__name__}, expected a torch.Tensor")
        return cls(source=source, config=dict(config or {}), vocab=vocab, _memory=dict(tensors))

    def names(self) -> list[str]:
        return list(self._memory) if self._memory is not None else list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        self._check_name(name)
        if self._memory is not None:
            return tuple(self._memory[name].shape)
        return self.entries[name].shape

    def tensor(self, name: str) -> Tensor:
        """Read tensor ``name`` (from memory, or from its safetensors file)."""
        self._check_name(name)
        if self._memory is not None:
            return self._memory[name]
        from safetensors import SafetensorError, safe_open

        entry = self.entries[name]
        try:
            with safe_open(str(entry.file), framework="pt") as f:
                return f.get_tensor(name)
        except SafetensorError as err:  # pragma: no cover - headers are validated first
            raise CheckpointError(f"{entry.file}: safetensors could not read tensor {name!r}: {err}") from None

    def shares_storage(self, a: str, b: str) -> bool:
        """True when tensors ``a`` and ``b`` are one piece of memory (or one byte range of one file)."""
        if self._memory is not None:
            ta, tb = self._memory[a], self._memory[b]
            return (ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()
                    and ta.storage_offset() == tb.storage_offset() and ta.stride() == tb.stride()
                    and ta.shape == tb.shape)
        ea, eb = self.entries[a], self.entries[b]
        return ea.file == eb.file and ea.offsets == eb.offsets  # the safetensors format itself forbids this

    def _check_name(self, name: str) -> None:
        if name not in self.names():
            close = difflib.get_close_matches(name, self.names(), n=5, cutoff=0.5)
            hint = f"; similar names: {close}" if close else ""
            raise CheckpointError(
                f"{self.source}: no tensor named {name!r}{hint}. "
                "List the names with `posenc inspect PATH --list-tensors`"
            )


# -- reading one file ----------------------------------------------------------
def not_weights(path: Path) -> str | None:
    """What ``path`` is when it cannot hold weights of any format — "a directory", "a FIFO (named pipe)", "a
    device", "only 3 bytes" — else None (a regular file of at least 4 bytes, which its format's reader judges)."""
    try:
        regular_file(path, "weights file")
    except FileNotFoundError:
        return "missing (a broken symbolic link?)" if path.is_symlink() else None
    except ValueError as err:  # "PATH is a FIFO (named pipe); posenc reads only regular files — …"
        return str(err).removeprefix(str(path)).strip(" :").removeprefix("is ").split(";")[0]
    size = path.stat().st_size
    return f"only {size} byte{'s' if size != 1 else ''} long (empty or truncated)" if size < 4 else None


def refuse_not_weights(path: Path) -> None:
    """Raise CheckpointError saying what ``path`` is when it is no weights file at all (``not_weights``), so that
    a directory, FIFO, device or 3-byte file named ``model.bin`` is not called pickle-based."""
    what = not_weights(path)
    if what is not None:
        raise CheckpointError(f"{path} is {what}: not a weights file of any format (safetensors, GGUF, CTranslate2 "
                              "model.bin, or a pickle); download the model's weights again")


def refuse_pickle(path: Path) -> None:
    """Raise CheckpointError if ``path`` is (by name or by its first bytes) a pickle-based file.

    A path that is no weights file at all (a directory, FIFO, device, a file under 4 bytes) is refused as what
    it is (``refuse_not_weights``), not as a pickle, and is never opened.
    """
    refuse_not_weights(path)
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise CheckpointError(f"{path}: refusing a {path.suffix} file. {_CONVERT_HINT}")
    with path.open("rb") as f:
        head = f.read(4)
    if head[:2] in {b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05"}:
        raise CheckpointError(f"{path}: this is a pickle stream (first bytes {head[:2]!r}). {_CONVERT_HINT}")
    if head == b"PK\x03\x04":
        raise CheckpointError(f"{path}: this is a zip archive (the torch.save format, which holds a pickle). "
                              f"{_CONVERT_HINT}")


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Validate the safetensors header of ``path`` and return its tensor entries.

    Raises:
        CheckpointError: pickle-based file, truncated file, header that is not
            safetensors JSON, unknown dtype, or a tensor whose bytes do not fit.
    """
    regular_file(path, "safetensors file")
    refuse_pickle(path)
    size = path.stat().st_size
    if size < 8:
        raise CheckpointError(f"{path}: only {size} bytes — truncated, or not a safetensors file "
                              "(a safetensors file starts with an 8-byte header length). Download it again")
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path}: header length {n} does not fit in a {size}-byte file — the file is truncated or "
                "not a safetensors file. Download it again, or check that it is a .safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{path}: the safetensors header nests too deeply to be a tensor list; "
                              "the file is corrupt or not a safetensors file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: the safetensors header is not valid JSON ({err}); "
                              "the file is corrupt or not a safetensors file") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header must be a JSON object, got {type(header).__name__}")
    data_size = size - 8 - n
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise CheckpointError(f"{where}: header entry must have dtype, shape and data_offsets, got {info!r}")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise CheckpointError(f"{where}: unknown dtype {dtype!r}; known: {sorted(DTYPE_SIZES)}")
        if (not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offsets) or offsets[1] < offsets[0]):
            raise CheckpointError(f"{where}: malformed shape {shape!r} or data_offsets {offsets!r}")
        need = math.prod(shape) * DTYPE_SIZES[dtype]
        if offsets[1] - offsets[0] != need:
            raise CheckpointError(f"{where}: shape {shape} of {dtype} needs {need} bytes but data_offsets "
                                  f"{offsets} hold {offsets[1] - offsets[0]}; the header is corrupt")
        if offsets[1] > data_size:
            raise CheckpointError(f"{where}: its bytes end at {offsets[1]} but the file holds only {data_size} "
                                  "bytes of data — the file is truncated. Download it again")
        entries[name] = TensorEntry(name, path, dtype, tuple(shape), (offsets[0], offsets[1]))
    if not entries:
        raise CheckpointError(f"{path}: the safetensors file holds no tensors")
    return entries


# -- finding the files of a checkpoint ----------------------------------------
def read_json(path: str | os.PathLike[str], *, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in file ``path``, read strictly within ``limit`` bytes; every failure names the file.

    A file larger than ``limit`` is refused before it is read (its size as the file system states it) and
    at most ``limit`` + 1 bytes are ever read (a file that grows, or one whose stated size is 0, as in /proc).
    FIFOs and devices are refused (``regular_file``). NaN and duplicate keys are read as Python's ``json``
    reads them (the value, the last key); the readers of each field bound its value.

    Args:
        limit: ``MAX_CONFIG_BYTES`` for a settings file (config.json, tokenizer_config.json), else
            ``MAX_JSON_BYTES``.

    Raises:
        CheckpointError: too large, not UTF-8, not JSON, or nested too deeply.
    """
    path = regular_file(path, "JSON file")
    size = path.stat().st_size
    if size > limit:
        raise CheckpointError(f"{path}: {size:,} bytes is more than the {limit:,} read for a {path.name}; the file "
                              "is not what its name says — remove it")
    with path.open("rb") as f:
        raw = f.read(size + 1)  # (not f.read(limit + 1): that allocates the whole bound for every small file)
        while size < len(raw) <= limit:  # it grew, or its stated size is 0 (/proc): read on, at most to the bound
            more = f.read(min(1 << 20, limit + 1 - len(raw)))
            if not more:
                break
            raw += more
    if len(raw) > limit:
        raise CheckpointError(f"{path}: more than the {limit:,} bytes read for a {path.name}; the file is not what "
                              "its name says — remove it")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{path}: nests too deeply to be a config or tokenizer; fix or remove the file") from None
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); use the file that came "
                              "with the model") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err}); fix or remove the file") from None


def read_index(index: Path) -> dict[str, TensorEntry]:
    """Entries of a sharded checkpoint from its ``*.safetensors.index.json`` file."""
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: a shard index must hold a non-empty 'weight_map' {{tensor: file}}")
    entries: dict[str, TensorEntry] = {}
    shards: dict[str, dict[str, TensorEntry]] = {}
    for name, shard in weight_map.items():
        if shard not in shards:
            shard_path = index.parent / shard
            if not shard_path.is_file():
                raise CheckpointError(f"{index}: lists shard {shard!r}, which is missing from {index.parent}; "
                                      "download every shard the index names")
            shards[shard] = read_header(shard_path)
        if name not in shards[shard]:
            raise CheckpointError(f"{index}: says tensor {name!r} is in {shard}, but that shard does not hold it; "
                                  "the index and the shards come from different downloads")
        entries[name] = shards[shard][name]
    return entries


def find_weights(folder: Path) -> list[Path]:
    """The weight file(s) of a model folder: an index, ``model.safetensors``, or the one ``*.safetensors``."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        return indexes[:1]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    candidates = sorted(p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
    for candidate in candidates:  # a model.bin that is a directory, FIFO, device or 3 bytes is no pickle
        refuse_not_weights(candidate)
    pickled = [p.name for p in candidates]
    if pickled:
        raise CheckpointError(f"{folder}: holds only pickle-based weights ({', '.join(pickled)}). {_CONVERT_HINT}")
    raise CheckpointError(f"{folder}: no .safetensors file (or *.safetensors.index.json) in this folder; "
                          "point posenc at a safetensors file or a model folder that has one")


def read_vocab(folder: Path) -> tuple[list[str] | None, str | None]:
    """Token strings by id from ``vocab.txt``, ``tokenizer.json`` or ``vocab.json`` in ``folder``."""
    if (folder / "vocab.txt").is_file():
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return lines, str(folder / "vocab.txt")
    for name in ("tokenizer.json", "vocab.json"):
        path = folder / name
        if not path.is_file():
            continue
        data = read_json(path)
        model = data.get("model", {}) if name == "tokenizer.json" else {"vocab": data}
        vocab = model.get("vocab") if isinstance(model, dict) else None
        by_id: dict[int, str] = {}
        try:
            if isinstance(vocab, dict):  # WordPiece / BPE: {token: id}
                by_id = {_token_id(i): str(t) for t, i in vocab.items()}
            elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
                by_id = {i: str(p[0] if isinstance(p, list) and p else p) for i, p in enumerate(vocab)}
            added_tokens = data.get("added_tokens", []) if name == "tokenizer.json" else []
            for added in added_tokens if isinstance(added_tokens, list) else []:
                by_id[_token_id(added["id"])] = str(added["content"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: malformed vocabulary ({type(err).__name__}: {err}); "
                                  "fix or remove the file to inspect without token strings") from None
        if by_id:
            top = max(by_id)
            if top >= 2 * len(by_id) + 1024:  # ids are dense in real tokenizers; this one would need a huge list
                raise CheckpointError(f"{path}: token id {top} for only {len(by_id)} tokens — the ids are not a "
                                      "vocabulary's; fix or remove the file to inspect without token strings")
            return [by_id.get(i, f"<{i}>") for i in range(top + 1)], str(path)
    return None, None


def _token_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"token id {value!r} is not an integer >= 0")
    return value


def load_safetensors(path: str | Path) -> Checkpoint:
    """Open a safetensors checkpoint safely: validate every header, read config and vocabulary; no tensor is read.

    Args:
        path: a ``.safetensors`` file, a ``*.safetensors.index.json`` file, or a
            folder holding either (with ``config.json`` and a vocabulary file
            next to it when available). ``posenc.formats.load_checkpoint`` also
            opens GGUF files.

    Raises:
        FileNotFoundError: nothing at ``path``.
        CheckpointError: pickle-based or malformed files (see :func:`read_header`).
    """
    path = Path(path)
    if not path.is_dir():
        regular_file(path, "checkpoint file or folder")
    folder = path if path.is_dir() else path.parent
    weights = find_weights(path) if path.is_dir() else [path]
    entries: dict[str, TensorEntry] = {}
    for w in weights:
        found = read_index(w) if w.name.endswith(".index.json") else read_header(w)
        for name, entry in found.items():
            if name in entries:
                raise CheckpointError(f"{w}: tensor {name!r} is also in {entries[name].file}; "
                                      "point posenc at one checkpoint (or at its index file)")
            entries[name] = entry
    ckpt = Checkpoint(source=str(path), entries=entries)
    if (folder / "config.json").is_file():
        config = read_json(folder / "config.json", limit=MAX_CONFIG_BYTES)
        if not isinstance(config, dict):
            raise CheckpointError(f"{folder / 'config.json'}: must hold a JSON object")
        ckpt.config = config
    elif path.is_dir():
        ckpt.notes.append(f"no config.json in {folder}: tensor names alone decide; RoPE settings cannot be read")
    ckpt.vocab, ckpt.vocab_source = read_vocab(folder)
    return ckpt


def to_float64(t: Tensor) -> Tensor:
    """A detached float64 copy (bf16/fp16/fp8 tables are widened exactly)."""
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.float()
    return t.detach().to(torch.float64)
