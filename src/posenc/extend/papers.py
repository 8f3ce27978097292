"""Each paper's claim for a training-free method, checked against a run's numbers with a stated rule.

A check has a verdict: ``holds``, ``does not hold`` or ``undecided`` (the data cannot tell, e.g. no paired
difference is significant). Perplexity checks compare pooled perplexities, which are measured without sampling
error on one text, so they always decide; retrieval checks use the run's paired tests (exact McNemar, Holm
over the pairs at one task and length: ``posenc.extend.stats``) or, across lengths, Fisher's exact test, and
decide only at ``ALPHA``. Which text and length each check read is part of it.

The papers, as this module reads them (the checks are ours; the wording of each claim is a summary):

* **YaRN** (Peng et al., 2023): without fine-tuning, dynamic scaling and YaRN keep perplexity past the
  trained context L₀ far better than position interpolation (PI), while plain RoPE degrades sharply.
* **Self-Extend** (Jin et al., 2024, "LLM Maybe LongLM"): grouping the positions of distant tokens (exact
  positions within a neighbour window) lets a model read past L₀ without tuning — perplexity stays low where
  plain RoPE's explodes, passkeys past L₀ are retrieved — while short contexts keep their quality.
* **STRING** (An et al., 2024, "Why Does the Effective Context Length of LLMs Fall Short?"): a model's
  effective context falls short of L₀ (retrieval fails well inside it, the far relative positions being
  under-trained); shifting well-trained positions over them improves retrieval *within* L₀, without training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posenc.extend.stats import ALPHA, fisher_exact

HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
IN_RANGE_COST = 1.05  # "short contexts keep their quality": in-range perplexity within this × plain RoPE's

CLAIMS = {
    "YaRN": "YaRN paper (Peng et al., 2023), without fine-tuning: dynamic scaling and YaRN hold perplexity past L₀ "
            "far better than position interpolation (PI), and plain RoPE degrades sharply",
    "Self-Extend": "Self-Extend paper (Jin et al., 2024), without fine-tuning: grouped positions for distant tokens "
                   "keep perplexity past L₀ low where plain RoPE's explodes, retrieve passkeys past L₀, and leave "
                   "short contexts as they were",
    "STRING": "STRING paper (An et al., 2024), without fine-tuning: retrieval already fails inside L₀ (the far "
              "positions are under-trained), and shifting well-trained positions over them improves retrieval "
              "within L₀",
}


def _check(paper: str, where: str, claim: str, rule: str, verdict: str, values: Sequence[Any]) -> dict[str, Any]:
    return {"paper": paper, "document": where, "claim": claim, "rule": rule, "verdict": verdict,
            "holds": verdict == HOLDS, "values": list(values)}


def label(method: str, factor: float | None) -> str:
    """A method as the report names it: ``rope``, ``rope-yarn ×2``."""
    return method if factor is None else f"{method} ×{factor:g}"


def _loss_rows(loss: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[tuple[str, Any], dict[str, Any]]]]:
    return [(name, doc, {(r["method"], r["factor"]): r for r in doc["rows"]}) for name, doc in loss.items()]


def yarn_checks(loss: dict[str, Any], *, break_ratio: float, plain: str = "rope") -> list[dict[str, Any]]:
    """Per document and factor: dynamic NTK (each mode) and YaRN each below PI past L₀; plain RoPE ≥
    ``break_ratio``× the best."""
    checks = []
    for name, doc, by in _loss_rows(loss):
        base = by.get((plain, None))
        for factor in sorted({r["factor"] for r in doc["rows"] if r["factor"] is not None}):
            pi = by.get(("rope-linear", factor))
            # dynamic NTK in both modes: per position (cached decoding) and fixed (one pass at its length — how the
            # paper's perplexities are taken, each length evaluated whole)
            for other in ("rope-dynamic-ntk", "rope-dynamic-ntk-fixed", "rope-yarn"):
                row = by.get((other, factor))
                if pi and row and pi["beyond_ppl"] and row["beyond_ppl"]:
                    better = row["beyond_ppl"] < pi["beyond_ppl"]
                    checks.append(_check("YaRN", name, f"{label(other, factor)} beats {label('rope-linear', factor)} "
                                         "past L₀", "lower perplexity past L₀", HOLDS if better else FAILS,
                                         [row["beyond_ppl"], pi["beyond_ppl"]]))
            if base and base["beyond_ppl"]:
                best = min((r["beyond_ppl"] for r in doc["rows"] if r["factor"] == factor and r["beyond_ppl"]),
                           default=None)
                if best is not None:
                    checks.append(_check("YaRN", name, f"plain RoPE past L₀ is ≥ {break_ratio:g}× the best ×{factor:g} "
                                         "method", "perplexity past L₀, ratio",
                                         HOLDS if base["beyond_ppl"] >= break_ratio * best else FAILS,
                                         [base["beyond_ppl"], best]))
    return checks


def _paired(tests: Sequence[dict[str, Any]], task: str, length: int, a: str, b: str) -> dict[str, Any] | None:
    """The paired comparison of labels a and b at (task, length), oriented as (a, b)."""
    for group in tests:
        if group["task"] == task and group["length"] == length:
            for c in group["comparisons"]:
                if {c["first"], c["second"]} == {a, b}:
                    if c["first"] == a:
                        return c
                    return {**c, "first": a, "second": b, "only_first": c["only_second"],
                            "only_second": c["only_first"]}
    return None


def _better(tests: Sequence[dict[str, Any]], paper: str, task: str, length: int, method: str, plain: str,
            claim: str) -> dict[str, Any] | None:
    """``method`` retrieves more than ``plain`` on the same prompts: holds / does not hold (significantly
    worse) / undecided, by the run's Holm-adjusted exact McNemar test."""
    c = _paired(tests, task, length, method, plain)
    if c is None:
        return None
    if c["significant"]:
        verdict = HOLDS if c["only_first"] > c["only_second"] else FAILS
    else:
        verdict = UNDECIDED
    rule = f"paired exact McNemar, Holm-adjusted, at {ALPHA:g}"
    return _check(paper, f"{task} at {length}", claim, rule, verdict,
                  [f"{c['only_first']} vs {c['only_second']} discordant of {c['trials']}", f"p(Holm) {c['p_holm']:.3g}"])


