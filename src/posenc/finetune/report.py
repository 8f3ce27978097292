"""The replication's report: results.json, results.md and plots from the finished cells.

Perplexity over a range of positions is exp of the token-weighted mean loss of
the buckets in it; over seeds, the mean of those losses with a 95 % Student-t
interval (none with one seed), reported as perplexities. Passkey accuracy
pools the trials of every seed, with a Wilson interval. Ranges: in range
[0, L₀), the fine-tuning length [L₀, s·L₀), beyond it [s·L₀, eval·L₀). A grid fine-tuned on shorter windows
than its scale (``train_factor`` t < s) adds [t·L₀, s·L₀): past the data, inside the scale.
"""

from __future__ import annotations

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
    """The finished cells of ``out``; a file there that is not one is named on stderr and left out (the grid
    recomputes it)."""
    import sys

    from posenc.validation import UnreadableFile, read_json

    cells = []
    for path in sorted((out / "cells").glob("*.json")):
        try:
            cells.append(read_json(path, "cell", fix="the grid's cells stage recomputes it"))
        except UnreadableFile as err:
            print(f"finetune grid: left out, not a cell: {err}", file=sys.stderr)
    return cells


def summarise(cells: list[dict[str, Any]], cfg: Any) -> dict[str, Any]:
    l0 = cfg.original_max_len
    top = cfg.eval_factor * l0
    grouped: dict[tuple[float, str, int], list[dict[str, Any]]] = defaultdict(list)
    seeds_of: dict[tuple[float, str, int], list[int]] = defaultdict(list)
    for cell in cells:
        if cell.get("config", {}).get("length", cfg.train_length(cell["factor"])) != cfg.train_length(cell["factor"]):
            continue  # fine-tuned on other windows than this grid's (a train-short cell in a full grid, or back)
        for step, m in cell["measures"].items():
            key = (cell["factor"], cell["method"], int(step))
            if int(step) == 0 and grouped[key]:
                continue  # before fine-tuning every seed measures the same model: one measure, not n copies
            grouped[key].append(m)
            seeds_of[key].append(cell.get("seed", len(seeds_of[key])))
    rows = []
    order = {m: i for i, m in enumerate(cfg.methods)}
    for (factor, method, step), ms in sorted(grouped.items(),
                                             key=lambda kv: (kv[0][0], kv[0][2], order.get(kv[0][1], 99))):
        ranges = {"in_range": (0, l0), "to_target": (l0, cfg.train_length(factor)), "beyond": (int(factor * l0), top)}
        if cfg.trains_short(factor):
            ranges["to_scale"] = (cfg.train_length(factor), int(factor * l0))
        row: dict[str, Any] = {"factor": factor, "method": method, "step": step, "seeds": len(ms), "ppl": {},
                               "passkey": {}, "curve": {}, "nll": {}}
        for doc in cfg.documents:
            per, by_seed = {}, {}
            for name, (lo, hi) in ranges.items():
                pairs = [(sd, range_nll(m["loss"][doc]["buckets"], lo, hi))
                         for sd, m in zip(seeds_of[(factor, method, step)], ms) if doc in m["loss"]]
                vals = [v for _, v in pairs if v is not None]
                per[name] = interval(vals) if vals else None
                by_seed[name] = {str(sd): v for sd, v in pairs if v is not None}
            row["ppl"][doc] = per
            row["nll"][doc] = by_seed  # mean loss per seed and range: what the claims pair
            buckets = [m["loss"][doc]["buckets"] for m in ms if doc in m["loss"]]
            if buckets:
                row["curve"][doc] = {"position": [(b["start"] + b["end"]) / 2 for b in buckets[0]],
                                     "ppl": [math.exp(sum(math.log(bs[i]["ppl"]) for bs in buckets) / len(buckets))
                                             for i in range(len(buckets[0]))],
                                     "min": [min(bs[i]["ppl"] for bs in buckets) for i in range(len(buckets[0]))],
                                     "max": [max(bs[i]["ppl"] for bs in buckets) for i in range(len(buckets[0]))]}
        for length in sorted({k for m in ms for k in m.get("passkey", {})}, key=int):  # a set: order by length
            ok = sum(m["passkey"][length]["correct"] for m in ms if length in m["passkey"])
            n = sum(m["passkey"][length]["trials"] for m in ms if length in m["passkey"])
            row["passkey"][length] = {"correct": ok, "trials": n, "accuracy": ok / n if n else None,
                                      "wilson95": list(wilson(ok, n))}
        rows.append(row)
    return {"rows": rows, "reading": reading(rows, cfg), "claims": claims(rows, cfg)}


