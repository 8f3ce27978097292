"""``posenc lab``: run every measured claim of the source articles and report it.

    posenc lab                          # all experiments, table + runs/lab/index.html
    posenc lab --only sinusoid-norm,not-monotonic --dim 128 --length 2048
    posenc lab --json - --out -         # one JSON object on stdout, no files
    posenc lab properties               # the property table of every registered scheme
    posenc lab --lang ko                # the table, verdicts and report in Korean (default: the locale)

Every claim, where it comes from and what "holds" means: docs/lab.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.cli_options import (add_force, add_json, add_out, add_quiet, add_seed, command_help, hold_out,
                                json_to_stdout, out_dir, write_json)
from posenc.validation import check_output, dumps, parse_list


def run(args: argparse.Namespace) -> int:
    from posenc.lab.core import LabConfig
    from posenc.lab.experiments import property_table, run_lab
    from posenc.lab.i18n import resolve_lang
    from posenc.lab.report import property_text, terminal_table, to_json, write_report

    lang = resolve_lang(args.lang)  # --lang, else the locale (LC_ALL, LC_MESSAGES, LANG): ko… → Korean
    cfg = LabConfig(dim=args.dim, length=args.length, base=args.base, seed=args.seed)
    if args.out != "-":
        check_output(args.out, "--out", kind="dir")
    check_output(args.json, "--json")
    show_progress = not args.quiet  # tqdm on stderr: stdout stays clean for --json
    to_stdout = json_to_stdout(args)  # then the table and messages go elsewhere: stdout is one JSON object
    if args.what == "properties":
        rows = property_table(cfg, progress=show_progress)
        if not to_stdout:
            print(property_text(rows, lang=lang))
        write_json(args, {"properties": rows})
        return 0
    only = parse_list(args.only, "--only") if args.only is not None else None
    folder = out_dir(args)
    # one run per report folder (two would mix their figures and results.json); another command's is refused
    with hold_out(folder, command="lab", force=args.force):
        findings = run_lab(cfg, only=only, progress=show_progress)
        rows = property_table(cfg) if not only else None
        if not to_stdout:
            print(terminal_table(findings, lang=lang))
            if rows:
                print()
                print(property_text(rows, lang=lang))
        write_json(args, to_json(findings, cfg=cfg, properties=rows), indent=None)
        if folder is not None:
            index = write_report(findings, folder, cfg=cfg, properties=rows, progress=show_progress, lang=lang,
                                 lang_fixed=args.lang is not None)
            print(f"report: {index}", file=sys.stderr if to_stdout else sys.stdout)
        return 0


def register(sub: Any) -> None:
    p = sub.add_parser("lab", help="reproduce every measured claim of the source articles",
                       **command_help(__doc__, description="Run the lab's experiments, each a claim of the source "
                                      "articles measured and checked (docs/lab.md lists them), and report them."))
    p.add_argument("what", nargs="?", choices=["run", "properties"], default="run",
                   help="'run' (default): the experiments; 'properties': the property table of every scheme")
    p.add_argument("--only", metavar="ID[,ID...]", help="run only these experiment ids")
    p.add_argument("--dim", type=int, default=64, help="model width d (default 64)")
    p.add_argument("--length", type=int, default=512, help="number of positions L (default 512)")
    p.add_argument("--base", type=float, default=10000.0, help="sinusoid/RoPE base (default 10000)")
    add_seed(p, help="seed for every random table and weight")
    add_out(p, default="runs/lab", help="report folder: index.html, figures and results.json")
    add_json(p, help="write every finding as one JSON object to FILE ('-': print it instead of the table)")
    p.add_argument("--lang", metavar="en|ko",
                   help="language of the table, the verdicts and the report's first view: 'en' or 'ko' (default: "
                        "the locale, ko_KR… → Korean; the report can switch either way). --json is the same in both")
    add_quiet(p)
    add_force(p)
    p.set_defaults(func=run)
