"""The ``posenc`` command line: plain argparse subcommands.

Each subcommand lives in its own module under ``posenc.commands`` and exposes
``register(subparsers)``, which adds its parser and sets ``func``; this file
only collects them, so adding a command never edits a shared list.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import posenc.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc",
        description="Token embeddings, position schemes, attention and Transformers — and a lab that measures them.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(posenc.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"posenc.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:  # bad input: one clear line, no traceback
        print(f"posenc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
