"""Progress on stderr (posenc.progress) and the results-folder rules (posenc.cli_options.claim_folder, run_lock).

A results folder records the command that wrote it; another command given it is refused by name unless
--force; a folder holding files posenc did not write is refused unless --force; the .lock goes with the run,
and one left by a killed run is taken over with a line on stderr. Progress: a grid shows "cell k of n" with the
time elapsed and left; --quiet shows no bar but still the one-line result and where the report went.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from posenc import progress
from posenc.cli import main

LAB = ["lab", "--only", "sinusoid-norm"]


@pytest.fixture(autouse=True)
def _loud_again():
    yield
    progress.set_quiet(False)


def extend_folder(path: Path) -> Path:
    """A folder as `posenc extend` leaves it: its record, a cell, its report."""
    (path / "cells").mkdir(parents=True)
    (path / "cells" / "loss-bible-rope-T512.json").write_text("{}")
    (path / "index.html").write_text("<p>extend</p>")
    (path / "posenc-folder.json").write_text(json.dumps({"command": "extend", "version": "0.1.0"}))
    return path


def test_lab_into_an_extend_folder_is_refused_naming_extend_and_force_replaces_it(tmp_path, capsys):
    out = extend_folder(tmp_path / "runs" / "x")
    assert main([*LAB, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out} was written by `posenc extend`; give another --out, or --force to replace it" in err
    assert (out / "index.html").read_text() == "<p>extend</p>" and not (out / ".lock").exists()
    assert main([*LAB, "--out", str(out), "--quiet", "--force"]) == 0
    captured = capsys.readouterr()
    assert "replaced" in captured.err and "cells" in captured.err
    assert json.loads((out / "posenc-folder.json").read_text())["command"] == "lab"
    assert not (out / "cells").exists() and (out / "results.json").is_file()
    assert not (out / ".lock").exists()  # released at exit


def test_the_same_command_takes_its_own_folder_again(tmp_path, capsys):
    out = tmp_path / "lab"
    assert main([*LAB, "--out", str(out), "--quiet"]) == 0
    assert main([*LAB, "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "posenc-folder.json").read_text())["command"] == "lab"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no .lock left


def test_a_folder_with_files_posenc_did_not_write_is_refused_unless_force(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    assert main([*LAB, "--out", str(out), "--quiet"]) == 2
    assert "holds files posenc did not write (notes.txt)" in capsys.readouterr().err
    assert main([*LAB, "--out", str(out), "--quiet", "--force"]) == 0
    assert (out / "notes.txt").read_text() == "my notes" and (out / "results.json").is_file()


def test_a_folder_of_cells_without_a_record_is_taken_as_posencs(tmp_path):
    """Cells copied together from shards (or a folder from before the record): posenc's own names only."""
    from posenc.cli_options import claim_folder

    (tmp_path / "cells").mkdir()
    (tmp_path / "results.json").write_text("{}")
    claim_folder(tmp_path, "extend")
    assert json.loads((tmp_path / "posenc-folder.json").read_text())["command"] == "extend"


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_message(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "lab"
    out.mkdir()
    (out / ".lock").write_text(f"{dead.pid}\nposenc lab --out {out}")
    assert main([*LAB, "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"taking over the stale lock of pid {dead.pid}" in err and "no longer running" in err
    assert not (out / ".lock").exists()


def test_the_lock_file_goes_on_an_exception_too(tmp_path):
    from posenc.checkpoint import run_lock

    (tmp_path / "kept.json").write_text("{}")
    with pytest.raises(RuntimeError), run_lock(tmp_path):
        assert (tmp_path / ".lock").is_file()
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]


def test_quiet_still_prints_the_report_path_and_no_bar(tmp_path, capfd):
    assert main([*LAB, "--out", str(tmp_path / "r"), "--quiet"]) == 0
    captured = capfd.readouterr()
    assert f"report: {tmp_path / 'r' / 'index.html'}" in captured.out
    assert "cell " not in captured.err and "it/s" not in captured.err


def test_the_overall_bar_counts_cells_with_time_left_and_is_silent_under_quiet(capfd):
    with progress.Overall(3, "extend") as overall:
        for name in ("a", "b", "c"):
            overall.start(name)
            overall.done()
    err = capfd.readouterr().err  # not a terminal: one line per cell
    assert "extend: cell 1 of 3 a (0:00 elapsed, time left unknown yet)" in err
    assert "extend: cell 3 of 3 c (0:00 elapsed, ~0:00 left)" in err
    assert "extend: 3 of 3 cells done" in err
    progress.set_quiet(True)
    with progress.Overall(2, "extend") as overall:
        overall.start("a")
        overall.done()
    assert capfd.readouterr().err == ""


def test_stages_show_once_the_step_is_slow(capfd):
    with progress.Stages("loading m.gguf", delay=0.0) as stages:
        stages.stage("reading the file")
        assert list(progress.counted(range(3), 3, "loading weights")) == [0, 1, 2]
    err = capfd.readouterr().err
    assert "loading m.gguf: reading the file …" in err and "loading m.gguf: loading weights: 3/3 tensors" in err
    with progress.Stages("loading fast.gguf") as stages:  # done within the delay: not a word
        stages.stage("reading the file")
    assert capfd.readouterr().err == ""


MICRO = ["lengthgen", "--task", "copy", "--position", "nope,learned", "--seeds", "0", "--steps", "6",
         "--eval-every", "3", "--train-max", "2", "--test-max", "3", "--dim", "16", "--heads", "2", "--layers", "1",
         "--batch-size", "8", "--eval-examples", "4"]


@pytest.mark.slow
def test_lengthgen_shows_cell_k_of_n_and_under_quiet_only_the_result(tmp_path, capfd):
    assert main([*MICRO, "--out", str(tmp_path / "a")]) == 0
    err = capfd.readouterr().err
    assert "lengthgen: cell 1 of 2 copy-none-seed0" in err and "lengthgen: cell 2 of 2 copy-learned-seed0" in err
    assert "lengthgen: 2 of 2 cells done" in err
    assert main([*MICRO, "--out", str(tmp_path / "b"), "--quiet"]) == 0
    captured = capfd.readouterr()
    assert "cell 1 of 2" not in captured.err
    assert f"wrote {tmp_path / 'b'}" in captured.out  # the report's paths
    assert not (tmp_path / "b" / ".lock").exists()
