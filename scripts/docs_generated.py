"""Regenerate (or check) the blocks of README.md and docs/*.md that quote a recorded results file.

A block is written between two markers, and its text is the file's (as a ``text`` code block):

    <!-- generated from benchmarks/rope/gemma3.txt (summary) -->
    ...
    <!-- end generated -->

``(summary)`` leaves out numeric tables (rows: lines that start with spaces and a digit; and the indented
header line above them), keeping the rest. Run ``python scripts/docs_generated.py`` to rewrite every block from its file,
``--check`` to list the blocks that differ (exit 1) — tests/test_docs_generated.py runs the check, so a
quoted figure cannot drift from its record.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- generated from (?P<path>\S+)(?: \((?P<mode>summary)\))? -->\n)(?P<body>.*?)"
                   r"(<!-- end generated -->)", re.S)
TABLE_ROW = re.compile(r"^\s+\d")


def render(path: str, mode: str | None) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.rstrip("\n").splitlines()
    if mode == "summary":  # drop each table: its rows and the indented header line above them
        rows = [bool(TABLE_ROW.match(line)) for line in lines]
        header = [line.startswith(" ") and i + 1 < len(lines) and rows[i + 1] for i, line in enumerate(lines)]
        lines = [line for line, row, head in zip(lines, rows, header) if not (row or head)]
    return "```text\n" + "\n".join(lines) + "\n```\n"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks").rglob("*.md"))]


def sync(check: bool) -> list[str]:
    """Rewrite every block (or, with ``check``, only report those that differ); returns the differing blocks."""
    stale = []
    for doc in documents():
        if not doc.is_file():
            continue
        text = doc.read_text(encoding="utf-8")

        def replace(m: re.Match) -> str:
            want = render(m["path"], m["mode"])
            if m["body"] != want:
                stale.append(f"{doc.relative_to(ROOT)}: block from {m['path']}")
            return m.group(1) + want + m.group(5)

        new = BLOCK.sub(replace, text)
        if not check and new != text:
            doc.write_text(new, encoding="utf-8")
    return stale


if __name__ == "__main__":
    check = "--check" in sys.argv[1:]
    stale = sync(check)
    for line in stale:
        print(("differs: " if check else "rewrote: ") + line)
    sys.exit(1 if check and stale else 0)
