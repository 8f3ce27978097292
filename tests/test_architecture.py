"""The import architecture: the contracts of ``.importlinter`` hold (imports run one way, down the layers, and no
modules import each other in a circle), and docs/architecture.md's layer table states the same layers.

import-linter builds the import graph with grimp, imports inside functions included. A broken contract fails
the test with import-linter's report: each import that goes against the table, with its line.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ROOT / ".importlinter"
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## Layers (who imports whom)"


def contract_layers() -> list[list[str]]:
    """The ``layers`` contract's layers, bottom first, each its sorted module names (an optional one's
    parentheses dropped)."""
    parser = configparser.ConfigParser()
    parser.read(CONTRACTS, encoding="utf-8")
    contract = parser["importlinter:contract:layers"]
    assert contract["containers"].strip() == "posenc" and contract["exhaustive"].strip() == "true"
    lines = [line.strip() for line in contract["layers"].strip().splitlines() if line.strip()]
    return [sorted(name.strip().strip("()") for name in re.split(r"[|:]", line)) for line in reversed(lines)]


def doc_layers() -> list[tuple[str, list[str]]]:
    """docs/architecture.md's layer table, bottom row first: (layer, sorted module names of its "modules" column,
    ``name.py`` and ``name/`` written without the suffix)."""
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/architecture.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:2] == ["layer", "modules"], header
    out = []
    for row in rows[2:]:  # after the header and its --- row
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = [re.sub(r"(\.py|/)$", "", n) for n in re.findall(r"`([^`]+)`", cells[1])]
        out.append((cells[0], sorted(names)))
    return list(reversed(out))


def test_the_doc_table_and_the_contracts_list_the_same_layers():
    doc, contract = doc_layers(), contract_layers()
    assert [names for _, names in doc] == list(reversed(contract)), (
        "docs/architecture.md's layer table (top row first, modules per row) and .importlinter's layers "
        f"(top first) differ:\n  doc:       {[(layer, names) for layer, names in doc]}\n"
        f"  contracts: {list(reversed(contract))}\nChange both together.")


def test_every_module_under_posenc_is_in_one_layer():
    """What ``exhaustive = true`` makes import-linter check, here without it: a new module or package must be
    given its layer (in the table and the contracts) before it can be imported anywhere."""
    src = ROOT / "src" / "posenc"
    children = {p.stem for p in src.glob("*.py") if p.name != "__init__.py"}
    children |= {p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    listed = [name for layer in contract_layers() for name in layer]
    assert len(listed) == len(set(listed)), f"a module in two layers: {sorted(listed)}"
    assert sorted(children - set(listed)) == [], "modules of posenc in no layer of .importlinter"


def test_the_import_contracts_hold():
    pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install -e '.[test]'")
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         str(CONTRACTS), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = run.stdout + run.stderr
    assert run.returncode == 0, f"an import goes against docs/architecture.md's layers (lint-imports):\n{report}"
    assert "0 broken" in report, report
