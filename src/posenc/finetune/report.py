"""The replication's report: results.json, results.md and plots from the finished cells.

Perplexity over a range of positions is exp of the token-weighted mean loss of
the buckets in it; over seeds, the mean of those losses with a 95 % Student-t
interval (none with one seed), reported as perplexities. Passkey accuracy
pools the trials of every seed, with a Wilson interval. Ranges: in range
[0, L₀), the fine-tuning length [L₀, s·L₀), beyond it [s·L₀, eval·L₀).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from posenc.checkpoint import atomic_write_text
from posenc.extend.passkey import wilson
from posenc.validation import dumps

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def range_nll(buckets: list[dict[str, Any]], lo: int, hi: int) -> float | None:
    """Token-weighted mean loss of the buckets lying in [lo, hi)."""
    sel = [b for b in buckets if b["start"] >= lo and b["end"] <= hi and b["ppl"] and b["tokens"]]
    tokens = sum(b["tokens"] for b in sel)
    return None if not tokens else sum(b["tokens"] * math.log(b["ppl"]) for b in sel) / tokens


def interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95 % t-interval of losses, as perplexities."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"ppl": math.exp(mean), "lo": None, "hi": None, "n": n}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T95.get(n - 1, 1.96) * sd / math.sqrt(n)
    return {"ppl": math.exp(mean), "lo": math.exp(mean - half), "hi": math.exp(mean + half), "n": n}


def load_cells(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "cells").glob("*.json"))]


def summarise(cells: list[dict[str, Any]], cfg: Any) -> dict[str, Any]:
    l0 = cfg.original_max_len
    top = cfg.eval_factor * l0
    grouped: dict[tuple[float, str, int], list[dict[str, Any]]] = defaultdict(list)
    for cell in cells:
        for step, m in cell["measures"].items():
            key = (cell["factor"], cell["method"], int(step))
            if int(step) == 0 and grouped[key]:
                continue  # before fine-tuning every seed measures the same model: one measure, not n copies
            grouped[key].append(m)
    rows = []
    order = {m: i for i, m in enumerate(cfg.methods)}
    for (factor, method, step), ms in sorted(grouped.items(),
                                             key=lambda kv: (kv[0][0], kv[0][2], order.get(kv[0][1], 99))):
        ranges = {"in_range": (0, l0), "to_target": (l0, int(factor * l0)), "beyond": (int(factor * l0), top)}
        row: dict[str, Any] = {"factor": factor, "method": method, "step": step, "seeds": len(ms), "ppl": {},
                               "passkey": {}, "curve": {}}
        for doc in cfg.documents:
            per = {}
            for name, (lo, hi) in ranges.items():
                vals = [v for v in (range_nll(m["loss"][doc]["buckets"], lo, hi) for m in ms if doc in m["loss"])
                        if v is not None]
                per[name] = interval(vals) if vals else None
            row["ppl"][doc] = per
            buckets = [m["loss"][doc]["buckets"] for m in ms if doc in m["loss"]]
            if buckets:
                row["curve"][doc] = {"position": [(b["start"] + b["end"]) / 2 for b in buckets[0]],
                                     "ppl": [math.exp(sum(math.log(bs[i]["ppl"]) for bs in buckets) / len(buckets))
                                             for i in range(len(buckets[0]))],
                                     "min": [min(bs[i]["ppl"] for bs in buckets) for i in range(len(buckets[0]))],
                                     "max": [max(bs[i]["ppl"] for bs in buckets) for i in range(len(buckets[0]))]}
        for length in {k for m in ms for k in m.get("passkey", {})}:
            ok = sum(m["passkey"][length]["correct"] for m in ms if length in m["passkey"])
            n = sum(m["passkey"][length]["trials"] for m in ms if length in m["passkey"])
            row["passkey"][length] = {"correct": ok, "trials": n, "accuracy": ok / n if n else None,
                                      "wilson95": list(wilson(ok, n))}
        rows.append(row)
    return {"rows": rows, "reading": reading(rows, cfg)}


def _get(rows: list[dict[str, Any]], factor: float, method: str, step: int, doc: str, rng: str) -> Any:
    for r in rows:
        if (r["factor"], r["method"], r["step"]) == (factor, method, step):
            return (r["ppl"].get(doc) or {}).get(rng)
    return None


def _fmt(v: Any) -> str:
    if not v:
        return "–"
    if v["lo"] is None:
        return f"{v['ppl']:.2f}"
    return f"{v['ppl']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]"


def reading(rows: list[dict[str, Any]], cfg: Any) -> list[str]:
    """The papers' claims, each read off the cells (or said to be unmeasured)."""
    out = []
    doc = cfg.documents[0]
    steps = sorted({r["step"] for r in rows})
    for factor in cfg.factors:
        last = max((s for s in steps), default=None)
        pi_last = _get(rows, factor, "rope-linear", last, doc, "to_target") if last is not None else None
        if pi_last:
            reached = [s for s in steps if (_get(rows, factor, "rope-yarn", s, doc, "to_target") or {}).get("ppl",
                                                                                                         math.inf)
                       <= pi_last["ppl"]]
            out.append(f"s={factor:g}, {doc}: PI after {last} steps has ppl {pi_last['ppl']:.2f} on [L0, s·L0); "
                       + (("YaRN is below it without fine-tuning" if reached[0] == 0 else
                           f"YaRN reaches it by step {reached[0]}") if reached
                          else "YaRN does not reach it in the steps measured"))
        for method in cfg.methods:
            a, b = (_get(rows, factor, method, last, doc, r) for r in ("to_target", "beyond"))
            if a and b:
                out.append(f"s={factor:g}, {LABEL(method)} after {last} steps: ppl {a['ppl']:.2f} up to s·L0, "
                           f"{b['ppl']:.2f} beyond it (ratio {b['ppl'] / a['ppl']:.2f})")
        for step in (0, last):
            y, lr = (_get(rows, factor, m, step, doc, "to_target") for m in ("rope-yarn", "rope-longrope"))
            if not (y and lr):
                continue
            if step == 0:  # training-free: one deterministic measure each, no interval to take
                out.append(f"s={factor:g}, no fine-tuning: LongRoPE {lr['ppl']:.3f} vs YaRN {y['ppl']:.3f} on "
                           f"[L0, s·L0) ({100 * (lr['ppl'] / y['ppl'] - 1):+.1f} %; deterministic, one model each)")
                continue
            sep = (lr["hi"] is not None and y["lo"] is not None and (lr["hi"] < y["lo"] or y["hi"] < lr["lo"]))
            out.append(f"s={factor:g}, step {step}: LongRoPE {_fmt(lr)} vs YaRN {_fmt(y)} on [L0, s·L0)"
                       + (" — intervals apart" if sep else " — intervals overlap or n < 2: no claim"))
    return out


