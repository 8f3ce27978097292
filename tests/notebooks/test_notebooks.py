"""The course book (notebooks/ko, notebooks/en, built from notebooks/source by scripts/build_notebooks.py).

* Every notebook is built from its source and run top to bottom in a fresh Jupyter kernel, both languages; its
  outputs equal the committed ones apart from timings and memory addresses (``build_notebooks.comparable``), so the
  committed outputs are what ``make notebooks`` gives.
* Every lab result a notebook prints (``course.show``: a block ending with its ``posenc lab … --json - --out -``
  command) is exactly what that command's JSON renders to; the notebooks' own computations assert their agreement
  with the lab's numbers inside the notebook (an assertion error fails the run).
* Every exercise's reference solution passes its hidden check and its wrong answer fails it, in both languages.
* Korean renders in figures: matplotlib finds a Korean font and draws Hangul without a missing-glyph warning.

Skipped, saying why, where nbclient, nbformat or ipykernel is missing (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shlex
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from posenc.cli import main
from posenc.lab import book
from posenc.lab.core import LabConfig
from posenc.lab.course import CHAPTERS, render
from posenc.lab.experiments import EXPERIMENTS
from posenc.lab.i18n import ui
from posenc.lab.report import property_text

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[test]')")
pytest.importorskip("nbclient", reason="nbclient not installed (pip install -e '.[test]')")
pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install -e '.[test]'): no kernel to run in")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)
CHAPTER_MODULES = build.chapters()
CASES = [(c, lang) for c in CHAPTER_MODULES for lang in build.LANGS]
COMMAND = re.compile(r"posenc lab (?:--only (?P<id>\S+)|(?P<properties>properties)) (?P<flags>--dim .*--out -)$")


def ids(case: tuple[Any, str]) -> str:
    return f"{case[0].SLUG}-{case[1]}"


def printed(nb: Any) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.get("output_type") == "stream")


@pytest.fixture(scope="module")
def executed() -> dict[tuple[str, str], Any]:
    """Each notebook built from its source and executed in a fresh kernel."""
    runs = {}
    for chapter, lang in CASES:
        start = time.perf_counter()
        runs[chapter.SLUG, lang] = build.execute(build.notebook(chapter, lang), lang)
        print(f"{chapter.SLUG} ({lang}): {time.perf_counter() - start:.1f} s")
    return runs


def committed(chapter: Any, lang: str) -> Any:
    return nbformat.read(build.path_of(chapter, lang), as_version=4)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_committed_notebook_is_its_source_with_outputs(case):
    """The committed notebook has the cells the source builds, every code cell run once, in order, without errors."""
    chapter, lang = case
    nb = committed(chapter, lang)
    nbformat.validate(nb)
    fresh = build.notebook(chapter, lang)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in fresh.cells], \
        f"{build.path_of(chapter, lang)} is stale: run `make notebooks`"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run top to bottom once"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "no figure"
    source = "\n".join(c.source for c in code)
    assert "torch.testing.assert_close" in source or "assert " in source
    assert f'LANG = "{lang}"' in source
    if lang == "ko":  # the prose and the figure labels speak Korean
        assert re.search(r"[가-힣]", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))


def test_every_claim_and_exercise_is_in_the_book():
    shown, exercises = [], []
    for chapter in CHAPTER_MODULES:
        source = "\n".join(c.en for c in chapter.CELLS if c.kind == "code")
        shown += re.findall(r'course\.claim\("([^"]+)"\)\ncourse\.show', source)
        exercises += re.findall(r'book\.check\("([^"]+)", answer, LANG\);', source)
        assert 2 <= len(re.findall(r"book\.check\(", source)) <= 4, chapter.SLUG
    assert sorted(shown) == sorted(EXPERIMENTS) and len(shown) == len(set(shown))
    assert sorted(exercises) == sorted(book.EXERCISES)
    assert sorted(c for ch in CHAPTERS.values() for c in ch.claims) == sorted(EXPERIMENTS)


@pytest.mark.parametrize("lang", ["ko", "en"])
@pytest.mark.parametrize("exercise_id", list(book.EXERCISES))
def test_exercise_checks_pass_the_solution_and_fail_the_wrong_answer(exercise_id, lang, capsys):
    ex = book.EXERCISES[exercise_id]
    assert book.check(exercise_id, book.solution_value(ex.solution), lang) is True
    with pytest.raises(AssertionError, match=f"✗ {re.escape(exercise_id)} — ") as err:
        book.check(exercise_id, book.solution_value(ex.wrong), lang)
    assert bool(re.search(r"[가-힣]", str(err.value))) == (lang == "ko")
    assert book.check(exercise_id, ..., lang) is False
    assert "✓" in capsys.readouterr().out


def test_korean_renders_in_figures_without_missing_glyphs():
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    name, path = book.korean_font()
    assert Path(path).is_file()
    assert font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False) == path
    book.setup("ko")
    fig, ax = plt.subplots()
    ax.set_title("위치 인코딩 — 사인파 표")
    ax.set_xlabel("위치 i")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph … missing from font(s)" would be a UserWarning
        fig.canvas.draw()
    plt.close(fig)


def lab_json(command: str) -> dict[str, Any]:
    args = shlex.split(command)
    assert args[:2] == ["posenc", "lab"], command
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*args[1:], "--quiet"]) == 0, command
    return json.loads(out.getvalue())


def blocks(text: str, lang: str) -> list[tuple[str, str]]:
    marker = f"  {ui('command', lang)} "
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("■ "):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith(marker):
                found.append((line[len(marker):], "\n".join(current)))
                current = None
    return found


@pytest.mark.slow
def test_fresh_run_equals_the_committed_outputs(executed):
    for chapter, lang in CASES:
        assert build.comparable(executed[chapter.SLUG, lang]) == build.comparable(committed(chapter, lang)), \
            f"{build.path_of(chapter, lang)}: outputs differ from a fresh run (run `make notebooks`)"


@pytest.mark.slow
def test_printed_lab_numbers_equal_posenc_lab_json(executed):
    checked = 0
    for (slug, lang), nb in executed.items():
        text = printed(nb)
        by_flags: dict[str, list[str]] = {}
        for command, block in blocks(text, lang):
            match = COMMAND.search(command)
            assert match and match["id"], command
            by_flags.setdefault(match["flags"], []).append(block)
        for flags, shown in by_flags.items():
            exp_ids = [b.splitlines()[0].split()[1] for b in shown]
            data = lab_json(f"posenc lab --only {','.join(dict.fromkeys(exp_ids))} {flags}")
            records = {e["id"]: e for e in data["experiments"]}
            for exp_id, block in zip(exp_ids, shown):
                assert block == render(records[exp_id], data["config"], lang), (slug, lang, exp_id, flags)
                checked += 1
        marker = f"  {ui('command', lang)} "
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker + "posenc lab properties "):
                head = max(j for j in range(i) if lines[j].startswith(ui("col_name", lang)))
                names = [row.split()[0] for row in lines[head + 1:i]]
                rows = {r["name"]: r for r in lab_json(line[len(marker):])["properties"]}
                assert "\n".join(lines[head:i]) == property_text([rows[n] for n in names], lang=lang)
                checked += 1
        assert not blocks(text, lang) or ui("verdict_yes", lang) in text
    assert checked >= 2 * (2 * len(EXPERIMENTS) + 1)


def test_render_of_a_record_and_of_its_finding_agree():
    """The comparison above is meaningful: a JSON record renders like its finding, and a changed number shows."""
    from posenc.lab.experiments import run_lab
    from posenc.lab.report import to_json

    cfg = LabConfig(dim=16, length=64)
    finding = run_lab(cfg, only=["not-monotonic"])[0]
    record = json.loads(json.dumps(to_json([finding], cfg=cfg)))
    for lang in ("en", "ko"):
        assert render(record["experiments"][0], record["config"], lang) == render(finding, cfg, lang)
    record["experiments"][0]["values"]["min"] += 1e-3
    assert render(record["experiments"][0], record["config"], "en") != render(finding, cfg, "en")
