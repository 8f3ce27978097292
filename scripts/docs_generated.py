"""Regenerate (or check) the blocks of README.md and docs/*.md that quote a recorded results file.

A block is written between two markers, and its text is the file's:

    <!-- generated from benchmarks/rope/gemma3.txt (summary) -->
    ...
    <!-- end generated -->

What of the file is quoted is chosen by the mode in parentheses (none: the whole file):

``(summary)``
    leaves out numeric tables (rows: lines that start with spaces and a digit; and the indented header line
    above them), keeping the rest.
``(lines A-B)``
    lines A to B of the file, counted from 1 (``(lines A-)``: A to the end).
``(match REGEX)``
    the lines that match the regular expression (Python ``re.search``).
``(section HEADING)``
    a Markdown file's section under the heading whose text is HEADING (any level), up to the next heading of
    the same or a higher level, without the heading line itself.
``(table N)``
    the N-th Markdown table of the file (counted from 1), its rows as written.

A ``.md`` file's text is quoted as Markdown (its tables render as tables); any other file's as a ``text``
code block. Run ``python scripts/docs_generated.py`` to rewrite every block from its file, ``--check`` to list
the blocks that differ (exit 1) — tests/test_docs_generated.py runs the check, so a quoted figure cannot drift
from its record.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- generated from (?P<path>\S+)(?: \((?P<mode>summary|lines|match|section|table)"
                   r"(?: (?P<arg>.*?))?\))? -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
TABLE_ROW = re.compile(r"^\s+\d")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _summary(lines: list[str]) -> list[str]:
    """Drop each numeric table: its rows and the indented header line above them."""
    rows = [bool(TABLE_ROW.match(line)) for line in lines]
    header = [line.startswith(" ") and i + 1 < len(lines) and rows[i + 1] for i, line in enumerate(lines)]
    return [line for line, row, head in zip(lines, rows, header) if not (row or head)]


def _lines(lines: list[str], arg: str) -> list[str]:
    m = re.fullmatch(r"(\d+)-(\d*)", arg or "")
    if not m:
        raise ValueError(f"(lines {arg}): give A-B or A-, line numbers from 1")
    start, end = int(m[1]), int(m[2]) if m[2] else len(lines)
    if not 1 <= start <= end <= len(lines):
        raise ValueError(f"(lines {arg}): the file has {len(lines)} lines")
    return lines[start - 1:end]


def _section(lines: list[str], title: str) -> list[str]:
    for i, line in enumerate(lines):
        h = HEADING.match(line)
        if h and h[2] == title:
            level, body = len(h[1]), []
            for rest in lines[i + 1:]:
                h2 = HEADING.match(rest)
                if h2 and len(h2[1]) <= level:
                    break
                body.append(rest)
            while body and not body[0].strip():
                body.pop(0)
            while body and not body[-1].strip():
                body.pop()
            return body
    raise ValueError(f"(section {title}): no heading with that text")


def _table(lines: list[str], arg: str) -> list[str]:
    tables, current = [], []
    for line in lines + [""]:
        if line.lstrip().startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    n = int(arg) if (arg or "").isdigit() else 0
    if not 1 <= n <= len(tables):
        raise ValueError(f"(table {arg}): the file has {len(tables)} Markdown tables")
    return tables[n - 1]


def render(path: str, mode: str | None, arg: str | None = None) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.rstrip("\n").splitlines()
    if mode == "summary":
        lines = _summary(lines)
    elif mode == "lines":
        lines = _lines(lines, arg)
    elif mode == "match":
        lines = [line for line in lines if re.search(arg or "", line)]
    elif mode == "section":
        lines = _section(lines, arg or "")
    elif mode == "table":
        lines = _table(lines, arg)
    if not lines:
        raise ValueError(f"{path} ({mode} {arg}): nothing to quote")
    if path.endswith(".md"):
        return "\n".join(lines) + "\n"
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
            try:
                want = render(m["path"], m["mode"], m["arg"])
            except (OSError, ValueError) as e:
                stale.append(f"{doc.relative_to(ROOT)}: block from {m['path']} cannot be rendered: {e}")
                return m.group(0)
            if m["body"] != want:
                stale.append(f"{doc.relative_to(ROOT)}: block from {m['path']}")
            return m.group(1) + want + m.group(6)

        new = BLOCK.sub(replace, text)
        if not check and new != text:
            doc.write_text(new, encoding="utf-8")
    return stale


if __name__ == "__main__":
    check = "--check" in sys.argv[1:]
    stale = sync(check)
    for line in stale:
        print(("differs: " if check else "rewrote: ") + line)
    sys.exit(1 if stale and (check or any("cannot be rendered" in line for line in stale)) else 0)
