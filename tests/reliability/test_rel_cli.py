"""Issue 14, items 5–9 on the command line: exit 2 for usage errors, 1 for runtime failures, one line,
no traceback (unless --debug), outputs checked before the work, strict JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_refused, posenc

TINY = ("train", "--quick", "--steps", "2", "--eval-examples", "2", "--dim", "8", "--heads", "2", "--layers", "1",
        "--quiet")


@pytest.mark.parametrize("flag, value", [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "-1"), ("--eval-examples", "0"), ("--batch-size", "-1"),
    ("--threads", "-1"), ("--dropout", "nan"), ("--seed", str(2**64)), ("--seed", "abc"), ("--layers", "-1"),
    ("--test-max", "0"), ("--steps", "0"), ("--checkpoint-every", "-2"),
])
def test_train_options_are_usage_errors(flag, value):
    result = posenc(*TINY, flag, value)
    assert result.code == 2 and f"argument {flag}" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("flag, value, fragments", [
    ("--batch-size", "10000000", ("one training step", "GiB", "lower --batch-size")),
    ("--eval-examples", "10000000", ("the evaluation set", "GiB", "lower --eval-examples")),
])
def test_sizes_beyond_the_memory_budget_are_refused_before_any_work(flag, value, fragments, monkeypatch):
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(4 << 30))
    assert_refused(posenc(*TINY, flag, value), *fragments, "memory budget of 4 GiB")


def test_a_huge_training_length_is_refused_before_any_work(monkeypatch):
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(4 << 30))
    assert_refused(posenc(*TINY, "--train-max", "1000000", "--test-max", "2000000"), "one training step")


@pytest.mark.parametrize("flag, where", [("--json", "file/out.json"), ("--json", "dir"),
                                         ("--checkpoint-dir", "file"), ("--checkpoint-dir", "file/run")])
def test_output_paths_are_checked_before_training(tmp_path, flag, where):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    result = posenc(*TINY, flag, str(tmp_path / where))
    assert_refused(result, str(tmp_path / where))
    assert "accuracy" not in result.out  # nothing was trained


@pytest.mark.parametrize("args", [
    ("lab", "--only", "tying", "--quiet", "--out", "{file}/report"),
    ("lab", "--only", "tying", "--quiet", "--out", "-", "--json", "{file}/lab.json"),
    ("bench", "--size", "tiny", "--suites", "attention", "--out", "{file}/bench"),
    ("lengthgen", "--quick", "--quiet", "--out", "{file}/grid"),
    ("translate", "prepare", "--data", "{file}/data"),
], ids=["lab-out", "lab-json", "bench-out", "lengthgen-out", "translate-prepare-data"])
def test_every_command_checks_its_output_path_before_the_work(tmp_path, args):
    """Issue 14 item 6 for the commands beyond train and inspect: a path under an existing file is a usage
    error naming the path, before anything is computed (each of these would otherwise run for seconds to hours)."""
    (tmp_path / "file").write_text("x")
    args = [a.format(file=tmp_path / "file") for a in args]
    result = posenc(*args)
    assert_refused(result, str(tmp_path / "file"))


def test_a_step_directory_as_checkpoint_dir_is_refused_with_the_fix(tmp_path):
    run = tmp_path / "run"
    assert posenc(*TINY, "--checkpoint-dir", str(run)).code == 0
    assert_refused(posenc(*TINY, "--checkpoint-dir", str(run / "step-00000002"), "--resume"),
                   "is a step directory", f"give the run directory that holds it and 'latest': {run}")


def test_resume_with_another_task_is_refused(tmp_path):
    run = tmp_path / "run"
    assert posenc(*TINY, "--checkpoint-dir", str(run)).code == 0
    assert_refused(posenc(*TINY, "--task", "reverse", "--checkpoint-dir", str(run), "--resume"),
                   "saved by a different run", "reverse")


def test_a_diverging_run_is_a_runtime_failure_with_the_step():
    result = posenc(*TINY, "--lr", "1e6", "--steps", "3")  # the largest --lr accepted: it diverges at once
    assert_refused(result, "at step", "lower the learning rate", code=1)


def test_json_output_is_strict(tmp_path):
    result = posenc(*TINY, "--json", "-")
    assert result.code == 0, result.err
    payload = result.out[result.out.index("{"):]

    def refuse(token):
        raise ValueError(token)
    data = json.loads(payload, parse_constant=refuse)
    assert data["steps"] == 2
    assert posenc(*TINY, "--json", str(tmp_path / "out.json")).code == 0
    json.loads((tmp_path / "out.json").read_text(), parse_constant=refuse)


@pytest.mark.parametrize("argv, fragment", [
    (("lengthgen", "--position", "rope,", "--quick", "--out", "-"), "--position='rope,' has an empty item"),
    (("lengthgen", "--seeds", "", "--quick", "--out", "-"), "--seeds is empty"),
    (("lengthgen", "--seeds", "0,0", "--quick", "--out", "-"), "repeats ['0']"),
    (("lengthgen", "--position", "rope,rope", "--quick", "--out", "-"), "repeats ['rope']"),
    (("lengthgen", "--position", "nope,none", "--quick", "--out", "-"), "repeats ['none']"),
    (("lengthgen", "--seeds", "abc", "--quick", "--out", "-"), "'abc' is not a valid value"),
    (("bench", "--suites", ""), "--suites is empty"),
    (("lab", "--only", ",", "--out", "-"), "--only=',' has an empty item"),
])
def test_empty_and_duplicate_lists_are_refused(argv, fragment):
    assert_refused(posenc(*argv), fragment)


def test_debug_shows_the_traceback():
    with pytest.raises(ValueError, match="--only"):
        posenc("--debug", "lab", "--only", ",", "--out", "-")


def _with_command(monkeypatch, name, func):
    """Make ``posenc NAME`` call ``func``."""
    from posenc import cli

    real = cli.build_parser

    def patched():
        parser = real()
        parser._subparsers._group_actions[0].choices[name].set_defaults(func=func)
        return parser
    monkeypatch.setattr(cli, "build_parser", patched)


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch):
    def boom(args):
        raise RuntimeError("something inside broke\nsecond line")
    _with_command(monkeypatch, "schemes", boom)
    result = posenc("schemes")
    assert_refused(result, "unexpected RuntimeError: something inside broke", "--debug", code=1)
    assert "second line" not in result.err


class _ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise OSError("no descriptor")


def test_a_closed_pipe_ends_quietly_in_process(monkeypatch, capsys):
    from posenc.cli import main

    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    code = main(["schemes"])
    assert code == 1 and capsys.readouterr().err == ""


@pytest.mark.timeout(120)
def test_a_closed_pipe_ends_quietly(tmp_path):
    """``posenc inspect … --json | head -c 10`` (~250 kB of JSON, more than a pipe holds): no traceback."""
    import torch
    from safetensors.torch import save_file

    save_file({"transformer.wte.weight": torch.randn(3000, 8), "transformer.wpe.weight": torch.randn(1000, 8)},
              str(tmp_path / "model.safetensors"))
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(f"{sys.executable} -m posenc.cli inspect {tmp_path} --json - | head -c 10", shell=True,
                          capture_output=True, text=True, env=env, timeout=110)
    # stderr may hold inspect's progress stages (a slow step on a loaded machine), never a traceback or an error
    assert len(proc.stdout) == 10 and "Traceback" not in proc.stderr and "error" not in proc.stderr.lower(), \
        proc.stderr


def test_a_width_no_machine_holds_is_refused_before_anything_allocates():
    """`posenc schemes --dim 2**64 --heads 2**64` grew to 23 GB building ALiBi's slopes (found by the CLI fuzz)."""
    huge = str(2**64)
    assert_refused(posenc("schemes", "--dim", huge, "--heads", huge), f"width dim={huge}", "memory budget")


def test_alibi_slopes_are_refused_past_the_memory_budget(monkeypatch):
    from posenc.positions.bias import alibi_slopes

    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 20))
    with pytest.raises(ValueError, match="ALiBi's slopes for num_heads=100000"):
        alibi_slopes(100_000)
    assert alibi_slopes(8).shape == (8,)


def test_a_memory_budget_too_small_to_load_the_commands_is_one_line_exit_2():
    """POSENC_MEMORY_BUDGET is read while the commands load (their default configs are checked): one line, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "posenc.cli", "schemes"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "POSENC_MEMORY_BUDGET": "1000000"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "POSENC_MEMORY_BUDGET" in proc.stderr
    assert sum("error:" in line for line in proc.stderr.splitlines()) == 1
