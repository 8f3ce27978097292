"""``posenc train``: one lengthgen cell from the command line, with checkpoints and exact resume.

The benchmark itself is tested in tests/lengthgen/."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from posenc import lengthgen as lg
from posenc.cli import main


def test_lengths_default_per_task_and_are_checked():
    assert lg.DEFAULT.lengths_for(_task("copy")) == (1, 16, 32)
    assert lg.DEFAULT.lengths_for(_task("scan")) == (1, 22, 48)
    assert lg.CellConfig(train_max=5).lengths_for(_task("copy")) == (1, 5, 10)
    with pytest.raises(ValueError, match="train_max <= test_max"):
        lg.CellConfig(train_max=5, test_max=4).lengths_for(_task("copy"))


def _task(name):
    from posenc.tasks import build_task

    return build_task(name)


def test_cell_config_composes_model_and_train_configs_and_round_trips():
    cfg = lg.DEFAULT.with_changes(batch_size=7, model={"dim": 48}, train={"steps": 50})
    assert cfg.model.dim == 48 and cfg.train.steps == 50 and cfg.train.warmup_steps <= 50 and cfg.batch_size == 7
    assert lg.CellConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="threshold must be in"):
        lg.CellConfig(threshold=1.5)


@pytest.mark.slow
def test_train_command_resumes_to_the_same_result(tmp_path, capsys):
    common = ["train", "--task", "reverse", "--position", "alibi", "--train-max", "3", "--test-max", "4", "--dim",
              "16", "--heads", "2", "--layers", "1", "--batch-size", "8", "--eval-examples", "4", "--threads", "1",
              "--quiet", "--steps", "10"]
    run = tmp_path / "run"
    assert main([*common, "--checkpoint-dir", str(run), "--checkpoint-every", "5",
                 "--json", str(tmp_path / "full.json")]) == 0
    # pretend the run had stopped after step 5: drop step 10 and point `latest` back
    shutil.rmtree(run / "step-00000010")
    (run / "latest").write_text("step-00000005\n")
    assert main([*common, "--checkpoint-dir", str(run), "--resume", "--json", str(tmp_path / "resumed.json")]) == 0
    full, resumed = (json.loads((tmp_path / f).read_text()) for f in ("full.json", "resumed.json"))
    assert resumed["hits"] == full["hits"] and resumed["final_loss"] == full["final_loss"]
    assert resumed["history"] == full["history"] and math.isfinite(full["final_loss"])
    # more steps would change the schedule of the steps already taken: refused clearly
    assert main([*common[:-1], "20", "--checkpoint-dir", str(run), "--resume"]) == 2
    assert "steps: checkpoint 10 vs now 20" in capsys.readouterr().err


@pytest.mark.parametrize("scheme", ["learned", "t5"])
def test_encoder_decoder_framing_trains_and_reports_every_length(scheme):
    config = lg.CellConfig(framing="encoder-decoder", train_max=2, test_max=4, batch_size=4, eval_examples=3,
                           gate_examples=2).with_changes(model={"dim": 16, "num_heads": 2, "num_layers": 1},
                                                         train={"steps": 3, "warmup_steps": 1, "eval_every": 0})
    cell = lg.train_cell("scan", scheme, seed=0, config=config)
    assert cell["framing"] == "encoder-decoder" and list(cell["accuracy"]) == ["1", "2", "3", "4"]
    assert cell["steps"] == 3 and math.isfinite(cell["final_loss"])
