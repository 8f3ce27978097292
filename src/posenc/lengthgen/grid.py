"""The grid: every (task, scheme, seed) cell, in shards, on several processes, resumable.

Each finished cell is written at once, atomically, to ``OUT/cells/<task>-<scheme>-seed<N>.json``
with the :class:`~posenc.lengthgen.config.CellConfig` that produced it. A later run with the same
config never recomputes it, so a grid can be stopped (Ctrl-C saves the running cell's checkpoint
in ``OUT/checkpoints/``), resumed, split across machines with ``shard=(i, n)`` — cells i, i + n, …
— and merged by copying the ``cells/`` folders together.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc.validation import dumps
from posenc.checkpoint import atomic_write_text
from posenc.lengthgen.cell import position_description, train_cell
from posenc.lengthgen.config import DEFAULT, SCHEMES, CellConfig
from posenc.tasks import build_task
from posenc.train import dist_info


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """Which cells to run: every (task, scheme, seed), each task with its CellConfig.

    ``cell`` is the config of every task that ``per_task`` does not name; ``per_task`` gives a task
    its own (the recorded benchmark's presets, :data:`~posenc.lengthgen.config.PRESETS`, size the
    model and the budget per task). Every scheme and seed of one task share its config, so the
    schemes of a task are always compared at one model size and one budget.
    """

    tasks: tuple[str, ...] = ("copy", "reverse")
    schemes: tuple[str, ...] = SCHEMES
    seeds: tuple[int, ...] = (0, 1, 2)
    cell: CellConfig = field(default_factory=lambda: DEFAULT)
    per_task: Mapping[str, CellConfig] = field(default_factory=dict)

    def config(self, task: str) -> CellConfig:
        """The CellConfig of ``task``'s cells."""
        return self.per_task.get(task, self.cell)

    def identities(self) -> dict[str, dict[str, Any]]:
        """Per task of the grid, what decides its cells' results (the report prints these)."""
        return {t: self.config(t).identity() for t in self.tasks}

    def cells(self) -> list[tuple[str, str, int]]:
        """Every cell, seeds innermost (so a shard of a partial run still covers schemes evenly)."""
        return [(t, s, seed) for t in self.tasks for seed in self.seeds for s in self.schemes]

    def shard(self, index: int, count: int) -> list[tuple[str, str, int]]:
        """Cells index, index + count, … of :meth:`cells`."""
        check_shard(index, count)
        return self.cells()[index::count]


def check_shard(index: int, count: int) -> None:
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"shard must be INDEX/COUNT with 0 <= INDEX < COUNT, got {index}/{count}")


def cell_name(task: str, scheme: str, seed: int) -> str:
    return f"{task}-{scheme}-seed{seed}"


def cell_file(out_dir: str | os.PathLike[str], task: str, scheme: str, seed: int) -> Path:
    return Path(out_dir) / "cells" / f"{cell_name(task, scheme, seed)}.json"


def finished(out_dir: str | os.PathLike[str], task: str, scheme: str, seed: int, config: CellConfig) -> dict | None:
    """The saved result of this cell if it was finished with the same config and scheme set-up, else None."""
    path = cell_file(out_dir, task, scheme, seed)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved if current(saved, config) else None


def current(saved: dict[str, Any], config: CellConfig) -> bool:
    """A saved cell still answers for ``config``: the same settings, and the same position scheme set-up
    (the one the benchmark would build today, :func:`~posenc.lengthgen.cell.position_description`)."""
    # the task options are compared as built (defaults filled in), so {} and the defaults spelled out agree
    saved_config, now = dict(saved.get("config") or {}), config.identity()
    saved_config.pop("task_options", None)
    now.pop("task_options")
    if not saved_config or not same_config(saved_config, now):
        return False
    if saved_task_options(saved) != config.task(saved["task"]).options():
        return False
    now = json.loads(dumps(position_description(saved["task"], saved["scheme"], config)))
    return saved.get("model", {}).get("position") == now


def saved_task_options(saved: dict[str, Any]) -> dict[str, Any]:
    """The task options a saved cell was trained with. An option it did not record (a cell saved before
    cells recorded them, or before the option existed) had the task's default of that time, which is
    today's (a new option keeps the old behaviour as its default); filling defaults in here means
    same_config's "fields added since are ignored" cannot make a changed task current."""
    return {**build_task(saved["task"]).options(), **saved.get("task_options", {})}


def same_config(saved: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Every setting the saved cell recorded equals today's (settings added to the configs since are ignored,
    so a library update that adds a field at its old behaviour does not void finished cells)."""
    if not isinstance(saved, dict):
        return False
    for key, value in saved.items():
        if key not in now:
            return False
        if isinstance(value, dict) and isinstance(now[key], dict):
            if not same_config(value, now[key]):
                return False
        elif value != now[key]:
            return False
    return True


def run_grid(
    grid: GridConfig,
    out_dir: str | os.PathLike[str] | None,
    *,
    shard: tuple[int, int] = (0, 1),
    fresh: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run this shard's cells, skipping those already finished with the same config (unless ``fresh``).

    ``out_dir`` None: keep nothing on disk (no resume). Returns the shard's finished cells (an
    interrupted run returns those it has; run it again to go on).
    """
    root = None if out_dir is None else Path(out_dir)
    info = dist_info()
    todo = grid.shard(*shard)
    from posenc.progress import Overall

    # the grid's bar (cell k of n, elapsed, time left) above each cell's training bar; one per run, never restarted
    with Overall(len(todo), "lengthgen", enabled=progress and info.is_main) as overall:
        return _run_cells(grid, root, todo, overall, fresh=fresh, progress=progress, log=log)


