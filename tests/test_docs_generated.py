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


def test_modes_quote_lines_matches_sections_and_tables(tmp_path, monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    (tmp_path / "r.txt").write_text("a 1\nb 2\nc 3\n")
    (tmp_path / "r.md").write_text("# T\n\n## One\n\nx\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n### Sub\n\ny\n\n## Two\n\nz\n")
    assert tool.render("r.txt", "lines", "2-3") == "```text\nb 2\nc 3\n```\n"
    assert tool.render("r.txt", "lines", "2-") == "```text\nb 2\nc 3\n```\n"
    assert tool.render("r.txt", "match", "^[ac]") == "```text\na 1\nc 3\n```\n"
    assert tool.render("r.md", "section", "One") == "x\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n### Sub\n\ny\n"
    assert tool.render("r.md", "table", "1") == "| a | b |\n|---|---|\n| 1 | 2 |\n"
    for mode, arg in (("lines", "3-9"), ("section", "Three"), ("table", "2"), ("match", "^q")):
        try:
            tool.render("r.md" if mode in ("section", "table") else "r.txt", mode, arg)
        except ValueError:
            continue
        raise AssertionError(f"({mode} {arg}) should be refused")


def test_a_block_that_cannot_be_rendered_is_reported(tmp_path, monkeypatch):
    tool = _tool()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("<!-- generated from missing.txt -->\n<!-- end generated -->\n")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert "cannot be rendered" in tool.sync(check=True)[0]


def test_readme_is_a_short_user_guide_not_a_diary():
    """README.md is the user guide: at most 400 lines, no changelog (CHANGELOG.md), no timestamps, no typed test count."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400, f"README.md has {len(text.splitlines())} lines; move detail to docs/"
    assert "UTC" not in text, "README.md quotes a UTC timestamp: diary lines belong in CHANGELOG.md or benchmarks/"
    assert not re.search(r"^#+ .*changelog", text, re.I | re.M), "the changelog lives in CHANGELOG.md"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "README.md quotes a dated entry; dates belong in CHANGELOG.md"
    assert not re.search(r"[\d,]+ tests\b", text), "README.md types a test count; it goes stale"
    assert (ROOT / "CHANGELOG.md").is_file()
