"""``posenc schemes [NAME]``: the registered position schemes, or one of them in full."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any

from posenc.cli_options import add_json, json_to_stdout, position_name, write_json

DESCRIPTION = """\
Without NAME: every registered position scheme, one line each: its name, its family (additive, rotary, bias
or none) and its one-line summary, with the other names it is accepted by.

With NAME (a registered name or an alias): that scheme's family, summary, options with their defaults (what
--position-option KEY=VALUE sets in every command), the paper it follows and the reference implementation
or formula its tests compare with."""

EXAMPLES = """\
examples:
  posenc schemes
  posenc schemes rope-yarn
  posenc schemes nope --json -"""


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words only, continued at ``indent``."""
    return textwrap.wrap(text, width=max(width, indent + 30), subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


def _value(value: Any) -> str:
    return "derived" if value is None else repr(value) if isinstance(value, str) else str(value)


def list_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from posenc.positions import about, build, names

    rows = []
    for name in names():
        info = about(name)
        rows.append({"name": name, "family": info["family"], "summary": info["summary"], "aliases": info["aliases"],
                     "options": info["options"],
                     "defaults": build(name, dim=args.dim, num_heads=args.heads).describe()})
    return rows


def print_list(rows: list[dict[str, Any]], width: int) -> None:
    name_w = max(len(r["name"]) for r in rows) + 2
    family_w = max(len(r["family"]) for r in rows) + 2
    for row in rows:
        also = f" (also: {', '.join(row['aliases'])})" if row["aliases"] else ""
        line = f"{row['name']:<{name_w}}{row['family']:<{family_w}}{row['summary']}{also}"
        print("\n".join(_wrap(line, width, name_w + family_w)))


def print_one(info: dict[str, Any], width: int) -> None:
    also = f" (also: {', '.join(info['aliases'])})" if info["aliases"] else ""
    print(f"{info['name']}{also}")
    print(f"family: {info['family']}")
    print("\n".join(_wrap(info["summary"], width, 0)))
    details = info["option_details"]
    print()
    if not details:
        print("options: none")
    else:
        print("options (--position-option KEY=VALUE; default):")
        key_w = max(len(d["name"]) for d in details) + 2
        for d in details:
            default = _value(d["default"])
            if d.get("choices"):
                default += f"  (one of {', '.join(map(str, d['choices']))})"
            head = f"  {d['name']:<{key_w}}{default}"
            print(head)
            if d.get("help"):
                print("\n".join(_wrap(" " * (key_w + 4) + d["help"], width, key_w + 4)))
    print()
    print("references:")
    print("\n".join(_wrap(f"  paper: {info['paper'] or 'none cited in its docstring'}", width, 4)))
    print("\n".join(_wrap(f"  verified against: {info['verified_against'] or 'none stated in its docstring'}",
                          width, 4)))


def run(args: argparse.Namespace) -> int:
    from posenc.positions import about

    width = min(shutil.get_terminal_size((100, 24)).columns, 120) - 1
    if args.name is not None:
        info = about(args.name)
        if not json_to_stdout(args):
            print_one(info, width)
        write_json(args, info, indent=2)
        return 0
    rows = list_rows(args)
    if not json_to_stdout(args):
        print_list(rows, width)
    write_json(args, rows, indent=2)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schemes", help="list the registered position schemes, or show one with its options",
                       description=DESCRIPTION, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", default=None, type=position_name, metavar="NAME",
                   help="a scheme's name or alias: show its family, options with defaults and references")
    add_json(p, help="write the list (or NAME's details) as JSON to FILE ('-': print it instead)")
    p.add_argument("--dim", type=int, default=64, help="model width used to show the built defaults in --json "
                                                        "(default 64)")
    p.add_argument("--heads", type=int, default=4, help="head count used to show the built defaults in --json "
                                                        "(default 4)")
    p.set_defaults(func=run)
