"""Every block of README.md and docs/ that quotes a recorded results file equals that file (no hand-typed copy)."""

from __future__ import annotations

import importlib.util
import re
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


# Pages and sections whose tables state definitions, not measurements: (page, section heading, reason).
DEFINITION_TABLES = (
    ("docs/schemes.md", "The catalogue", "each scheme's formula and constants (0.1·ln factor + 1, eps 0.01, …)"),
    ("docs/lab.md", "The claims", "what each lab experiment computes and its rule (cosine 0.8, dropout p = 0.1 are inputs)"),
    ("docs/layers.md", None, "model families' layer plans: sizes and versions (Mistral v0.1), no measurement"),
)


def _undeclared_measured_rows(text: str, page: str) -> list[str]:
    """Markdown table rows holding a decimal number outside generated blocks, code fences and allowed sections."""
    import re

    text = re.sub(r"<!-- generated from .*?<!-- end generated -->", "", text, flags=re.S)
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    allowed = {section for p, section, _ in DEFINITION_TABLES if p == page}
    if None in allowed:
        return []
    found, headings = [], []  # the headings above the line, outermost first: a section's subsections are in it
    for line in text.splitlines():
        h = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if h:
            headings = [(level, title) for level, title in headings if level < len(h[1])] + [(len(h[1]), h[2])]
        elif (re.match(r"^\s*\|\s", line) and re.search(r"\d\.\d", line)
              and not allowed & {title for _, title in headings}):
            found.append(f"{page} ({headings[-1][1] if headings else None}): {line[:100]}")
    return found


def test_docs_type_no_measurement_in_a_table():
    """A table row with a decimal number in docs/*.md is a measurement: it must come from a generated block.

    Outside `<!-- generated from FILE -->` blocks, code fences and the DEFINITION_TABLES sections (formulas and
    constants), no Markdown table row in docs/ may hold a decimal number — quote the results file instead.
    """
    found = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        found += _undeclared_measured_rows(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))
    assert not found, "typed measurements (quote their results file through a generated block):\n" + "\n".join(found)


def test_the_measurement_rule_sees_typed_rows_and_skips_generated_ones():
    text = ("# P\n\n## R\n\n| a | 1.5 |\n\n<!-- generated from r.md -->\n| b | 2.5 |\n<!-- end generated -->\n"
            "\n```\n| c | 3.5 |\n```\n\n## The claims\n\n### One\n\n| d | 0.8 |\n")
    assert _undeclared_measured_rows(text, "docs/x.md") == ["docs/x.md (R): | a | 1.5 |",
                                                             "docs/x.md (One): | d | 0.8 |"]
    assert _undeclared_measured_rows(text, "docs/lab.md") == ["docs/lab.md (R): | a | 1.5 |"]


# Prose figures with a unit of time, speed or memory, or a "×" ratio: a number typed next to such a unit is a
# measurement unless it states a definition or a limit. The allowed ones: (page, regex of the phrase, reason).
PROSE_UNIT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?)?"
                        r"(?:\s(?:ms|µs|s|min|minutes?|seconds?|hours?|tok/s|tokens/s|it/s|[KMGT]i?B)(?![\w/])"
                        r"|×(?![\d(]))")  # a ratio is written 1.08×; "512 × 384" and "4 × the weights" are products
DEFINITION_PHRASES = (
    ("docs/explore.md", r"estimated above 1 s is refused", "the explorer's request limit (a cap, not a timing)"),
    ("docs/explore.md", r"idle for 30 s are dropped", "the server's idle-connection timeout (a setting)"),
    ("docs/architecture.md", r"stages after 2 s", "when progress lines start (a threshold in posenc.progress)"),
    ("docs/performance.md", r"at most 32 MiB|is 32 MiB|~1 MiB blocks|16 KiB ahead",
     "the benchmark's memory budget, the size of a stated shape, the kernels' block and prefetch sizes (design)"),
    ("docs/reliability.md", r"\b(?:64|256) MiB|\b500 MB|\b[123] [GK]iB\b",
     "the size limits posenc enforces on input files and the fuzz child's memory cap"),
    ("docs/reliability.md", r"\b(?:30|120) s deadline|deadline is now 120 s", "the model-file build deadline (a limit)"),
    ("docs/lab.md", r"> 10×|> 5×|< 2×", "the pass rules of lab claims (thresholds the experiment checks)"),
    ("docs/performance.md", r"goal: 1\.5× forward, 2× fwd\+bwd", "an issue's speed goal (a target, not a result)"),
    ("docs/performance.md", r"logits 256 MiB at a", "perplexity's logits chunk (LOGIT_BYTES, a design constant)"),
    ("docs/extend.md", r"\"2\.5× fewer steps\"", "a quoted claim of the paper the experiment tests"),
    ("docs/translation.md", r"more than 1\.8× off|about 3× the typical", "the data filter's ratio and the x3 split's definition"),
)


def _undeclared_prose_figures(text: str, page: str) -> list[str]:
    """Numbers with a time, speed or memory unit, or a "×" ratio, outside generated blocks, code and the allow-list."""
    text = re.sub(r"<!-- generated from .*?<!-- end generated -->", lambda m: "\n" * m[0].count("\n"), text, flags=re.S)
    text = re.sub(r"^\s*```.*?^\s*```", lambda m: "\n" * m[0].count("\n"), text, flags=re.S | re.M)
    allowed = [phrase for p, phrase, _ in DEFINITION_PHRASES if p == page]
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"`[^`]*`", "``", line)
        for phrase in allowed:
            line = re.sub(phrase, "", line)
        found += [f"{page}:{number}: {m[0]!r} in {line.strip()[:100]}" for m in PROSE_UNIT.finditer(line)]
    return found


def test_docs_type_no_measurement_in_prose():
    """No number with a unit of time, speed or memory (s, ms, tok/s, MiB, GB, …) or "×" ratio in the prose of
    README.md and docs/*.md outside generated blocks and code: quote its results file, or allow-list it in
    DEFINITION_PHRASES with the reason it is a definition or a limit."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found += _undeclared_prose_figures(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))
    assert not found, "typed measurements in prose (quote their results file through a generated block):\n" + \
        "\n".join(found)


def test_the_prose_rule_sees_units_and_ratios_and_skips_blocks_code_and_definitions():
    text = ("Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.\n"
            "<!-- generated from r.txt -->\n5 s\n<!-- end generated -->\n```\n7 ms\n```\n"
            "A `--timeout 9 s` flag, 4,096 tokens, a 404s page, ×8 linear, 2× faster.\n"
            "A request estimated above 1 s is refused.\n")
    found = [f.split(": ")[1] for f in _undeclared_prose_figures(text, "docs/explore.md")]
    assert found == ["'62.9 tokens/s' in Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.",
                     "'1.08×' in Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.",
                     "'0.6 s' in Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.",
                     "'963 MiB' in Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.",
                     "'2–6 s' in Decode at 62.9 tokens/s, 1.08× llama.cpp, load 0.6 s, peak 963 MiB, 2–6 s each.",
                     "'2×' in A `` flag, 4,096 tokens, a 404s page, ×8 linear, 2× faster."]
