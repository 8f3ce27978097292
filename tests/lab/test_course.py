"""posenc.lab.course, what the notebooks call: its errors, its printed text, and that the command it prints
is the one that gives the same numbers (the notebooks themselves run in tests/notebooks)."""

from __future__ import annotations

import io
import json
import re
import shlex
from contextlib import redirect_stdout

import pytest

from posenc.cli import main
from posenc.lab import course
from posenc.lab.core import LabConfig
from posenc.lab.experiments import run_lab


def test_settings_and_chapters_refuse_what_does_not_exist():
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['width'\]; a lab run has dim, length, base, seed"):
        course.settings(width=3)
    with pytest.raises(ValueError, match="--dim must be an even number"):
        course.settings(dim=7)
    with pytest.raises(ValueError, match="no chapter for article '004'; the articles are 000, 001, 002, 003"):
        course.chapter("004")
    with pytest.raises(ValueError, match="needs a setting to change"):
        course.try_this("sinusoid-norm")
    with pytest.raises(ValueError, match="unknown experiment id"):
        course.claim("nope")
    stray = run_lab(LabConfig(), only=["sinusoid-norm"])[0]
    with pytest.raises(ValueError, match="not made by course.claim"):
        course.show(stray, "en")


@pytest.mark.parametrize("base", [10000.0, 500.0, 0.1 + 1.2, 123456.789])
def test_the_printed_command_gives_the_same_numbers(base, seed):
    cfg = LabConfig(dim=16, length=64, base=base, seed=seed % 1000)
    finding = run_lab(cfg, only=["not-monotonic"])[0]
    text = course.render(finding, cfg, "en")
    command = text.splitlines()[-1].split("same numbers: ", 1)[1]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*shlex.split(command)[1:], "--quiet"]) == 0
    data = json.loads(out.getvalue())
    assert data["config"] == cfg.to_dict()  # the flags parse back to exactly these settings
    assert course.render(data["experiments"][0], data["config"], "en") == text


def test_claim_runs_once_and_try_this_says_where_a_claim_stops(capsys):
    first = course.claim("shift-is-linear", length=64)
    assert course.claim("shift-is-linear", length=64) is first
    course.try_this("shift-is-linear", length=64, lang="en")
    out = capsys.readouterr().out
    assert "· does NOT hold" in out and out.rstrip().endswith(
        "→ at the articles' settings it holds; with length=64 it does NOT hold")
    course.try_this("sinusoid-norm", dim=128, lang="ko")
    out = capsys.readouterr().out
    assert "노름 8.0000" in out and out.rstrip().endswith("→ 글의 설정에서는 성립, dim=128 에서는 여전히 성립")


def test_render_leaves_out_wall_clock_times_and_cuts_long_lists():
    cfg = LabConfig(dim=16, length=64)
    finding = run_lab(LabConfig(), only=["pe-module"])[0]  # d/2 = 32 columns: 16 pairs
    finding_times = run_lab(cfg, only=["sinusoid-norm"])[0]
    finding_times.id = "complexity"  # pretend: only the key names matter to render's wall-clock rule
    finding_times.values = {**finding_times.values, "milliseconds": {"cnn": [1.0]}}
    text = course.render(finding_times, cfg, "en")
    assert "milliseconds =" not in text and "(milliseconds: wall-clock times" in text
    pairs = finding.values["crossings_per_pair"]
    line = next(x for x in course.render(finding, LabConfig(), "ko").splitlines() if "crossings_per_pair" in x)
    assert line.endswith(f"… {len(pairs) - 8}개 더]") and line.count(",") == 8
    assert re.search(r"norm = 2\.82843$", course.render(run_lab(cfg, only=["sinusoid-norm"])[0], cfg, "en"), re.M)


def test_properties_prints_the_registry_rows(capsys):
    course.properties(["sinusoidal", "learned"], "en", dim=16, length=64)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("scheme") and [x.split()[0] for x in lines[1:3]] == ["sinusoidal", "learned"]
    assert lines[3] == "  same numbers: posenc lab properties --dim 16 --length 64 --base 10000 --seed 0 --json - --out -"
