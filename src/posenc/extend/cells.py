"""Finished cells on disk: one JSON file per cell, written atomically; a rerun skips what is done.

A cell is saved with the settings that produced it; a saved cell counts as
done only when those settings equal the current ones (a changed model, text
or length recomputes it). Passkey cells are saved after every trial, so an
interrupted cell resumes at its next trial. ``CellStore(None)`` keeps cells in
memory only (``--out -``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from posenc.validation import dumps
from posenc.checkpoint import atomic_write_text

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cell_name(*parts: Any) -> str:
    """A file-safe cell name from its coordinates, e.g. ``loss-bible-rope-yarn-x2-T16384``."""
    return "-".join(_UNSAFE.sub("_", str(p)) for p in parts if p is not None and p != "")


class CellStore:
    """Cells under ``root/cells/<name>.json`` (or in memory when ``root`` is None)."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = None if root is None else Path(root) / "cells"
        self._memory: dict[str, dict[str, Any]] = {}

    def load(self, name: str, settings: dict[str, Any]) -> dict[str, Any] | None:
        """The saved cell ``name`` if it was made with ``settings``, else None."""
        cell = self.saved(name)
        return cell if cell is not None and cell.get("settings") == settings else None

    def saved(self, name: str) -> dict[str, Any] | None:
        """The saved cell ``name`` whatever its settings (None: none, or not readable JSON — recomputed)."""
        if self.root is None:
            return self._memory.get(name)
        path = self.root / f"{name}.json"
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # not ours to trust: recompute
            return None

    def save(self, name: str, cell: dict[str, Any]) -> None:
        self._memory[name] = cell
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / f"{name}.json", dumps(cell))

    def all(self) -> list[dict[str, Any]]:
        """Every saved cell (from disk when there is a root), sorted by name."""
        if self.root is None:
            return [self._memory[k] for k in sorted(self._memory)]
        if not self.root.is_dir():
            return []
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.root.glob("*.json"))]