def _methods(rows: Sequence[dict[str, Any]], method: str) -> list[tuple[str, float | None]]:
    return sorted({(r["method"], r["factor"]) for r in rows if r["method"] == method}, key=lambda m: m[1] or 0)


def self_extend_checks(loss: dict[str, Any], passkey: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]], *,
                       break_ratio: float, flat_ratio: float, plain: str = "rope") -> list[dict[str, Any]]:
    """Past L₀: flat (within ``flat_ratio`` of the control) and ≥ ``break_ratio``× below plain RoPE; in range:
    within IN_RANGE_COST of plain; retrieval past L₀ (up to s·L₀): more passkeys than plain on the same prompts."""
    checks = []
    for name, doc, by in _loss_rows(loss):
        base = by.get((plain, None))
        for method, factor in _methods(doc["rows"], "self-extend"):
            row = by[(method, factor)]
            lab = label(method, factor)
            if row["flat_past_l0"] is not None:
                ref = "the same tokens read in range" if doc.get("control") else "its own in-range perplexity"
                ratio = row["beyond_vs_control"] if doc.get("control") else row["beyond_vs_own_in_range"]
                checks.append(_check("Self-Extend", name, f"{lab} stays flat past L₀",
                                     f"perplexity past L₀ ≤ {flat_ratio:g}× {ref}",
                                     HOLDS if row["flat_past_l0"] else FAILS, [ratio]))
            if base and base["beyond_ppl"] and row["beyond_ppl"]:
                checks.append(_check("Self-Extend", name, f"plain RoPE past L₀ is ≥ {break_ratio:g}× {lab}'s",
                                     "perplexity past L₀, ratio",
                                     HOLDS if base["beyond_ppl"] >= break_ratio * row["beyond_ppl"] else FAILS,
                                     [base["beyond_ppl"], row["beyond_ppl"]]))
            if row["in_range_vs_plain"] is not None:
                checks.append(_check("Self-Extend", name, f"{lab} leaves the first L₀ tokens as they were",
                                     f"perplexity over 0–L₀ ≤ {IN_RANGE_COST:g}× plain RoPE's",
                                     HOLDS if row["in_range_vs_plain"] <= IN_RANGE_COST else FAILS,
                                     [row["in_range_vs_plain"]]))
    for method, factor in _methods(passkey, "self-extend"):
        for r in passkey:
            if (r["method"], r["factor"]) != (method, factor):
                continue
            l0 = r["original_max_len"]
            if l0 < r["length"] <= (factor or 1) * l0:
                check = _better(tests, "Self-Extend", r["task"], r["length"], r["label"], plain,
                                f"{r['label']} retrieves past L₀ more often than plain RoPE")
                if check:
                    checks.append(check)
    return checks


