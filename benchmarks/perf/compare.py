"""Compare posenc's ratios against its peers between two `posenc bench` recordings (results.json).

    python benchmarks/perf/compare.py OLD/results.json NEW/results.json [--suites rope,train]

Only ratios taken inside one run are compared (absolute times depend on the
machine and its load). For each case present in both files it prints, old → new:
posenc's time ÷ the floor (``× floor``), and each peer's time ÷ posenc's time
(posenc's speed-up; > 1: posenc is faster). The range in brackets is the
interquartile spread of that ratio inside its run (peer p25 ÷ posenc p75 …
peer p75 ÷ posenc p25); a ratio "holds" when the old and new ranges overlap.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def key(case: dict[str, Any]) -> tuple[str, str, str]:
    return case["suite"], case["name"], case["facts"].get("allocator", "-")


def ratio(stats: dict[str, Any], num: str, den: str) -> tuple[float, float, float]:
    a, b = stats[num], stats[den]
    return a["median_ms"] / b["median_ms"], a["p25_ms"] / b["p75_ms"], a["p75_ms"] / b["p25_ms"]


def fmt(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.2f} [{r[1]:.2f}–{r[2]:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--suites", default="rope,train")
    args = ap.parse_args()
    suites = set(args.suites.split(","))
    old = {key(c): c for c in json.load(open(args.old))["cases"] if c["suite"] in suites}
    new = {key(c): c for c in json.load(open(args.new))["cases"] if c["suite"] in suites}
    print("| case | allocator | ratio | old | new | holds |")
    print("|---|---|---|---|---|---|")
    held = total = 0
    for k in [k for k in new if k in old]:
        o, n = old[k], new[k]
        rows = []
        if n["floor"]:
            rows.append(("posenc × floor", ratio(o["stats"], n["posenc"], o["floor"]),
                         ratio(n["stats"], n["posenc"], n["floor"])))
        for peer in n["stats"]:
            if peer in (n["posenc"], n["floor"]) or peer.startswith("clone") or peer not in o["stats"]:
                continue
            rows.append((f"{peer} ÷ posenc", ratio(o["stats"], peer, o["posenc"]), ratio(n["stats"], peer, n["posenc"])))
        for what, ro, rn in rows:
            ok = ro[1] <= rn[2] and rn[1] <= ro[2]
            held += ok
            total += 1
            print(f"| {k[0]}: {k[1]} | {k[2]} | {what} | {fmt(ro)} | {fmt(rn)} | {'yes' if ok else '**no**'} |")
    print(f"\n{held} of {total} ratios hold (interquartile ranges overlap).")


if __name__ == "__main__":
    main()
