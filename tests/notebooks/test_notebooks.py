"""The course notebooks (notebooks/*.ipynb): each runs top to bottom in a fresh Jupyter kernel, and every
number it prints equals what ``posenc lab --json -`` gives at the same settings.

How the numbers are compared: every result a notebook prints is ``posenc.lab.course.render`` of one finding,
ending with the ``posenc lab --only ID --dim … --seed … --json - --out -`` command that gives the same numbers.
The test reads those commands from the executed notebook, runs each settings group once through
``posenc.cli.main`` (what the console script ``posenc`` calls), renders every JSON record the same way and
requires the notebook's printed block to be exactly that text. The property table printed by notebook 3 is
compared with ``posenc lab properties --json -`` the same way.

Skipped, saying why, where nbclient, nbformat or ipykernel is missing (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import shlex
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import posenc
from posenc.cli import main
from posenc.lab.core import LabConfig
from posenc.lab.course import CHAPTERS, render
from posenc.lab.experiments import EXPERIMENTS
from posenc.lab.i18n import ui
from posenc.lab.report import property_text

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (pip install -e '.[test]')")
nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (pip install -e '.[test]')")
pytest.importorskip("ipykernel", reason="ipykernel not installed (pip install -e '.[test]'): no kernel to run in")

ROOT = Path(__file__).resolve().parents[2]
#: The language each notebook's kernel speaks (its locale, which ``course.language()`` follows): each notebook
#: runs once, and both output languages are exercised end to end.
KERNEL_LANG = {"000": "ko", "001": "en", "002": "ko", "003": "en"}
LOCALE = {"ko": "ko_KR.UTF-8", "en": "en_US.UTF-8"}
COMMAND = re.compile(r"posenc lab (?:--only (?P<id>\S+)|(?P<properties>properties)) (?P<flags>--dim .*--out -)$")


def printed(nb: Any) -> str:
    """Everything the notebook's code cells printed, in order."""
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.get("output_type") == "stream")


@pytest.fixture(scope="module")
def executed() -> dict[str, tuple[Any, str, float]]:
    """Each chapter's notebook executed in its own kernel: (notebook, printed text, CPU seconds of its kernel)."""
    src = str(Path(posenc.__file__).resolve().parents[1])  # the kernel imports the posenc these tests import
    runs = {}
    for article, chapter in CHAPTERS.items():
        nb = nbformat.read(ROOT / chapter.notebook, as_version=4)
        env = {**os.environ, "LC_ALL": "", "LC_MESSAGES": "", "LANG": LOCALE[KERNEL_LANG[article]],
               "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               "MPLBACKEND": "agg"}
        client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                         resources={"metadata": {"path": str(ROOT / "notebooks")}})
        start, wall = _children_cpu(), time.perf_counter()
        client.execute(env=env)  # the kernel has exited (and been reaped) when this returns
        runs[article] = (nb, printed(nb), _children_cpu() - start)
        print(f"{chapter.notebook}: {runs[article][2]:.1f} s CPU, {time.perf_counter() - wall:.1f} s wall")
    return runs


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def blocks(text: str, lang: str) -> list[tuple[str, str]]:
    """(command, printed block) for every finding the text shows: from its '■ id' line to its command line."""
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


def lab_json(command: str) -> dict[str, Any]:
    """Run ``command`` (a ``posenc lab … --json - --out -`` line) through the CLI and parse its stdout."""
    args = shlex.split(command)
    assert args[:2] == ["posenc", "lab"], command
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*args[1:], "--quiet"]) == 0, command
    return json.loads(out.getvalue())


@pytest.mark.slow
def test_every_notebook_runs_top_to_bottom(executed):
    total = 0.0
    for article, (nb, text, seconds) in executed.items():
        lang = KERNEL_LANG[article]
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.execution_count is not None for c in code), article
        assert not [o for c in code for o in c.outputs if o.output_type == "error"], article
        shown = [block.splitlines()[0].split()[1] for _, block in blocks(text, lang)]
        for exp_id in CHAPTERS[article].claims:  # each claim at the articles' settings, then once changed
            assert shown.count(exp_id) == 2, (article, exp_id, shown)
        assert text.count("  → ") == len(CHAPTERS[article].claims)  # one "try this" verdict per claim
        assert ui("verdict_yes", lang) in text  # the kernel spoke the language its locale asked for
        total += seconds
    print(f"all notebooks: {total:.1f} s CPU")


@pytest.mark.slow
def test_printed_numbers_equal_posenc_lab_json(executed):
    checked = 0
    for article, (_, text, _) in executed.items():
        lang = KERNEL_LANG[article]
        by_command: dict[str, list[str]] = {}
        for command, block in blocks(text, lang):
            match = COMMAND.search(command)
            assert match and match["id"], command
            by_command.setdefault(match["flags"], []).append(block)
        for flags, shown in by_command.items():  # one CLI run per settings group
            ids = [b.splitlines()[0].split()[1] for b in shown]
            data = lab_json(f"posenc lab --only {','.join(dict.fromkeys(ids))} {flags}")
            records = {e["id"]: e for e in data["experiments"]}
            for exp_id, block in zip(ids, shown):
                assert block == render(records[exp_id], data["config"], lang), (article, exp_id, flags)
                checked += 1
        marker = f"  {ui('command', lang)} "
        for i, line in enumerate(lines := text.splitlines()):
            if not line.startswith(marker + "posenc lab properties "):
                continue
            head = max(j for j in range(i) if lines[j].startswith(ui("col_name", lang)))
            names = [row.split()[0] for row in lines[head + 1:i]]
            rows = {r["name"]: r for r in lab_json(line[len(marker):])["properties"]}
            assert "\n".join(lines[head:i]) == property_text([rows[n] for n in names], lang=lang)
            checked += 1
    assert checked >= 2 * len(EXPERIMENTS) + 1


def test_chapters_hold_every_claim_once():
    claims = [c for chapter in CHAPTERS.values() for c in chapter.claims]
    assert sorted(claims) == sorted(EXPERIMENTS) and len(claims) == len(set(claims))
    assert list(CHAPTERS) == sorted(CHAPTERS) and set(KERNEL_LANG) == set(CHAPTERS)


@pytest.mark.parametrize("article", list(CHAPTERS))
def test_notebook_is_committed_without_outputs_and_computes_nothing_itself(article):
    """Committed clean (outputs come from running it), and its code only calls posenc: every claim of the
    chapter through ``course.claim`` and once more through ``course.try_this``, in the article's order."""
    path = ROOT / CHAPTERS[article].notebook
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), f"{path}: outputs committed"
    source = "\n".join(c.source for c in code)
    imports = re.findall(r"^\s*(?:from|import)\s+(\S+)", source, re.M)
    assert imports and all(m.split(".")[0] == "posenc" for m in imports), imports
    assert re.findall(r'course\.claim\("([^"]+)"\)\ncourse\.show', source) == list(CHAPTERS[article].claims)
    assert re.findall(r'course\.try_this\("([^"]+)", \w+=', source) == list(CHAPTERS[article].claims)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert markdown.count("**KO**") == markdown.count("**EN**") >= 2 * len(CHAPTERS[article].claims)


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
    block = render(finding, cfg, "en")
    assert blocks(block, "en") == [(block.splitlines()[-1].split(": ", 1)[1], block)]
    assert LabConfig(**{**cfg.to_dict()}) == cfg
