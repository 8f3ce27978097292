"""``posenc schemes``: list the registered position schemes."""

from __future__ import annotations

import argparse
import json
from typing import Any


def run(args: argparse.Namespace) -> int:
    from posenc.positions import build, lookup, names

    rows = []
    for name in names():
        cls = lookup(name)
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        rows.append({"name": name, "family": cls.family, "summary": doc,
                     "defaults": build(name, dim=args.dim, num_heads=args.heads).describe()})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['name']:<16} {row['family']:<9} {row['summary']}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schemes", help="list the registered position schemes")
    p.add_argument("--json", action="store_true", help="print JSON with each scheme's default options")
    p.add_argument("--dim", type=int, default=64, help="model width used to show defaults")
    p.add_argument("--heads", type=int, default=4, help="head count used to show defaults")
    p.set_defaults(func=run)
