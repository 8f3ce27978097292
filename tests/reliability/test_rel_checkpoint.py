"""Issue 14, items 3 and 4: resume trusts nothing in state.json; re-saving a step never leaves a gap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc import ModelConfig, build_decoder_only
from posenc import checkpoint as ckpt
from posenc.train import TrainConfig, step_generator, train

VOCAB = 11


def _model() -> torch.nn.Module:
    return build_decoder_only(ModelConfig(vocab_size=VOCAB, dim=16, num_heads=2, num_layers=1, position="rope"))


def _batches(step: int, rank: int, world: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (4, 6), generator=step_generator(0, step, rank))


def _loss(model: torch.nn.Module, ids: torch.Tensor):
    logits = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
    return loss, ids[:, 1:].numel()


def _run(directory: Path, *, steps: int = 4, resume: bool = False, task: str = "copy", **kw):
    return train(_model(), _loss, _batches, TrainConfig(steps=steps, lr=1e-3, progress=False, **kw),
                 checkpoint_dir=directory, resume=resume, extra_state={"task": {"name": task}})


def _edit_state(step_dir: Path, **changes) -> None:
    meta = json.loads((step_dir / ckpt.STATE_FILE).read_text())
    meta.update(changes)
    (step_dir / ckpt.STATE_FILE).write_text(json.dumps(meta))


@pytest.fixture
def run_dir(tmp_path, seed) -> Path:
    torch.manual_seed(seed)
    _run(tmp_path / "run", steps=2)
    return tmp_path / "run"


@pytest.mark.parametrize("changes, message", [
    ({"step": -5}, "step must be an integer >= 0, got -5"),
    ({"step": 999}, "says step 999 but lies in step-00000002"),
    ({"step": "2"}, "step must be an integer"),
    ({"files": {}}, "must list every tensor file"),
    ({"files": {"model.safetensors": "0" * 64}}, "missing ['optimizer.safetensors', 'rng.safetensors']"),
    ({"model_config": "x"}, "'model_config' must be present"),
    ({"rng_ranks": 0}, "rng_ranks must be an integer >= 1"),
])
def test_a_tampered_state_json_is_refused(run_dir, changes, message):
    _edit_state(run_dir / "step-00000002", **changes)
    with pytest.raises(ValueError) as err:
        _run(run_dir, steps=4, resume=True)
    assert message in str(err.value)


def test_model_config_null_does_not_skip_the_config_check(run_dir):
    _edit_state(run_dir / "step-00000002", model_config=None)
    with pytest.raises(ValueError, match="saved without a model config, but this model has one"):
        _run(run_dir, steps=2, resume=True)


def test_a_missing_model_config_key_is_refused(run_dir):
    meta = json.loads((run_dir / "step-00000002" / ckpt.STATE_FILE).read_text())
    del meta["model_config"]
    (run_dir / "step-00000002" / ckpt.STATE_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="'model_config' must be present"):
        _run(run_dir, steps=4, resume=True)


def test_resuming_with_another_task_is_refused(run_dir):
    with pytest.raises(ValueError, match=r"saved by a different run \(task: checkpoint \{'name': 'copy'\} vs now"):
        _run(run_dir, steps=2, resume=True, task="reverse")


def test_resuming_past_the_run_is_refused(run_dir):
    with pytest.raises(ValueError, match="beyond this run's 1 steps"):
        _run(run_dir, steps=1, resume=True)


def test_a_step_directory_given_as_the_run_directory_is_refused_with_the_fix(run_dir):
    step_dir = run_dir / "step-00000002"
    with pytest.raises(ValueError, match=rf"is a step directory.*give the run directory .*: {run_dir}$"):
        _run(step_dir, steps=4, resume=True)
    assert sorted(p.name for p in step_dir.iterdir()) == sorted(ckpt.read_state(step_dir)["files"]) + ["state.json"]


def test_a_genuine_resume_still_continues_exactly(tmp_path, seed):
    torch.manual_seed(seed)
    whole = _run(tmp_path / "a", steps=4)
    torch.manual_seed(seed)
    _run(tmp_path / "b", steps=4, checkpoint_every=2)
    for step in ("step-00000004",):  # drop the end: resume from step 2
        import shutil

        shutil.rmtree(tmp_path / "b" / step)
    (tmp_path / "b" / "latest").write_text("step-00000002\n")
    resumed = _run(tmp_path / "b", steps=4, resume=True, checkpoint_every=2)
    assert resumed.step == whole.step == 4
    a = ckpt.load_weights(tmp_path / "a", _model())
    b = ckpt.load_weights(tmp_path / "b", _model())
    assert a["files"]["model.safetensors"] == b["files"]["model.safetensors"]  # bitwise equal weights


# -- item 4: re-saving the same step ----------------------------------------------------------------
def _save(root: Path, step: int, note: str) -> Path:
    return ckpt.save_checkpoint(root, model=_model(), step=step, state={"note": note})


def _latest_is_complete(root: Path) -> bool:
    name = (root / ckpt.LATEST).read_text().strip()
    try:
        ckpt.read_state(root / name)
    except (OSError, ValueError):
        return False
    return True


def test_resaving_a_step_replaces_it_and_latest_always_names_a_complete_directory(tmp_path, monkeypatch, seed):
    _save(tmp_path, 3, "first")
    seen = []
    real_replace = ckpt.os.replace

    def watching(src, dst):  # every rename: is `latest` complete just before and just after?
        seen.append(_latest_is_complete(tmp_path))
        real_replace(src, dst)
        seen.append(_latest_is_complete(tmp_path))

    monkeypatch.setattr(ckpt.os, "replace", watching)
    _save(tmp_path, 3, "second")
    assert all(seen) and seen
    assert ckpt.read_state(tmp_path)["state"]["note"] == "second"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_crash_between_the_two_renames_is_repaired_on_the_next_resume(tmp_path, monkeypatch, seed):
    """Where the atomic swap is unavailable, the old copy is moved aside first; a crash there loses nothing."""
    _save(tmp_path, 3, "first")
    monkeypatch.setattr(ckpt, "_exchange", lambda a, b: False)
    calls = {"n": 0}
    real_replace = ckpt.os.replace

    def crash_on_second_dir_rename(src, dst):
        if Path(src).is_dir():
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt("killed between the renames")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", crash_on_second_dir_rename)
    monkeypatch.setattr(ckpt.shutil, "rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 3, "second")
    monkeypatch.undo()
    assert not (tmp_path / "step-00000003").exists()  # the gap the issue describes
    state = ckpt.read_state(tmp_path)  # resume: the complete new copy is moved into place
    assert state["state"]["note"] == "second" and state["step"] == 3


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_of_killed_runs_are_removed_on_the_next_save(tmp_path, seed):
    _save(tmp_path, 1, "first")
    pid = _dead_pid()
    partial = tmp_path / f".tmp-step-00000002-{pid}"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half a file")
    stray = tmp_path / f".latest.tmp-{pid}"
    stray.write_text("step-0000")
    _save(tmp_path, 2, "second")
    assert not partial.exists() and not stray.exists()
    assert ckpt.read_state(tmp_path)["step"] == 2