def _get(rows: list[dict[str, Any]], factor: float, method: str, step: int, doc: str, rng: str) -> Any:
    return (((_row(rows, factor, method, step) or {}).get("ppl") or {}).get(doc) or {}).get(rng)


def _row(rows: list[dict[str, Any]], factor: float, method: str, step: int) -> dict[str, Any] | None:
    return next((r for r in rows if (r["factor"], r["method"], r["step"]) == (factor, method, step)), None)


def _fmt(v: Any) -> str:
    if not v:
        return "–"
    if v["lo"] is None:
        return f"{v['ppl']:.2f}"
    return f"{v['ppl']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]"


def fine_tuning_span(cfg: Any) -> str:
    """The end of the fine-tuning windows, as the text writes it: s·L0, or t·L0 for a train-short grid."""
    return "s·L0" if cfg.train_factor is None else f"{cfg.train_factor:g}·L0"


def reading(rows: list[dict[str, Any]], cfg: Any) -> list[str]:
    """The papers' claims, each read off the cells (or said to be unmeasured)."""
    out = []
    doc = cfg.documents[0]
    steps = sorted({r["step"] for r in rows})
    ft = fine_tuning_span(cfg)
    for factor in cfg.factors:
        last = max((s for s in steps), default=None)
        pi_last = _get(rows, factor, "rope-linear", last, doc, "to_target") if last is not None else None
        if pi_last:
            reached = [s for s in steps if (_get(rows, factor, "rope-yarn", s, doc, "to_target") or {}).get("ppl",
                                                                                                         math.inf)
                       <= pi_last["ppl"]]
            out.append(f"s={factor:g}, {doc}: PI after {last} steps has ppl {pi_last['ppl']:.2f} on [L0, {ft}); "
                       + (("YaRN is below it without fine-tuning" if reached[0] == 0 else
                           f"YaRN reaches it by step {reached[0]}") if reached
                          else "YaRN does not reach it in the steps measured"))
        for method in cfg.methods:
            a, m, b = (_get(rows, factor, method, last, doc, r) for r in ("to_target", "to_scale", "beyond"))
            if a and m:
                out.append(f"s={factor:g}, {LABEL(method)} after {last} steps: ppl {a['ppl']:.2f} up to {ft} (the "
                           f"data), {m['ppl']:.2f} from there to s·L0 (ratio {m['ppl'] / a['ppl']:.2f})")
            if a and b:
                out.append(f"s={factor:g}, {LABEL(method)} after {last} steps: ppl {a['ppl']:.2f} up to {ft}, "
                           f"{b['ppl']:.2f} beyond s·L0 (ratio {b['ppl'] / a['ppl']:.2f})")
        for step in (0, last):
            y, lr = (_get(rows, factor, m, step, doc, "to_target") for m in ("rope-yarn", "rope-longrope"))
            if not (y and lr):
                continue
            if step == 0:  # training-free: one deterministic measure each, no interval to take
                out.append(f"s={factor:g}, no fine-tuning: LongRoPE {lr['ppl']:.3f} vs YaRN {y['ppl']:.3f} on "
                           f"[L0, {ft}) ({100 * (lr['ppl'] / y['ppl'] - 1):+.1f} %; deterministic, one model each)")
                continue
            ratio = paired_ratio(rows, factor, ("rope-longrope", step), ("rope-yarn", step), doc)
            sep = bool(ratio and ratio["hi"] is not None and (ratio["hi"] < 1 or ratio["lo"] > 1))
            out.append(f"s={factor:g}, step {step}: LongRoPE {_fmt(lr)} vs YaRN {_fmt(y)} on [L0, {ft}), paired "
                       f"ratio {_ratio_text(ratio)}" + (" — interval excludes 1" if sep else
                                                         " — interval holds 1 or n < 2: no claim"))
    return out


#: "holds beyond s·L0": perplexity past the fine-tuning length at most this much above the one up to it
BEYOND_TOLERANCE = 1.10
#: YaRN's claim: PI's perplexity reached in 2.5x fewer steps (Peng et al., 2023, section 4)
YARN_STEP_RATIO = 2.5


def _ratio(row_nll: dict[str, dict[str, float]], num: str, den: str) -> dict[str, Any] | None:
    """exp of the per-seed difference of two ranges' losses: mean and 95 % t-interval of the ratio of perplexities."""
    a, b = row_nll.get(num) or {}, row_nll.get(den) or {}
    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    return interval(diffs) if diffs else None


