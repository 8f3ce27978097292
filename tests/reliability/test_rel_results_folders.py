"""Hostile results folders: every file a results folder holds goes through one reader.

``posenc.validation.read_json`` reads cells, run and search states, ``--longrope`` and ``--setting`` files:
regular files only (a FIFO would block the read for ever), size- and depth-bounded (a 100,000-deep array
must not raise RecursionError), UTF-8 checked, the file and the fix named. A garbage extend cell is
recomputed by a normal run and named by ``--report-only``.
"""

from __future__ import annotations

import json
import os

import pytest

from posenc.validation import UnreadableFile, read_json, read_text_file

from conftest import assert_refused, posenc
from model_files import hf_folder

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content, reason", [
    (b"[]", "holds an array where a cell is an object"),
    (b"{", "not a valid JSON cell"),
    (DEEP.encode(), "nested 100000 deep"),
    (b'{"a": "\xff"}', "not UTF-8 text (byte 7"),
    (b"null", "holds null"),
])
def test_the_reader_names_the_file_the_reason_and_the_fix(tmp_path, content, reason):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(UnreadableFile) as err:
        read_json(path, "cell", fix="delete it")
    assert str(err.value).startswith(str(path)) and reason in str(err.value) and str(err.value).endswith("delete it")


def test_the_reader_refuses_a_fifo_without_opening_it_and_bounds_the_size(tmp_path):
    fifo = tmp_path / "cell.json"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match="FIFO"):  # returns at once: nothing writes to the pipe
        read_json(fifo, "cell")
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(UnreadableFile, match="larger than"):
        read_json(big, "cell", max_bytes=1000)
    with pytest.raises(UnreadableFile, match="not UTF-8"):
        (tmp_path / "t.txt").write_bytes(b"caf\xe9")
        read_text_file(tmp_path / "t.txt", "--train-text file")
    assert read_json(tmp_path / "big.json", "cell")["a"] == "x" * 2000
    assert issubclass(UnreadableFile, ValueError)  # every command's usage-error path (exit 2) takes it


# -- extend's cells ---------------------------------------------------------------------------------------------
@pytest.fixture
def extended(tmp_path):
    """A tiny HF folder and an extend results folder of two loss cells (plain RoPE and its control)."""
    model = hf_folder(tmp_path / "model")
    out = tmp_path / "out"
    argv = ["extend", model, "--methods", "rope", "--text", "licenses", "--max-tokens", "96", "--passkey-trials",
            "0", "--out", out, "--quiet"]
    first = posenc(*argv)
    assert first.code == 0, first.err
    return argv, out


def test_a_fifo_cell_is_recomputed_by_a_run_and_named_by_report_only(extended):
    argv, out = extended
    cell = sorted((out / "cells").glob("*.json"))[0]
    cell.unlink()
    os.mkfifo(cell)
    report = posenc("extend", argv[1], "--report-only", "--out", out)
    assert report.code == 0, report.err
    assert str(cell) in report.err and "FIFO" in report.err
    again = posenc(*argv)
    assert again.code == 0, again.err
    assert f"not a cell, recomputed: {cell}" in again.err + again.out
    assert cell.is_file() and read_json(cell, "cell")["kind"] in ("loss", "control")


@pytest.mark.parametrize("content", ["[]", "{garbage", DEEP, '{"x": 1}'])
def test_a_garbage_cell_is_recomputed_by_a_run_and_named_by_report_only(extended, content):
    argv, out = extended
    cell = sorted((out / "cells").glob("*.json"))[0]
    good = json.loads(cell.read_text())
    cell.write_text(content)
    report = posenc("extend", argv[1], "--report-only", "--out", out)
    assert report.code == 0, report.err  # the other cell is reported; this one is named, not fatal
    assert "Traceback" not in report.err and f"left out, not a cell: {cell}" in report.err
    again = posenc(*argv)
    assert again.code == 0, again.err
    assert json.loads(cell.read_text())["name"] == good["name"]


def test_report_only_with_nothing_but_garbage_is_refused_naming_it(extended):
    argv, out = extended
    for cell in (out / "cells").glob("*.json"):
        cell.write_text("[]")
    assert_refused(posenc("extend", argv[1], "--report-only", "--out", out), "no finished cells",
                   "are not cells")


