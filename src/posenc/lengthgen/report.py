"""The report: results.json, results.md and accuracy.png from a summary (see :mod:`.summary`)."""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posenc.validation import dumps
from posenc.checkpoint import atomic_write_text
from posenc.lengthgen.summary import summarise
from posenc.tasks import build_task


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _ci(ci: Sequence[float] | None) -> str:
    return "" if ci is None else f" [{_pct(ci[0])}, {_pct(ci[1])}]"


MODEL_FIELDS = ("dim", "num_heads", "num_layers", "ffn_dim", "dropout", "norm_first")
TRAIN_FIELDS = ("steps", "lr", "min_lr", "warmup_steps", "weight_decay", "grad_clip", "eval_every")


def _settings(data: dict[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k} {data[k]}" for k in keys if k in data)


def _machine_line(m: dict[str, Any]) -> str:
    if not m:
        return "unknown"
    return (f"{m.get('platform')}, {m.get('cpu_count')} CPUs, torch {m.get('torch')}, Python {m.get('python')}; "
            f"{m.get('jobs', 1)} job(s) × {m.get('torch_threads_per_process')} thread(s)")


def headline(summary: dict[str, Any]) -> list[str]:
    """One row per task: the schemes by rank, beyond-range mean and interval; not-learned ones last."""
    lines = ["| task | beyond the training lengths: exact match % [95 % CI], rank (= tied) | did not learn |",
             "| --- | --- | --- |"]
    for task, t in summary.items():
        ranked = [s for s in t["order"] if t["schemes"][s]["learned"]]
        failed = [f"{s} (0/{len(t['schemes'][s]['seeds'])})" for s in t["order"] if not t["schemes"][s]["learned"]]
        parts = []
        for s in ranked:
            x = t["schemes"][s]
            part = f"{x['rank']}. {s} {_pct(x['beyond'])}{_ci(x['beyond_ci'])}"
            if len(x["learned_seeds"]) < len(x["seeds"]):
                part += f" ({len(x['learned_seeds'])}/{len(x['seeds'])} seeds)"
            parts.append(part)
        lines.append(f"| {task} | {' · '.join(parts)} | {', '.join(failed) or '—'} |")
    return lines


def task_section(task: str, t: dict[str, Any]) -> list[str]:
    lo, hi = t["train_lengths"]
    out = [f"## {task} (trained on {lo}–{hi} {t['length_unit']}, tested to {t['test_max']})", "",
           "Over the seeds that passed the gate. Rank: 1 + the schemes significantly ahead (paired bootstrap).", "",
           "| rank | scheme | learned seeds | in range | beyond [95 % CI] |", "| ---: | --- | ---: | ---: | --- |"]
    for s in t["order"]:
        x = t["schemes"][s]
        out.append(f"| {x['rank'] or '—'} | {s} | {len(x['learned_seeds'])}/{len(x['seeds'])} | {_pct(x['in_range'])} "
                   f"| {_pct(x['beyond'])}{_ci(x['beyond_ci'])} |" if x["learned"] else
                   f"| — | {s} | 0/{len(x['seeds'])} | not learned | excluded |")
    out += ["", "**Convergence** (updates until held-out in-range exact match ≥ threshold; ✗ = budget ran out, "
            "gate accuracy then). Per cell: beyond-range exact match with its Wilson 95 % interval.", "",
            "| scheme | seed | steps to threshold | in range | beyond [Wilson 95 %] | CPU s |",
            "| --- | ---: | ---: | ---: | --- | ---: |"]
    for s in t["order"]:
        for r in t["schemes"][s]["rows"]:
            steps = str(r["passed_at"]) if r["learned"] else f"✗ {r['budget']} (gate {_pct(r['gate'])} %)"
            out.append(f"| {s} | {r['seed']} | {steps} | {_pct(r['in_range'])} | {_pct(r['beyond'])}"
                       f"{_ci(r['beyond_ci'])} | {'—' if r['cpu_seconds'] is None else round(r['cpu_seconds'])} |")
    lengths = t["lengths"]
    out += ["", "Exact match (%) by length, mean over learned seeds:", "",
            "| scheme | " + " | ".join(lengths) + " |", "| --- |" + " ---: |" * len(lengths)]
    for s in t["order"]:
        by = t["schemes"][s]["by_length"]
        if by:
            out.append(f"| {s} | " + " | ".join(_pct(by[n]["mean"]) for n in lengths) + " |")
    sig = [k for k, v in t["pairs"].items() if v["significant"]]
    ties = [k.replace(" > ", " = ") for k, v in t["pairs"].items() if not v["significant"]]
    out += ["", f"Significantly different (95 % paired-bootstrap interval of the difference excludes 0): "
            f"{'; '.join(sig) or 'none'}.  ", f"Tied: {'; '.join(ties) or 'none'}.", ""]
    for reading in t.get("claims", [t["paper"]]):
        out += paper_lines(reading) + [""]
    return out


def paper_lines(paper: dict[str, Any]) -> list[str]:
    lines = [f"**Against {paper['source']}** ({', '.join(paper['leaders'])} ahead of "
             f"{', '.join(paper['laggards'])} beyond the training lengths; the paper: {paper['statement']}): "
             f"**{paper['verdict']}**"
             + (" (" + "; ".join(f"{k}: {v}" for k, v in paper["by_leader"].items()) + ")"
                if len(paper["by_leader"]) > 1 else "") + "."]
    for r in paper["pairs"]:
        if r["reading"] == "not testable":
            lines.append(f"- {r['leader']} vs {r['laggard']}: not testable ({r['why']})")
        else:
            lines.append(f"- {r['leader']} vs {r['laggard']}: {r['reading']} "
                         f"(difference {100 * r['diff']:+.1f} points, 95 % CI [{100 * r['ci'][0]:+.1f}, "
                         f"{100 * r['ci'][1]:+.1f}])")
    return lines


def missing_line(missing: Sequence[str]) -> str:
    """``copy-rope-seed2, …`` compressed per task: a task with every cell missing is named once."""
    by_task: dict[str, list[str]] = {}
    for name in missing:
        by_task.setdefault(name.split("-", 1)[0], []).append(name)
    parts = [f"{task} ({len(names)} cells: {', '.join(n.split('-', 1)[1] for n in names)})" if len(names) <= 24
             else f"{task} ({len(names)} cells)" for task, names in by_task.items()]
    return "; ".join(parts)


def config_table(configs: dict[str, dict[str, Any]]) -> list[str]:
    """One row per task: the model, the training and the gate its cells share (``configs``: task → identity)."""
    lines = ["Per task, every scheme and seed share one model and one budget (full configuration in results.json):", "",
             "| task | task options | framing | model | training | batch | gate | test examples per length |",
             "| --- | --- | --- | --- | --- | ---: | --- | ---: |"]
    for task, cfg in configs.items():
        built = build_task(task, **(cfg.get("task_options") or {}))
        options = ", ".join(f"{k} {v}" for k, v in built.options().items()) or "—"
        lines.append(f"| {task} | {options} | {cfg.get('framing')} | {_settings(cfg.get('model', {}), MODEL_FIELDS)} | "
                     f"{_settings(cfg.get('train', {}), TRAIN_FIELDS)} | {cfg.get('batch_size')} | "
                     f"≥ {cfg.get('threshold')} on {cfg.get('gate_examples')} per training length | "
                     f"{cfg.get('eval_examples')} |")
    return lines


def claims_table(summary: dict[str, Any]) -> list[str]:
    """One row per published claim, one column per task: its verdict there (— where its schemes were not run)."""
    sources = [c["source"] for t in summary.values() for c in t.get("claims", [])]
    sources = list(dict.fromkeys(sources))
    if not sources:
        return []
    lines = ["The published claims, read task by task (each task's section gives the pairs with their intervals):", "",
             "| claim | " + " | ".join(summary) + " |", "| --- |" + " --- |" * len(summary)]
    for src in sources:
        cells = []
        for t in summary.values():
            found = [c for c in t.get("claims", []) if c["source"] == src]
            cells.append(found[0]["verdict"] if found else "—")
        claim = next(c for t in summary.values() for c in t.get("claims", []) if c["source"] == src)
        lines.append(f"| {src}: {', '.join(claim['leaders'])} ahead of {', '.join(claim['laggards'])} | "
                     + " | ".join(cells) + " |")
    return lines + [""]


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    cfg = meta.get("config", {})
    lines = ["# Length generalisation by position scheme", "",
             f"Command: `{meta.get('command', '')}`  ",
             f"Cells: {meta.get('finished', '?')} finished of {meta.get('expected', '?')}"
             + (f" — not yet run: {missing_line(meta['missing'])}" if meta.get("missing") else "") + "  ",
             f"Total CPU time of the cells: {meta.get('cpu_seconds', 0):.0f} s "
             f"({meta.get('cpu_seconds', 0) / 3600:.2f} h)  ",
             f"Machine: {_machine_line(meta.get('machine', {}))}  ",
             "", *config_table(cfg), "",
             "Only cells that passed the convergence gate are compared; a scheme whose seeds all failed "
             "it is listed as not learned and excluded (never averaged in as zeros).", "",
             *headline(summary), "", *claims_table(summary)]
    for task, t in summary.items():
        lines += task_section(task, t)
    return "\n".join(lines)


def scheme_colors(summary: dict[str, Any]) -> dict[str, str]:
    """One colour per scheme for every panel (the order of first appearance across tasks, matplotlib's
    tab10 then tab20), so a scheme reads the same in every task whatever its rank there."""
    import matplotlib

    palette = [matplotlib.colors.to_hex(c) for c in (*matplotlib.colormaps["tab10"].colors,
                                                      *matplotlib.colormaps["tab20"].colors[1::2])]
    names: list[str] = []
    for t in summary.values():
        names += [s for s in t["order"] if s not in names]
    return {s: palette[i % len(palette)] for i, s in enumerate(names)}


def plot(summary: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Accuracy against length per task, bootstrap 95 % bands, the training lengths shaded; one colour per
    scheme in every panel and one legend for the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    colors = scheme_colors(summary)
    cols = min(3, len(summary))
    rows = -(-len(summary) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, (task, t) in zip(flat, summary.items()):
        lo, hi = t["train_lengths"]
        ax.axvspan(lo - 0.5, hi + 0.5, color="0.9")
        for s in t["order"]:
            by = t["schemes"][s]["by_length"]
            if not by:
                continue
            xs = [int(n) for n in by]
            ax.plot(xs, [100 * v["mean"] for v in by.values()], marker="o", ms=2.5, lw=1.3, color=colors[s])
            ax.fill_between(xs, [100 * v["ci"][0] for v in by.values()], [100 * v["ci"][1] for v in by.values()],
                            color=colors[s], alpha=0.15, lw=0)
        failed = [s for s in t["order"] if not t["schemes"][s]["learned"]]
        if failed and len(failed) == len(t["order"]):
            title = f"{task}\nnot learned by any of the {len(failed)} schemes"
        else:
            title = task + ("\n" + textwrap.fill(f"not learned: {', '.join(failed)}", 48) if failed else "")
        ax.set(title=title, xlabel=f"length ({t['length_unit']})", ylabel="exact match (%)", ylim=(-3, 103))
        ax.grid(alpha=0.3)
    handles = [Patch(color="0.9", label="training lengths"),
               *(Line2D([], [], color=c, marker="o", ms=3, label=s) for s, c in colors.items())]
    spare = flat[len(summary):]
    if spare:  # an empty panel holds the legend
        for ax in spare:
            ax.axis("off")
        spare[0].legend(handles=handles, loc="center", fontsize=9, title="scheme (mean, 95 % band)")
    else:
        flat[-1].legend(handles=handles, fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(cells: Sequence[dict[str, Any]], out_dir: str | os.PathLike[str],
                 meta: dict[str, Any]) -> dict[str, Path]:
    """results.json (meta, summary, every cell without its loss history), results.md, accuracy.png."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    summary = summarise(cells)
    meta = {**meta, "cpu_seconds": sum(c.get("cpu_seconds", 0.0) for c in cells), "finished": len(cells)}
    slim = [{k: v for k, v in c.items() if k != "history"} for c in cells]
    paths = {"json": root / "results.json", "markdown": root / "results.md", "plot": root / "accuracy.png"}
    atomic_write_text(paths["json"], dumps({"meta": meta, "summary": summary, "cells": slim}, indent=1))
    atomic_write_text(paths["markdown"], markdown(summary, meta))
    plot(summary, paths["plot"])
    return paths
