"""The length-generalisation benchmark: one model per (task, scheme, seed), accuracy by length.

After Kazemnejad et al., "The Impact of Positional Encoding on Length
Generalization in Transformers" (NeurIPS 2023; github.com/McGill-NLP/length-generalization):
train on lengths ``1..train_max``, test exact-match accuracy on every length up to
``test_max`` (about twice as long), and compare the position schemes.

Plain functions, no globals:

* :func:`train_one` trains and evaluates one cell (also what ``posenc train`` runs);
* :func:`run_grid` runs every cell, writing each result as soon as it is done so an
  interrupted grid continues where it stopped, and can be split across machines
  (``shard=(i, n)``) and merged afterwards;
* :func:`summarise`, :func:`markdown` and :func:`plot` turn cells into the report.

Tiny example (seconds on a CPU)::

    from posenc.lengthgen import CellSettings, train_one
    cell = train_one("copy", "rope", seed=0, settings=CellSettings(steps=50, train_max=4, test_max=8))
    cell["accuracy"]   # {"1": 1.0, "2": …}: exact-match accuracy by length (JSON keys)
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.checkpoint import atomic_write_text
from posenc.positions import lookup, names
from posenc.tasks import Example, Task, build_task, collate, correct, loss_sum, sequence_length
from posenc.tasks.framing import check_framing
from posenc.train import TrainConfig, dist_info, step_generator, train
from posenc.transformer import ModelConfig, build_decoder_only, build_encoder_decoder

#: CLI spellings → registry names (NoPE is registered as ``none``; "absolute" means the sinusoidal table).
ALIASES = {"nope": "none", "absolute": "sinusoidal"}
#: The schemes of the published comparison, in its order; the default grid takes those registered.
PAPER_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
#: Per task: (train_max, test_max). Copy/reverse/sort: the paper's 20/40 scaled down to 8/16 for CPU;
#: addition: digits per operand (the paper's 8/16 halved); SCAN: its length split (train ≤ 22 actions, test to 48).
TASK_LENGTHS = {"copy": (8, 16), "reverse": (8, 16), "sort": (8, 16), "addition": (4, 8), "scan": (22, 48)}
EVAL_SEED = 2_147_483_629  # one fixed evaluation set shared by every scheme and seed


def resolve_scheme(name: str) -> str:
    """Registry name for ``name`` (aliases: nope → none, absolute → sinusoidal); unknown names raise."""
    real = ALIASES.get(name, name)
    if real not in names():
        raise ValueError(f"unknown position scheme {name!r}; valid names: {', '.join(names())} "
                         f"(aliases: {', '.join(f'{a}={b}' for a, b in ALIASES.items())})")
    return real


def default_schemes() -> list[str]:
    """The paper's schemes that are registered here (t5 only once the catalogue provides it)."""
    return [s for s in PAPER_SCHEMES if s in names()]


@dataclass(frozen=True, kw_only=True)
class CellSettings:
    """How one (task, scheme, seed) model is built, trained and tested (plain data).

    Args:
        framing: ``decoder`` (prompt + answer) or ``encoder-decoder``.
        train_min, train_max: training lengths (None: the task's default, TASK_LENGTHS).
        test_max: longest evaluated length (None: the task's default, about 2 × train_max).
        dim, heads, layers, ffn_dim, dropout: the model.
        steps, batch_size, lr, min_lr, warmup_steps, weight_decay, grad_clip: the training.
        eval_examples: evaluated examples per length.
        eval_every: also evaluate during training (0: only at the end).
    """

    framing: str = "decoder"
    train_min: int = 1
    train_max: int | None = None
    test_max: int | None = None
    dim: int = 64
    heads: int = 4
    layers: int = 2
    ffn_dim: int | None = None
    dropout: float = 0.0
    steps: int = 3000
    batch_size: int = 32
    lr: float = 5e-3
    min_lr: float = 5e-4
    warmup_steps: int = 150
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_examples: int = 50
    eval_every: int = 0

    def lengths_for(self, task: Task) -> tuple[int, int, int]:
        """(train_min, train_max, test_max) for ``task``, defaults filled in and checked."""
        base_train, base_test = TASK_LENGTHS.get(task.name, (8, 16))
        train_max = self.train_max or base_train
        test_max = self.test_max or (base_test if self.train_max is None else 2 * train_max)
        hi = task.max_length()
        test_max = min(test_max, hi) if hi is not None else test_max
        if not 1 <= self.train_min <= train_max <= test_max:
            raise ValueError(f"need 1 <= train_min <= train_max <= test_max, got "
                             f"{self.train_min}, {train_max}, {test_max} for task {task.name!r}")
        return self.train_min, train_max, test_max