# -- finetune's results folders -------------------------------------------------------------------------------------
def test_finetune_grid_report_on_an_empty_folder_is_refused(tmp_path):
    """It once wrote an empty results.json and exited 0, where extend --report-only refuses the same."""
    out = tmp_path / "grid"
    assert_refused(posenc("finetune", "grid", "--quick", "--stage", "report", "--out", out), "no finished cells",
                   "nothing to report")
    assert not (out / "results.json").exists()


def test_finetune_resume_before_the_first_checkpoint_says_to_start_without_resume(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)  # killed before its first checkpoint
    assert_refused(posenc("finetune", "run", tmp_path / "missing-model", "--factor", "2", "--resume", "--out", out),
                   "holds no checkpoint yet", "the same command without --resume")


# -- interruption ---------------------------------------------------------------------------------------------------
def test_extend_stops_on_sigterm_after_the_current_cell_and_resumes(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from model_files import SRC

    model = hf_folder(tmp_path / "model")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "posenc", "extend", str(model), "--methods", "rope,rope-yarn,rope-ntk,rope-linear",
            "--factors", "2,3,4,5,6,7,8,9", "--text", "licenses", "--max-tokens", "640", "--passkey-trials", "0",
            "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((out / "cells").glob("*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "run the same command again to resume" in err
    saved = {p.name for p in (out / "cells").glob("*.json")}
    assert saved and all(read_json(out / "cells" / name, "cell")["kind"] for name in saved)
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert saved < {p.name for p in (out / "cells").glob("*.json")}


# -- search state, --longrope and --setting files ---------------------------------------------------------------------
@pytest.mark.parametrize("content, reason", [("[]", "holds an array"), ("{garbage", "not a valid JSON search state"),
                                             (DEEP, "nested 100000 deep"), ('{"x": 1}', "no config object")])
def test_a_garbage_search_state_is_refused_naming_the_file_and_the_fix(tmp_path, content, reason):
    from posenc.finetune.longrope import STATE_FILE, Search, SearchConfig

    (tmp_path / STATE_FILE).write_text(content)
    search = Search.__new__(Search)  # only load() is exercised: no model needed
    search.out, search.cfg = tmp_path, SearchConfig(factor=2.0, original_max_len=64)
    with pytest.raises(ValueError) as err:
        search.load()
    assert str(tmp_path / STATE_FILE) in str(err.value) and reason in str(err.value)
    assert "delete it to start the search again" in str(err.value)


@pytest.mark.parametrize("content, reason", [
    (b"not json", "not a valid JSON --longrope search result"),
    (b'{"options": {"long_factor": ["1.0", "2.0"]}}', "must be a list of positive numbers"),
    (b'{"options": {"long_factor": "\xff"}}', "not UTF-8"),
    (b"[]", "holds an array"),
])
def test_a_bad_longrope_file_is_refused_in_one_line(tmp_path, content, reason):
    bad = tmp_path / "result.json"
    bad.write_bytes(content)
    assert_refused(posenc("finetune", "run", tmp_path / "m", "--method", "rope-longrope", "--longrope", bad,
                          "--factor", "2"), "--longrope", str(bad), reason)


def test_a_bad_setting_file_is_refused_in_one_line(tmp_path):
    from posenc.commands.export import read_setting

    for content, reason in [(b"\xff\xfe", "not UTF-8"), (DEEP.encode(), "nested"), (b"[1]", "holds an array")]:
        bad = tmp_path / "setting.json"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match=reason) as err:
            read_setting(bad)
        assert str(err.value).startswith(f"--setting {bad}")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        read_setting(fifo)


def test_finetune_search_stops_on_sigterm_between_candidates_and_resumes(tmp_path):
    """It once died with −15; now the first SIGTERM stops before the next candidate, every score saved, exit 130."""
    import signal
    import subprocess
    import sys
    import time

    from model_files import SRC

    model = hf_folder(tmp_path / "model")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "posenc", "finetune", "search", str(model), "--factor", "2", "--samples", "1",
            "--population", "6", "--generations", "3", "--train-text", "licenses", "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "search-state.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the search finished before the signal arrived (a very fast machine)")
    assert proc.returncode == 130, err
    assert "finetune search: interrupted" in err and "run the same command again to resume" in err
    state = read_json(out / "search-state.json", "search state")
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "best: ppl" in again.stdout + again.stderr and (out / "result.json").is_file()
    assert len(read_json(out / "search-state.json", "search state")["scores"]) >= len(state["scores"])