def LABEL(method: str) -> str:
    from posenc.finetune.grid import LABELS

    return LABELS.get(method, method)


def markdown(summary: dict[str, Any], cfg: Any, meta: dict[str, Any]) -> str:
    lines = ["# Extend by training: mini-scale replication", "",
             f"L0 = {cfg.original_max_len} byte tokens; model {cfg.dim}×{cfg.layers} layers; "
             f"fine-tuning {cfg.batch_size}×s·L0 tokens per step at lr {cfg.lr:g}; seeds {list(cfg.seeds)}.", "",
             "Perplexity: mean over seeds, 95 % t-interval in brackets (none with one seed).", ""]
    for k, v in meta.items():
        lines.append(f"- {k}: {v}")
    rows = summary["rows"]
    for factor in cfg.factors:
        for doc in cfg.documents:
            lines += ["", f"## s = {factor:g}, {doc}", "",
                      "| method | steps | [0, L0) | [L0, s·L0) | [s·L0, 16·L0) | passkey |", "|---|---|---|---|---|---|"]
            for r in rows:
                if r["factor"] != factor:
                    continue
                p = r["ppl"].get(doc) or {}
                keys = "; ".join(f"{n}: {v['correct']}/{v['trials']} [{v['wilson95'][0]:.2f}, {v['wilson95'][1]:.2f}]"
                                 for n, v in sorted(r["passkey"].items(), key=lambda kv: int(kv[0])))
                lines.append(f"| {LABEL(r['method'])} | {r['step']} | {_fmt(p.get('in_range'))} | "
                             f"{_fmt(p.get('to_target'))} | {_fmt(p.get('beyond'))} | {keys or '–'} |")
    lines += ["", "## Reading", ""] + [f"- {line}" for line in summary["reading"]]
    return "\n".join(lines) + "\n"


def plots(summary: dict[str, Any], cfg: Any, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    steps = sorted({r["step"] for r in summary["rows"]})
    for factor in cfg.factors:
        doc = cfg.documents[0]
        fig, axes = plt.subplots(1, len(steps), figsize=(4 * len(steps), 3.4), sharey=True, squeeze=False)
        for ax, step in zip(axes[0], steps):
            for r in summary["rows"]:
                if r["factor"] == factor and r["step"] == step and doc in r["curve"]:
                    c = r["curve"][doc]
                    ax.plot(c["position"], c["ppl"], label=LABEL(r["method"]))
                    ax.fill_between(c["position"], c["min"], c["max"], alpha=0.15)
            ax.axvline(cfg.original_max_len, color="grey", lw=0.8, ls=":")
            ax.axvline(factor * cfg.original_max_len, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_title(f"s = {factor:g}, {step} steps")
            ax.set_xlabel("position")
        axes[0][0].set_ylabel(f"perplexity ({doc})")
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        path = out / f"ppl-x{factor:g}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path.name)
    return paths


def write_report(out: str | Path, cfg: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    out = Path(out)
    cells = load_cells(out)
    summary = summarise(cells, cfg)
    meta = dict(meta or {})
    meta.setdefault("cells", f"{len(cells)} of {len(cfg.cells())}")
    summary["plots"] = plots(summary, cfg, out) if cells else []
    atomic_write_text(out / "results.json", dumps({"config": cfg.to_dict(), "meta": meta, **summary}, indent=1))
    atomic_write_text(out / "results.md", markdown(summary, cfg, meta))
    return summary
