"""Finished cells on disk: one JSON file per cell, written atomically; a rerun skips what is done.

A cell is saved with the settings that produced it; a saved cell counts as
done only when those settings equal the current ones (a changed model, text
or length recomputes it). Passkey cells are saved after every trial, so an
interrupted cell resumes at its next trial. ``CellStore(None)`` keeps cells in
memory only (``--out -``).

Cells are read by ``posenc.validation.read_json`` (regular files only, size-,
depth- and UTF-8-checked): a cell that is not one — garbage, ``[]``, a FIFO —
is recomputed by a run (and named in its log) and named and left out by
``--report-only`` (``CellStore.unreadable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc.checkpoint import atomic_write_text
from posenc.validation import UnreadableFile, dumps, read_json

#: What to do about a cell file that is not a cell.
CELL_FIX = "a run recomputes it (over the file); delete it to leave it out of a --report-only"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cell_name(*parts: Any) -> str:
    """A file-safe cell name from its coordinates, e.g. ``loss-bible-rope-yarn-x2-T16384``."""
    return "-".join(_UNSAFE.sub("_", str(p)) for p in parts if p is not None and p != "")


class CellStore:
    """Cells under ``root/cells/<name>.json`` (or in memory when ``root`` is None)."""

    def __init__(self, root: str | Path | None, *, log: Callable[[str], None] | None = None) -> None:
        self.root = None if root is None else Path(root) / "cells"
        self._memory: dict[str, dict[str, Any]] = {}
        self.log = log
        #: the cell files found unreadable so far, each with why (``UnreadableFile``)
        self.unreadable: dict[Path, UnreadableFile] = {}

    def _read(self, path: Path) -> dict[str, Any] | None:
        """The cell in ``path``; None when it is gone or is not a cell (then recorded and logged once)."""
        try:
            cell = read_json(path, "cell", fix=CELL_FIX)
            if not isinstance(cell.get("kind"), str) or not isinstance(cell.get("settings"), dict):
                raise UnreadableFile(path, "a JSON object without a cell's kind and settings", CELL_FIX)
        except UnreadableFile as err:
            if path not in self.unreadable and self.log is not None:
                self.log(f"not a cell, recomputed: {err.path} ({err.reason})")
            self.unreadable[path] = err
            return None
        except FileNotFoundError:  # removed meanwhile
            return None
        return cell

    def load(self, name: str, settings: dict[str, Any]) -> dict[str, Any] | None:
        """The saved cell ``name`` if it was made with ``settings``, else None."""
        cell = self.saved(name)
        return cell if cell is not None and cell.get("settings") == settings else None

    def saved(self, name: str) -> dict[str, Any] | None:
        """The saved cell ``name`` whatever its settings (None: none, or not readable JSON — recomputed)."""
        if self.root is None:
            return self._memory.get(name)
        path = self.root / f"{name}.json"
        if not path.exists() and not path.is_symlink():
            return None
        return self._read(path)  # not a cell (garbage, [], a FIFO): None, recomputed over

    def save(self, name: str, cell: dict[str, Any]) -> None:
        self._memory[name] = cell
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / f"{name}.json", dumps(cell))

    def all(self) -> list[dict[str, Any]]:
        """Every saved cell (from disk when there is a root), sorted by name; files that are not cells are left
        out and recorded in ``unreadable``."""
        if self.root is None:
            return [self._memory[k] for k in sorted(self._memory)]
        if not self.root.is_dir():
            return []
        cells = [self._read(p) for p in sorted(self.root.glob("*.json"))]
        return [c for c in cells if c is not None]