#: ~2–4 minutes for copy+reverse × 5–6 schemes on 2 cores; the default grid: < 30 minutes with --jobs 2.
QUICK = CellSettings(steps=600, dim=48, heads=4, layers=2, batch_size=32, train_max=5, test_max=10,
                     warmup_steps=50, eval_examples=40)
DEFAULT = CellSettings()


def valid_lengths(task: Task, lo: int, hi: int) -> list[int]:
    """Lengths in lo..hi the task can produce (SCAN has gaps)."""
    have = getattr(task, "lengths", None)
    allowed = set(have()) if callable(have) else None
    return [n for n in range(lo, hi + 1) if allowed is None or n in allowed]


def eval_set(task: Task, lengths: Sequence[int], per_length: int) -> dict[int, list[Example]]:
    """The fixed evaluation examples: ``per_length`` of each length, from EVAL_SEED."""
    gen = torch.Generator().manual_seed(EVAL_SEED)
    return {n: task.examples([n] * per_length, gen) for n in lengths}


def build_model(framing: str, vocab_size: int, scheme: str, settings: CellSettings, max_len: int) -> nn.Module:
    """The model of one cell. A learned table gets ``max_len`` rows — enough for the longest test —
    but rows beyond the training lengths never receive a gradient."""
    cls = lookup(scheme)
    params = _init_params(cls)
    options: dict[str, Any] = {"max_len": max_len} if "max_len" in params else {}
    if "bidirectional" in params and framing == "decoder":
        options["bidirectional"] = False  # T5's decoder buckets: a causal model only sees the past
    cfg = ModelConfig(vocab_size=vocab_size, dim=settings.dim, num_heads=settings.heads, num_layers=settings.layers,
                      ffn_dim=settings.ffn_dim, dropout=settings.dropout, position=scheme, position_options=options,
                      tie_embeddings=cls.extra_width == 0, share_embeddings=framing == "encoder-decoder")
    return build_decoder_only(cfg) if framing == "decoder" else build_encoder_decoder(cfg)


def _init_params(cls: type) -> set[str]:
    import inspect

    return set(inspect.signature(cls.__init__).parameters)


def accuracy_by_length(model: nn.Module, examples: dict[int, list[Example]], vocab: Any, framing: str,
                       batch_size: int = 256) -> dict[int, float]:
    """Exact-match accuracy per length (the model in eval mode, no grad)."""
    device = next(model.parameters()).device
    out: dict[int, float] = {}
    with torch.no_grad():
        for n, exs in examples.items():
            hits = 0
            for i in range(0, len(exs), batch_size):
                hits += int(correct(model, collate(exs[i:i + batch_size], vocab, framing).to(device)).sum())
            out[n] = hits / len(exs)
    return out


