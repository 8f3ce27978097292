"""The replication grid on a micro configuration: shards cover every cell once, a rerun keeps them, the report reads them."""

from __future__ import annotations

import json

import pytest

from posenc.finetune.grid import Replication, ReplicationConfig


def _cfg(text_file) -> ReplicationConfig:
    return ReplicationConfig(original_max_len=16, dim=32, layers=1, heads=2, ffn_dim=48, pretrain_steps=4,
                             pretrain_batch=2, pretrain_lr=3e-3, pretrain_warmup=1,
                             methods=("rope", "rope-yarn", "rope-longrope"), factors=(2.0,), steps=(0, 1, 2),
                             seeds=(0, 1), batch_size=2, lr=1e-3, warmup_steps=1, search_population=3,
                             search_generations=1, search_samples=1, eval_factor=4, documents=(str(text_file),),
                             passkey_factors=(), passkey_trials=0, train_text=str(text_file))


@pytest.mark.slow
def test_two_shards_cover_the_grid_and_a_rerun_keeps_every_cell(tmp_path, text_file, seed):
    cfg, out = _cfg(text_file), tmp_path / "rep"
    quiet = {"progress": False, "log": lambda m: None}
    first = Replication(cfg, out, **quiet).run(stages=("pretrain", "search", "cells"), shard=(0, 2))
    second = Replication(cfg, out, **quiet).run(stages=("cells",), shard=(1, 2))
    names = sorted(c["name"] for c in first + second)
    assert names == sorted(f"{m}-x2-seed{s}" for m in cfg.methods for s in cfg.seeds)
    assert not set(c["name"] for c in first) & set(c["name"] for c in second)
    cell = json.loads((out / "cells" / "rope-yarn-x2-seed1.json").read_text())
    assert sorted(cell["measures"], key=int) == ["0", "1", "2"]
    assert not (out / "runs" / "rope-yarn-x2-seed1" / "checkpoints").exists()  # weights are not kept
    logs: list[str] = []
    Replication(cfg, out, progress=False, log=logs.append).run()
    assert sum("done earlier, kept" in line for line in logs) == 6
    results = json.loads((out / "results.json").read_text())
    rows = {(r["method"], r["step"]) for r in results["rows"]}
    assert rows == {(m, s) for m in cfg.methods for s in cfg.steps}
    assert all(r["seeds"] == (1 if r["step"] == 0 else 2) for r in results["rows"])  # step 0: one model
    assert (out / "results.md").read_text().count("| YaRN |") == 3 and (out / "ppl-x2.png").exists()


def test_the_measures_before_fine_tuning_are_shared_by_the_seeds(tmp_path, text_file, seed):
    from posenc.finetune.run import FinetuneConfig

    a = FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=16, length=32, steps=5, seed=0)
    b = FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=16, length=32, steps=9, seed=1, lr=1e-3)
    c = FinetuneConfig(method="rope-ntk", factor=2.0, original_max_len=16, length=32, steps=5, seed=0)
    assert a.before_key() == b.before_key() != c.before_key()


def test_a_grid_trained_short_fine_tunes_on_shorter_windows_and_reads_past_them(tmp_path, text_file, seed):
    """train_factor t < s: windows of t·L0, cells named -ft<t>, the report adds [t·L0, s·L0) and the YaRN paper's
    claim on it; a full grid's cells in the same folder are left out of its report."""
    import dataclasses

    from posenc.finetune.report import summarise

    cfg = dataclasses.replace(_cfg(text_file), methods=("rope-yarn",), factors=(4.0,), train_factor=2.0, seeds=(0,),
                              steps=(0, 1), eval_factor=8)
    out = tmp_path / "short"
    cells = Replication(cfg, out, progress=False, log=lambda m: None).run(stages=("pretrain", "cells"))
    (cell,) = cells
    assert cell["name"] == "rope-yarn-x4-ft2-seed0" and cell["config"]["length"] == 32  # 2 × L0 = 16
    assert cell["config"]["factor"] == 4.0  # the scale is still s = 4
    summary = summarise(cells, cfg)
    row = next(r for r in summary["rows"] if r["step"] == 1)
    doc = cfg.documents[0]
    assert set(row["ppl"][doc]) == {"in_range", "to_target", "to_scale", "beyond"}
    claim = next(c for c in summary["claims"] if c["id"] == "holds-past-data")
    assert claim["verdict"] == "undecided" and claim["measured"]["seeds"] == 1  # one seed: no interval
    full = dataclasses.replace(cfg, train_factor=None)
    assert summarise(cells, full)["rows"] == []  # the full grid's report does not read a train-short cell
    assert full.cell_name("rope-yarn", 4.0, 0) == "rope-yarn-x4-seed0"
    with pytest.raises(ValueError, match="train_factor must be"):
        dataclasses.replace(cfg, train_factor=8.0)  # longer than the scale


def test_shard_any_takes_the_cells_as_a_queue_skipping_one_another_holds(tmp_path, text_file, seed):
    """Processes sharing a folder with shard=ANY each take the next cell that is neither saved nor held: a cell
    whose run folder another process holds (run_lock: flock, so a second descriptor in this process is refused
    alike) is skipped at once, and taken by a later call once free."""
    import dataclasses

    from posenc.checkpoint import run_lock
    from posenc.finetune.grid import ANY

    cfg = dataclasses.replace(_cfg(text_file), methods=("rope", "rope-yarn"), seeds=(0, 1), steps=(0, 1))
    out = tmp_path / "queue"
    Replication(cfg, out, progress=False, log=lambda m: None).run(stages=("pretrain",))
    logs: list[str] = []
    with run_lock(out / "runs" / "rope-yarn-x2-seed0"):  # "another process" fine-tuning this cell
        cells = Replication(cfg, out, progress=False, log=logs.append).run(stages=("cells", "report"), shard=ANY)
    assert [c["name"] for c in cells] == ["rope-x2-seed0", "rope-x2-seed1", "rope-yarn-x2-seed1"]
    assert any(line.startswith("rope-yarn-x2-seed0: skipped, cell rope-yarn-x2-seed0 ") and "is in use by another "
               "posenc run" in line for line in logs)
    assert not (out / "results.json").exists()  # a queue process does not report: others may still be running
    logs.clear()
    again = Replication(cfg, out, progress=False, log=logs.append).run(stages=("cells",), shard=ANY)
    assert [c["name"] for c in again] == ["rope-x2-seed0", "rope-yarn-x2-seed0", "rope-x2-seed1",
                                          "rope-yarn-x2-seed1"]
    assert sum("fine-tuning" in line for line in logs) == 1 and sum("done earlier" in line for line in logs) == 3
    with pytest.raises(ValueError, match=r"shard must be INDEX/COUNT with 0 <= INDEX < COUNT or 'any', got"):
        Replication(cfg, out, progress=False, log=lambda m: None).run(shard="all")
