"""The length-generalisation benchmark and the train/lengthgen commands, end to end on a micro grid."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from posenc import lengthgen as lg
from posenc.cli import main
from posenc.positions import names


def test_scheme_names_and_aliases():
    assert lg.resolve_scheme("nope") == "none" and lg.resolve_scheme("absolute") == "sinusoidal"
    with pytest.raises(ValueError, match="unknown position scheme 'xyz'.*rope"):
        lg.resolve_scheme("xyz")
    assert set(lg.default_schemes()) <= set(names()) and "none" in lg.default_schemes()


def test_lengths_default_per_task_and_are_checked():
    assert lg.DEFAULT.lengths_for(lg.build_task("copy")) == (1, 8, 16)
    assert lg.DEFAULT.lengths_for(lg.build_task("scan")) == (1, 22, 48)
    assert lg.CellSettings(train_max=5).lengths_for(lg.build_task("copy")) == (1, 5, 10)
    with pytest.raises(ValueError, match="train_max <= test_max"):
        lg.CellSettings(train_max=5, test_max=4).lengths_for(lg.build_task("copy"))


def test_summary_and_published_ranking_are_computed():
    def cell(scheme, beyond):
        return {"task": "copy", "scheme": scheme, "seed": 0, "train_lengths": [1, 2], "test_max": 4,
                "length_unit": "symbols", "in_range": 1.0, "beyond": beyond,
                "accuracy": {"1": 1.0, "2": 1.0, "3": beyond, "4": beyond}}

    summary = lg.summarise([cell("none", 0.5), cell("rope", 0.0), cell("learned", 0.25)])
    assert summary["copy"]["ranking"] == ["none", "learned", "rope"]
    verdict = summary["copy"]["published_order"]
    assert verdict["agrees"] and verdict["worst_leader"] == 0.5 and verdict["best_laggard"] == 0.25
    assert verdict["each_leader_ahead"] == {"none": True}
    assert not lg.summarise([cell("none", 0.1), cell("rope", 0.2)])["copy"]["published_order"]["agrees"]
    text = lg.markdown(summary, {"command": "posenc lengthgen", "wall_seconds": 1.0})
    assert "| none | 100.0 | 50.0 |" in text and "**agrees**" in text


@pytest.mark.slow
def test_micro_grid_end_to_end_and_restart(tmp_path, capsys):
    argv = ["lengthgen", "--task", "copy", "--scheme", "nope,learned", "--steps", "12", "--train-max", "2",
            "--test-max", "3", "--dim", "16", "--heads", "2", "--layers", "1", "--batch-size", "8",
            "--eval-examples", "4", "--threads", "1", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert [c["scheme"] for c in data["cells"]] == ["none", "learned"]
    for c in data["cells"]:
        assert set(c["accuracy"]) == {"1", "2", "3"} and c["steps"] == 12
        assert all(0.0 <= a <= 1.0 for a in c["accuracy"].values()) and not math.isnan(c["final_loss"])
    learned = next(c for c in data["cells"] if c["scheme"] == "learned")
    assert learned["model"]["max_len"] >= 2 * 3 + 2  # covers the longest test sequence
    assert (tmp_path / "accuracy.png").stat().st_size > 1000 and "## copy" in (tmp_path / "results.md").read_text()
    capsys.readouterr()
    assert main(argv) == 0  # a second run keeps the finished cells
    assert capsys.readouterr().out.count("done earlier, kept") == 2
    assert main(["lengthgen", "--report-only", "--out", str(tmp_path)]) == 0


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
    assert resumed["accuracy"] == full["accuracy"] and resumed["final_loss"] == full["final_loss"]
    assert resumed["history"] == full["history"]
    # more steps would change the schedule of the steps already taken: refused clearly
    assert main([*common[:-1], "20", "--checkpoint-dir", str(run), "--resume"]) == 2
    assert "steps: checkpoint 10 vs now 20" in capsys.readouterr().err


@pytest.mark.parametrize("scheme", ["learned", "naive"])
def test_encoder_decoder_framing_trains_and_reports_every_length(scheme):
    settings = lg.CellSettings(framing="encoder-decoder", steps=3, warmup_steps=1, train_max=2, test_max=4, dim=16,
                               heads=2, layers=1, batch_size=4, eval_examples=3)
    cell = lg.train_one("scan", scheme, seed=0, settings=settings)
    assert cell["framing"] == "encoder-decoder" and list(cell["accuracy"]) == ["1", "2", "3", "4"]
    assert cell["steps"] == 3 and math.isfinite(cell["final_loss"])