def train_one(
    task_name: str,
    scheme: str,
    *,
    seed: int,
    settings: CellSettings,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    checkpoint_every: int = 0,
    progress: bool = False,
    task_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train and evaluate one (task, scheme, seed) cell; return its result as plain data.

    Returns:
        A dict with the cell's identity, training lengths, ``accuracy`` ({length: acc}),
        ``in_range``/``beyond`` mean accuracies, final loss, wall time and the model description;
        ``interrupted`` is True if Ctrl-C stopped training (then accuracy is that of the saved state).
    """
    info = dist_info()
    framing = check_framing(settings.framing)
    scheme = resolve_scheme(scheme)
    task = build_task(task_name, **(task_options or {}))
    vocab = task.vocab()
    lo, train_max, test_max = settings.lengths_for(task)
    train_lengths = valid_lengths(task, lo, train_max)
    test_lengths = valid_lengths(task, lo, test_max)
    examples = eval_set(task, test_lengths, settings.eval_examples)
    max_len = max(sequence_length(*task.size_bound(n), framing) for n in test_lengths)  # every example fits

    torch.manual_seed(seed)
    model = build_model(framing, len(vocab), scheme, settings, max_len).to(info.device)
    pick = torch.tensor(train_lengths)

    def batches(step: int, rank: int, world: int) -> Any:
        gen = step_generator(seed, step)  # the global batch of this step, then this rank's rows
        lengths = pick[torch.randint(0, len(pick), (settings.batch_size,), generator=gen)].tolist()
        rows = task.examples(lengths, gen)[rank::world]
        return collate(rows, vocab, framing).to(info.device)

    def evaluate(m: nn.Module, step: int) -> dict[str, float]:
        acc = accuracy_by_length(m, examples, vocab, framing)
        return {str(n): a for n, a in acc.items()}

    config = TrainConfig(steps=settings.steps, lr=settings.lr, min_lr=settings.min_lr,
                         warmup_steps=min(settings.warmup_steps, settings.steps), weight_decay=settings.weight_decay,
                         grad_clip=settings.grad_clip, eval_every=settings.eval_every, seed=seed, progress=progress,
                         checkpoint_every=checkpoint_every,
                         log_every=max(1, settings.steps // 50))
    extra = {"task": task.describe(), "scheme": scheme, "settings": asdict(settings), "cell_seed": seed}
    began = time.perf_counter()
    result = train(model, loss_sum, batches, config, evaluate=evaluate if info.is_main else None,
                   checkpoint_dir=checkpoint_dir, resume=resume, extra_state=extra)
    if result.evals and result.evals[-1]["step"] == result.step:
        accuracy = {int(k): v for k, v in result.evals[-1].items() if k != "step"}
    elif info.is_main:  # interrupted: evaluate the state that was saved
        accuracy = accuracy_by_length(model.eval(), examples, vocab, framing)
    else:  # other ranks of a data-parallel run leave evaluation to rank 0
        accuracy = {}
    inside = [a for n, a in accuracy.items() if n <= train_max]
    beyond = [a for n, a in accuracy.items() if n > train_max]
    return {
        "task": task.name, "scheme": scheme, "seed": seed, "framing": framing,
        "length_unit": task.length_unit, "train_lengths": [lo, train_max], "test_max": test_max,
        "accuracy": {str(n): a for n, a in accuracy.items()},
        "in_range": sum(inside) / len(inside) if inside else math.nan, "beyond": sum(beyond) / len(beyond) if beyond else math.nan,
        "final_loss": result.final_loss, "steps": result.step, "interrupted": result.interrupted,
        "seconds": time.perf_counter() - began, "tokens": result.tokens,
        "history": result.history, "evals": result.evals[:-1] if settings.eval_every else [],
        "model": {"parameters": model.describe()["parameters"], "max_len": max_len,
                  "position": model.describe().get("position")},
    }


# -- the grid ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """Which cells to run: every (task, scheme, seed), with one CellSettings."""

    tasks: tuple[str, ...] = ("copy", "reverse")
    schemes: tuple[str, ...] = field(default_factory=lambda: tuple(default_schemes()))
    seeds: tuple[int, ...] = (0,)
    settings: CellSettings = DEFAULT

    def cells(self) -> list[tuple[str, str, int]]:
        return [(t, resolve_scheme(s), seed) for t in self.tasks for s in self.schemes for seed in self.seeds]


def cell_name(task: str, scheme: str, seed: int) -> str:
    return f"{task}-{scheme}-seed{seed}"


def machine_note(threads: int, jobs: int = 1) -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads_per_process": threads, "jobs": jobs,
            "torch": torch.__version__, "python": platform.python_version(),
            "world_size": dist_info().world_size}


def _machine_line(m: dict[str, Any]) -> str:
    if not m:
        return "unknown"
    return (f"{m.get('platform')}, {m.get('cpu_count')} CPUs, torch {m.get('torch')}, Python {m.get('python')}; "
            f"{m.get('jobs', 1)} job(s) × {m.get('world_size', 1)} process(es) × "
            f"{m.get('torch_threads_per_process')} thread(s)")


def run_grid(
    grid: GridConfig,
    out_dir: str | os.PathLike[str],
    *,
    shard: tuple[int, int] = (0, 1),
    fresh: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run the cells of ``grid`` (those of ``shard`` = (index, count)), writing ``cells/<name>.json`` as each ends.

    A cell whose JSON already exists (with the same settings) is skipped unless ``fresh``; a cell
    stopped by Ctrl-C resumes exactly from its checkpoint in ``checkpoints/<name>``. Returns the
    results of this shard's finished cells (an interrupted grid returns what it has).
    """
    index, count = shard
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")
    root = Path(out_dir)
    info = dist_info()
    results = []
    todo = [c for i, c in enumerate(grid.cells()) if i % count == index]
    for number, (task, scheme, seed) in enumerate(todo, 1):
        name = cell_name(task, scheme, seed)
        done_file = root / "cells" / f"{name}.json"
        if done_file.exists() and not fresh:
            saved = json.loads(done_file.read_text())
            if saved.get("settings") == asdict(grid.settings):
                log(f"[{number}/{len(todo)}] {name}: done earlier, kept")
                results.append(saved)
                continue
        ckpt = root / "checkpoints" / name
        resume = ckpt.exists() and (ckpt / "latest").exists() and not fresh
        log(f"[{number}/{len(todo)}] {name}: training" + (" (resuming)" if resume else ""))
        cell = train_one(task, scheme, seed=seed, settings=grid.settings, checkpoint_dir=ckpt, resume=resume,
                         progress=progress)
        if cell["interrupted"]:
            log(f"{name}: interrupted; run the same command again to continue")
            break
        cell["settings"] = asdict(grid.settings)
        if info.is_main:
            done_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(done_file, json.dumps(cell, indent=1))
        log(f"    in-range {cell['in_range']:.3f}  beyond {cell['beyond']:.3f}  "
            f"loss {cell['final_loss']:.4f}  {cell['seconds']:.0f}s")
        results.append(cell)
    return results


def load_cells(out_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every finished cell under ``out_dir/cells`` (e.g. merged from several shards)."""
    files = sorted((Path(out_dir) / "cells").glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no finished cells in {Path(out_dir) / 'cells'}")
    return [json.loads(f.read_text()) for f in files]


# -- the report ----------------------------------------------------------------------
def summarise(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per task: mean (over seeds) accuracy by length, in-range and beyond, per scheme; the ranking
    by beyond-range accuracy; and whether it agrees with the published ordering."""
    tasks: dict[str, Any] = {}
    for cell in cells:
        t = tasks.setdefault(cell["task"], {"train_lengths": cell["train_lengths"], "test_max": cell["test_max"],
                                            "length_unit": cell["length_unit"], "schemes": {}})
        s = t["schemes"].setdefault(cell["scheme"], {"seeds": [], "accuracy": {}, "in_range": [], "beyond": []})
        s["seeds"].append(cell["seed"])
        s["in_range"].append(cell["in_range"])
        s["beyond"].append(cell["beyond"])
        for n, a in cell["accuracy"].items():
            s["accuracy"].setdefault(n, []).append(a)
    for t in tasks.values():
        for s in t["schemes"].values():
            s["accuracy"] = {n: sum(v) / len(v) for n, v in sorted(s["accuracy"].items(), key=lambda kv: int(kv[0]))}
            s["in_range"] = sum(s["in_range"]) / len(s["in_range"])
            s["beyond"] = sum(s["beyond"]) / len(s["beyond"])
        t["ranking"] = sorted(t["schemes"], key=lambda k: (-t["schemes"][k]["beyond"], k))
        t["published_order"] = published_agreement(t["schemes"])
    return tasks


def published_agreement(schemes: dict[str, Any]) -> dict[str, Any]:
    """Kazemnejad et al. find NoPE and T5 ahead of absolute (sinusoidal, learned) and RoPE beyond the
    training length. Check that on the schemes present: every leader above every laggard."""
    leaders = [s for s in ("none", "t5") if s in schemes]
    laggards = [s for s in ("sinusoidal", "learned", "rope") if s in schemes]
    if not leaders or not laggards:
        return {"checked": False, "reason": "needs NoPE or T5 and one of sinusoidal/learned/rope"}
    worst_leader = min(schemes[s]["beyond"] for s in leaders)
    best_laggard = max(schemes[s]["beyond"] for s in laggards)
    return {"checked": True, "leaders": leaders, "laggards": laggards, "agrees": worst_leader > best_laggard,
            "worst_leader": worst_leader, "best_laggard": best_laggard,
            "each_leader_ahead": {s: schemes[s]["beyond"] > best_laggard for s in leaders}}


def _pct(x: float) -> str:
    return "—" if isinstance(x, float) and math.isnan(x) else f"{100 * x:.1f}"


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """The results as Markdown: a summary table, the per-length table, and the ranking verdict."""
    lines = ["# Length generalisation by position scheme", "",
             f"Command: `{meta.get('command', '')}`  ", f"Wall time: {meta.get('wall_seconds', 0):.0f} s  ",
             f"Machine: {_machine_line(meta.get('machine', {}))}  ", f"Settings: {meta.get('settings', {})}  ",
             f"Schemes: {', '.join(meta.get('schemes', []))} (registered: {', '.join(meta.get('registered_schemes', []))})",
             "",
             "Exact-match accuracy (%), mean over seeds. *In range*: lengths seen in training; "
             "*beyond*: longer ones.", ""]
    for task, t in summary.items():
        lo, hi = t["train_lengths"]
        lines += [f"## {task} (trained on {lo}–{hi} {t['length_unit']}, tested to {t['test_max']})", "",
                  "| scheme | in range | beyond |", "| --- | ---: | ---: |"]
        for scheme in t["ranking"]:
            s = t["schemes"][scheme]
            lines.append(f"| {scheme} | {_pct(s['in_range'])} | {_pct(s['beyond'])} |")
        lengths = list(next(iter(t["schemes"].values()))["accuracy"])
        lines += ["", "| scheme | " + " | ".join(lengths) + " |", "| --- |" + " ---: |" * len(lengths)]
        for scheme in t["ranking"]:
            acc = t["schemes"][scheme]["accuracy"]
            lines.append(f"| {scheme} | " + " | ".join(_pct(acc.get(n, math.nan)) for n in lengths) + " |")
        verdict = t["published_order"]
        if verdict["checked"]:
            word = "agrees" if verdict["agrees"] else "does not agree"
            lines += ["", f"Published ranking (NoPE, T5 ahead of absolute and RoPE beyond the training length): "
                      f"**{word}** here — worst of {verdict['leaders']} {_pct(verdict['worst_leader'])} % vs best of "
                      f"{verdict['laggards']} {_pct(verdict['best_laggard'])} %. Each alone: "
                      + ", ".join(f"{k} {'ahead' if v else 'not ahead'}" for k, v in verdict["each_leader_ahead"].items())
                      + "."]
        lines.append("")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Accuracy against length, one panel per task, the training range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(5 * len(summary), 3.8), squeeze=False)
    for ax, (task, t) in zip(axes[0], summary.items()):
        lo, hi = t["train_lengths"]
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.9", label="training lengths")
        for scheme in sorted(t["schemes"]):
            acc = t["schemes"][scheme]["accuracy"]
            ax.plot([int(n) for n in acc], [100 * a for a in acc.values()], marker="o", ms=3, label=scheme)
        ax.set(title=task, xlabel=f"length ({t['length_unit']})", ylabel="exact match (%)", ylim=(-3, 103))
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(cells: Sequence[dict[str, Any]], out_dir: str | os.PathLike[str], meta: dict[str, Any]) -> dict[str, Path]:
    """results.json, results.md and accuracy.png in ``out_dir``."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    summary = summarise(cells)
    slim = [{k: v for k, v in c.items() if k not in ("history",)} for c in cells]
    paths = {"json": root / "results.json", "markdown": root / "results.md", "plot": root / "accuracy.png"}
    atomic_write_text(paths["json"], json.dumps({"meta": meta, "summary": summary, "cells": slim}, indent=1))
    atomic_write_text(paths["markdown"], markdown(summary, meta))
    plot(summary, paths["plot"])
    return paths


def with_overrides(settings: CellSettings, **changes: Any) -> CellSettings:
    """``settings`` with the given non-None fields replaced."""
    return replace(settings, **{k: v for k, v in changes.items() if v is not None})
