"""GGUF's error type, in a module of its own: the header walk, the architectures, the tokenizer and the reader all
raise it, and none of them imports another to do so (the only import is the base, ``CheckpointError``)."""

from __future__ import annotations

from posenc.formats.safetensors import CheckpointError


class GGUFError(CheckpointError):
    """A GGUF file that cannot be read: the message names the file, the tensor or key, and the fix."""
