"""Tabulate the recorded 1,500-update runs (recorded/long-*/) as Markdown: recorded/long-results.md.

    python benchmarks/translation/long_table.py

Reads each run's run.json (label, updates, train seconds) and metrics-beam*.json (BLEU / chrF per set), as
written by `posenc translate` and copied by collect.py; docs/translation.md quotes the file through a
generated block (scripts/docs_generated.py), so no figure there is typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

RECORDED = Path(__file__).resolve().parent / "recorded"


def _cell(sets: dict, name: str, chrf: bool = False) -> str:
    s = sets.get(name)
    if not s:
        return "—"
    return f"{s['bleu']:.2f} / {s['chrf']:.1f}" if chrf else f"{s['bleu']:.2f}"


def main() -> None:
    rows = ["| run | decoding | test verses | updates | train min | test BLEU / chrF | long BLEU | x3 BLEU |",
            "|---|---|---|---|---|---|---|---|"]
    for run in sorted(RECORDED.glob("long-*/run.json")):
        record = json.loads(run.read_text(encoding="utf-8"))
        for metrics in sorted(run.parent.glob("metrics-beam*.json")):
            m = json.loads(metrics.read_text(encoding="utf-8"))
            sets = m["sets"]
            decoding = "greedy" if m["beam"] == 1 else f"beam {m['beam']}"
            whole = metrics.stem == "metrics-beam1"  # the training time goes on the run's full greedy row only
            minutes = f"{record['train_seconds'] / 60:.1f}" if whole else "—"
            rows.append(f"| {m['label']} | {decoding} | {sets['test']['n']} | {record['steps']:,} | {minutes} | "
                        f"{_cell(sets, 'test', chrf=True)} | {_cell(sets, 'long')} | {_cell(sets, 'x3')} |")
    head = ("# Translation, 1,500 updates (recorded/long-*)\n\n"
            "Written by `python benchmarks/translation/long_table.py` from each run's run.json and "
            "metrics-beam*.json.\n\n")
    (RECORDED / "long-results.md").write_text(head + "\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED / 'long-results.md'}")


if __name__ == "__main__":
    main()
