"""Every block of README.md and docs/ that quotes a recorded results file equals that file (no hand-typed copy)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("docs_generated", ROOT / "scripts" / "docs_generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_equal_their_records():
    stale = _tool().sync(check=True)
    assert not stale, f"run `python scripts/docs_generated.py` to regenerate: {stale}"


def test_a_block_that_drifts_is_caught(tmp_path, monkeypatch):
    tool = _tool()
    (tmp_path / "docs").mkdir()
    (tmp_path / "rec.txt").write_text("L0 8192\n  0  1.0\nfindings: none\n")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text("x\n<!-- generated from rec.txt (summary) -->\n```text\nL0 4096\n```\n<!-- end generated -->\n")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert tool.sync(check=True) == ["docs/a.md: block from rec.txt"]
    assert tool.sync(check=False) and tool.sync(check=True) == []
    assert "L0 8192\nfindings: none" in doc.read_text() and "1.0" not in doc.read_text()
