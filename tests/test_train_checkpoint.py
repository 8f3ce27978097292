"""Checkpoints: round trip, atomic writes, and clear errors on bad files."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from posenc import ModelConfig, build_decoder_only
from posenc import checkpoint as ckpt
from posenc.train import TrainConfig, make_optimizer


def model_and_optimizer(seed: int, position: str = "learned"):
    torch.manual_seed(seed)
    model = build_decoder_only(ModelConfig(vocab_size=13, dim=16, num_heads=2, num_layers=1, position=position))
    opt = make_optimizer(model, TrainConfig(steps=10))
    ids = torch.randint(0, 13, (3, 7))
    for _ in range(2):  # give the optimiser real state
        model(ids).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path, seed):
    model, opt = model_and_optimizer(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    path = ckpt.save_checkpoint(tmp_path, model=model, step=7, optimizer=opt, state={"note": "x"})
    assert path.name == "step-00000007" and (tmp_path / "latest").read_text().strip() == path.name
    expected = (torch.rand(3), random.random(), np.random.rand())

    other, other_opt = model_and_optimizer(seed + 1)
    torch.manual_seed(seed + 5)
    meta = ckpt.load_checkpoint(tmp_path, model=other, optimizer=other_opt)
    assert meta["step"] == 7 and meta["state"]["note"] == "x"
    after = (torch.rand(3), random.random(), np.random.rand())  # the streams continue where they were saved
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]
    for (k, a), b in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), k
    for index, entry in opt.state_dict()["state"].items():
        for key, value in entry.items():
            assert torch.equal(value, other_opt.state_dict()["state"][index][key]), (index, key)
    assert other_opt.param_groups[0]["betas"] == opt.param_groups[0]["betas"]
    # nothing pickled: every file is safetensors or JSON
    assert sorted(p.name for p in path.iterdir()) == ["model.safetensors", "optimizer.safetensors",
                                                     "rng.safetensors", "state.json"]


def test_keeps_only_the_last_checkpoints(tmp_path, seed):
    model, opt = model_and_optimizer(seed)
    for step in (1, 2, 3, 4):
        ckpt.save_checkpoint(tmp_path, model=model, step=step, optimizer=opt, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000003", "step-00000004"]


def test_a_crash_mid_save_leaves_the_previous_checkpoint_and_no_partial_file(tmp_path, seed, monkeypatch):
    model, opt = model_and_optimizer(seed)
    ckpt.save_checkpoint(tmp_path, model=model, step=1, optimizer=opt)

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_file", explode)  # fails after model.safetensors was written
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(tmp_path, model=model, step=2, optimizer=opt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001"]  # no temp dir, no step 2
    assert ckpt.read_state(tmp_path)["step"] == 1


def test_atomic_text_write_leaves_old_content_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "latest"
    ckpt.atomic_write_text(target, "old\n")

    def fail(src, dst):
        raise OSError("no")

    monkeypatch.setattr(ckpt.os, "replace", fail)
    with pytest.raises(OSError):
        ckpt.atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_corrupt_missing_and_mismatched_files_are_clear_errors(tmp_path, seed):
    model, opt = model_and_optimizer(seed)
    path = ckpt.save_checkpoint(tmp_path, model=model, step=3, optimizer=opt)

    with pytest.raises(FileNotFoundError, match="does not exist"):
        ckpt.read_state(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="latest"):
        ckpt.read_state(tmp_path.parent)  # a directory that is not a run
    with pytest.raises(ValueError, match="vocab_size: checkpoint 13 vs model 14"):
        ckpt.load_weights(tmp_path, build_decoder_only(ModelConfig(vocab_size=14, dim=16, num_heads=2, num_layers=1,
                                                                   position="learned")))
    with pytest.raises(ValueError, match="saved by 1 process"):
        ckpt.load_checkpoint(tmp_path, model=model, optimizer=opt, world_size=2)

    weights = path / "model.safetensors"
    original = weights.read_bytes()
    data = bytearray(original)
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="model.safetensors is corrupt"):
        ckpt.load_weights(tmp_path, model)
    weights.write_bytes(original)
    (path / "optimizer.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="optimizer.safetensors is missing"):
        ckpt.read_state(path)
    (path / "state.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ckpt.read_state(path)
    (path / "state.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a posenc checkpoint"):
        ckpt.read_state(path)


def test_weights_of_another_architecture_are_refused(tmp_path, seed):
    model, _ = model_and_optimizer(seed)
    ckpt.save_checkpoint(tmp_path, model=model, step=0)
    plain = torch.nn.Linear(3, 3)  # a model without a config: refused before any tensor is read
    with pytest.raises(ValueError, match=r"saved from a model with a config \(Linear has none\)"):
        ckpt.load_weights(tmp_path, plain)
    ckpt.save_checkpoint(tmp_path / "plain", model=torch.nn.Linear(2, 2), step=0)
    with pytest.raises(ValueError, match="do not fit this Linear"):  # neither has a config: the tensor check
        ckpt.load_weights(tmp_path / "plain", plain)
