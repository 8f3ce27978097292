"""The grid: shards merged equal one run, and a resumed grid never recomputes a finished cell."""

from __future__ import annotations

import json
import shutil

import pytest

from posenc.lengthgen import QUICK, GridConfig, load_cells, run_grid, summarise
from posenc.lengthgen import grid as grid_module

TINY = QUICK.with_changes(train_max=2, test_max=3, gate_examples=2, eval_examples=3, batch_size=4,
                          model={"dim": 16, "num_heads": 2, "num_layers": 1},
                          train={"steps": 4, "eval_every": 2, "warmup_steps": 1})
GRID = GridConfig(tasks=("copy",), schemes=("none", "rope"), seeds=(0,), cell=TINY)
TIMING = ("seconds", "cpu_seconds")


def _results(cells):
    return [{k: v for k, v in c.items() if k not in TIMING} for c in cells]


def test_shards_merged_equal_a_single_run(tmp_path):
    run_grid(GRID, tmp_path / "one", log=lambda _: None)
    for i in range(2):
        run_grid(GRID, tmp_path / f"part{i}", shard=(i, 2), log=lambda _: None)
    merged = tmp_path / "merged" / "cells"
    merged.mkdir(parents=True)
    for i in range(2):
        for f in (tmp_path / f"part{i}" / "cells").glob("*.json"):
            shutil.copy(f, merged / f.name)
    single, parts = load_cells(tmp_path / "one", GRID), load_cells(tmp_path / "merged", GRID)
    assert len(single) == 2 and _results(parts) == _results(single)
    assert summarise(_results(parts), replicates=100) == summarise(_results(single), replicates=100)
    assert not (tmp_path / "one" / "checkpoints" / "copy-none-seed0").exists()  # weights not kept once saved


def test_shards_partition_the_cells():
    grid = GridConfig(tasks=("copy", "sort"), schemes=("none", "rope"), seeds=(0, 1), cell=TINY)
    shards = [grid.shard(i, 3) for i in range(3)]
    assert sorted(c for s in shards for c in s) == sorted(grid.cells()) and sum(map(len, shards)) == 8
    with pytest.raises(ValueError, match="0 <= INDEX < COUNT"):
        grid.shard(3, 3)


def test_resume_skips_finished_cells_and_retrains_only_what_is_missing(tmp_path, monkeypatch):
    first = run_grid(GRID, tmp_path, log=lambda _: None)
    (tmp_path / "cells" / "copy-rope-seed0.json").unlink()  # as if the run had stopped before this cell
    trained = []
    real = grid_module.train_cell

    def counting(task, scheme, **kw):
        trained.append((task, scheme, kw["seed"]))
        return real(task, scheme, **kw)

    monkeypatch.setattr(grid_module, "train_cell", counting)
    again = run_grid(GRID, tmp_path, log=lambda _: None)
    assert trained == [("copy", "rope", 0)]
    assert _results(again) == _results(first)
    trained.clear()
    run_grid(GRID, tmp_path, log=lambda _: None)
    assert trained == []  # everything finished: nothing recomputed
    # a different config is a different experiment: its cells are trained anew
    changed = GridConfig(tasks=("copy",), schemes=("none",), seeds=(0,), cell=TINY.with_changes(batch_size=5))
    run_grid(changed, tmp_path, log=lambda _: None)
    assert trained == [("copy", "none", 0)]


def test_same_config_ignores_settings_added_later_but_not_changed_ones():
    saved = TINY.identity()
    now = TINY.identity()
    now["model"]["new_field"] = "its old behaviour"
    assert grid_module.same_config(saved, now)
    now["model"]["dim"] = 32
    assert not grid_module.same_config(saved, now)
    assert not grid_module.same_config(None, now)