def _run_cells(grid: GridConfig, root: Path | None, todo: list[tuple[str, str, int]], overall: Any, *, fresh: bool,
               progress: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    info = dist_info()
    results = []
    for number, (task, scheme, seed) in enumerate(todo, 1):
        name = cell_name(task, scheme, seed)
        overall.start(name)
        config = grid.config(task)
        saved = None if fresh or root is None else finished(root, task, scheme, seed, config)
        if saved is not None:
            log(f"[{number}/{len(todo)}] {name}: done earlier, kept")
            results.append(saved)
            overall.done(kept=True)
            continue
        ckpt = None if root is None else root / "checkpoints" / name
        resume = ckpt is not None and (ckpt / "latest").exists() and not fresh
        if fresh and ckpt is not None and ckpt.exists() and info.is_main:
            shutil.rmtree(ckpt)  # --fresh: this cell starts over, so its old checkpoints go (train refuses a mix)
        log(f"[{number}/{len(todo)}] {name}: training" + (" (resuming)" if resume else ""))
        cell = train_cell(task, scheme, seed=seed, config=config, checkpoint_dir=ckpt, resume=resume,
                          progress=progress)
        if cell["interrupted"]:
            log(f"{name}: interrupted; run the same command again to continue")
            break
        cell["config"] = config.identity()
        if info.is_main and root is not None:
            path = cell_file(root, task, scheme, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, dumps(cell, indent=1))
            shutil.rmtree(ckpt, ignore_errors=True)  # type: ignore[arg-type]  # the JSON is the result; the weights are not kept
        gate = f"learned at step {cell['gate']['passed_at']}" if cell["learned"] else \
            f"NOT learned (gate {cell['gate']['accuracy']:.3f} after {cell['steps']} steps)"
        log(f"    {name}: {gate}; in-range {cell['in_range']:.3f} beyond {cell['beyond']:.3f} "
            f"({cell['seconds']:.0f} s, {cell['cpu_seconds']:.0f} s CPU)")
        results.append(cell)
        overall.done()
    return results


def _stop_with_parent() -> None:
    """On Linux, have the kernel send this process SIGTERM when its parent dies (even by SIGKILL):
    a worker must not go on training, and writing cells, for a grid nobody waits for."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _worker(grid: GridConfig, out_dir: str, shard: tuple[int, int], fresh: bool, threads: int,
            parent: int) -> int:
    _stop_with_parent()
    if os.getppid() != parent:  # the parent died before the line above took effect
        return 0
    torch.set_num_threads(threads)
    label = f"[shard {shard[0]}/{shard[1]}] "
    cells = run_grid(grid, out_dir, shard=shard, fresh=fresh, log=lambda s: print(label + s, flush=True))
    return len(cells)


def run_jobs(grid: GridConfig, out_dir: str | os.PathLike[str], *, jobs: int, fresh: bool = False,
             threads: int = 1) -> None:
    """Run the grid as ``jobs`` local processes, one shard each (``threads`` torch threads each).

    Stopping: Ctrl-C reaches every process of the terminal's group, so each worker saves its running
    cell and stops; a SIGTERM to this process is passed on to the workers, which do the same; and
    on Linux a worker also stops if this process dies without passing anything on (SIGKILL).
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(grid, str(out_dir), (i, jobs), fresh, threads, os.getpid()))
             for i in range(jobs)]

    def pass_on(signum: int, frame: Any) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: the worker's training loop saves and returns

    previous = signal.signal(signal.SIGTERM, pass_on)
    try:
        for p in procs:
            p.start()
        try:
            for p in procs:
                p.join()
        except KeyboardInterrupt:  # the children got the same Ctrl-C: let them save and stop
            for p in procs:
                p.join()
    finally:
        signal.signal(signal.SIGTERM, previous)


def load_cells(out_dir: str | os.PathLike[str], grid: GridConfig | None = None) -> list[dict[str, Any]]:
    """Finished cells under ``out_dir/cells`` (merged shards); with ``grid``, only its cells, in its order."""
    folder = Path(out_dir) / "cells"
    cells = [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))]
    if grid is not None:
        order = {cell_name(*c): i for i, c in enumerate(grid.cells())}
        cells = [c for c in cells if cell_name(c["task"], c["scheme"], c["seed"]) in order
                 and current(c, grid.config(c["task"]))]
        cells.sort(key=lambda c: order[cell_name(c["task"], c["scheme"], c["seed"])])
    if not cells:
        raise FileNotFoundError(f"no finished cells in {folder}")
    return cells


def machine_note(threads: int, jobs: int = 1) -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads_per_process": threads, "jobs": jobs,
            "torch": torch.__version__, "python": platform.python_version(), "world_size": dist_info().world_size}
