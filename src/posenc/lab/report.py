"""Showing the lab's findings: a terminal table, JSON, and a static HTML report with figures.

Nothing here measures anything: it reads the plain data the experiments
returned (``Finding``) and the property rows, and draws or prints them.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc.lab import texts_ko
from posenc.lab.core import Finding, LabConfig
from posenc.lab.i18n import LANGS, check_lang, display_width, fmt_number, pad, ui, wrap
from posenc.report_style import CSS, pyplot  # noqa: F401  (one look for every posenc report)
from posenc.validation import dumps

__all__ = ["CSS", "FIGURES", "HEADLINES", "claim_text", "fmt_number", "headline", "property_text", "terminal_table",
           "title_text", "to_json", "write_report"]

# -- short text per experiment ----------------------------------------------------------------------------


def _naive(v: dict) -> str:
    w = v["windows"]
    return "; ".join(f"@{x['start']}: pos {fmt_number(x['position_spread'], 2)} vs content {fmt_number(x['content_spread'], 2)}, "
                     f"p_max {fmt_number(x['max_prob'])}" for x in w)


HEADLINES: dict[str, Callable[[dict], str]] = {
    "naive-position": _naive,
    "sinusoid-norm": lambda v: f"norm {v['norm']:.4f} (√(d/2) {v['expected']:.4f}), spread {fmt_number(v['norm_spread'])}",
    "distance-only": lambda v: f"diagonal spread {fmt_number(v['diagonal_spread'])}, vs Σcos {fmt_number(v['formula_error'])}",
    "not-monotonic": lambda v: (f"{', '.join(f'{x:.2f}' for x in v['profile_head'][:7])}…; rises {v['increases']}/"
                                f"{v['steps']}, min {v['min']:.2f} @ {v['argmin']}, last {v['last']:.2f}"),
    "shift-is-linear": lambda v: (f"k={v['offsets']}: sinusoid ≤ {fmt_number(max(v['sinusoid_residual']))}, random ≥ "
                                  f"{fmt_number(min(v['random_residual']))} (rel {fmt_number(min(v['random_relative']))})"),
    "beyond-training-length": lambda v: (f"p={v['position']}: norm {v['norm']:.4f}, PE·PE(+1) {v['dot_next']:.3f} "
                                         f"= origin {v['dot_origin']:.3f}; learned row: {fmt_number(v['learned_defined'])}"),
    "position-vs-content": lambda v: (f"partner {v['partner_without']:.3f}→{v['partner_with']:.3f}, neighbour "
                                      f"{v['neighbour_without']:.3f}→{v['neighbour_with']:.3f}"),
    "permutation": lambda v: (f"equivariant: none {fmt_number(v['no_position'])}, fixed {fmt_number(v['position_fixed'])}, "
                              f"travel {fmt_number(v['position_travels'])}"),
    "pe-module": lambda v: (f"shape {v['input_shape']}→{v['output_shape']}, dropout zeros "
                            f"{v['dropout_zero_fraction']:.3f}, crossings {v['crossings_per_pair'][:4]}…"),
    "multihead-shapes": lambda v: (f"{v['input_shape']}→{v['output_shape']}, masked weight {fmt_number(v['masked_weight'])}, "
                                   f"masked keys' effect {fmt_number(v['masked_keys_effect'])}"),
    "complexity": lambda v: (f"FLOP slope cnn {v['flops_slope']['cnn']:.2f} rnn {v['flops_slope']['rnn']:.2f} attn "
                             f"{v['flops_slope']['attention']:.2f}; path cnn {v['max_path_length']['cnn']} rnn "
                             f"{v['max_path_length']['rnn']} attn {v['max_path_length']['attention']}"),
    "encoder-decoder-causal": lambda v: (f"earlier outputs moved {fmt_number(v['max_change_before'])}, own moved ≥ "
                                         f"{fmt_number(v['min_change_at'])}"),
    "exercises-depth": lambda v: (f"probe acc at depth {v['depths'][-1]}: residual {v['accuracy_residual'][-1]:.2f}, "
                                  f"plain {v['accuracy_plain'][-1]:.2f} (from {v['accuracy_plain'][0]:.2f}; chance "
                                  f"{v['chance']:.2f})"),
    "exercises-learned": lambda v: ("acc " + ", ".join(f"{k} {fmt_number(x, 2)}" for k, x in v["accuracy"].items())
                                    + "; learned past table: " + fmt_number(v["accuracy_beyond_table"]["learned"])),
    "exercises-relative": lambda v: ("shifted acc " + ", ".join(f"{k} {fmt_number(x, 2)}"
                                                                for k, x in v["accuracy_shifted"].items())),
    "lookup-is-matmul": lambda v: (f"bitwise equal {fmt_number(v['bitwise_equal'])}; FLOPs lookup {v['flops']['lookup']} vs "
                                   f"matmul {v['flops']['one_hot_matmul']}"),
    "table-size": lambda v: f"params {v['parameters']}, ratios {v['ratios']}",
    "tying": lambda v: f"tied {v['parameters']['tied']}, untied {v['parameters']['untied']}",
    "self-score": lambda v: ("own row on top: " + ", ".join(fmt_number(x, 2) for x in v["self_top_fraction"])
                             + " as row lengths spread"),
    "cosine-vs-dot": lambda v: (f"cosine lists changed {v['cosine_lists_changed']}; stretched leads "
                                + ", ".join(fmt_number(x, 2) for x in v["dot_led_fraction"])),
    "sqrt-d": lambda v: f"norm ratio {v['ratio_min']:.4f}…{v['ratio_max']:.4f} (√d {v['sqrt_d']:.4f}), min cos {v['cosine_min']:.6f}",
    "no-context": lambda v: f"same id, max diff {fmt_number(v['max_difference'])}; with positions {fmt_number(v['max_difference_with_positions'])}",
}


def headline(f: Finding, lang: str = "en") -> str:
    """The measured values of ``f`` in one line, in ``lang``."""
    fn = (texts_ko.HEADLINES if check_lang(lang) == "ko" else HEADLINES).get(f.id)
    if fn is not None:
        try:
            return fn(f.values)
        except (KeyError, TypeError, IndexError, ValueError):
            pass
    scalars = [(k, v) for k, v in f.values.items() if isinstance(v, (int, float, bool))]
    return ", ".join(f"{k} {fmt_number(v, lang=lang)}" for k, v in scalars[:4])


def claim_text(f: Finding, lang: str = "en") -> str:
    """The claim of ``f`` in ``lang`` (the experiment's own English text, or its Korean from ``texts_ko``)."""
    return texts_ko.CLAIMS.get(f.id, f.claim) if check_lang(lang) == "ko" else f.claim


def title_text(exp_id: str, lang: str = "en") -> str:
    """The short title of experiment ``exp_id`` in ``lang``."""
    from posenc.lab.experiments import EXPERIMENTS  # importing it registers every experiment

    english = EXPERIMENTS[exp_id].title if exp_id in EXPERIMENTS else exp_id
    return texts_ko.TITLES.get(exp_id, english) if check_lang(lang) == "ko" else english


def terminal_table(findings: Sequence[Finding], *, width: int = 100, lang: str = "en") -> str:
    """One row per experiment: id, holds, seconds, the measured headline (wrapped to ``width`` terminal columns).

    In Korean the words of the frame and the headlines are Korean; widths count terminal columns (a Hangul
    syllable takes two), so the table still fits ``width``.
    """
    id_w = max([len(f.id) for f in findings] + [display_width(ui("experiment", lang))])
    mark_w = max(5, *(display_width(ui(k, lang)) for k in ("holds", "mark_yes", "mark_no")))
    lead = id_w + 2 + mark_w + 2 + 5 + 2
    room = max(width - lead, 30)
    head = f"{pad(ui('experiment', lang), id_w)}  {pad(ui('holds', lang), mark_w)}  "
    lines = [f"{head}{' ' * (5 - display_width(ui('sec', lang)))}{ui('sec', lang)}  {ui('measured', lang)}",
             "-" * min(width, lead + room)]
    for f in findings:
        chunks = wrap(headline(f, lang), room)
        mark = ui("mark_yes" if f.holds else "mark_no", lang)
        lines.append(f"{f.id:<{id_w}}  {pad(mark, mark_w)}  {f.seconds:>5.2f}  {chunks[0]}")
        lines.extend(" " * lead + c for c in chunks[1:])
    lines.append(ui("held", lang, held=sum(f.holds for f in findings), total=len(findings)))
    return "\n".join(lines)


#: The property table's columns: the row's key, in the order shown (headers: ``i18n.UI[lang]["col_" + key]``).
PROPERTY_COLUMNS = ["name", "family", "norm_constant", "translation_invariant", "monotone_decay", "symmetric",
                    "shift_relative", "defined_beyond"]


def property_text(rows: Sequence[dict[str, Any]], *, lang: str = "en") -> str:
    """The property table as fixed-width text (headers and yes/no in ``lang``)."""
    heads = [ui(f"col_{k}", lang) for k in PROPERTY_COLUMNS]
    widths = [max(display_width(h), 9) for h in heads]
    widths[0] = max([widths[0]] + [len(str(r.get("name", ""))) for r in rows])
    out = ["  ".join(pad(h, w) for h, w in zip(heads, widths))]
    for row in rows:
        if "error" in row:
            out.append(f"{pad(row['name'], widths[0])}  {pad(row.get('family', '?'), widths[1])}  "
                       f"{ui('error', lang)}: {row['error'][:50]}")
            continue
        out.append("  ".join(pad(fmt_number(row.get(k), lang=lang), w) for k, w in zip(PROPERTY_COLUMNS, widths)))
    return "\n".join(line.rstrip() for line in out)


def to_json(findings: Sequence[Finding], *, cfg: LabConfig | None = None, properties: Sequence[dict] | None = None,
            series: bool = False) -> dict[str, Any]:
    """The JSON object: ``{"experiments": [{id, claim, params, values, holds}, …]}`` (+ config, properties)."""
    out: dict[str, Any] = {"experiments": []}
    for f in findings:
        rec = f.public()
        if series:
            rec = {**rec, "article": f.article, "seconds": f.seconds, "series": f.series}
        out["experiments"].append(rec)
    if cfg is not None:
        out["config"] = cfg.to_dict()
    if properties is not None:
        out["properties"] = list(properties)
    return out


# -- figures -----------------------------------------------------------------------------------------------


def _save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return name


def fig_naive(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    s = f.series
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.plot(s["starts"], s["position_spread"], label="position part i·j/√5", color="tab:red")
    ax.plot(s["starts"], s["content_spread"], label="content part", color="tab:blue")
    ax.set_yscale("log")
    ax.set_xlabel("first position of the 6-token window")
    ax.set_ylabel("logit spread (max − min)")
    ax2 = ax.twinx()
    ax2.plot(s["starts"], s["max_prob"], color="gray", ls="--", label="largest softmax probability")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("max probability")
    ax2.grid(False)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [ln.get_label() for ln in lines], loc="center right", fontsize=8)
    ax.set_title("Naive index: the position part grows until it swamps content")
    return [_save(fig, out, "naive_position.png")]


def fig_pe_module(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    s = f.series
    fig, ax = plt.subplots(figsize=(6.4, 3.3))
    for col, ys in s["columns"].items():
        ax.plot(range(len(ys)), ys, label=f"column {col}")
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.set_title(f"Sinusoid columns over {len(next(iter(s['columns'].values())))} positions (d = {f.params['dim']})")
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    names = [_save(fig, out, "pe_columns.png")]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    im = ax.imshow(s["heatmap"], aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("encoding dimension (column)")
    ax.set_ylabel("position")
    ax.grid(False)
    ax.set_title("The table as a heat map: low columns flip fast, like the low bits of a counter")
    fig.colorbar(im, ax=ax, fraction=0.04)
    names.append(_save(fig, out, "pe_heatmap.png"))
    return names


def fig_profile(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    ys = f.series["profile"]
    v = f.values
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.plot(range(len(ys)), ys, color="tab:blue", lw=1.2, label="PE(i)·PE(i+δ)")
    rises = [i + 1 for i in range(len(ys) - 1) if ys[i + 1] > ys[i] + 1e-9 * max(map(abs, ys))]
    ax.scatter(rises, [ys[i] for i in rises], s=4, color="tab:red", zorder=3, label=f"rises ({len(rises)} steps)")
    ax.scatter([v["argmin"]], [v["min"]], s=50, marker="v", color="black", zorder=4,
               label=f"minimum {v['min']:.2f} at δ = {v['argmin']}")
    ax.scatter([len(ys) - 1], [v["last"]], s=40, marker="o", facecolor="none", edgecolor="black", zorder=4,
               label=f"last {v['last']:.2f}")
    ax.set_xlabel("distance δ")
    ax.set_ylabel("inner product")
    ax.set_title("Sinusoid similarity against distance: not monotone")
    ax.legend(fontsize=8)
    return [_save(fig, out, "distance_profile.png")]


def fig_shift(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v = f.values
    x = range(len(v["offsets"]))
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.bar([i - 0.2 for i in x], [max(r, 1e-18) for r in v["sinusoid_residual"]], 0.4, label="sinusoid")
    ax.bar([i + 0.2 for i in x], v["random_residual"], 0.4, label="random table, same size")
    for i, (a, b) in enumerate(zip(v["sinusoid_residual"], v["random_residual"])):
        ax.text(i - 0.2, max(a, 1e-18) * 3, f"{a:.0e}", ha="center", fontsize=7)
        ax.text(i + 0.2, b * 3, f"{b:.2f}", ha="center", fontsize=7)
    ax.set_xticks(list(x), [str(k) for k in v["offsets"]])
    ax.set_yscale("log")
    ax.set_ylim(1e-17, 1e3)
    ax.set_xlabel("offset k")
    ax.set_ylabel("max |residual| of the best M_k")
    ax.set_title("PE(p+k) = M_k·PE(p): one map fits the sinusoid, none fits random")
    ax.legend(fontsize=8, loc="center right")
    return [_save(fig, out, "shift_residual.png")]


def fig_attention_rows(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v = f.values
    n = len(v["without"])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.1))
    ax.bar([i - 0.2 for i in range(n)], v["without"], 0.4, label="content only")
    ax.bar([i + 0.2 for i in range(n)], v["with"], 0.4, label="content + sinusoid")
    ax.set_xticks(range(n), [f"t{i}" + (" (partner)" if i == f.params["partner"] else "") for i in range(n)],
                  fontsize=7)
    ax.set_ylabel("token 0's attention share")
    ax.set_title(f"Row of t0 at scale {f.params['headline_scale']:.2f}")
    ax.legend(fontsize=7)
    lost = [a - b for a, b in zip(v["partner_without_by_scale"], v["partner_with_by_scale"])]
    bx.plot(v["scales"], v["row_change_by_scale"], "o-", color="tab:purple", label="row moved (total variation)")
    bx.plot(v["scales"], lost, "s-", color="tab:blue", label="partner share lost")
    bx.axvline(math.sqrt(f.params["dim"]), color="gray", ls=":", lw=1)
    bx.text(math.sqrt(f.params["dim"]), max(v["row_change_by_scale"]), " ×√d", fontsize=7, va="top")
    bx.set_xscale("log", base=2)
    bx.set_xlabel("embedding scale (content norm ≈ scale)")
    bx.set_ylabel("change when positions are added")
    bx.set_title("Bigger embeddings: positions move less")
    bx.legend(fontsize=7)
    return [_save(fig, out, "attention_rows.png")]


def fig_complexity(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v, p = f.values, f.params
    ns = p["lengths"]
    fig, axes = plt.subplots(1, 4, figsize=(12, 3.1))
    colors = {"cnn": "tab:green", "rnn": "tab:orange", "attention": "tab:purple"}
    for name, ys in v["flops"].items():
        axes[0].plot(ns, ys, "o-", color=colors[name], label=f"{name} (slope {v['flops_slope'][name]:.2f})")
    axes[0].set(yscale="log", xlabel="n", ylabel="FLOPs (one layer)", title="Operations")
    for name, ys in v["milliseconds"].items():
        axes[1].plot(ns, ys, "o-", color=colors[name], label=name)
    axes[1].set(yscale="log", xlabel="n", ylabel="ms (median)", title="Wall time, CPU")
    for name, ys in v["sequential_depth"].items():
        axes[2].plot(ns, ys, "o-", color=colors[name], label=name)
    axes[2].set(yscale="log", xlabel="n", ylabel="autograd chain length", title="Sequential steps")
    for name, ys in v["max_path_length"].items():
        axes[3].plot(p["path_lengths"], ys, "o-", color=colors[name], label=name)
    axes[3].set(xlabel="n", ylabel="layers / steps", title="Path: input n−1 → output 0")
    for ax in axes[:3]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.minorticks_off()
    for ax in axes:
        ax.legend(fontsize=7)
    return [_save(fig, out, "complexity.png")]


def fig_depth(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v = f.values
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    x = range(len(v["depths"]))  # evenly spaced: depths 0, 1, 2, 4, … read as steps
    ax.plot(x, v["accuracy_residual"], "o-", label="x + att(LN(x)) (residual)")
    ax.plot(x, v["accuracy_plain"], "s-", label="x ← att(x) (no residual)")
    ax.axhline(v["chance"], color="gray", ls=":", label="chance")
    ax.set_xticks(list(x), [str(d) for d in v["depths"]])
    ax.set_xlabel("random attention layers stacked")
    ax.set_ylabel("position probe accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title("How much position survives depth")
    ax.legend(fontsize=8)
    return [_save(fig, out, "depth_probe.png")]


def fig_exercises(findings: dict[str, Finding], out: Path) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    trained: dict[str, float | None] = {}
    shifted: dict[str, float | None] = {}
    for key in ("exercises-learned", "exercises-relative"):
        if key in findings:
            trained.update(findings[key].values["accuracy"])
            shifted.update(findings[key].values.get("accuracy_shifted", {}))
    bars = [(k, trained[k], shifted.get(k)) for k in trained]
    x = range(len(bars))
    ax.bar([i - 0.2 for i in x], [b[1] or 0 for b in bars], 0.4, label="trained positions")
    ax.bar([i + 0.2 for i in x], [b[2] or 0 for b in bars], 0.4, label="every position shifted far away")
    for i, b in enumerate(bars):
        if b[2] is None:
            ax.text(i + 0.2, 0.02, "no row there", ha="center", fontsize=7, rotation=90)
    ax.set_xticks(list(x), [b[0] for b in bars])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("previous-token accuracy")
    ax.set_title("Learned and relative positions, trained on the same task")
    ax.legend(fontsize=8)
    return [_save(fig, out, "exercises.png")]


def fig_neighbours(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v = f.values
    factors = f.params["factors"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.1), gridspec_kw={"width_ratios": [1.3, 1]})
    ax.plot(factors, v["dot_rank_after"], "o-", label="dot product, stretched")
    ax.axhline(v["dot_rank_before"], color="tab:blue", ls=":", label="dot product, before")
    ax.plot(factors, v["cosine_rank_after"], "s--", color="tab:green", label="cosine, stretched")
    ax.axhline(v["cosine_rank_before"], color="tab:green", ls=":", label="cosine, before")
    ax.set(xscale="log", yscale="log", xlabel="stretch factor", ylabel="mean rank of the stretched row",
           title="Rank of one stretched row in others' lists")
    from matplotlib.ticker import ScalarFormatter

    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.legend(fontsize=7)
    lists = v["example_lists"]
    sid = f.params["stretched"]
    rows = [[name.replace("_", " "), "  ".join(("[" + str(t) + "]") if t == sid else str(t) for t in ids)]
            for name, ids in lists.items()]
    bx.axis("off")
    table = bx.table(cellText=rows, colLabels=["list", "top neighbours, best first"],
                     loc="center", cellLoc="left", colWidths=[0.35, 0.65])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.scale(1, 1.5)
    bx.set_title(f"Token [{sid}] stretched ×{v['example_factor']:g}: lists of token {v['example_token']}",
                 fontsize=9)
    return [_save(fig, out, "neighbours.png")]


def fig_self_score(f: Finding, out: Path) -> list[str]:
    plt = pyplot()
    v = f.values
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    ax.plot(f.params["length_spreads"], v["self_top_fraction"], "o-", label="dot product")
    ax.plot(f.params["length_spreads"], v["cosine_self_top_fraction"], "s--", label="cosine")
    ax.set(xlabel="spread σ of log row length", ylabel="own token scores highest", ylim=(0, 1.05),
           title="h = a token's row: does that token win?")
    ax.legend(fontsize=8)
    return [_save(fig, out, "self_score.png")]


FIGURES: dict[str, Callable[[Finding, Path], list[str]]] = {
    "naive-position": fig_naive, "pe-module": fig_pe_module, "not-monotonic": fig_profile,
    "shift-is-linear": fig_shift, "position-vs-content": fig_attention_rows, "complexity": fig_complexity,
    "exercises-depth": fig_depth, "cosine-vs-dot": fig_neighbours, "self-score": fig_self_score,
}


# -- HTML ------------------------------------------------------------------------------------------------


#: Added to ``CSS`` by the lab report: only the chosen language's text shows, and the switch sits top right.
LANG_CSS = """
html[lang=en] [data-l=ko],html[lang=ko] [data-l=en]{display:none}
html[lang=ko] body{word-break:keep-all} th{white-space:nowrap}
#lang{float:right;margin-top:.4em;font:inherit;padding:.25em .8em;border:1px solid #bbb;border-radius:4px;
background:#fafafa;cursor:pointer}
"""

#: The language switch: ``?lang=`` in the address, else the report's own language when ``posenc lab --lang`` set
#: it, else the reader's last choice (remembered), else the browser's language — the explorer's rule
#: (posenc.lab.i18n). Without JavaScript the page shows the language it was written in.
LANG_JS = """<script>
(function () {
  var KEY = "posenc-lab-lang", LANGS = ["en", "ko"], root = document.documentElement;
  function show(lang, remember) {
    root.lang = lang;
    document.title = root.getAttribute("data-title-" + lang);
    if (remember) { try { localStorage.setItem(KEY, lang); } catch (e) { /* private mode */ } }
  }
  var asked = new URLSearchParams(location.search).get("lang"), saved = null;
  try { saved = localStorage.getItem(KEY); } catch (e) { /* private mode, file:// */ }
  var fixed = root.getAttribute("data-lang-fixed");
  var browser = (navigator.language || "en").toLowerCase().indexOf("ko") === 0 ? "ko" : "en";
  show(LANGS.indexOf(asked) >= 0 ? asked : LANGS.indexOf(fixed) >= 0 ? fixed
       : LANGS.indexOf(saved) >= 0 ? saved : browser, false);
  document.getElementById("lang").addEventListener("click", function () {
    show(root.lang === "en" ? "ko" : "en", true);
  });
})();
</script>"""


def _compact(value: Any, limit: int = 12) -> Any:
    """Lists longer than ``limit`` shortened for display (the full data is in results.json)."""
    if isinstance(value, list):
        items = [_compact(v, limit) for v in value[:limit]]
        return items + [f"… {len(value) - limit} more"] if len(value) > limit else items
    if isinstance(value, dict):
        return {k: _compact(v, limit) for k, v in value.items()}
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def _both(make: Callable[[str], str], tag: str = "span") -> str:
    """One ``<tag>`` per language around ``make(lang)`` (already HTML); CSS shows the page's language only."""
    return "".join(f"<{tag} data-l='{lang}' lang='{lang}'>{make(lang)}</{tag}>" for lang in LANGS)


def write_report(findings: Sequence[Finding], out: str | Path, *, cfg: LabConfig,
                 properties: Sequence[dict[str, Any]] | None = None, progress: bool = False,
                 lang: str = "en", lang_fixed: bool = False) -> Path:
    """Write results.json, one PNG per figure and index.html (relative links: opens from disk).

    The page carries every text in English and Korean and a button that switches between them. It opens in
    ``lang``; with ``lang_fixed`` (``posenc lab --lang``) that language beats the reader's remembered choice,
    otherwise the remembered choice and then the browser's language decide (``LANG_JS``). Figures are drawn
    once, with English labels.
    """
    from tqdm import tqdm

    check_lang(lang)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(dumps(to_json(findings, cfg=cfg, properties=properties, series=True)))
    by_id = {f.id: f for f in findings}
    figures: dict[str, list[str]] = {}
    drawn = [f for f in findings if f.id in FIGURES]
    for f in tqdm(drawn, desc="figures", unit="fig", disable=not progress, leave=False):
        figures[f.id] = FIGURES[f.id](f, out)
    if "exercises-learned" in by_id or "exercises-relative" in by_id:
        key = "exercises-relative" if "exercises-relative" in by_id else "exercises-learned"
        figures.setdefault(key, []).extend(fig_exercises(by_id, out))

    esc = html.escape
    held = sum(f.holds for f in findings)
    titles = " ".join(f"data-title-{x}='{esc(ui('title', x))}'" for x in LANGS)
    fixed = f" data-lang-fixed='{lang}'" if lang_fixed else ""
    parts = [f"<!doctype html><html lang='{lang}' {titles}{fixed}><head><meta charset='utf-8'>"
             f"<title>{esc(ui('title', lang))}</title><style>{CSS}{LANG_CSS}</style></head><body>",
             f"<button id='lang' type='button' aria-label='{esc(ui('lang_label', 'en'))} / "
             f"{esc(ui('lang_label', 'ko'))}'>{_both(lambda x: esc(ui('lang_button', x)))}</button>",
             f"<h1>{_both(lambda x: esc(ui('title', x)))}</h1>",
             "<p class='sub'>" + _both(lambda x: esc(ui(
                 "sub", x, held=held, total=len(findings), dim=cfg.dim, length=cfg.length, base=fmt_number(cfg.base),
                 seed=cfg.seed, results="\0")).replace("\0", "<a href='results.json'>results.json</a>")) + "</p>",
             f"<p class='meta' data-l='ko' lang='ko'>{esc(ui('figures_note', 'ko'))}</p>",
             "<table><tr>" + "".join(f"<th>{_both(lambda x, k=k: esc(ui(k, x)))}</th>"
                                     for k in ("experiment", "claim", "holds", "measured")) + "</tr>"]
    for f in findings:
        cls = "yes" if f.holds else "no"
        mark = "mark_yes" if f.holds else "mark_no"
        parts.append(f"<tr><td><a href='#{esc(f.id)}'>{esc(f.id)}</a></td>"
                     f"<td>{_both(lambda x, f=f: esc(claim_text(f, x)))}</td>"
                     f"<td class='{cls}'>{_both(lambda x, m=mark: esc(ui(m, x)))}</td>"
                     f"<td>{_both(lambda x, f=f: esc(headline(f, x)))}</td></tr>")
    parts.append("</table>")
    if properties:
        parts.append(f"<section id='properties'><h2>{_both(lambda x: esc(ui('properties_title', x)))}</h2>"
                     f"<p class='meta'>{_both(lambda x: esc(ui('properties_note', x, last=cfg.length - 1)))}</p>"
                     "<table><tr>")
        parts.extend(f"<th>{_both(lambda x, k=k: esc(ui(f'col_{k}', x)))}</th>" for k in PROPERTY_COLUMNS)
        parts.append("</tr>")
        for row in properties:
            if "error" in row:
                parts.append(f"<tr><td>{esc(row['name'])}</td><td colspan='{len(PROPERTY_COLUMNS) - 1}'>"
                             f"{esc(row['error'])}</td></tr>")
                continue
            parts.append("<tr>" + "".join(f"<td>{_both(lambda x, v=row.get(k): esc(fmt_number(v, lang=x)))}</td>"
                                          for k in PROPERTY_COLUMNS) + "</tr>")
        parts.append("</table></section>")
    for f in findings:
        cls = "yes" if f.holds else "no"
        verdict = "verdict_yes" if f.holds else "verdict_no"
        parts.append(f"<section id='{esc(f.id)}'><h2>{esc(f.id)} <span class='{cls}'>"
                     f"{_both(lambda x, v=verdict: esc(ui(v, x)))}</span></h2>"
                     f"<p class='claim'>{_both(lambda x, f=f: esc(claim_text(f, x)))}</p>"
                     f"<p class='meta'>{_both(lambda x, f=f: esc(ui('meta', x, article=f.article, seconds=f'{f.seconds:.2f}')))} "
                     f"<code>{esc(json.dumps(_compact(f.params), ensure_ascii=False))}</code></p>")
        for name in figures.get(f.id, []):
            parts.append(f"<img src='{esc(name)}' alt='{esc(f.id)} figure'>")
        parts.append("<table class='values'><tr>" + "".join(f"<th>{_both(lambda x, k=k: esc(ui(k, x)))}</th>"
                                                            for k in ("value", "measured")) + "</tr>")
        for key, value in f.values.items():
            text = json.dumps(_compact(value), ensure_ascii=False)
            parts.append(f"<tr><td><code>{esc(key)}</code></td><td><code>{esc(text)}</code></td></tr>")
        parts.append("</table></section>")
    parts.append(LANG_JS)
    parts.append("</body></html>")
    (out / "index.html").write_text("\n".join(parts), encoding="utf-8")
    return out / "index.html"