def _seed_losses(row: dict[str, Any] | None, doc: str, rng: str) -> dict[str, float]:
    return dict(((row or {}).get("nll", {}).get(doc) or {}).get(rng) or {})


def paired_ratio(rows: list[dict[str, Any]], factor: float, a: tuple[str, int], b: tuple[str, int], doc: str,
                 rng: str = "to_target") -> dict[str, Any] | None:
    """Perplexity of (method, step) ``a`` ÷ that of ``b`` on one range, paired by seed: the mean and 95 % t-interval
    of the per-seed loss differences, as a ratio (n = the seeds both have).

    A seed draws the same fine-tuning windows for every method, so pairing removes the seed's own effect. The
    measure before fine-tuning (step 0) is one model whatever the seed: it pairs with every seed of the other side.
    """
    la, lb = (_seed_losses(_row(rows, factor, m, st), doc, rng) for m, st in (a, b))
    if a[1] == 0 and len(la) == 1 and lb:
        la = dict.fromkeys(lb, next(iter(la.values())))
    if b[1] == 0 and len(lb) == 1 and la:
        lb = dict.fromkeys(la, next(iter(lb.values())))
    diffs = [la[sd] - lb[sd] for sd in sorted(set(la) & set(lb))]
    return interval(diffs) if diffs else None


def claims(rows: list[dict[str, Any]], cfg: Any) -> list[dict[str, Any]]:
    """The papers' fine-tuning claims, each with its rule, what was measured and a verdict.

    Verdicts: ``holds``, ``does not hold``, ``undecided`` (the intervals do not settle it) or ``not measured``.
    Perplexities are over the fine-tuning length [L0, s·L0) (or [L0, t·L0) for a grid trained short) of the first
    document unless a claim says otherwise; intervals are
    95 % Student-t over the fine-tuning seeds (a verdict from one seed is marked ``undecided`` where the rule
    needs an interval).
    """
    out: list[dict[str, Any]] = []
    doc = cfg.documents[0]
    steps = sorted({r["step"] for r in rows})
    if not steps:
        return out
    last = steps[-1]
    ft = fine_tuning_span(cfg)

    for factor in cfg.factors:
        # 1. YaRN reaches PI's perplexity in fewer steps (paired by seed: the same windows for both)
        claim = {"id": "yarn-fewer-steps", "paper": "YaRN (Peng et al., 2023), section 4",
                 "claim": f"YaRN reaches PI's perplexity with {YARN_STEP_RATIO:g}x fewer fine-tuning steps",
                 "factor": factor, "rule": (f"per seed, YaRN's perplexity on [L0, {ft}) after k steps ÷ PI's after "
                                            f"{last} (the same windows); holds if the 95 % interval lies at or below 1 "
                                            f"at some measured k ≤ {last}/{YARN_STEP_RATIO:g}, does not hold if YaRN's "
                                            "mean never gets there before step "
                                            f"{last} or its interval lies above 1 at a measured k ≥ {last}/"
                                            f"{YARN_STEP_RATIO:g} (it needs more steps than claimed), else "
                                            "undecided")}
        pi = _get(rows, factor, "rope-linear", last, doc, "to_target")
        ratios = {s: paired_ratio(rows, factor, ("rope-yarn", s), ("rope-linear", last), doc) for s in steps}
        if not pi or last == 0 or not all(ratios.values()):
            out.append({**claim, "measured": None, "verdict": "not measured"})
        else:
            reached = next((s for s in steps if ratios[s]["ppl"] <= 1), None)
            sure = next((s for s in steps if ratios[s]["hi"] is not None and ratios[s]["hi"] <= 1), None)
            late = [s for s in steps if last / YARN_STEP_RATIO <= s < last]
            measured = {"pi_ppl": pi, "pi_steps": last, "yarn_step": reached, "yarn_step_sure": sure,
                        "ratio": ratios[reached if reached is not None else last],
                        "yarn_ppl": _get(rows, factor, "rope-yarn", reached if reached is not None else last, doc,
                                         "to_target")}
            if sure is not None and sure <= last / YARN_STEP_RATIO:
                verdict = "holds"
            elif reached is None or reached >= last or any(
                    ratios[s]["lo"] is not None and ratios[s]["lo"] > 1 for s in late):
                verdict = "does not hold"
            else:
                verdict = "undecided"  # reached on average, but not surely within the claimed step count
            out.append({**claim, "measured": measured, "verdict": verdict})
        # 2. fine-tuned at t·L0 (t = s unless the grid trains short), it keeps its perplexity further on
        for method in cfg.methods:
            r = _row(rows, factor, method, last)
            nll = {} if r is None or last == 0 else r["nll"].get(doc, {})
            if cfg.trains_short(factor) and method != "rope":
                out.append(_tolerance_claim(
                    {"id": "holds-past-data", "paper": "YaRN (Peng et al., 2023), section 4: s = 32 fine-tuned on "
                     "64k-token windows, read to 128k", "claim": f"{LABEL(method)} with a scale for s·L0, fine-tuned on "
                     f"{ft} windows, keeps its perplexity up to s·L0", "factor": factor, "method": method,
                     "rule": f"per seed, ppl on [{ft}, s·L0) ÷ ppl on [L0, {ft}) after {last} steps; " + _TOLERANCE},
                    _ratio(nll, "to_scale", "to_target")))
            out.append(_tolerance_claim(
                {"id": "holds-beyond", "paper": "this replication's question (the YaRN paper reads its models only "
                 "up to their scale's s·L0: see holds-past-data)",
                 "claim": f"{LABEL(method)} fine-tuned at {ft} keeps its perplexity beyond s·L0", "factor": factor,
                 "method": method, "rule": (f"per seed, ppl on [s·L0, {cfg.eval_factor}·L0) ÷ ppl on [L0, {ft}) after "
                                            f"{last} steps; " + _TOLERANCE)},
                _ratio(nll, "beyond", "to_target")))
        # 3. searched LongRoPE beats YaRN, without and with fine-tuning
        for step in sorted({0, last}):
            y, lr = (_get(rows, factor, m, step, doc, "to_target") for m in ("rope-yarn", "rope-longrope"))
            claim = {"id": "longrope-beats-yarn", "paper": "LongRoPE (Ding et al., 2024), section 4",
                     "claim": "searched LongRoPE factors give lower perplexity than YaRN's", "factor": factor,
                     "step": step,
                     "rule": ("no fine-tuning: one deterministic model each, holds if LongRoPE's perplexity is lower"
                              if step == 0 else "per seed, LongRoPE's perplexity ÷ YaRN's (the same windows); holds "
                              "if the 95 % interval lies below 1, does not hold if above, else undecided")}
            if not (y and lr):
                out.append({**claim, "measured": None, "verdict": "not measured"})
                continue
            ratio = paired_ratio(rows, factor, ("rope-longrope", step), ("rope-yarn", step), doc)
            if step == 0:
                verdict = "holds" if lr["ppl"] < y["ppl"] else "does not hold"
            elif ratio is None or ratio["hi"] is None:
                verdict = "undecided"
            elif ratio["hi"] < 1:
                verdict = "holds"
            elif ratio["lo"] > 1:
                verdict = "does not hold"
            else:
                verdict = "undecided"
            out.append({**claim, "measured": {"longrope_ppl": lr, "yarn_ppl": y, "ratio": ratio}, "verdict": verdict})
    return out


