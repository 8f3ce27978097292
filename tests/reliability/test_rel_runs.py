"""Issue 25: runs that share a directory, special files in a checkpoint, and the lab's size guard."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from conftest import assert_refused, posenc

from posenc import ModelConfig, build_decoder_only
from posenc import checkpoint as ckpt
from posenc.train import TrainConfig, train


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_decoder_only(ModelConfig(vocab_size=5, dim=8, num_heads=2, num_layers=1, position="rope"))


def _batches(step: int, rank: int, world_size: int) -> torch.Tensor:
    return torch.randint(0, 5, (2, 6), generator=torch.Generator().manual_seed(step))


def _loss(model, batch):
    logits = model(batch[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()), batch[:, 1:].numel()


CFG = TrainConfig(steps=2, lr=1e-3, warmup_steps=0, progress=False)


@pytest.fixture
def alarm():
    """Fail in 20 s instead of blocking the suite (a read of a FIFO blocks until someone writes)."""
    def stop(*_):
        raise TimeoutError("blocked: the FIFO was opened for reading")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_a_fresh_run_into_a_directory_holding_a_run_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(_model(), _loss, _batches, CFG, checkpoint_dir=run)
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(ValueError, match=r"already holds a run \(latest: step-00000002\).*--resume"):
        train(_model(), _loss, _batches, CFG, checkpoint_dir=run)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing mixed in
    train(_model(), _loss, _batches, CFG, checkpoint_dir=run, resume=True)  # continuing it is fine


def test_the_train_command_refuses_it_too(tmp_path: Path) -> None:
    args = ["train", "--quick", "--steps", "2", "--eval-examples", "2", "--dim", "8", "--heads", "2", "--layers", "1",
            "--quiet", "--checkpoint-dir", str(tmp_path / "run")]
    assert posenc(*args).code == 0
    assert_refused(posenc(*args), "already holds a run", "--resume")


def test_a_second_run_while_one_holds_the_directory_is_refused_naming_its_pid(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with ckpt.run_lock(run):
        with pytest.raises(ValueError, match=rf"in use by another posenc run \(pid {os.getpid()}\)"):
            train(_model(), _loss, _batches, CFG, checkpoint_dir=run)
    train(_model(), _loss, _batches, CFG, checkpoint_dir=run)  # released: the directory is free again


@pytest.mark.parametrize("name", [ckpt.STATE_FILE, ckpt.MODEL_FILE, ckpt.LATEST])
def test_a_fifo_in_a_checkpoint_is_refused_by_name_without_blocking(tmp_path: Path, alarm, name: str) -> None:
    run = tmp_path / "run"
    train(_model(), _loss, _batches, CFG, checkpoint_dir=run)
    target = run / name if name == ckpt.LATEST else run / "step-00000002" / name
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(ValueError, match="FIFO") as err:
        train(_model(), _loss, _batches, CFG, checkpoint_dir=run, resume=True)
    assert name in str(err.value) and "missing" not in str(err.value)


def test_the_lab_refuses_sizes_beyond_the_memory_budget(monkeypatch) -> None:
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 30))
    assert_refused(posenc("lab", "--length", "100000", "--out", "-", "--quiet"), "--length", "memory budget")
    from posenc.lab.core import LabConfig

    with pytest.raises(ValueError, match="lower --length or --dim"):
        LabConfig(length=100_000)


# every command that writes an output folder holds it for the whole run (posenc.cli_options.hold_out)
FOLDER_COMMANDS = {
    "lengthgen": ["lengthgen", "--task", "copy", "--position", "nope", "--seeds", "0", "--quiet"],
    "lengthgen --jobs": ["lengthgen", "--task", "copy", "--position", "nope,rope", "--seeds", "0", "--jobs", "2"],
    "lengthgen --report-only": ["lengthgen", "--task", "copy", "--report-only"],
    "finetune run": ["finetune", "run", "no-model", "--method", "rope", "--quiet"],
    "finetune search": ["finetune", "search", "no-model", "--factor", "2", "--quiet"],
    "finetune grid": ["finetune", "grid", "--quick", "--quiet"],
    "bench": ["bench", "--suites", "rope", "--size", "tiny", "--quiet"],
    "lab": ["lab", "--only", "sinusoid-norm", "--quiet"],
    "inspect": ["inspect", "no-model.safetensors"],
    "translate compare": ["translate", "compare", "--data", "no-data", "--quiet"],
    "export": ["export", "no-model"],
}


@pytest.mark.parametrize("command", sorted(FOLDER_COMMANDS))
def test_a_command_writing_a_folder_another_run_holds_is_refused_naming_it(tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "kept.json").write_text("{}")
    with ckpt.run_lock(out, what="--out folder"):
        before = sorted((p.relative_to(out).as_posix(), p.stat().st_mtime_ns) for p in out.rglob("*"))
        outcome = posenc(*FOLDER_COMMANDS[command], "--out", str(out))
        if command == "export":  # export refuses any non-empty --out before it would take the lock
            assert_refused(outcome, f"--out {out} is not empty")
        else:
            assert_refused(outcome, f"--out folder {out} is in use by another posenc run (pid {os.getpid()}), "
                                    "started as")
        assert sorted((p.relative_to(out).as_posix(), p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    if command.startswith("lengthgen"):  # a grid run in shards: the refusal gives the route for shards at once
        assert "one --out each" in outcome.err and "`posenc lengthgen --report-only --out DIR`" in outcome.err


def test_finetune_grid_shards_share_their_folder_as_documented(tmp_path: Path) -> None:
    """Shards of a finetune grid run at once in one folder (after shard 0's pretraining): not refused by the lock."""
    out = tmp_path / "out"
    with ckpt.run_lock(out, what="--out folder"):
        outcome = posenc("finetune", "grid", "--quick", "--quiet", "--stage", "cells", "--shard", "1/2", "--out", out)
    assert outcome.code == 2 and "the pretrained model is not finished" in outcome.err


def test_a_folder_the_lock_made_is_removed_when_nothing_was_written_into_it(tmp_path: Path) -> None:
    """A run refused or failed before its first file (an encoder given to finetune, a bad file to inspect) leaves
    no empty folder behind; a folder that existed before, or that the run wrote into, stays."""
    made, kept, written = tmp_path / "made", tmp_path / "kept", tmp_path / "written"
    kept.mkdir()
    with ckpt.run_lock(made), ckpt.run_lock(kept), ckpt.run_lock(written):
        (written / "results.json").write_text("{}")
    # ...and the lock file goes with the run, whatever it wrote
    assert not made.exists() and sorted(p.name for p in kept.iterdir()) == []
    assert sorted(p.name for p in written.iterdir()) == ["results.json"]
    assert_refused(posenc("inspect", tmp_path / "missing.safetensors", "--out", tmp_path / "report"), "missing")
    assert not (tmp_path / "report").exists()
