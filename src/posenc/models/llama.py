"""Deprecated: the universal decoder moved to ``posenc.models.decoder`` under the names of what it is.

``LlamaConfig`` → ``DecoderConfig``, ``LlamaLM`` → ``Decoder``, ``build_llama`` → ``build_decoder``. The old
names still work for this release, each with a DeprecationWarning (they are the same objects, not a second
class); everything else of ``posenc.models.decoder`` is re-exported under its own name.
"""

from __future__ import annotations

import warnings
from typing import Any

from posenc.models import decoder as _decoder
from posenc.models.decoder import *  # noqa: F403 - the module's former contents, under their own names

#: Former name → current name (in ``posenc.models.decoder``).
RENAMED = {"LlamaConfig": "DecoderConfig", "LlamaLM": "Decoder", "build_llama": "build_decoder"}


def __getattr__(name: str) -> Any:
    if name in RENAMED:
        warnings.warn(f"posenc.models.llama.{name} is deprecated: use posenc.models.decoder.{RENAMED[name]} "
                      "(the same object; the old name goes in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(_decoder, RENAMED[name])
    try:
        return getattr(_decoder, name)
    except AttributeError:
        raise AttributeError(f"module 'posenc.models.llama' has no attribute {name!r}") from None
