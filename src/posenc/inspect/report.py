"""Presenting an inspection: terminal summary, PNG figures and a static HTML page.

Plotting lives here, apart from the measures: every figure
is drawn from the plain data :func:`posenc.inspect.inspect_checkpoint` returns.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from posenc.plan import format_plan
from posenc.validation import dumps
# The page style, figure style and number format: one look for every posenc report.
from posenc.report_style import CSS
from posenc.report_style import fmt_number as _fmt
from posenc.report_style import pyplot as _plt

SHORT_KEYS = ("norms", "coords", "values")  # long per-row lists left out of --json on the terminal


def compact(data: Any) -> Any:
    """``data`` without the per-row lists (token norms, PCA coordinates)."""
    if isinstance(data, dict):
        return {k: compact(v) for k, v in data.items() if not (k in SHORT_KEYS and isinstance(v, list) and len(v) > 64)}
    if isinstance(data, list):
        return [compact(v) for v in data]
    return data


# -- terminal ----------------------------------------------------------------------------------------------
def _sinusoid_line(fit: dict[str, Any]) -> str:
    """Whether a stored table is a sinusoid: which one and the residual, or why not."""
    from posenc.inspect.sinusoid import describe

    return f"sinusoid    yes: {describe(fit)}" if fit["is_sinusoid"] else f"sinusoid    no: {fit.get('why', '')}"


def _table_lines(pos: dict[str, Any]) -> list[str]:
    """A measured table's size, norms, distance fit and cosine profile (three lines)."""
    a = pos["analysis"]
    n, base = a["norms"], a.get("baselines", {})
    rows = f" (positions {pos['rows'][0]}…{pos['rows'][1] - 1})" if "rows" in pos else ""
    mono = a["monotonic"]["cosine"]
    return [f"table       {a['shape'][0]} × {a['shape'][1]}{rows}; "
            f"norm {_fmt(n['norm_min'])} … {_fmt(n['norm_max'])}",
            f"distance    R² of 'depends on i−j only' {_fmt(a['distance_r2'], 3)}"
            + (f" (sinusoid {_fmt(base['sinusoid']['distance_r2'], 3)}, random "
               f"{_fmt(base['random']['distance_r2'], 3)})" if base else ""),
            f"cosine      vs distance rises at {mono['increases']} of {mono['steps']} steps; "
            f"{_fmt(mono['head'][1], 3)} at 1, min {_fmt(mono['min'], 3)} at {mono['argmin']}, "
            f"{_fmt(mono['last'], 3)} at {mono['steps']}"]


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A short human summary: what was found, and the headline numbers."""
    loc, tying, pos = result["located"], result["tying"], result["position"]
    lines = [f"checkpoint  {result['source']}  ({result['tensors']} tensors)",
             f"position    {pos['kind']}" + (f"  {loc['position']}" if loc["position"] else ""),
             f"token       {loc['token']}",
             f"head        {loc['head']}  → {tying['status']}: {tying['evidence']}"]
    for stack, entry in (result.get("stacks") or {}).items():
        scheme = entry["scheme"]
        options = ", ".join(f"{k}={v}" for k, v in scheme.items() if k not in ("name", "family"))
        lines.append(f"{stack:<11} {scheme['name']} ({options})  " + (entry["tensor"] or entry.get("note", "")))
        if "sinusoid" in entry:
            from posenc.inspect.sinusoid import describe

            fit = entry["sinusoid"]
            lines.append(f"            stored table {'is a sinusoid: ' + describe(fit) if fit['is_sinusoid'] else 'is not a sinusoid: ' + fit.get('why', '')}")
    if result.get("layer_plan"):
        lines.append("layer plan  (each layer's position scheme, window and query scale)")
        lines.extend("            " + line for line in format_plan(result["layer_plan"]).splitlines())
    if pos["kind"] == "rotary":
        s = pos["settings"]
        lines.append(f"rotary      scheme {s['scheme']}  base {s['base']:g}  head_dim {s['head_dim']}  "
                     f"rotary_dim {s['rotary_dim']}  rope_type {s['rope_type']}")
        lines.append(f"            translation invariant {pos['translation_invariant']} "
                     f"(relative spread {_fmt(pos['relative_spread'])}); rises at {pos['monotonic']['increases']} "
                     f"of {pos['monotonic']['steps']} steps; min {_fmt(pos['monotonic']['min'])} at distance "
                     f"{pos['monotonic']['argmin']}")
    if "sinusoid" in pos:
        lines.append(_sinusoid_line(pos["sinusoid"]))
    if pos["kind"] == "alibi":
        s = pos["settings"]
        slopes = s["slopes"]
        lines.append(f"alibi       {s['num_heads']} heads, max_bias {s['max_bias']:g}: slopes {_fmt(max(slopes), 3)} … "
                     f"{_fmt(min(slopes), 3)} (bias −m·|i − j|); translation invariant {pos['translation_invariant']}")
    a = pos.get("analysis")
    if a:
        shift, base = a["shift_centred"], a.get("baselines", {})
        lines += _table_lines(pos)
        pcs = a["shift_pcs"]

        def row(label: str, values: list[float]) -> str:
            return f"  {label:<34}" + "  ".join(f"{_fmt(v, 3):>8}" for v in values)

        lines.append("shift       k:" + " " * 22 + "  ".join(f"{k:>8}" for k in shift["offsets"]))
        lines.append(row("equations per unknown (all d)", shift["equations_per_unknown"]))
        lines.append(row("table, centred, all d", shift["relative_residual"]))
        lines += [row(f"{name}, all d", base[name]["shift"]["relative_residual"]) for name in base]
        r = pcs["components"]
        kept = _fmt(100 * pcs["variance_kept"], 1)
        lines.append(row(f"table, first {r} PCs ({kept}% var)", pcs["relative_residual"]))
        lines += [row(f"{name}, first {r} PCs", base[name]["shift_pcs"]["relative_residual"]) for name in base]
        if shift["equations_per_unknown"] and min(shift["equations_per_unknown"]) < 2:
            lines.append("  (with all d columns the fit is barely or under-determined — even noise fits; "
                         "read the PC rows)")
        pca = a["pca"]
        lines.append(f"pca         components for 50/90/99% of variance: "
                     + "/".join(str(v) for v in pca["components_for"].values())
                     + "; first shares " + ", ".join(_fmt(v, 3) for v in pca["explained"])
                     + "; periods " + ", ".join(_fmt(c["period"], 2) for c in pca["components"]))
        if pca["pc12_rotation"]:
            rot = pca["pc12_rotation"]
            lines.append(f"            PC1–PC2 plane: {_fmt(rot['step_degrees'], 1)}° per position "
                         f"(std {_fmt(rot['step_degrees_std'], 1)}°), radius cv {_fmt(rot['radius_cv'], 3)}")
    for more in result.get("more_positions", []):  # an encoder–decoder's other table, measured alike
        lines.append(f"position    {more['kind']}  {more['tensor']}")
        lines.append(_sinusoid_line(more["sinusoid"]))
        lines += _table_lines(more)
    tok = result.get("tokens")
    if tok:
        q = tok["norm_quantiles"]
        lines.append(f"tokens      {tok['shape'][0]} × {tok['shape'][1]}; norm min {_fmt(q['min'])} median "
                     f"{_fmt(q['median'])} max {_fmt(q['max'])}; a row tops its own dot-product list in "
                     f"{_fmt(100 * tok['self_score']['self_top'], 2)}% of {tok['self_score']['sampled']}")
        for e in tok["neighbours"]:
            lines.append(f"  {e['token']!r:<12} cosine: {', '.join(n['token'] for n in e['cosine'])}")
            lines.append(f"  {'':<12} dot:    {', '.join(n['token'] for n in e['dot'])}")
    lines += [f"note        {n}" for n in result["notes"]]
    return lines


# -- figures -----------------------------------------------------------------------------------------------
def figures(result: dict[str, Any], out: Path) -> dict[str, str]:
    """Write the PNG figures for ``result`` into ``out``; returns {key: file name}."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}

    def save(fig, key: str) -> None:
        from PIL import Image  # matplotlib's own dependency

        fig.tight_layout()
        fig.savefig(out / f"{key}.png", dpi=80)
        plt.close(fig)
        with Image.open(out / f"{key}.png") as im:  # a 256-colour palette: a quarter of the bytes, same look
            small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        small.save(out / f"{key}.png", optimize=True)
        files[key] = f"{key}.png"

    pos = result["position"]
    a = pos.get("analysis")
    if a:
        n = a["shape"][0]
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(a["norms"]["norms"], lw=1)
        ax.set(xlabel="position", ylabel="‖P[p]‖", title="norm by position")
        save(fig, "norms")

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        base = a.get("baselines", {})
        axes[0].plot(a["cosine_profile"], lw=1, label="this table")
        for name, style in (("sinusoid", "--"), ("random", ":")):
            if name in base:
                axes[0].plot(base[name]["cosine_profile"], style, lw=1, label=f"{name} {n}×{a['shape'][1]}")
        axes[0].set(xlabel="distance δ = j − i", ylabel="mean cos(P[i], P[i+δ])", title="similarity vs distance")
        axes[0].axhline(0, color="grey", lw=0.5)
        axes[0].legend(fontsize=8)
        limit = min(n, 64)
        axes[1].plot(range(limit), a["cosine_profile"][:limit], ".-", lw=1, label="this table")
        if "sinusoid" in base:
            axes[1].plot(range(limit), base["sinusoid"]["cosine_profile"][:limit], "--", lw=1, label="sinusoid")
        axes[1].set(xlabel="distance δ", title=f"first {limit} distances")
        axes[1].legend(fontsize=8)
        save(fig, "profile")

        fig, ax = plt.subplots(figsize=(4.4, 3.8))
        step = a["cosine_gram"]["step"]
        extent = (-0.5 * step, (len(a["cosine_gram"]["values"]) - 0.5) * step) * 2
        im = ax.imshow(a["cosine_gram"]["values"], cmap="RdBu_r", vmin=-1, vmax=1,
                       extent=(extent[0], extent[1], extent[1], extent[0]))
        ax.set(xlabel="position j", ylabel="position i", title="cos(P[i], P[j])")
        fig.colorbar(im, ax=ax, shrink=0.8)
        save(fig, "gram")

        fig, ax = plt.subplots(figsize=(8, 3.4))
        offsets = a["shift_centred"]["offsets"]
        r = a["shift_pcs"]["components"]
        ax.plot(offsets, a["shift_pcs"]["relative_residual"], "o-", color="C0", label=f"this table, first {r} PCs")
        ax.plot(offsets, a["shift_centred"]["relative_residual"], "o--", color="C0", alpha=0.5,
                label="this table, all columns")
        for name, colour in (("sinusoid", "C2"), ("random", "C3")):
            if name in base:
                ax.plot(offsets, base[name]["shift_pcs"]["relative_residual"], "s-", color=colour,
                        label=f"{name}, first {r} PCs")
                ax.plot(offsets, [max(v, 1e-17) for v in base[name]["shift"]["relative_residual"]], "s--",
                        color=colour, alpha=0.5, label=f"{name}, all columns")
        ax.set(xscale="log", ylim=(-0.03, 1.05), xlabel="shift k", ylabel="relative residual",
               title="‖P[p+k] − M_k P[p]‖ / ‖P[p+k]‖, best M_k")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        save(fig, "shift")

        coords = a["pca"].get("coords")
        if coords and len(coords[0]) >= 3:
            c = list(zip(*coords))
            fig = plt.figure(figsize=(12, 3.8))
            axes = [fig.add_subplot(1, 3, 1), fig.add_subplot(1, 3, 2, projection="3d"), fig.add_subplot(1, 3, 3)]
            sc = axes[0].scatter(c[0], c[1], c=range(len(c[0])), s=6, cmap="viridis")
            axes[0].plot(c[0], c[1], lw=0.3, color="grey")
            axes[0].set(xlabel="PC1", ylabel="PC2", title="PC1 vs PC2 (colour: position)")
            axes[1].scatter(c[0], c[1], c[2], c=range(len(c[0])), s=4, cmap="viridis")
            axes[1].plot(c[0], c[1], c[2], lw=0.3, color="grey")
            axes[1].set(xlabel="PC1", ylabel="PC2", zlabel="PC3", title="first three components")
            fig.colorbar(sc, ax=axes[0], shrink=0.8, label="position")
            first = min(n, 96)
            for i in range(min(4, len(c))):
                axes[2].plot(c[i][:first], lw=0.8, label=f"PC{i + 1} ({100 * a['pca']['explained'][i]:.1f}%)")
            axes[2].set(xlabel="position", title=f"components along the first {first} positions")
            axes[2].legend(fontsize=7)
            save(fig, "pca")
    if pos["kind"] == "rotary":
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(pos["similarity_profile"], lw=1)
        ax.set(xlabel="distance m − n", ylabel="rotated all-ones q·k",
               title=f"{pos['settings']['scheme']} (base {pos['settings']['base']:g}) induced similarity")
        save(fig, "rotary")
    for rel in result.get("relative", []):
        fig, ax = plt.subplots(figsize=(6, 3))
        im = ax.imshow(rel["bias_by_bucket"], aspect="auto", cmap="RdBu_r")
        ax.set(xlabel="bucket", ylabel="head", title=rel["tensor"])
        fig.colorbar(im, ax=ax)
        save(fig, "relative_" + rel["tensor"].replace(".", "_"))
    tok = result.get("tokens")
    if tok and tok.get("norms"):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(tok["norms"], bins=100)
        ax.set(xlabel="‖E[id]‖", ylabel="tokens", yscale="log", title=f"token-row norms ({tok['shape'][0]} rows)")
        save(fig, "token_norms")
    return files


