"""Turn bench results (plain data) into a terminal/Markdown table and JSON.

For every case: each contender's median time, the interquartile range, the
ratio to the floor (the copy or read-add-write of the same bytes, where the
case has one), minor page faults per call, and how many times faster posenc
is than that contender (its time ÷ posenc's) — all from one interleaved run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posenc.validation import dumps


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def case_rows(case: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one case's table."""
    stats, floor, posenc, facts = case["stats"], case["floor"], case["posenc"], case["facts"]
    per_contender = {k: v for k, v in facts.items() if isinstance(v, dict) and set(v) & set(stats)
                     and all(isinstance(x, (int, float)) for x in v.values())}
    per_contender.pop("max_abs_diff", None)
    header = ["contender", "median ms", "p25–p75 ms"]
    if floor:
        header.append("× floor")
    header.append("faults/call")
    if posenc:
        header.append("posenc speed-up")
    header += list(per_contender)
    rows = []
    base = stats[floor]["median_ms"] if floor in stats else None
    mine = stats[posenc]["median_ms"] if posenc in stats else None
    for name, s in stats.items():
        row = [name, _fmt(s["median_ms"]), f"{_fmt(s['p25_ms'])}–{_fmt(s['p75_ms'])}"]
        if floor:
            row.append(f"{s['median_ms'] / base:.2f}" if base else "")
        row.append(f"{s['faults_per_call']:.0f}")
        if posenc:
            row.append("—" if name == posenc or not mine else f"{s['median_ms'] / mine:.2f}×")
        for key, values in per_contender.items():
            row.append(_fmt(values[name]) if name in values else "")
        rows.append(row)
    return header, rows


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())


def _cell(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _sub_tables(case: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Facts shaped {row: {column: value}} (angle errors per position, masks per situation) as tables."""
    out = []
    for key, value in case["facts"].items():
        if _is_table(value):
            cols = list(dict.fromkeys(c for row in value.values() for c in row))
            out.append((key, [key.split("_vs_")[0], *cols],
                        [[str(r), *(_cell(row.get(c, "")) for c in cols)] for r, row in value.items()]))
    return out


def _notes(case: dict[str, Any]) -> list[str]:
    facts = case["facts"]
    notes = []
    for key, value in facts.items():
        if key in ("allocator",) or _is_table(value):
            continue
        if isinstance(value, dict) and all(isinstance(x, (int, float)) for x in value.values()) and set(value) & set(case["stats"]):
            continue
        notes.append(f"{key}: {json.dumps(value)}")
    return notes


def _aligned(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [indent + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [header, *rows]]


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(r) + " |" for r in rows])


def render_markdown(result: dict[str, Any]) -> str:
    """The whole result as Markdown: machine, command, one table per case."""
    m = result["machine"]
    lines = ["# posenc bench results", "",
             f"- command: `{result['command']}`",
             f"- machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m['cpu_capability']}, torch {m['torch']} "
             f"({m['torch_threads']} threads), Python {m['python']}, {m['platform']}",
             f"- load average (1/5/15 min) before: {m['load_average']}, after: {result['load_average_after']}"
             f" — {'the machine was loaded by other work: absolute times are inflated, compare ratios' if result['loaded'] else 'quiet machine'}",
             f"- started {m['time_utc']}, took {result['elapsed_s']:.0f} s", ""]
    for case in result["cases"]:
        alloc = case["facts"].get("allocator")
        title = f"## {case['suite']}: {case['name']}" + (f" — allocator: {alloc}" if alloc else "")
        lines += [title, ""]
        if case["stats"]:
            lines += _markdown_table(*case_rows(case)) + [""]
        for key, header, rows in _sub_tables(case):
            lines += [f"{key}:", ""] + _markdown_table(header, rows) + [""]
        lines += [f"- {n}" for n in _notes(case)]
        lines.append("")
    return "\n".join(lines)


def render_terminal(result: dict[str, Any]) -> str:
    """Plain aligned tables for the terminal."""
    out = []
    for case in result["cases"]:
        alloc = case["facts"].get("allocator")
        out.append(f"\n{case['suite']}: {case['name']}" + (f"  [allocator: {alloc}]" if alloc else ""))
        if case["stats"]:
            out += _aligned(*case_rows(case))
        for key, header, rows in _sub_tables(case):
            out += [f"  {key}:"] + _aligned(header, rows, indent="    ")
        out += [f"  {n}" for n in _notes(case)]
    m = result["machine"]
    out.append(f"\nload average before {m['load_average']}, after {result['load_average_after']}; "
               f"{m['torch_threads']} torch threads; {result['elapsed_s']:.0f} s")
    return "\n".join(out)


def write(result: dict[str, Any], *, json_path: str | None, markdown_path: str | None) -> None:
    """Write the JSON and/or Markdown files (parents created)."""
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(dumps(result, indent=2) + "\n", encoding="utf-8")
    if markdown_path:
        Path(markdown_path).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown_path).write_text(render_markdown(result) + "\n", encoding="utf-8")