_TOLERANCE = (f"holds if the 95 % interval's top is at most {BEYOND_TOLERANCE:g}, does not hold if its bottom is "
              f"above {BEYOND_TOLERANCE:g}")


def _tolerance_claim(claim: dict[str, Any], ratio: dict[str, Any] | None) -> dict[str, Any]:
    """A per-seed perplexity ratio against BEYOND_TOLERANCE: holds / does not hold / undecided (n < 2 or straddling)."""
    if ratio is None:
        return {**claim, "measured": None, "verdict": "not measured"}
    if ratio["hi"] is None:
        verdict = "undecided"
    elif ratio["hi"] <= BEYOND_TOLERANCE:
        verdict = "holds"
    elif ratio["lo"] > BEYOND_TOLERANCE:
        verdict = "does not hold"
    else:
        verdict = "undecided"
    return {**claim, "measured": {"ratio": ratio, "seeds": ratio["n"]}, "verdict": verdict}


def _claim_value(c: dict[str, Any]) -> str:
    m = c["measured"]
    if m is None:
        return "–"
    if c["id"] == "yarn-fewer-steps":
        at = f"step {m['yarn_step']}" if m["yarn_step"] is not None else "never"
        sure = f"step {m['yarn_step_sure']}" if m.get("yarn_step_sure") is not None else "at no step"
        return (f"PI@{m['pi_steps']} {_fmt(m['pi_ppl'])}; YaRN reaches it on average: {at} ({_fmt(m['yarn_ppl'])}; "
                f"paired ratio {_ratio_text(m.get('ratio'))}); interval at or below 1: {sure}")
    if c["id"] in ("holds-beyond", "holds-past-data"):
        return f"ratio {_fmt(m['ratio'])}"
    lr, y = m["longrope_ppl"], m["yarn_ppl"]
    if c.get("step") == 0:  # one model each: the difference itself
        return f"LongRoPE {lr['ppl']:.3f} vs YaRN {y['ppl']:.3f} ({100 * (lr['ppl'] / y['ppl'] - 1):+.1f} %)"
    return f"LongRoPE {_fmt(lr)} vs YaRN {_fmt(y)}; paired ratio {_ratio_text(m.get('ratio'))}"


