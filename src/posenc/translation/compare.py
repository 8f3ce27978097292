"""Train several models at the same budget on one split and tabulate BLEU / chrF (plain data + a plot)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc.train import resume_step
from posenc.translation.run import Prepared, TranslateOptions, evaluate_run, train_run

BASELINE = "torch"


def comparison_runs(base: TranslateOptions, *, positions: list[str], baseline: bool) -> dict[str, TranslateOptions]:
    """One run per position scheme of posenc's model, plus (``baseline``) the nn.Transformer one, named
    ``torch``; everything but the backbone and the scheme is ``base``'s."""
    torch_model = replace(base.model, position="sinusoidal", position_options={})  # the baseline's own encoding
    runs = {BASELINE: replace(base, backbone="torch", model=torch_model)} if baseline else {}
    for position in positions:
        runs[position] = replace(base, backbone="posenc", model=replace(base.model, position=position))
    return runs


def run_comparison(prepared: Prepared, out: str | Path, *, runs: dict[str, TranslateOptions], beam: int = 1,
                   limit: int | None = None, progress: bool = True) -> list[dict[str, Any]]:
    """Train each named run (``comparison_runs``) in ``out/<name>`` and score it.

    A model whose ``metrics-beam{beam}.json`` already exists is not retrained, so an
    interrupted comparison continues where it stopped.
    """
    out = Path(out)
    rows = []
    for name, opts in runs.items():
        run_dir = out / name
        metrics_path = run_dir / f"metrics-beam{beam}.json"
        if not metrics_path.exists():
            if not (run_dir / "run.json").exists():
                resume = resume_step(run_dir / "checkpoints") is not None if (run_dir / "checkpoints").exists() else False
                record = train_run(opts, prepared, run_dir, progress=progress, resume=resume)
                if record["interrupted"]:  # Ctrl-C / SIGTERM: keep the checkpoint, score nothing half-trained
                    (run_dir / "run.json").unlink()
                    raise KeyboardInterrupt(f"training of {name!r} interrupted; rerun the same command to resume")
            evaluate_run(run_dir, beam=beam, limit=limit, progress=progress)
        record = json.loads((run_dir / "run.json").read_text())
        metrics = json.loads(metrics_path.read_text())
        rows.append({"model": name, "label": record["label"], "parameters": record["model"].get("parameters"),
                     "steps": record["steps"], "train_seconds": record["train_seconds"], "tokens": record["tokens"],
                     "final_train_loss": record["history"][-1]["loss"] if record["history"] else None,
                     "valid_loss": record["evals"][-1].get("valid_loss") if record["evals"] else None,
                     **{f"{s}_{k}": v.get(k) for s, v in metrics["sets"].items() for k in ("bleu", "chrf", "n")}})
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    (out / "results.md").write_text(markdown_table(rows, beam=beam))
    plot_curves(out, list(runs))
    return rows


def markdown_table(rows: list[dict[str, Any]], *, beam: int) -> str:
    sets = [k[:-5] for k in rows[0] if k.endswith("_bleu")] if rows else []
    head = ["model", "params", "steps", "train s", "train loss", "valid loss"] + [f"{s} BLEU / chrF" for s in sets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["label"], f"{r['parameters']:,}" if r["parameters"] else "?", str(r["steps"]),
                 f"{r['train_seconds']:.0f}", _f(r["final_train_loss"]), _f(r["valid_loss"])]
        cells += [f"{_f(r[f'{s}_bleu'], 2)} / {_f(r[f'{s}_chrf'], 1)}" for s in sets]
        lines.append("| " + " | ".join(cells) + " |")
    n = {s: rows[0].get(f"{s}_n") for s in sets} if rows else {}
    return "\n".join(lines) + f"\n\nDecoding: {'greedy' if beam == 1 else f'beam {beam}'}; sentences per set: {n}.\n"


def _f(x: Any, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def plot_curves(out: Path, models: list[str]) -> Path | None:
    """Training loss (and validation loss at each evaluation) per model → ``curves.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name in models:
        path = out / name / "run.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        line, = ax.plot([h["step"] for h in rec["history"]], [h["loss"] for h in rec["history"]], lw=1, label=rec["label"])
        ev = [e for e in rec["evals"] if "valid_loss" in e]
        if ev:
            ax.plot([e["step"] for e in ev], [e["valid_loss"] for e in ev], "o--", color=line.get_color(), ms=3, lw=0.8)
    ax.set_xlabel("update")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("English→Spanish (WEB→RV1909): train loss (lines), valid loss (dots, no smoothing)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    target = out / "curves.png"
    fig.savefig(target, dpi=120)
    plt.close(fig)
    return target
