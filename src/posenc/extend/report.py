"""The context-extension report: results.json, results.md, PNG plots and an HTML page in the lab's style.

Nothing here measures: it reads finished cells, summarises them (``summarise``)
and writes them out. The reading (where plain RoPE breaks, which methods stay
flat past L₀, what each costs in range, agreement with the YaRN, Self-Extend and STRING papers —
``posenc.extend.papers``) is computed from the numbers with the thresholds stated next to it.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc.validation import dumps
from posenc.checkpoint import atomic_write_text
from posenc.extend.methods import PLAIN, REMAPS
from posenc.extend.papers import label, paper_checks, verdict_line
from posenc.extend.passkey import wilson
from posenc.extend.retrieval import answered_key, depth_setting, last_needle, other_needle, placement
from posenc.extend.stats import ALPHA, compare_methods, fisher_exact, holm, paired
from posenc.report_style import CSS, fmt_number, pyplot

BREAK_RATIO = 2.0  # plain RoPE "breaks" in the first bucket past L₀ whose perplexity exceeds this × its in-range one
FLAT_RATIO = 1.25  # a method "stays flat" when its perplexity past L₀ is within this × its own in-range perplexity


def _pooled_ppl(buckets: Sequence[dict[str, Any]], lo: int, hi: int | None = None) -> float | None:
    """Perplexity over the buckets inside [lo, hi) pooled by tokens: exp(Σ n·ln ppl / Σ n)."""
    rows = [b for b in buckets if b["start"] >= lo and (hi is None or b["end"] <= hi) and b["tokens"]]
    n = sum(b["tokens"] for b in rows)
    return math.exp(sum(b["tokens"] * math.log(b["ppl"]) for b in rows) / n) if n else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def first_break(nll: Sequence[float], in_range_ppl: float, window: int, *, edges: Sequence[int] | None = None,
                start: int = 0) -> int | None:
    """First target position of the first ``window``-token stretch at or past ``start`` whose perplexity exceeds
    BREAK_RATIO × ``in_range_ppl`` (None if none does).

    Entry p of ``nll`` is the loss of the token at position p + 1. Stretches cover target positions
    [a, a + window) from ``start`` on, cut at the bucket ``edges`` too (when given), so they tile every
    bucket past ``start`` exactly: a bucket whose perplexity exceeds the threshold always holds a stretch
    that does (the mean of its stretches' mean losses is its mean loss). The report scans from L₀: the
    first tokens of a text, with little context, are above an in-range average for reasons unrelated
    to position.
    """
    start, end = max(start, 1), len(nll) + 1  # target positions start..end-1 (position 0 has no loss)
    cuts = sorted({start, end, *(e for e in (edges or ()) if start < e < end)})
    limit = math.log(BREAK_RATIO * in_range_ppl)
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        for a in range(lo, hi, window):
            b = min(a + window, hi)
            if math.fsum(nll[a - 1:b - 1]) / (b - a) > limit:
                return a
    return None


def _break_bucket(edges: Sequence[int], ppls: Sequence[float | None], in_range_ppl: float, l0: int) -> int | None:
    """Start of the first L₀/2 bucket at or past L₀ whose perplexity exceeds BREAK_RATIO × ``in_range_ppl``."""
    for start, ppl in zip(edges, ppls):
        if start >= l0 and ppl is not None and ppl > BREAK_RATIO * in_range_ppl:
            return start
    return None


def summarise_loss(cells: Sequence[dict[str, Any]], controls: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Per document: one row per (method, factor) with bucket perplexities and the derived ratios.

    ``controls`` (plain RoPE over the last L₀ tokens alone) give, per document, the perplexity of the
    tokens past L₀ read at in-range positions; with one, "flat past L₀" compares a method with it
    (same tokens), else with the method's own in-range perplexity (earlier, different text).
    """
    docs: dict[str, Any] = {}
    plain_nll = {c["document"]: c.get("nll") for c in cells if c["method"] == PLAIN}
    for c in sorted(cells, key=lambda c: (c["document"], c["method"] != PLAIN, c["method"], c["factor"] or 0)):
        l0 = c["original_max_len"]
        doc = docs.setdefault(c["document"], {"source": c["source"], "length": c["length"], "original_max_len": l0,
                                              "edges": [b["start"] for b in c["buckets"]] + [c["length"]],
                                              "rows": []})
        doc["rows"].append({"method": c["method"], "factor": c["factor"], "label": label(c["method"], c["factor"]),
                            "buckets": [b["ppl"] for b in c["buckets"]], "in_range_ppl": _pooled_ppl(c["buckets"], 0, l0),
                            "beyond_ppl": _pooled_ppl(c["buckets"], l0), "seconds": c["seconds"],
                            "sdpa_causal_path_only": c["sdpa"]["causal_path_only"]})
    by_doc = {c["document"]: c for c in controls}
    for name, doc in docs.items():
        plain = next((r for r in doc["rows"] if r["method"] == PLAIN), None)
        control = by_doc.get(name)
        doc["control"] = None if control is None else {
            "offset": control["offset"], "buckets": [b["ppl"] if b["tokens"] else None for b in control["buckets"]],
            "beyond_ppl": _pooled_ppl(control["buckets"], doc["original_max_len"])}
        for r in doc["rows"]:
            r["in_range_vs_plain"] = _ratio(r["in_range_ppl"], plain and plain["in_range_ppl"])
            r["beyond_vs_own_in_range"] = _ratio(r["beyond_ppl"], r["in_range_ppl"])
            r["beyond_vs_control"] = _ratio(r["beyond_ppl"], doc["control"] and doc["control"]["beyond_ppl"])
            reference = r["beyond_vs_control"] if doc["control"] else r["beyond_vs_own_in_range"]
            r["flat_past_l0"] = None if reference is None else reference <= FLAT_RATIO
        doc["plain_breaks_at"] = doc["plain_breaks_window"] = None
        if plain is not None and plain["in_range_ppl"]:
            l0 = doc["original_max_len"]
            doc["plain_breaks_at"] = _break_bucket(doc["edges"], plain["buckets"], plain["in_range_ppl"], l0)
            nll = plain_nll.get(name)
            if nll:  # finer: the first stretch of L₀/16 tokens past L₀ above the threshold (tiles the buckets)
                window = max(1, l0 // 16)
                doc["plain_breaks_window"] = {"window": window, "at": first_break(
                    nll, plain["in_range_ppl"], window, edges=doc["edges"], start=l0)}
    return docs


def _task(cell: dict[str, Any]) -> str:
    return cell.get("task", "passkey")  # cells recorded before the retrieval tasks are single-key passkeys


#: the note under a retrieval table whose cells put the needle at the fixed grid depths
GRID_DEPTHS_NOTE = ("Grid depths (0, ¼, ½, ¾, 1): the trials at one depth read the same filler and differ only in "
                    "the key, so their answers cluster by depth (see the column by fifth) and the paired tests, which "
                    "count every trial as independent, overstate the evidence; `--depths strata` (the default) puts "
                    "every trial at its own depth.")


#: the note under a retrieval table with distractors (multi-key)
OTHER_KEY_NOTE = ("Another key: of the wrong answers, those naming a distractor's key (another door's) — the model read "
                  "the far needles but took the wrong one; the rest named no needle's key at all.")


def _any_other_key(rows: Sequence[dict[str, Any]]) -> bool:
    return any(r["other_key"] is not None for r in rows)


def _other_key_cell(row: dict[str, Any]) -> str:
    """"k/wrong" for a row with distractors, "" otherwise."""
    return "" if row["other_key"] is None else f"{row['other_key']}/{row['trials'] - row['correct']}"


def _grid_depths(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any retrieval row comes from cells with the fixed grid depths (then the note goes under the table)."""
    return any(r["depths"] == depth_setting("grid") for r in rows)


def by_fifth(trials: Sequence[dict[str, Any]]) -> str:
    """Found / trials in each fifth of the filler depth, e.g. "4/4 0/4 4/4 1/4 0/4" ("" where trials hold no depth)."""
    if not trials or any("depth" not in t for t in trials):
        return ""
    counts = [[0, 0] for _ in range(5)]
    for t in trials:
        fifth = min(int(t["depth"] * 5), 4)
        counts[fifth][0] += bool(t["correct"])
        counts[fifth][1] += 1
    return " ".join(f"{k}/{n}" for k, n in counts)


#: the note under a retrieval table with distractors: where the asked needle stood decides more than the door
PLACE_NOTE = ("By place among needles: found / trials by the asked door's needle's place in the prompt, first to last "
              "(last: nearest the question). Deep needles are more often last, so this overlaps the column by fifth; "
              "the reading's count of wrong answers naming the last needle, against chance, does not.")


def has_distractors(trials: Sequence[dict[str, Any]]) -> bool:
    """Whether every trial hid several needles and asked for one door (multi-key), so wrong doors can be told."""
    return bool(trials) and all(len(t.get("needles") or ()) >= 2 and t.get("asked") is not None for t in trials)


def recency(trials: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Whether the answers follow the needle nearest the question (``retrieval.last_needle``) rather than the door
    asked; None where no trial holds distractors.

    ``by_place``: [found, trials] for each place the asked needle took among the needles, first to last.
    ``last``/``found_last``: trials whose asked needle was placed last, and how many were found; ``earlier``/
    ``found_earlier`` the rest; ``p`` Fisher's exact test of the two (two-sided). ``other``: wrong answers naming
    another needle's key (``retrieval.other_needle``; the table's "another key"), ``other_last`` those naming the
    last needle, ``other_chance`` how many would if each took a distractor's key uniformly at random
    (1 / (needles − 1) for each trial whose last needle is a distractor, 0 where the asked one is last).
    """
    if not has_distractors(trials):
        return None
    out: dict[str, Any] = {"by_place": [[0, 0] for _ in range(max(len(t["needles"]) for t in trials))],
                           "last": 0, "found_last": 0, "earlier": 0, "found_earlier": 0,
                           "other": 0, "other_last": 0, "other_chance": 0.0}
    for t in trials:
        last = last_needle(t["needles"])
        # the asked needle is recorded first; with fewer needles than the widest trial, last still counts as last
        place = placement([n[1] for n in t["needles"]]).index(0) + len(out["by_place"]) - len(t["needles"])
        out["by_place"][place][0] += bool(t["correct"])
        out["by_place"][place][1] += 1
        where = "last" if last == str(t["key"]) else "earlier"
        out[where] += 1
        out["found_" + where] += bool(t["correct"])
        if not t["correct"] and other_needle(t["answer"] or "", t["needles"], t["key"]):
            out["other"] += 1
            out["other_last"] += answered_key(t["answer"]) == last
            out["other_chance"] += 0.0 if where == "last" else 1 / (len(t["needles"]) - 1)
    out["p"] = fisher_exact(out["found_last"], out["last"], out["found_earlier"], out["earlier"])
    return out


def _place_cell(row: dict[str, Any]) -> str:
    """Found/trials by the asked needle's place, first to last ("1/4 0/6 0/5 4/5"), "" without distractors."""
    r = row.get("recency")
    return "" if r is None else " ".join(f"{k}/{n}" for k, n in r["by_place"])


def _last_cell(row: dict[str, Any]) -> str:
    """"found/trials · found/trials" (asked needle last · earlier) for a row with distractors, "" otherwise."""
    r = row["recency"]
    return f"{r['found_last']}/{r['last']} · {r['found_earlier']}/{r['earlier']}"


def _retrieval_order(c: dict[str, Any]) -> tuple:
    """Cells by task, length, plain RoPE first, then method and factor: the order of the table and the tests."""
    return _task(c), c["length"], c["method"] != PLAIN, c["method"], c["factor"] or 0


def _outcomes(cells: Sequence[dict[str, Any]],
              outcome: Callable[[dict[str, Any]], Any]) -> dict[tuple[str, int], dict[str, list[bool]]]:
    """Per (task, length): label → ``outcome(trial)`` for each trial in order (trial i is the same prompt for every
    method), over the cells with trials."""
    groups: dict[tuple[str, int], dict[str, list[bool]]] = {}
    for c in sorted(cells, key=_retrieval_order):
        if c["trials"]:
            groups.setdefault((_task(c), c["length"]), {})[label(c["method"], c["factor"])] = [
                bool(outcome(t)) for t in c["trials"]]
    return groups


def summarise_passkey(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (task, length, method, factor): found / trials with the Wilson 95% interval, per fifth of the
    needle's depth (``by_fifth``) and, with distractors, the wrong answers that took another needle's key."""
    rows = []
    for c in sorted(cells, key=_retrieval_order):
        n, k = len(c["trials"]), sum(t["correct"] for t in c["trials"])
        lo, hi = wilson(k, n)
        near = recency(c["trials"])
        rows.append({"task": _task(c), "length": c["length"], "method": c["method"], "factor": c["factor"],
                     "label": label(c["method"], c["factor"]), "correct": k, "trials": n,
                     "by_fifth": by_fifth(c["trials"]), "recency": near,
                     "other_key": None if near is None else near["other"],
                     "depths": c.get("settings", {}).get("depths"),
                     "accuracy": k / n if n else None, "wilson_low": lo, "wilson_high": hi,
                     "prompt_tokens": max((t["prompt_tokens"] for t in c["trials"]), default=None),
                     "seconds": sum(t["seconds"] for t in c["trials"]),
                     "original_max_len": c["original_max_len"]})
    return rows


def paired_tests(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, length): every pair of methods compared on the same prompts (exact McNemar, Holm-adjusted).

    Trials are paired by index (the same seeded prompt for every method); a cell with fewer trials is
    compared on its first trials only.
    """
    out = []
    for (task, length), outcomes in _outcomes(cells, lambda t: t["correct"]).items():
        if len(outcomes) > 1:
            out.append({"task": task, "length": length, "comparisons": compare_methods(outcomes)})
    return out


def reached(trial: dict[str, Any]) -> bool:
    """Whether a multi-key answer names some needle's key — the asked one or another door's: the model reached the
    needles, whichever it bound. An answer naming none ("1000000", a near-copy) did not reach them at all."""
    return bool(trial["correct"]) or other_needle(trial["answer"] or "", trial["needles"], trial["key"])


def reach_tests(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, length) with distractors: each method against plain RoPE on ``reached``, the same prompts paired
    (exact McNemar, Holm-adjusted over the methods at that length).

    Past L₀ a method can fail two ways: positions the model never saw break its reading (no needle's key at all),
    or it reads the needles and takes the wrong door. The paired tests on found/not mix the two; this one asks
    only the first, against plain RoPE. ``only_first`` counts prompts where the method reached and plain RoPE did
    not, ``only_second`` the reverse; ``reached`` is the method's count over the ``trials`` it shares with plain.
    """
    plain = label(PLAIN, None)
    out = []
    for (task, length), outcomes in _outcomes([c for c in cells if has_distractors(c["trials"])], reached).items():
        base = outcomes.get(plain)
        if base is None or len(outcomes) < 2:
            continue
        rows = []
        for name, got in outcomes.items():
            if name != plain:
                row = {"label": name, **paired(got, base)}
                rows.append({**row, "reached": sum(got[:row["trials"]])})
        for row, adj in zip(rows, holm([r["p"] for r in rows])):
            row["p_holm"], row["significant"] = adj, adj < ALPHA
        out.append({"task": task, "length": length, "plain": [sum(base), len(base)], "methods": rows})
    return out


def reading(loss: dict[str, Any], passkey: Sequence[dict[str, Any]], papers: Sequence[dict[str, Any]] = (),
            tests: Sequence[dict[str, Any]] = (), reach: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Plain sentences computed from the summary (every number in them is measured)."""
    out = []
    for name, doc in loss.items():
        l0 = doc["original_max_len"]
        at = doc["plain_breaks_at"]
        plain = next((r for r in doc["rows"] if r["method"] == PLAIN), None)
        if plain:
            step = max(1, l0 // 2)
            where = (f"breaks from position {at} ({at / l0:.2g}·L₀: first {step}-token bucket past L₀ above "
                     f"{BREAK_RATIO:g}× its in-range perplexity {fmt_number(plain['in_range_ppl'])})" if at is not None
                     else f"has no {step}-token bucket past L₀ above {BREAK_RATIO:g}× its in-range perplexity "
                          f"{fmt_number(plain['in_range_ppl'])} up to {doc['length']} tokens")
            fine = doc.get("plain_breaks_window") or {}
            # the windows tile the buckets past L₀: one can exceed where no whole bucket does, never the reverse
            if fine.get("at") is not None:
                where += (f"; in windows of {fine['window']} tokens past L₀, the first above {BREAK_RATIO:g}× starts "
                          f"at position {fine['at']} ({fine['at'] / l0:.3g}·L₀)")
            elif fine.get("window") is not None and at is None:
                where += f"; nor does any window of {fine['window']} tokens past L₀"
            out.append(f"[{name}] plain RoPE {where}; past L₀ = {l0} it averages {fmt_number(plain['beyond_ppl'])}.")
        flat = [r["label"] for r in doc["rows"] if r["flat_past_l0"]]
        control = doc.get("control")
        if control:
            ratios = ", ".join(f"{r['label']} {fmt_number(r['beyond_vs_control'])}×" for r in doc["rows"])
            out.append(f"[{name}] the tokens past L₀ read in range (plain RoPE, last L₀ tokens alone) have perplexity "
                       f"{fmt_number(control['beyond_ppl'])}; past L₀ each method reaches: {ratios} of that.")
            what = "of that in-range reading of the same tokens"
        else:
            what = "of their own in-range perplexity (earlier text: a rough reference)"
        out.append(f"[{name}] within {FLAT_RATIO:g}× {what} past L₀: " + (", ".join(flat) if flat else "none") + ".")
        costs = [f"{r['label']} {fmt_number(r['in_range_vs_plain'])}×" for r in doc["rows"]
                 if r["method"] != PLAIN and r["in_range_vs_plain"] is not None]
        if costs:
            out.append(f"[{name}] in-range cost (perplexity over 0–L₀ relative to plain RoPE): " + ", ".join(costs) + ".")
    for task in dict.fromkeys(r["task"] for r in passkey):
        lines: dict[str, list[str]] = {}
        for r in passkey:
            if r["task"] == task:
                lines.setdefault(r["label"], []).append(f"{r['length']}: {r['correct']}/{r['trials']}")
        out.append(f"Retrieval, {task} (found / trials by prompt length): "
                   + "; ".join(f"{k} — {', '.join(v)}" for k, v in lines.items()) + ".")
        for length in dict.fromkeys(r["length"] for r in passkey if r["task"] == task):
            wrong = [r for r in passkey if r["task"] == task and r["length"] == length and r["other_key"] is not None
                     and r["correct"] < r["trials"]]
            if wrong:
                out.append(f"[{task} at {length}] wrong answers naming another needle's key (read, wrong door) of "
                           "all wrong answers: " + ", ".join(f"{r['label']} {_other_key_cell(r)}" for r in wrong) + ".")
            near = [r for r in passkey if r["task"] == task and r["length"] == length and r.get("recency")]
            if near:
                out.append(f"[{task} at {length}] found where the asked needle is the last before the question · "
                           "where another follows it (Fisher p): "
                           + ", ".join(f"{r['label']} {_last_cell(r)} ({r['recency']['p']:.2g})" for r in near)
                           + ".")
            took = [r for r in near if r["recency"]["other"]]
            if took:
                out.append(f"[{task} at {length}] of the wrong answers naming another needle's key, those naming the "
                           "needle nearest the question (expected if the wrong door were drawn at random): "
                           + ", ".join(f"{r['label']} {r['recency']['other_last']}/{r['recency']['other']} "
                                       f"({r['recency']['other_chance']:.1f})" for r in took) + ".")
    for group in tests:
        sig = [c for c in group["comparisons"] if c["significant"]]
        worse = lambda c: c["second"] if c["better"] == c["first"] else c["first"]  # noqa: E731
        said = ", ".join(f"{c['better']} > {worse(c)} (p = {c['p_holm']:.3g})" for c in sig)
        out.append(f"[{group['task']} at {group['length']}] paired exact McNemar, Holm-adjusted over "
                   f"{len(group['comparisons'])} pairs: " + (f"significant at {ALPHA:g}: {said}" if sig else
                                                             f"no difference significant at {ALPHA:g}") + ".")
    for group in reach:
        sig = [r["label"] for r in group["methods"] if r["significant"]]
        k, n = group["plain"]
        each = "; ".join(f"{r['label']} {r['reached']}/{r['trials']} ({r['only_first']} · {r['only_second']}, "
                         f"p = {r['p']:.2g}, Holm {r['p_holm']:.2g})" for r in group["methods"])
        out.append(f"[{group['task']} at {group['length']}] answers naming some needle's key, either door (the needles "
                   f"reached, whichever was bound), against plain RoPE on the same prompts (only the method · only "
                   f"plain RoPE, exact McNemar p, Holm over {len(group['methods'])}): plain RoPE {k}/{n}; {each}; "
                   + (f"significant at {ALPHA:g}: {', '.join(sig)}" if sig else f"none significant at {ALPHA:g}")
                   + ".")
    out += [line for line in map(verdict_line, papers) if line]
    return out


def summarise(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    loss = summarise_loss([c for c in cells if c["kind"] == "loss"], [c for c in cells if c["kind"] == "control"])
    retrieval = [c for c in cells if c["kind"] == "passkey"]
    passkey = summarise_passkey(retrieval)
    tests = paired_tests(retrieval)
    reach = reach_tests(retrieval)
    papers = paper_checks(loss, passkey, tests, break_ratio=BREAK_RATIO, flat_ratio=FLAT_RATIO, plain=PLAIN)
    return {"loss": loss, "passkey": passkey, "paired_tests": tests, "reach_tests": reach, "papers": papers,
            "yarn_paper": papers[0],  # the results.json key of earlier reports
            "reading": reading(loss, passkey, papers, tests, reach),
            "thresholds": {"break": BREAK_RATIO, "flat": FLAT_RATIO, "alpha": ALPHA}}


# -- figures -----------------------------------------------------------------------------------------


def _factors(cells: Sequence[dict[str, Any]]) -> list[float | None]:
    found = sorted({c["factor"] for c in cells if c["factor"] is not None})
    return found or [None]


def plot_loss(cells: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """One figure per (document, factor): smoothed perplexity against position for plain RoPE and each method."""
    plt = pyplot()
    names = []
    loss = [c for c in cells if c["kind"] == "loss"]
    for doc in sorted({c["document"] for c in loss}):
        mine = [c for c in loss if c["document"] == doc]
        for factor in _factors(mine):
            fig, ax = plt.subplots(figsize=(7.2, 3.8))
            for c in mine:
                if c["factor"] not in (None, factor):
                    continue
                style = {"color": "black", "lw": 1.8} if c["method"] == PLAIN else {"lw": 1.2}
                ax.plot(c["curve"]["position"], c["curve"]["ppl"], label=label(c["method"], c["factor"]), **style)
            l0 = mine[0]["original_max_len"]
            for c in (c for c in cells if c["kind"] == "control" and c["document"] == doc):
                spans = [b for b in c["buckets"] if b["tokens"] and b["start"] >= l0]
                for i, b in enumerate(spans):
                    ax.hlines(b["ppl"], b["start"], b["end"], color="grey", lw=3, alpha=0.6,
                              label="same tokens read in range (plain)" if i == 0 else None)
            ax.axvline(l0, color="grey", ls="--", lw=1)
            ax.text(l0, 1.0, " L₀", transform=ax.get_xaxis_transform(), va="top", color="grey")
            ax.set_yscale("log")
            ax.set_xlabel("position (tokens)")
            ax.set_ylabel(f"perplexity (window of {mine[0]['curve']['window']} tokens)")
            ax.set_title(f"{doc}: loss by position" + ("" if factor is None else f", factor {factor:g}"))
            ax.legend(fontsize=7, ncol=2)
            name = f"loss-{doc}" + ("" if factor is None else f"-x{factor:g}") + ".png"
            fig.tight_layout()
            fig.savefig(out / name)
            plt.close(fig)
            names.append(name)
    return names


def plot_passkey(all_rows: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """Accuracy against prompt length with Wilson 95% intervals, one line per method: a row of panels (one per
    factor) per task, in one figure; the legend beside the panels."""
    if not all_rows:
        return []
    plt = pyplot()
    tasks = list(dict.fromkeys(r.get("task", "passkey") for r in all_rows))
    factors = sorted({r["factor"] for r in all_rows if r["factor"] is not None}) or [None]
    fig, grid = plt.subplots(len(tasks), len(factors), figsize=(6.4 * len(factors) + 2.4, 3.8 * len(tasks)),
                             squeeze=False)
    for task, axes in zip(tasks, grid):
        rows = [r for r in all_rows if r.get("task", "passkey") == task]
        _passkey_panels(axes, rows, factors, task)
    handles, labels = grid[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / (6.4 * len(factors) + 2.4), 1))
    fig.savefig(out / "passkey.png")
    plt.close(fig)
    return ["passkey.png"]


def _passkey_panels(axes: Any, rows: Sequence[dict[str, Any]], factors: Sequence[float | None], task: str) -> None:
    """Methods side by side at each length (a small shift along the log-length axis, so that their intervals do
    not hide each other): colour per method, solid for RoPE and the frequency scalings, dashed for remappings."""
    plt = pyplot()
    colours = plt.get_cmap("tab20").colors
    for ax, factor in zip(axes, factors):
        labs = list(dict.fromkeys(r["label"] for r in rows if r["factor"] in (None, factor)))
        for n, lab in enumerate(labs):
            mine = sorted((r for r in rows if r["label"] == lab), key=lambda r: r["length"])
            shift = 2 ** (0.012 * (n - (len(labs) - 1) / 2))
            x = [r["length"] * shift for r in mine]
            y = [r["accuracy"] for r in mine]
            err = [[r["accuracy"] - r["wilson_low"] for r in mine], [r["wilson_high"] - r["accuracy"] for r in mine]]
            plain = mine[0]["method"] == PLAIN
            ax.errorbar(x, y, yerr=err, marker="o", ms=4, capsize=2, lw=1.8 if plain else 1.1, elinewidth=0.8,
                        color="black" if plain else colours[(2 * n + n // 10) % 20],  # dark shades, then light
                        ls="--" if mine[0]["method"] in REMAPS else "-", label=lab)
        l0 = rows[0]["original_max_len"]
        ax.axvline(l0, color="grey", ls=":", lw=1)
        ax.text(l0, 1.0, " L₀", transform=ax.get_xaxis_transform(), va="bottom", color="grey", fontsize=8)
        lengths = sorted({r["length"] for r in rows})
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [f"{n:,}" for n in lengths])
        ax.minorticks_off()
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel(f"{task}: found")
        ax.set_title(f"{task}" + ("" if factor is None else f", factor {factor:g}"), pad=14)


# -- text --------------------------------------------------------------------------------------------


def _bucket_header(doc: dict[str, Any]) -> list[str]:
    l0, edges = doc["original_max_len"], doc["edges"]
    return [f"{a / l0:g}–{b / l0:g}·L₀" for a, b in zip(edges[:-1], edges[1:])]


def _meta_lines(meta: dict[str, Any]) -> list[str]:
    return [f"{k}: {v}" for k, v in meta.items() if not isinstance(v, dict)] + [
        f"{k}: {json.dumps(v)}" for k, v in meta.items() if isinstance(v, dict)]


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = ["# Context extension: loss by position and passkey retrieval", ""]
    lines += [f"- {line}" for line in _meta_lines(meta)] + ["", "## Reading", ""]
    lines += [f"- {s}" for s in summary["reading"]] + [""]
    for name, doc in summary["loss"].items():
        lines += [f"## Perplexity by position — {name}", "", f"Text: {doc['source']}; {doc['length']} tokens; "
                  f"L₀ = {doc['original_max_len']}.", ""]
        head = ["method", *_bucket_header(doc), "0–L₀", "past L₀", "in-range ×plain", "past ×control",
                "past/in-range", "s"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in doc["rows"]:
            cells = [r["label"], *(fmt_number(p) for p in r["buckets"]), fmt_number(r["in_range_ppl"]),
                     fmt_number(r["beyond_ppl"]), fmt_number(r["in_range_vs_plain"]), fmt_number(r["beyond_vs_control"]),
                     fmt_number(r["beyond_vs_own_in_range"]), f"{r['seconds']:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
        if doc.get("control"):
            c = doc["control"]
            lines.append("| control: same tokens in range | " + " | ".join(fmt_number(p) for p in c["buckets"])
                         + f" | | {fmt_number(c['beyond_ppl'])} | | 1 | | |")
            lines += ["", f"Control: plain RoPE over tokens {c['offset']}–{doc['length']} alone, so the tokens past "
                      "L₀ sit at in-range positions (blank buckets: not in that pass)."]
        lines.append("")
    if summary["passkey"]:
        other = _any_other_key(summary["passkey"])
        head = ["task", "length", "method", "found", "by fifth of depth",
                *(["another key", "by place among needles"] if other else []), "accuracy", "Wilson 95%", "s"]
        lines += ["## Retrieval", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in summary["passkey"]:
            wrong = [_other_key_cell(r), _place_cell(r)] if other else []
            lines.append("| " + " | ".join([r["task"], str(r["length"]), r["label"], f"{r['correct']}/{r['trials']}",
                                           r["by_fifth"], *wrong, fmt_number(r["accuracy"]),
                                           f"{r['wilson_low']:.2f}–{r['wilson_high']:.2f}", f"{r['seconds']:.0f}"])
                         + " |")
        lines.append("")
        if other:
            lines += [OTHER_KEY_NOTE, "", PLACE_NOTE, ""]
        if _grid_depths(summary["passkey"]):
            lines += [GRID_DEPTHS_NOTE, ""]
    if summary.get("paired_tests"):
        lines += ["## Paired comparisons (same prompts)", "",
                  f"Exact McNemar on the trials two methods disagree on (b: only the first found it, c: only the "
                  f"second), p Holm-adjusted over every pair at that task and length; significant at {ALPHA:g}.", "",
                  "| task | length | first | second | b | c | p | p (Holm) | significant |", "|---|---|---|---|---|---|---|---|---|"]
        for g in summary["paired_tests"]:
            for c in g["comparisons"]:
                lines.append(f"| {g['task']} | {g['length']} | {c['first']} | {c['second']} | {c['only_first']} | "
                             f"{c['only_second']} | {c['p']:.3g} | {c['p_holm']:.3g} | "
                             f"{'**' + c['better'] + ' better**' if c['significant'] else 'no'} |")
        lines.append("")
    papers = [p for p in summary.get("papers", ()) if p["checks"]]
    if papers:
        lines += ["## Against the papers", "", "Each check has a rule; perplexity checks always decide, retrieval "
                  "checks only where a test is significant (else *undecided*).", "",
                  "| paper | where | claim | rule | verdict | values |", "|---|---|---|---|---|---|"]
        for p in papers:
            for c in p["checks"]:
                verdict = c["verdict"] if c["verdict"] != "does not hold" else "**does not hold**"
                lines.append(f"| {p['paper']} | {c['document']} | {c['claim']} | {c['rule']} | {verdict} | "
                             f"{_values(c['values'])} |")
        lines += [""] + [f"- {p['paper']}: {p['claim']}." for p in papers] + [""]
    return "\n".join(lines)


def _values(values: Sequence[Any]) -> str:
    """Numbers compared ("a vs b"), or the counts and p-value of a test as they are ("…; …")."""
    if all(isinstance(v, (int, float)) for v in values):
        return " vs ".join(fmt_number(v) for v in values)
    return "; ".join(str(v) for v in values)


def html_page(summary: dict[str, Any], meta: dict[str, Any], figures: Sequence[str]) -> str:
    esc = html.escape
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>posenc extend</title>"
             f"<style>{CSS}</style></head><body>", "<h1>Context extension without fine-tuning</h1>",
             "<p class='sub'>loss by position over one long causal pass per method, and passkey retrieval · every "
             "number was computed in this run; full data in <a href='results.json'>results.json</a></p>",
             "<p class='meta'>" + "<br>".join(esc(s) for s in _meta_lines(meta)) + "</p>",
             "<section><h2>Reading</h2><ul>" + "".join(f"<li>{esc(s)}</li>" for s in summary["reading"]) + "</ul>"]
    for p in (p for p in summary.get("papers", ()) if p["checks"]):
        parts.append(f"<p class='claim'>{esc(p['claim'])}.</p><table><tr><th>where</th><th>check</th><th>rule</th>"
                     "<th>verdict</th><th>values</th></tr>")
        for c in p["checks"]:
            cls = {"holds": "yes", "does not hold": "no"}.get(c["verdict"], "")
            parts.append(f"<tr><td>{esc(c['document'])}</td><td>{esc(c['claim'])}</td><td>{esc(c['rule'])}</td>"
                         f"<td class='{cls}'>{esc(c['verdict'])}</td><td>{esc(_values(c['values']))}</td></tr>")
        parts.append("</table>")
    parts.append("</section>")
    for name, doc in summary["loss"].items():
        parts.append(f"<section id='loss-{esc(name)}'><h2>Perplexity by position — {esc(name)}</h2>"
                     f"<p class='meta'>{esc(doc['source'])} · {doc['length']} tokens · L₀ = {doc['original_max_len']}</p>")
        parts += [f"<img src='{esc(f)}' alt='{esc(f)}'>" for f in figures if f.startswith(f"loss-{name}")]
        head = ["method", *_bucket_header(doc), "0–L₀", "past L₀", "in-range ×plain", "past ×control",
                "past / in-range", "seconds"]
        parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
        for r in doc["rows"]:
            values = [*(fmt_number(p) for p in r["buckets"]), fmt_number(r["in_range_ppl"]), fmt_number(r["beyond_ppl"]),
                      fmt_number(r["in_range_vs_plain"]), fmt_number(r["beyond_vs_control"]),
                      fmt_number(r["beyond_vs_own_in_range"]), f"{r['seconds']:.0f}"]
            parts.append(f"<tr><td>{esc(r['label'])}</td>" + "".join(f"<td>{esc(v)}</td>" for v in values) + "</tr>")
        if doc.get("control"):
            c = doc["control"]
            values = [*(fmt_number(p) if p else "" for p in c["buckets"]), "", fmt_number(c["beyond_ppl"]), "", "1", "", ""]
            parts.append("<tr><td>control: same tokens in range</td>" + "".join(f"<td>{esc(v)}</td>" for v in values)
                         + "</tr>")
        parts.append("</table>")
        if doc.get("control"):
            parts.append(f"<p class='meta'>Control: plain RoPE over tokens {doc['control']['offset']}–{doc['length']} "
                         "alone, so the tokens past L₀ sit at in-range positions.</p>")
        parts.append("</section>")
    if summary["passkey"]:
        parts.append("<section id='passkey'><h2>Passkey retrieval</h2>")
        parts += [f"<img src='{esc(f)}' alt='passkey accuracy'>" for f in figures if f == "passkey.png"]
        other = _any_other_key(summary["passkey"])
        parts.append("<table><tr><th>task</th><th>length</th><th>method</th><th>found</th><th>by fifth of depth</th>"
                     + ("<th>another key</th><th>by place among needles</th>" if other else "") + "<th>accuracy</th><th>Wilson 95%</th><th>seconds</th></tr>")
        for r in summary["passkey"]:
            wrong = f"<td>{esc(_other_key_cell(r))}</td><td>{esc(_place_cell(r))}</td>" if other else ""
            parts.append(f"<tr><td>{esc(r['task'])}</td><td>{r['length']}</td><td>{esc(r['label'])}</td>"
                         f"<td>{r['correct']}/{r['trials']}</td><td>{esc(r['by_fifth'])}</td>{wrong}"
                         f"<td>{esc(fmt_number(r['accuracy']))}</td><td>{r['wilson_low']:.2f}–{r['wilson_high']:.2f}</td>"
                         f"<td>{r['seconds']:.0f}</td></tr>")
        parts.append("</table>")
        if other:
            parts.append(f"<p class='meta'>{esc(OTHER_KEY_NOTE)} {esc(PLACE_NOTE)}</p>")
        if _grid_depths(summary["passkey"]):
            parts.append(f"<p class='meta'>{esc(GRID_DEPTHS_NOTE)}</p>")
        if summary.get("paired_tests"):
            parts.append(f"<h3>Paired comparisons (same prompts)</h3><p class='meta'>exact McNemar on discordant trials, "
                         f"Holm-adjusted per task and length; significant at {ALPHA:g}</p><table><tr><th>task</th>"
                         "<th>length</th><th>first</th><th>second</th><th>only first</th><th>only second</th><th>p</th>"
                         "<th>p (Holm)</th><th>significant</th></tr>")
            for g in summary["paired_tests"]:
                for c in g["comparisons"]:
                    verdict = f"{c['better']} better" if c["significant"] else "no"
                    parts.append(f"<tr><td>{esc(g['task'])}</td><td>{g['length']}</td><td>{esc(c['first'])}</td>"
                                 f"<td>{esc(c['second'])}</td><td>{c['only_first']}</td><td>{c['only_second']}</td>"
                                 f"<td>{c['p']:.3g}</td><td>{c['p_holm']:.3g}</td><td>{esc(verdict)}</td></tr>")
            parts.append("</table>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(cells: Sequence[dict[str, Any]], out: str | Path, meta: dict[str, Any]) -> dict[str, Path]:
    """Write results.json (summary + cells without per-token losses), results.md, PNGs and index.html."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(cells)
    figures = plot_loss(cells, out) + plot_passkey(summary["passkey"], out)
    slim = [{k: v for k, v in c.items() if k != "nll"} for c in cells]
    paths = {"json": out / "results.json", "markdown": out / "results.md", "html": out / "index.html"}
    atomic_write_text(paths["json"], dumps({"meta": meta, "summary": summary, "cells": slim}, indent=1))
    atomic_write_text(paths["markdown"], markdown(summary, meta))
    atomic_write_text(paths["html"], html_page(summary, meta, figures))
    return paths
