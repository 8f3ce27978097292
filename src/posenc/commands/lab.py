"""``posenc lab``: run every measured claim of the source articles and report it.

    posenc lab                          # all experiments, table + lab-report/index.html
    posenc lab --only sinusoid-norm,not-monotonic --dim 128 --length 2048
    posenc lab --json                   # one JSON object on stdout
    posenc lab properties               # the property table of every registered scheme
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.validation import check_output, dumps, parse_list


def run(args: argparse.Namespace) -> int:
    from posenc.lab.core import LabConfig
    from posenc.lab.experiments import property_table, run_lab
    from posenc.lab.report import property_text, terminal_table, to_json, write_report

    cfg = LabConfig(dim=args.dim, length=args.length, base=args.base, seed=args.seed)
    if args.out != "-":
        check_output(args.out, "--out", kind="dir")
    show_progress = not args.quiet  # tqdm on stderr: stdout stays clean for --json
    if args.what == "properties":
        rows = property_table(cfg, progress=show_progress)
        print(dumps({"properties": rows}, indent=1) if args.json else property_text(rows))
        return 0
    only = parse_list(args.only, "--only") if args.only is not None else None
    findings = run_lab(cfg, only=only, progress=show_progress)
    rows = property_table(cfg) if not only else None
    if args.json:
        print(dumps(to_json(findings, cfg=cfg, properties=rows)))
    else:
        print(terminal_table(findings))
        if rows:
            print()
            print(property_text(rows))
    if args.out != "-":
        index = write_report(findings, args.out, cfg=cfg, properties=rows, progress=show_progress)
        print(f"report: {index}", file=sys.stderr if args.json else sys.stdout)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("lab", help="reproduce every measured claim of the source articles",
                       description="Run the lab's experiments (shared/SPEC.md items 1–20) and report them.")
    p.add_argument("what", nargs="?", choices=["run", "properties"], default="run",
                   help="'run' (default): the experiments; 'properties': the property table of every scheme")
    p.add_argument("--only", metavar="ID[,ID...]", help="run only these experiment ids")
    p.add_argument("--dim", type=int, default=64, help="model width d (default 64)")
    p.add_argument("--length", type=int, default=512, help="number of positions L (default 512)")
    p.add_argument("--base", type=float, default=10000.0, help="sinusoid/RoPE base (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random table and weight (default 0)")
    p.add_argument("--out", default="lab-report", metavar="DIR",
                   help="write index.html, figures and results.json here (default lab-report/; '-' for none)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)
