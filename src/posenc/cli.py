"""The ``posenc`` command line: plain argparse subcommands.

Each subcommand lives in its own module under ``posenc.commands`` and exposes
``register(subparsers)``, which adds its parser and sets ``func``; this file
only collects them, so adding a command never edits a shared list.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

import posenc.commands
from posenc.checks import OPTIONAL_PARTS  # (import name, what it brings, the extra that installs it)


def version_lines() -> list[str]:
    """posenc's and torch's versions, then one line per optional part: present (its version) or the extra."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    import torch

    import posenc

    lines = [f"posenc {posenc.__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})"]
    for module, what, extra in OPTIONAL_PARTS:
        if importlib.util.find_spec(module) is None:
            lines.append(f"  {module:<13} absent   ({what}: pip install 'posenc[{extra}]')")
            continue
        try:
            found = version(module)
        except PackageNotFoundError:
            found = "present"
        lines.append(f"  {module:<13} {found:<8} ({what})")
    return lines


class _Version(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 - argparse's signature
        print("\n".join(version_lines()))
        parser.exit()


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" also names the closest valid one (``posenc shemes``)."""

    def error(self, message: str) -> NoReturn:
        found = _INVALID_CHOICE.search(message)
        if found:
            from posenc.validation import did_you_mean

            choices = re.findall(r"'([^']*)'", found["choices"])
            hint = did_you_mean(found["value"], choices)
            message = (f"{message[:found.start()]}invalid choice: {found['value']!r}{hint} "
                       f"(choose from {found['choices']})")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="posenc",
        description="Token embeddings, position schemes, attention and Transformers, and a lab that measures them.",
        epilog="examples:\n"
               "  posenc schemes                      # every position scheme, one line each\n"
               "  posenc lab --only sinusoid-norm     # one measured claim, table and report\n"
               "  posenc COMMAND --help               # what a command does, its options and examples\n"
               "\n--debug may come before or after the command: posenc lab --debug",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print posenc's and torch's versions and which optional parts are installed, then exit")
    parser.add_argument("--debug", action="store_true",
                        help="show the full Python traceback of an error (default: one line and an exit code); "
                             "accepted anywhere on the command line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(posenc.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"posenc.commands.{info.name}")
        module.register(sub)
    return parser


#: Exit codes: 0 success, 1 a runtime failure (the input was fine, the work failed: NaN loss, full disk,
#: out of memory), 2 a usage error (a bad option, value or file — the message says what to change),
#: 130 interrupted (Ctrl-C; training saves first).
EXIT_RUNTIME, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


def _failure(err: BaseException) -> tuple[int, str]:
    """The exit code and one-line message of an error escaping a command."""
    if isinstance(err, (ValueError, TypeError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
                        PermissionError, FileExistsError)):
        return EXIT_USAGE, str(err) or type(err).__name__
    if isinstance(err, MemoryError):
        return EXIT_RUNTIME, "out of memory; try smaller sizes (batch, length, examples)"
    if isinstance(err, (OSError, FloatingPointError)):
        return EXIT_RUNTIME, str(err) or type(err).__name__
    first = (str(err).strip().splitlines() or [""])[0]
    return EXIT_RUNTIME, f"unexpected {type(err).__name__}: {first} (rerun with --debug for the traceback)"


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``posenc … | head``): stop quietly, as ``cat`` does."""
    try:  # Python flushes stdout at exit; point it at /dev/null so that flush cannot raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_RUNTIME


#: The arguments that name a model (MODEL, CONFIG|MODEL, PATH): each takes a short name of ``posenc models``.
MODEL_ARGUMENTS = ("model", "source", "path")


def _model_names(args: argparse.Namespace) -> None:
    """Replace a model's short name (``smollm2``, ``gemma3``) by its file, where no such path exists."""
    from pathlib import Path

    from posenc.pretrained.catalogue import MODELS, resolve

    for name in MODEL_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value.lower() in MODELS and not Path(value).exists():
            setattr(args, name, str(resolve(value, say=lambda line: print(line, file=sys.stderr, flush=True))))


def split_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without its ``--debug`` flags (before or after the command; not after a ``--``), and whether
    there was one: ``posenc lab --debug`` and ``posenc --debug lab`` both show tracebacks."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    return kept, len(kept) < len(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``posenc`` command; return its exit code (usage errors 2, runtime failures 1).

    Errors print one line, ``posenc: error: …``, on stderr; ``--debug`` re-raises
    them with the traceback instead.
    """
    argv, debug = split_debug(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
    except Exception as err:  # noqa: BLE001 - loading the commands failed: the environment (POSENC_*) is bad
        if debug:
            raise
        code, message = _failure(err)
        print(f"posenc: error: {message}", file=sys.stderr)
        return code
    args = parser.parse_args(argv)  # a usage error exits 2 here (argparse's SystemExit), --help 0
    args.debug = debug
    from posenc.progress import set_quiet

    set_quiet(getattr(args, "quiet", False))  # stage lines and bars on stderr: off under --quiet
    try:
        _model_names(args)
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        if args.debug:
            raise
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("posenc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as err:  # noqa: BLE001 - the one place every error becomes a line and an exit code
        # (BaseException: a Rust panic inside tokenizers or safetensors is a pyo3 PanicException, not an Exception)
        if args.debug:
            raise
        code, message = _failure(err)
        print(f"posenc: error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
