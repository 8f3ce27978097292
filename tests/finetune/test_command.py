"""`posenc finetune run` and `search` end to end on a tiny posenc run directory, and their refusals."""

from __future__ import annotations

import json

import pytest

from posenc.cli import main

from .conftest import save_start, tiny_model


def test_run_with_lora_measures_before_and_after_and_resumes(tmp_path, seed, text_file, capsys):
    start = save_start(tmp_path / "start", tiny_model(seed))
    args = ["finetune", "run", str(start), "--method", "rope-yarn", "--factor", "4", "--steps", "3", "--warmup", "1",
            "--lr", "1e-2", "--lora-rank", "2", "--grad-checkpoint", "--train-text", str(text_file),
            "--text", str(text_file), "--eval-length", "96", "--out", str(tmp_path / "run"), "--quiet",
            "--json", str(tmp_path / "out.json")]
    assert main(args) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["config"]["length"] == 64 and out["step"] == 3 and out["trainable_parameters"] == 2 * 4 * 2 * (32 + 32)
    before, after = (m["loss"][str(text_file)] for m in (out["before"], out["evals"][-1]))
    assert [b["start"] for b in before["buckets"]] == list(range(0, 96, 8))
    assert after["mean_nll"] < before["mean_nll"]  # lr 1e-2 on the very text measured: the loss goes down
    assert main(args + ["--resume"]) == 0  # a finished run resumed: nothing to do, same result
    again = json.loads((tmp_path / "out.json").read_text())
    assert again["history"] == out["history"]


def test_search_writes_a_configuration_run_accepts(tmp_path, seed, text_file):
    start = save_start(tmp_path / "start", tiny_model(seed))
    assert main(["finetune", "search", str(start), "--factor", "2", "--population", "4", "--generations", "1",
                 "--samples", "1", "--start-tokens", "0,2", "--train-text", str(text_file),
                 "--out", str(tmp_path / "lr"), "--quiet"]) == 0
    result = json.loads((tmp_path / "lr" / "result.json").read_text())
    assert result["method"] == "rope-longrope" and len(result["options"]["long_factor"]) == 4
    assert main(["finetune", "run", str(start), "--method", "rope-longrope", "--longrope", str(tmp_path / "lr"),
                 "--factor", "2", "--steps", "1", "--train-text", str(text_file), "--eval-length", "0",
                 "--out", "-", "--quiet"]) == 0


@pytest.mark.parametrize("extra, message", [
    (["--method", "rope-longrope", "--factor", "2"], "needs per-pair factors found by a search"),
    (["--method", "rope-yarn"], "--method rope-yarn needs --factor S"),
    (["--method", "rope-yarn", "--factor", "2", "--lora-rank", "2", "--lora-targets", "qkv"],
     r"\['qkv'\] match no linear layer"),
    (["--method", "rope-yarn", "--factor", "2", "--batch-size", "3", "--length", "100000"], "fewer than one window"),
])
def test_bad_runs_are_refused_with_the_fix(tmp_path, seed, text_file, capsys, extra, message):
    import re

    start = save_start(tmp_path / "start", tiny_model(seed))
    code = main(["finetune", "run", str(start), "--train-text", str(text_file), "--eval-length", "0", "--steps", "1",
                 "--quiet", *extra])
    assert code == 2 and re.search(message, capsys.readouterr().err)


def test_grid_shard_takes_index_count_or_any(capsys):
    from posenc.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["finetune", "grid", "--shard", "any"]).shard == "any"
    assert parser.parse_args(["finetune", "grid", "--shard", "1/3"]).shard == (1, 3)
    for bad, message in (("all", "--shard takes INDEX/COUNT, e.g. 0/4, or any, got 'all'"),
                         ("3/3", "--shard 3/3: need 0 <= INDEX < COUNT")):
        with pytest.raises(SystemExit):
            parser.parse_args(["finetune", "grid", "--shard", bad])
        assert message in capsys.readouterr().err