def _ratio_text(r: dict[str, Any] | None) -> str:
    if not r:
        return "–"
    if r["lo"] is None:
        return f"{r['ppl']:.4f} (n = 1)"
    return f"{r['ppl']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}] (n = {r['n']})"


#: How the report names each method of ``posenc.finetune.grid.METHODS``.
LABELS = {"rope": "RoPE (no scaling)", "rope-linear": "PI", "rope-ntk": "NTK-aware", "rope-yarn": "YaRN",
          "rope-longrope": "LongRoPE (searched)"}


def LABEL(method: str) -> str:
    return LABELS.get(method, method)


def markdown(summary: dict[str, Any], cfg: Any, meta: dict[str, Any]) -> str:
    lines = ["# Extend by training: mini-scale replication", "",
             f"L0 = {cfg.original_max_len} byte tokens; model {cfg.dim}×{cfg.layers} layers; "
             f"fine-tuning {cfg.batch_size}×{fine_tuning_span(cfg)} tokens per step at lr {cfg.lr:g}; seeds "
             f"{list(cfg.seeds)}.", "",
             "Perplexity: mean over seeds, 95 % t-interval in brackets (none with one seed).", ""]
    for k, v in meta.items():
        lines.append(f"- {k}: {v}")
    rows = summary["rows"]
    ft = fine_tuning_span(cfg)
    for factor in cfg.factors:
        spans = ["in_range", "to_target"] + (["to_scale"] if cfg.trains_short(factor) else []) + ["beyond"]
        names = {"in_range": "[0, L0)", "to_target": f"[L0, {ft})", "to_scale": f"[{ft}, s·L0)",
                 "beyond": f"[s·L0, {cfg.eval_factor}·L0)"}
        for doc in cfg.documents:
            head = ["method", "steps", *(names[n] for n in spans), "passkey"]
            lines += ["", f"## s = {factor:g}, {doc}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in rows:
                if r["factor"] != factor:
                    continue
                p = r["ppl"].get(doc) or {}
                keys = "; ".join(f"{n}: {v['correct']}/{v['trials']} [{v['wilson95'][0]:.2f}, {v['wilson95'][1]:.2f}]"
                                 for n, v in sorted(r["passkey"].items(), key=lambda kv: int(kv[0])))
                lines.append(f"| {LABEL(r['method'])} | {r['step']} | "
                             + " | ".join(_fmt(p.get(n)) for n in spans) + f" | {keys or '–'} |")
    lines += ["", "## The papers' claims", "",
              f"Rules are fixed before reading the numbers (`posenc.finetune.report.claims`); perplexity on [L0, {ft}) "
              f"of {cfg.documents[0]} unless the claim says otherwise.", "",
              "| s | claim | measured | verdict | rule |", "|---|---|---|---|---|"]
    for c in summary.get("claims", []):
        when = f" (step {c['step']})" if "step" in c else ""
        lines.append(f"| {c['factor']:g} | {c['claim']}{when} | {_claim_value(c)} | **{c['verdict']}** | {c['rule']} |")
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
            if cfg.trains_short(factor):  # the data end before the scale does
                ax.axvline(cfg.train_length(factor), color="tab:red", lw=0.8, ls="--")
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
    if not cells:  # as extend --report-only: an empty results.json would read as a finished, empty grid
        raise FileNotFoundError(f"no finished cells in {out / 'cells'}: nothing to report; run the grid's cells "
                                f"first (posenc finetune grid --out {out}), or give the --out of a grid that ran")
    summary = summarise(cells, cfg)
    meta = dict(meta or {})
    meta.setdefault("cells", f"{len(cells)} of {len(cfg.cells())}")
    summary["plots"] = plots(summary, cfg, out) if cells else []
    atomic_write_text(out / "results.json", dumps({"config": cfg.to_dict(), "meta": meta, **summary}, indent=1))
    atomic_write_text(out / "results.md", markdown(summary, cfg, meta))
    return summary
