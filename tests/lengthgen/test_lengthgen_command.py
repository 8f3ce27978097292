"""``posenc lengthgen`` on the command line: bad lists refused clearly, a micro grid end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.cli import main


@pytest.mark.parametrize("flags, message", [
    (["--seeds", ""], "--seeds is empty"),
    (["--seeds", "0,x"], "--seeds takes integers, got 'x'"),
    (["--seeds", "1,1"], "repeats ['1']"),
    (["--task", "copy,cpy"], "unknown task 'cpy'"),
    (["--jobs", "2", "--shard", "0/2"], "do not combine it with --shard"),
])
def test_bad_lists_are_refused_with_exit_2(flags, message, capsys, tmp_path):
    assert main(["lengthgen", "--out", str(tmp_path), *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--position", ","], "give at least one position scheme name"),
    (["--position", "xyz"], "unknown position scheme 'xyz'"),
])
def test_bad_positions_are_usage_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["lengthgen", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bad_shard_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["lengthgen", "--shard", "2/2"])
    assert exit_info.value.code == 2 and "need 0 <= INDEX < COUNT" in capsys.readouterr().err


MICRO = ["lengthgen", "--task", "copy", "--position", "nope,learned", "--seeds", "0", "--steps", "6",
         "--eval-every", "3", "--train-max", "2", "--test-max", "3", "--dim", "16", "--heads", "2", "--layers", "1",
         "--batch-size", "8", "--eval-examples", "4", "--quiet"]


@pytest.mark.slow
def test_micro_grid_end_to_end_resume_and_report(tmp_path, capsys):
    assert main([*MICRO, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["scheme"] for c in data["cells"]] == ["none", "learned"]
    assert data["meta"]["expected"] == 2 and data["meta"]["missing"] == []
    assert data["meta"]["cpu_seconds"] == pytest.approx(sum(c["cpu_seconds"] for c in data["cells"]))
    for c in data["cells"]:
        assert set(c["hits"]) == {"1", "2", "3"} and all(len(v) == 4 for v in c["hits"].values())
        assert c["steps"] <= 6 and isinstance(c["learned"], bool)
    assert (tmp_path / "accuracy.png").stat().st_size > 1000
    text = (tmp_path / "results.md").read_text()
    assert "## copy" in text and "Total CPU time" in text and "Convergence" in text
    capsys.readouterr()
    assert main([*MICRO, "--out", str(tmp_path)]) == 0  # nothing recomputed
    assert main([*MICRO, "--out", str(tmp_path), "--report-only"]) == 0
    assert "report of 2 of 2 cells" in capsys.readouterr().out
    # the same grid with a third seed: the report names what is missing, and the run exits 0 only when complete
    assert main([*MICRO[:6], "0,1", *MICRO[7:], "--out", str(tmp_path), "--report-only"]) == 0
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert meta["missing"] == ["copy-none-seed1", "copy-learned-seed1"]


@pytest.mark.slow
def test_a_jobs_grid_holds_its_folder_and_its_workers_are_not_refused_by_it(tmp_path, capsys):
    """The parent holds OUT (posenc.checkpoint.run_lock on OUT/.lock, removed at the end) for the whole grid; its workers train their
    cells under OUT/checkpoints/<cell>/.lock (train's own lock) and write OUT/cells without taking OUT's."""
    assert main([*MICRO, "--jobs", "2", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "cells").glob("*.json")) == ["copy-learned-seed0.json",
                                                                         "copy-none-seed0.json"]
    assert (tmp_path / "results.json").is_file() and not (tmp_path / ".lock").exists()  # released at exit
    assert json.loads((tmp_path / "posenc-folder.json").read_text())["command"] == "lengthgen"


@pytest.mark.slow
def test_out_dash_writes_no_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*MICRO, "--out", "-"]) == 0
    assert list(tmp_path.iterdir()) == [] and "| copy |" in capsys.readouterr().out


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used (Linux /proc; 0 once it is gone)."""
    import os

    try:
        fields = (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (Linux /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry.name))
    return kids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find the workers")
def test_sigterm_to_a_jobs_grid_stops_every_worker_and_keeps_their_cells(tmp_path):
    """`kill PID` of `lengthgen --jobs 2` must not leave workers training (and writing cells) on their own."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "grid"
    cmd = [sys.executable, "-m", "posenc.cli", "lengthgen", "--quick", "--task", "copy", "--position", "none,rope",
           "--seeds", "0", "--steps", "100000", "--eval-every", "100000", "--jobs", "2", "--quiet", "--out", str(out)]
    log = tmp_path / "log.txt"  # a file, as when run from a shell (a pipe whose reader stops can end orphans early)
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        # each worker prints "[shard i/2] [1/1] <cell>: training" as it begins
        while sum(line.endswith(": training") for line in log.read_text().splitlines()) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the workers never began training"
            time.sleep(0.2)
        workers = _children(proc.pid)  # the two workers and multiprocessing's resource tracker
        assert len(workers) >= 2
        # into the training loop (a 100,000-update budget and no convergence gate before it: far from done, and no
        # early stop): wait for CPU time, not wall time, so a loaded machine does not signal the workers before
        # their first update; starting a worker (imports, the cell's data) alone takes ~3 s of CPU
        busy = sorted(workers, key=_cpu_seconds)[-2:]
        while min(_cpu_seconds(w) for w in busy) < 8.0:
            assert proc.poll() is None and time.monotonic() < deadline + 120, "the workers never got going"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers):
            assert time.monotonic() < deadline, "a worker kept running after its parent was told to stop"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    saved = sorted(p.parent.name for p in (out / "checkpoints").glob("*/latest"))
    assert saved == ["copy-none-seed0", "copy-rope-seed0"]  # each worker saved its running cell on the way out


@pytest.mark.parametrize("flags, message", [
    (["--task", "copy", "--task-option", "answer_order=lsd"],
     "--task-option answer_order: no chosen task takes it (the options of each: copy: num_symbols)"),
    (["--task", "addition", "--task-option", "answer_order=backwards"], "answer_order must be one of msd, lsd"),
    (["--task", "addition", "--task-option", "answer_order=msd", "--task-option", "answer_order=lsd"],
     "--task-option answer_order given twice"),
])
def test_bad_task_options_are_refused_before_any_work(flags, message, capsys, tmp_path):
    assert main(["lengthgen", "--out", str(tmp_path / "out"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_task_options_reach_the_tasks_that_take_them_over_the_preset():
    from posenc.commands.lengthgen import grid_from_args
    from posenc.lengthgen import preset
    from posenc.cli import build_parser

    args = build_parser().parse_args(["lengthgen", "--task", "copy,addition", "--task-option", "answer_order=msd"])
    grid = grid_from_args(args)
    assert grid.config("addition").task_options == {**preset("addition").task_options, "answer_order": "msd"}
    assert grid.config("copy").task_options == preset("copy").task_options
    args = build_parser().parse_args(["lengthgen", "--task", "addition"])
    assert grid_from_args(args).config("addition") == preset("addition")
    args = build_parser().parse_args(["lengthgen", "--task", "copy", "--gate-examples", "7"])
    assert grid_from_args(args).config("copy").gate_examples == 7
