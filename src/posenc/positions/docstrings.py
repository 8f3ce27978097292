"""What a scheme's docstring says, as plain text: its one-line summary, its paper, what it was verified against,
and the sentence its ``Args:`` section gives each option.

The docstrings are written for Sphinx (double backquotes, ``:class:`` roles); a terminal shows them without that
markup (``plain``). Used by the registry (``posenc.positions.summary`` / ``about``), which ``posenc schemes``
prints.
"""

from __future__ import annotations

import inspect
import re

_ROLE = re.compile(r":[a-z]+:`~?([^`]*)`")
_LITERAL = re.compile(r"``(.*?)``")
_INTERPRETED = re.compile(r"`([^`]*)`")
_YEAR = re.compile(r"\b(1[89]|20)\d\d\b")
_VERIFIED = re.compile(r"^reference used to verify:\s*", re.IGNORECASE)


def plain(text: str) -> str:
    """``text`` without reStructuredText markup (``x``, :func:`x`, `x` → x) and with its lines joined."""
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    return " ".join(text.split())


def paragraphs(doc: str | None) -> list[str]:
    """The docstring's paragraphs (blank-line separated), each as one plain line."""
    return [plain(p) for p in inspect.cleandoc(doc or "").split("\n\n") if p.strip()]


def first_sentence(text: str) -> str:
    """The first sentence of ``text``: up to the first '.', '?' or '!' that is followed by a space or the end,
    outside parentheses and quotes, and is not the point of "et al." / "e.g." / "i.e."; the whole text when
    there is no such point (a summary is never cut inside a word or a bracket)."""
    depth, quoted = 0, False
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == '"':
            quoted = not quoted
        elif ch in ".?!" and depth == 0 and not quoted and (i + 1 == len(text) or text[i + 1] == " "):
            before = text[:i].split()[-1:] or [""]
            if before[0] in ("al", "e.g", "i.e", "cf", "vs", "Eq", "Sec", "§"):
                continue
            return text[: i + 1]
    return text


def summary(doc: str | None) -> str:
    """The first sentence of the docstring's first paragraph, as plain text."""
    parts = paragraphs(doc)
    return first_sentence(parts[0]) if parts else ""


def _parentheticals(text: str) -> list[tuple[int, int]]:
    """(start, end) of each top-level parenthesised group of ``text``, the brackets included."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                out.append((start, i + 1))
    return out


def paper(summary_text: str) -> str | None:
    """The paper a summary cites: its first parenthesised group that names a year ("Press et al., 2022"), or for
    "Shaw et al. (2018) …" the names before the year; None when the summary cites none."""
    for start, end in _parentheticals(summary_text):
        inner = summary_text[start + 1: end - 1].strip()
        if not _YEAR.search(inner):
            continue
        if _YEAR.fullmatch(inner):  # "Shaw et al. (2018)": the authors come before the bracket
            words = summary_text[:start].split()
            names = words[-3:] if words[-2:-1] == ["et"] else words[-1:]
            return f"{' '.join(names)} ({inner})"
        return inner
    return None


def verified_against(doc: str | None) -> str | None:
    """The docstring's "Reference used to verify: …" paragraph (the reference implementation or formula the
    tests compare with), without that lead; None when it has none."""
    for p in paragraphs(doc):
        if "reference used to verify" in p.lower():
            return _VERIFIED.sub("", p)
    return None


def option_help(doc: str | None) -> dict[str, str]:
    """The ``Args:`` section as {option: its sentence}; "head_dim, base: as for RoPE." gives each name the
    sentence."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        at = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return {}
    entries: list[tuple[str, list[str]]] = []
    indent = None
    for line in lines[at + 1:]:
        if not line.strip():
            if entries:
                break
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break
        head, sep, rest = line.strip().partition(":")
        if width == indent and sep:
            entries.append((head, [rest]))
        elif entries:
            entries[-1][1].append(line.strip())
    out: dict[str, str] = {}
    for head, text in entries:
        sentence = plain(" ".join(text))
        for name in head.split(","):
            out[name.strip()] = sentence
    return out
