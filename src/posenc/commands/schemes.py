"""``posenc schemes``: list the registered position schemes."""

from __future__ import annotations

import argparse
from typing import Any

from posenc.cli_options import add_json, write_json


def run(args: argparse.Namespace) -> int:
    from posenc.positions import aliases, build, lookup, names

    rows = []
    for name in names():
        cls = lookup(name)
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        rows.append({"name": name, "family": cls.family, "summary": doc,
                     "aliases": [a for a, real in aliases().items() if real == name],
                     "defaults": build(name, dim=args.dim, num_heads=args.heads).describe()})
    if args.json == "-":
        write_json(args, rows, indent=2)
        return 0
    for row in rows:
        also = f" (also: {', '.join(row['aliases'])})" if row["aliases"] else ""
        print(f"{row['name']:<16} {row['family']:<9} {row['summary']}{also}")
    write_json(args, rows, indent=2)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schemes", help="list the registered position schemes")
    add_json(p, help="write every scheme with its default options as JSON to FILE ('-': print it instead)")
    p.add_argument("--dim", type=int, default=64, help="model width used to show defaults")
    p.add_argument("--heads", type=int, default=4, help="head count used to show defaults")
    p.set_defaults(func=run)