def string_checks(passkey: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]],
                  plain: str = "rope") -> list[dict[str, Any]]:
    """Plain RoPE's retrieval at the longest length ≤ L₀ below that at the shortest (Fisher's exact test: the
    prompts differ); STRING above plain RoPE at every length in (L₀/2, L₀] (paired)."""
    checks = []
    for task in dict.fromkeys(r["task"] for r in passkey):
        mine = [r for r in passkey if r["task"] == task]
        base = sorted((r for r in mine if r["method"] == plain and r["length"] <= r["original_max_len"]),
                      key=lambda r: r["length"])
        if len(base) >= 2 and base[0]["trials"] and base[-1]["trials"]:
            short, long = base[0], base[-1]
            p = fisher_exact(long["correct"], long["trials"], short["correct"], short["trials"])
            lower = long["correct"] / long["trials"] < short["correct"] / short["trials"]
            verdict = UNDECIDED if p >= ALPHA else HOLDS if lower else FAILS
            checks.append(_check("STRING", f"{task} at {short['length']} and {long['length']}",
                                 f"plain RoPE retrieves less at {long['length']} than at {short['length']} "
                                 "(both within L₀)", f"Fisher's exact test at {ALPHA:g}", verdict,
                                 [f"{long['correct']}/{long['trials']} vs {short['correct']}/{short['trials']}",
                                  f"p {p:.3g}"]))
        for r in mine:
            if r["method"] == "string" and r["original_max_len"] / 2 < r["length"] <= r["original_max_len"]:
                check = _better(tests, "STRING", task, r["length"], r["label"], plain,
                                "STRING retrieves within L₀ more often than plain RoPE")
                if check:
                    checks.append(check)
    return checks


def paper_checks(loss: dict[str, Any], passkey: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]], *,
                 break_ratio: float, flat_ratio: float, plain: str = "rope") -> list[dict[str, Any]]:
    """One entry per paper: its claim, its checks and the count of each verdict (papers without a check too)."""
    found = {
        "YaRN": yarn_checks(loss, break_ratio=break_ratio, plain=plain),
        "Self-Extend": self_extend_checks(loss, passkey, tests, break_ratio=break_ratio, flat_ratio=flat_ratio,
                                          plain=plain),
        "STRING": string_checks(passkey, tests, plain=plain),
    }
    out = []
    for paper, checks in found.items():
        counts = {v: sum(c["verdict"] == v for c in checks) for v in (HOLDS, FAILS, UNDECIDED)}
        out.append({"paper": paper, "claim": CLAIMS[paper], "checks": checks, "counts": counts,
                    "held": counts[HOLDS], "total": len(checks),
                    "agrees": bool(checks) and counts[HOLDS] == len(checks)})
    return out


def verdict_line(entry: dict[str, Any]) -> str | None:
    """One sentence for the reading: how many checks hold, fail, cannot tell (None without checks)."""
    if not entry["checks"]:
        return None
    c = entry["counts"]
    parts = [f"{c[HOLDS]} hold", f"{c[FAILS]} do not"] + ([f"{c[UNDECIDED]} undecided"] if c[UNDECIDED] else [])
    n = len(entry["checks"])
    return f"Against the {entry['claim']}: {n} check{'s' * (n != 1)} — " + ", ".join(parts) + "."
