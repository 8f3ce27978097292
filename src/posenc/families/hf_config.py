"""Typed, bounded reading of an HF ``config.json``: every field a family reads goes through here.

A config is JSON a user downloaded: ``"tie_word_embeddings": "false"`` (a
string, truthy in Python), ``"num_hidden_layers": 1e9`` or ``"rope_theta":
"abc"`` must be refused by name, not reinterpreted. ``HFConfig`` wraps the
dict and hands out values of the declared type within declared bounds, or
raises ``ValueError`` naming the file, the field, the value and the fix.

>>> c = HFConfig({"hidden_size": 64, "tie_word_embeddings": False}, source="config.json")
>>> c.int("hidden_size"), c.bool("tie_word_embeddings", default=True)
(64, False)
>>> c.bool("attention_bias", default=False)
False
>>> HFConfig({"tie_word_embeddings": "false"}, source="config.json").bool("tie_word_embeddings")
Traceback (most recent call last):
...
ValueError: config.json: tie_word_embeddings must be true or false (a JSON boolean), got 'false'; write it without quotes
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Bounds no real checkpoint reaches (``posenc.validation``, shared with the GGUF reader and the model configs)
from posenc.validation import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH  # noqa: F401

_MISSING: Any = object()


class MissingField(ValueError):
    """A field the model type needs is absent (a ``ValueError``): a reader that measures what it can
    (``posenc inspect``) may go on without it, where a present but invalid value is refused."""


class HFConfig:
    """Read-only typed access to an HF config dict.

    Args:
        data: the parsed config.json (must be a JSON object).
        source: what to call it in messages (the file's path).

    Raises:
        ValueError: ``data`` is not a dict.
    """

    def __init__(self, data: Any, *, source: str = "config.json") -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: must hold a JSON object, got {type(data).__name__}")
        self.data, self.source = data, source

    def __contains__(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = None) -> Any:
        """The value as stored (None and absent both give ``default``)."""
        value = self.data.get(key)
        return default if value is None else value

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise MissingField(f"{self.source}: missing field {key!r}, which this model type needs; "
                                 "use the config.json that came with the weights")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1, maximum: int | None = None) -> Any:
        """An integer field in [minimum, maximum]; JSON numbers like 2048.0 count, 2048.5 or "2048" do not."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise ValueError(f"{self.source}: {key} must be an integer, got {value!r}")
        value = int(value)
        if value < minimum or (maximum is not None and value > maximum):
            upper = "" if maximum is None else f" and <= {maximum:,}"
            raise ValueError(f"{self.source}: {key} = {value:,} is out of range: it must be >= {minimum}{upper}; "
                             "the config is corrupt or not a real model's")
        return value

    def float(self, key: str, default: Any = _MISSING, *, above: float | None = None,
              minimum: float | None = None, maximum: float | None = None) -> Any:
        """A finite number field (> ``above``, >= ``minimum``, <= ``maximum`` where given)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.source}: {key} must be a finite number, got {value!r}")
        value = float(value)
        if (above is not None and not value > above) or (minimum is not None and value < minimum) or (
                maximum is not None and value > maximum):
            parts = [f"> {above:g}" if above is not None else "", f">= {minimum:g}" if minimum is not None else "",
                     f"<= {maximum:g}" if maximum is not None else ""]
            raise ValueError(f"{self.source}: {key} = {value!r} must be {' and '.join(p for p in parts if p)}")
        return value

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        """A JSON boolean (a string "false" is refused: Python would read it as true)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, bool):
            fix = "; write it without quotes" if isinstance(value, str) else ""
            raise ValueError(f"{self.source}: {key} must be true or false (a JSON boolean), got {value!r}{fix}")
        return value

    def str(self, key: str, default: Any = _MISSING, *, choices: tuple[str, ...] | None = None) -> Any:
        """A string field, optionally one of ``choices``."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise ValueError(f"{self.source}: {key} must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise ValueError(f"{self.source}: {key} = {value!r} is not supported; supported: {', '.join(choices)}")
        return value

    def list(self, key: str, default: Any = _MISSING, *, length: int | None = None) -> Any:
        """A list field (of a given length where stated)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list):
            raise ValueError(f"{self.source}: {key} must be a list, got {value!r}")
        if length is not None and len(value) != length:
            raise ValueError(f"{self.source}: {key} has {len(value)} entries, expected {length} (one per layer)")
        return value

    def dict(self, key: str, default: Any = _MISSING) -> Any:
        """An object field."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"{self.source}: {key} must be an object, got {value!r}")
        return value

    def ids(self, key: str, default: Any = _MISSING, *, below: int) -> Any:
        """Token ids: one integer or a list of integers, each in [0, below) (``eos_token_id`` is either)."""
        value = self._get(key, default)
        if value is default and default is not _MISSING:
            return value
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < below for i in items):
            raise ValueError(f"{self.source}: {key} must be a token id or a list of token ids from 0 to "
                             f"{below - 1:,}, got {value!r}")
        return list(items)

    def sub(self, key: str, data: Any) -> "HFConfig":
        """A nested object read with the same rules, its fields named ``key.field`` in messages."""
        return HFConfig(data, source=f"{self.source} ({key})")