def test_each_task_trains_with_its_own_config_and_resumes_against_it(tmp_path, monkeypatch):
    """Per-task presets: a task's cells are built, recorded and resumed with that task's config alone."""
    wider = TINY.with_changes(model={"dim": 24})
    grid = GridConfig(tasks=("copy", "sort"), schemes=("none",), seeds=(0,), cell=TINY, per_task={"sort": wider})
    assert grid.config("copy") is TINY and grid.config("sort") is wider
    cells = {c["task"]: c for c in run_grid(grid, tmp_path, log=lambda _: None)}
    assert cells["copy"]["config"] == TINY.identity() and cells["sort"]["config"] == wider.identity()
    assert cells["sort"]["model"]["parameters"] > cells["copy"]["model"]["parameters"]  # the width reached the model
    assert grid.identities() == {"copy": TINY.identity(), "sort": wider.identity()}
    assert [c["task"] for c in load_cells(tmp_path, grid)] == ["copy", "sort"]
    # the same cells under one shared config: sort's saved cell is another experiment, copy's is kept
    shared = GridConfig(tasks=("copy", "sort"), schemes=("none",), seeds=(0,), cell=TINY)
    assert [c["task"] for c in load_cells(tmp_path, shared)] == ["copy"]
    trained = []
    real = grid_module.train_cell
    monkeypatch.setattr(grid_module, "train_cell", lambda t, s, **kw: trained.append(t) or real(t, s, **kw))
    run_grid(shared, tmp_path, log=lambda _: None)
    assert trained == ["sort"]


def test_a_changed_scheme_set_up_retrains_the_cell(tmp_path, monkeypatch):
    """How the benchmark sets up a scheme is not in the CellConfig; a saved cell built another way is stale."""
    grid = GridConfig(tasks=("copy",), schemes=("randomized", "none"), seeds=(0,), cell=TINY)
    run_grid(grid, tmp_path, log=lambda _: None)
    assert len(load_cells(tmp_path, grid)) == 2
    from posenc.lengthgen import cell as cell_module

    real = cell_module.position_options
    monkeypatch.setattr(cell_module, "position_options",
                        lambda scheme, config, **kw: {**real(scheme, config, **kw), "eval_positions": "given"}
                        if scheme == "randomized" else real(scheme, config, **kw))
    assert [c["scheme"] for c in load_cells(tmp_path, grid)] == ["none"]  # the randomized cell is stale
    trained = []
    real_train = grid_module.train_cell
    monkeypatch.setattr(grid_module, "train_cell", lambda t, s, **kw: trained.append(s) or real_train(t, s, **kw))
    run_grid(grid, tmp_path, log=lambda _: None)
    assert trained == ["randomized"]


def test_changed_task_options_retrain_the_cell_and_old_cells_count_as_the_defaults(tmp_path, monkeypatch):
    """Task options are part of what a cell is: a cell trained on msd addition is not a result for lsd."""
    msd = GridConfig(tasks=("addition",), schemes=("none",), seeds=(0,), cell=TINY.with_changes(train_max=1))
    lsd = GridConfig(tasks=("addition",), schemes=("none",), seeds=(0,),
                     cell=TINY.with_changes(train_max=1, task_options={"answer_order": "lsd"}))
    (cell,) = run_grid(msd, tmp_path, log=lambda _: None)
    assert cell["task_options"] == {"answer_order": "msd", "operand_order": "msd"}
    spelled_out = GridConfig(tasks=("addition",), schemes=("none",), seeds=(0,),
                             cell=TINY.with_changes(train_max=1, task_options={"operand_order": "msd"}))
    assert len(load_cells(tmp_path, spelled_out)) == 1  # the defaults given by name are the same task
    with pytest.raises(FileNotFoundError, match="no finished cells"):
        load_cells(tmp_path, lsd)
    # a cell saved before cells recorded their task options was built with the defaults (msd)
    path = tmp_path / "cells" / "addition-none-seed0.json"
    saved = json.loads(path.read_text())
    del saved["task_options"], saved["config"]["task_options"]
    path.write_text(json.dumps(saved))
    assert len(load_cells(tmp_path, msd)) == 1
    with pytest.raises(FileNotFoundError, match="no finished cells"):
        load_cells(tmp_path, lsd)
    trained = []
    real = grid_module.train_cell
    monkeypatch.setattr(grid_module, "train_cell", lambda t, s, **kw: trained.append(kw["config"]) or real(t, s, **kw))
    (cell,) = run_grid(lsd, tmp_path, log=lambda _: None)
    assert len(trained) == 1 and cell["task_options"] == {"answer_order": "lsd", "operand_order": "msd"}