# -- HTML --------------------------------------------------------------------------------------------------
def _table(rows: list[list[Any]], header: list[str] | None = None) -> str:
    head = "<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def write_html(result: dict[str, Any], out: Path, files: dict[str, str]) -> Path:
    """Write ``index.html`` (and ``inspect.json``) into ``out``; figures must already be there."""
    loc, tying, pos = result["located"], result["tying"], result["position"]
    parts = [f"<h1>posenc inspect</h1><p class='sub'><code>{html.escape(result['source'])}</code> · "
             f"{result['tensors']} tensors · config {html.escape(json.dumps(result['config']))} · every number "
             "below was computed from the checkpoint in this run; data in <a href='inspect.json'>inspect.json</a></p>",
             "<section><h2>What was found</h2>",
             _table([["position", pos["kind"], loc["position"] or "—"], ["token table", "", loc["token"] or "—"],
                     ["output head", tying["status"], loc["head"] or "—"], ["tying evidence", "", tying["evidence"]],
                     ["vocabulary", "", result["vocab_source"] or "— (ids shown)"]], ["role", "", "tensor"])]
    parts += [f"<p class='meta'>{html.escape(n)}</p>" for n in result["notes"]]
    if result.get("stacks"):
        from posenc.inspect.sinusoid import describe

        parts.append("</section><section><h2>Position scheme per stack (encoder–decoder)</h2>")
        parts.append(_table([[stack, ", ".join(f"{k}={v}" for k, v in e["scheme"].items() if k != "family"),
                              e["tensor"] or e.get("note", "—"),
                              describe(e["sinusoid"]) if "sinusoid" in e else "—"]
                             for stack, e in result["stacks"].items()],
                            ["stack", "scheme posenc runs", "tensor", "stored table, by fit"]))
    if result.get("layer_plan"):
        parts.append("</section><section><h2>Layer plan</h2>")
        parts.append(_table([[r["layer"], r["position"], ", ".join(f"{k}={v}" for k, v in r["position_options"].items()
                                                                   if not isinstance(v, list)) or "—",
                              r["window"], r["query_scale"] or "—"] for r in result["layer_plan"]],
                            ["layer", "scheme", "options", "window", "query scale"]))
    if pos["kind"] == "rotary":
        s = pos["settings"]
        parts.append("</section><section><h2>Rotary positions (from config.json)</h2>")
        parts.append(_table([[k, s[k]] for k in ("scheme", "base", "head_dim", "rotary_dim", "pairing", "rope_type")]
                            + [["translation invariant", pos["translation_invariant"]],
                               ["relative diagonal spread", pos["relative_spread"]],
                               ["rises (of steps)", f"{pos['monotonic']['increases']} of {pos['monotonic']['steps']}"],
                               ["minimum at distance", pos["monotonic"]["argmin"]]]))
    a = pos.get("analysis")
    if a:
        base = a.get("baselines", {})
        rows = f", positions {pos['rows'][0]}…{pos['rows'][1] - 1}" if "rows" in pos else ""
        parts.append(f"</section><section><h2>Position table ({a['shape'][0]} × {a['shape'][1]}{rows})</h2>")
        n = a["norms"]
        norm_range = f"{_fmt(n['norm_min'])} / {_fmt(n['norm'])} / {_fmt(n['norm_max'])}"
        parts.append(_table([["norm min / mean / max", norm_range],
                             ["share of ‖P‖² in the mean row", a["mean_row_share"]],
                             ["distance R² (1 = depends on i−j only)", a["distance_r2"]],
                             ["relative diagonal spread (lab)", a["profile"]["relative_spread"]]]
                            + [[f"{k}: distance R²", v["distance_r2"]] for k, v in base.items()]))
        for key, caption in (("norms", "Norm of each position vector."),
                             ("profile", "Mean cosine between positions δ apart, against a sinusoidal and a random "
                                         "table of the same size."),
                             ("gram", "Cosine between every pair of positions."),
                             ("shift", "Relative residual of the best linear map P[p] → P[p+k] (least squares over "
                                       "all p)."),
                             ("pca", "Principal components of the centred table.")):
            if key in files:
                parts.append(f"<figure><img src='{files[key]}'><figcaption>{caption}</figcaption></figure>")
        mono = a["monotonic"]
        parts.append("<h3>Monotonicity</h3>" + _table(
            [[name, m["increases"], m["steps"], m["first"], m["min"], m["argmin"], m["last"]]
             for name, m in mono.items()]
            + [[f"{k} (cosine)", v["monotonic_cosine"]["increases"], v["monotonic_cosine"]["steps"],
                v["monotonic_cosine"]["first"], v["monotonic_cosine"]["min"], v["monotonic_cosine"]["argmin"],
                v["monotonic_cosine"]["last"]] for k, v in base.items()],
            ["profile", "rises", "steps", "at 0", "min", "argmin", "last"]))
        sh, pcs = a["shift_centred"], a["shift_pcs"]
        r = pcs["components"]
        parts.append("<h3>Shift is linear?</h3><p>Relative residual of the least-squares map M_k with "
                     "P[p+k] ≈ M_k·P[p] for all p. With all d columns there are only (L−k)/d equations "
                     "per unknown, "
                     f"so even noise fits when that is near 1; the first {r} principal components "
                     f"({_fmt(100 * pcs['variance_kept'], 1)}% of this table's variance) give ≥ 8.</p>" + _table(
            [[f"this table, first {r} PCs", *pcs["relative_residual"]]]
            + [[f"{k}, first {r} PCs", *v["shift_pcs"]["relative_residual"]] for k, v in base.items()]
            + [["this table (centred), all columns", *sh["relative_residual"]],
               ["this table (raw), all columns", *a["shift"]["relative_residual"]]]
            + [[f"{k}, all columns", *v["shift"]["relative_residual"]] for k, v in base.items()]
            + [["equations per unknown, all columns", *sh["equations_per_unknown"]]],
            ["relative residual, k =", *sh["offsets"]]))
        pca = a["pca"]
        rot = pca["pc12_rotation"]
        parts.append("<h3>Principal components</h3><p>Components holding 50 / 90 / 99 % of the variance: "
                     + " / ".join(str(v) for v in pca["components_for"].values())
                     + "".join(f"; {k}: " + " / ".join(str(x) for x in v["pca"]["components_for"].values())
                               for k, v in base.items())
                     + (f". In the PC1–PC2 plane each position step turns {_fmt(rot['step_degrees'])}° "
                        f"(std {_fmt(rot['step_degrees_std'])}°) at radius {_fmt(rot['radius'])} "
                        f"(cv {_fmt(rot['radius_cv'])}); a sinusoid pair turns a fixed angle on a circle (std 0, cv 0)"
                        if rot else "") + ".</p>" + _table(
            [[f"PC{i + 1}", pca["explained"][i], pca["cumulative"][i], c["period"], c["r2"]]
             for i, c in enumerate(pca["components"])],
            ["component", "variance share", "cumulative", "best-sinusoid period (positions)", "sinusoid R²"]))
    for more in result.get("more_positions", []):  # an encoder–decoder's other table
        m, fit = more["analysis"], more["sinusoid"]
        parts.append(f"</section><section><h2>Position table {html.escape(more['tensor'])} "
                     f"({m['shape'][0]} × {m['shape'][1]})</h2>")
        parts.append(_table([["kind", more["kind"]],
                             ["sinusoid", _sinusoid_line(fit).removeprefix("sinusoid").strip()],
                             ["norm min / mean / max", f"{_fmt(m['norms']['norm_min'])} / {_fmt(m['norms']['norm'])} / "
                                                       f"{_fmt(m['norms']['norm_max'])}"],
                             ["distance R² (1 = depends on i−j only)", m["distance_r2"]]]))
    if "rotary" in files:
        parts.append(f"<img src='{files['rotary']}'>")
    for rel in result.get("relative", []):
        key = "relative_" + rel["tensor"].replace(".", "_")
        parts.append(f"</section><section><h2>Relative bias {html.escape(rel['tensor'])} {rel['shape']}</h2>"
                     f"<img src='{files[key]}'>")
    tok = result.get("tokens")
    if tok:
        q = tok["norm_quantiles"]
        parts.append(f"</section><section><h2>Token table ({tok['shape'][0]} × {tok['shape'][1]})</h2>")
        parts.append(_table([list(q.values())], list(q)))
        if "token_norms" in files:
            parts.append(f"<img src='{files['token_norms']}'>")
        parts.append("<h3>Longest and shortest rows</h3>" + _table(
            [[f"{lo['token']} ({_fmt(lo['norm'])})", f"{hi['token']} ({_fmt(hi['norm'])})"]
             for lo, hi in zip(tok["shortest"], tok["longest"])], ["shortest", "longest"]))
        ss = tok["self_score"]
        parts.append(f"<p>Used as the hidden vector, a row scores highest on itself (dot product) for "
                     f"{_fmt(100 * ss['self_top'])}% of {ss['sampled']} sampled rows.</p>")
        parts.append("<h3>Neighbours: cosine vs dot product</h3>" + _table(
            [[e["token"], ", ".join(n["token"] for n in e["cosine"]), ", ".join(n["token"] for n in e["dot"]),
              ", ".join(e["dot_only"]) or "—"] for e in tok["neighbours"]],
            ["token", "by cosine", "by dot product", "only by dot"]))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>posenc inspect</title><style>{CSS}</style>"
            f"</head><body>{''.join(parts)}</section></body></html>")
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"


def write_report(result: dict[str, Any], out: str | Path) -> Path:
    """Figures, ``index.html`` and ``inspect.json`` (without per-row lists) in ``out``; returns the HTML path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = figures(result, out)
    (out / "inspect.json").write_text(dumps(compact(result), indent=1), encoding="utf-8")
    return write_html(result, out, files)
