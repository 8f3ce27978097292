"""The flags every ``posenc`` command shares, defined once.

A command adds the ones it needs and reads them back through the helpers
here, so the same thing has the same spelling and meaning everywhere:

==========================  =====================================================
flag                        meaning
==========================  =====================================================
``--position NAME``         a position scheme (registered name or alias, e.g.
                            ``nope`` → ``none``); checked against the registry
``--position-option K=V``   one option of that scheme, repeatable (``base=500000``,
                            ``pairing=interleaved``, ``short_factor=[1,2]``)
``--quiet``                 no progress bars or chatter
``--out DIR``               output folder; ``--out -`` writes no files
``--json FILE``             machine-readable results; ``--json -`` prints them
``--seed N``                seed of every random choice
``--threads N``             torch intra-op threads (default: torch's choice)
``--device cpu|cuda``       where tensors live
``--dtype NAME``            float32 | bfloat16 | float16
==========================  =====================================================

Example::

    p = sub.add_parser("demo")
    add_position(p, default="rope"); add_out(p, default="demo-out"); add_quiet(p)
    ...
    args = p.parse_args(["--position", "nope", "--position-option", "base=500000", "--out", "-"])
    args.position, position_options(args), out_dir(args)   # ('none', {'base': 500000}, None)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported only when a command asks for a dtype/device
    import torch

NO_FILES = "-"
#: Where a command whose result is a report folder writes it by default (``add_out``): runs/lab, runs/extend, …
OUT_RULE = "runs/COMMAND in the current folder"
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")


# -- position ---------------------------------------------------------------------
def position_name(text: str) -> str:
    """argparse type: the registered name for ``text`` (aliases resolved); unknown names are usage errors."""
    from posenc.positions import canonical

    try:
        return canonical(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def position_names(text: str) -> list[str]:
    """argparse type: a comma list of scheme names (or ``all``: every registered one), aliases resolved."""
    from posenc.positions import names

    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("give at least one position scheme name (or 'all')")
    if not all(items):
        raise argparse.ArgumentTypeError(f"--position={text!r} has an empty item; give a comma list like 'rope,alibi'")
    if items == ["all"]:
        return names()
    resolved = [position_name(t) for t in items]
    repeated = sorted({r for r in resolved if resolved.count(r) > 1})
    if repeated:  # after aliases: nope,none names one scheme twice
        raise argparse.ArgumentTypeError(f"--position={text!r} repeats {repeated} (aliases resolved); give each once")
    return resolved


def option_value(text: str) -> Any:
    """A ``--position-option`` value: JSON when it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def key_value(text: str) -> tuple[str, Any]:
    """argparse type for ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. base=500000), got {text!r}")
    return key.strip(), option_value(value.strip())


def add_position(parser: argparse.ArgumentParser, *, default: str | None = "sinusoidal", many: bool = False,
                 options: bool = True, help: str | None = None) -> None:
    """``--position NAME`` (or a comma list with ``many``) and, with ``options``, ``--position-option K=V``."""
    what = "comma list of position schemes, or 'all'" if many else "position scheme"
    parser.add_argument(
        "--position", default=default, type=position_names if many else position_name, metavar="NAME",
        help=help or f"{what}: a name from 'posenc schemes' or an alias (nope, absolute)"
                     + (f" (default: {default})" if default else ""))
    if options:
        parser.add_argument("--position-option", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                            help="an option of the position scheme, repeatable (e.g. base=500000)")


def key_values(pairs: list[tuple[str, Any]] | None, flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs of a repeatable ``flag`` as a dict; a key given twice is an error naming it."""
    options: dict[str, Any] = {}
    for key, value in pairs or []:
        if key in options:
            raise ValueError(f"{flag} {key} given twice ({options[key]!r} and {value!r}); give it once")
        options[key] = value
    return options


def position_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--position-option`` pairs as a dict; a key given twice is an error naming it."""
    return key_values(getattr(args, "position_option", None), "--position-option")


# -- output -------------------------------------------------------------------------
def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bars or progress messages")


def add_out(parser: argparse.ArgumentParser, *, default: str | None, help: str | None = None) -> None:
    """``--out DIR``; ``-`` means write no files. ``default=None``: no files unless asked.

    One rule for every command, stated in each ``--out`` help (``OUT_RULE``): a command whose result is a report
    folder (lab, lengthgen, extend, finetune grid, translate compare) writes it to ``runs/COMMAND`` under the
    current folder; a command whose result is printed (bench, inspect, finetune run and search) writes files
    only when ``--out`` is given; ``export``, whose folder is its result, requires ``--out``.
    """
    if default in (None, NO_FILES):
        shown = "default: none, no files; a command that prints its result writes files only with --out"
    else:
        shown = f"default: {default}; a command whose result is a report folder writes it to {OUT_RULE}"
    parser.add_argument("--out", default=default, metavar="DIR",
                        help=f"{help or 'output folder'} ({shown}; '-' writes no files)")


def out_dir(args: argparse.Namespace) -> Path | None:
    """The output folder, or None when the command must write no files (``--out -`` or no default)."""
    out = getattr(args, "out", None)
    return None if out in (None, "", NO_FILES) else Path(out)


#: The file that says which command wrote a results folder (``{"command": "extend", "version": …}``).
FOLDER_FILE = "posenc-folder.json"  # = posenc.checkpoint.FOLDER_FILE: the lock's cleanup knows it too
#: What a posenc results folder may hold besides that file: a folder without one (written before posenc
#: recorded its command, or cells copied together from shards) holding only these is taken as posenc's.
POSENC_NAMES = frozenset({".lock", "cells", "runs", "checkpoints", "pretrain", "figures", "reports", "latest"})
POSENC_SUFFIXES = (".json", ".md", ".html", ".png", ".svg", ".csv", ".tmp")


def add_force(parser: argparse.ArgumentParser, *, help: str | None = None) -> None:
    """``--force``: write into an --out folder another command wrote (replacing what it wrote) or that holds files
    posenc did not write."""
    parser.add_argument("--force", action="store_true",
                        help=help or "replace an --out folder another posenc command wrote, or write into one "
                                     "holding files posenc did not write")


def _posenc_name(name: str) -> bool:
    return (name in POSENC_NAMES or name.endswith(POSENC_SUFFIXES)
            or (name.startswith(("longrope-", ".")) and not name.startswith(".git")))


def folder_owner(folder: str | os.PathLike[str]) -> str | None:
    """The command recorded in ``folder``'s ``posenc-folder.json`` (None: no such file, or unreadable)."""
    path = Path(folder) / FOLDER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    command = data.get("command") if isinstance(data, dict) else None
    return command if isinstance(command, str) and command else None


def claim_folder(folder: str | os.PathLike[str], command: str, *, force: bool = False) -> None:
    """Make ``folder`` the results folder of ``posenc COMMAND``, or refuse it (call it holding the folder's lock).

    * no ``posenc-folder.json`` and nothing else (or only what posenc writes: a folder from before the file
      existed, cells copied together from shards): the file is written, naming ``command``;
    * written by ``command`` itself: taken as it is (a resume, a ``--report-only``);
    * written by another command: refused naming it, unless ``force`` — then what that command wrote (the
      folder's posenc files and folders) is removed first, so no report mixes the two;
    * holding files posenc did not write: refused naming some, unless ``force`` (they are left there).
    """
    import shutil

    from posenc import __version__
    from posenc.checkpoint import LOCK_FILE, atomic_write_text

    root = Path(folder)
    owner = folder_owner(root)
    marker = root / FOLDER_FILE
    if owner == command:
        return
    entries = sorted(p.name for p in root.iterdir() if p.name not in (LOCK_FILE, FOLDER_FILE)) if root.is_dir() else []
    if owner is not None or marker.exists():
        who = f"`posenc {owner}`" if owner else "an unknown posenc command (its posenc-folder.json is unreadable)"
        if not force:
            raise ValueError(f"{root} was written by {who}; give another --out, or --force to replace it")
        gone = [name for name in entries if _posenc_name(name)]
        for name in gone:
            target = root / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        print(f"posenc: --force: {root} was written by {who}; replaced"
              + (f" (removed {', '.join(gone[:6])}{' …' if len(gone) > 6 else ''})" if gone else ""),
              file=sys.stderr)
    else:
        unknown = [name for name in entries if not _posenc_name(name)]
        if unknown and not force:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise ValueError(f"{root} holds files posenc did not write ({shown}); give another --out (a new or "
                             "empty folder), or --force to write into it")
    atomic_write_text(marker, json.dumps({"command": command, "version": __version__}) + "\n")


def hold_out(folder: str | os.PathLike[str] | None, *, shards: str | None = None, command: str | None = None,
             force: bool = False) -> AbstractContextManager[None]:
    """Hold ``posenc.checkpoint.run_lock`` on a command's output folder while the command runs.

    A second posenc run into the same folder is refused at once, naming the first (its pid and
    command line), instead of writing the same cells and report files. ``None`` (``--out -``, or a
    rank of a ``torchrun`` that writes nothing) holds nothing. Call it after ``check_output``: the lock
    creates the folder. The lock file goes when the command ends; one left by a process that died
    (``kill -9``) is taken over, saying so on stderr.

    Args:
        shards: for a command whose grid runs in shards (``"lengthgen"``, ``"extend MODEL"``): the
            refusal also gives the route for shards at the same time (one folder each, then
            ``--report-only``).
        command: the folder is this command's results folder (``claim_folder``): recorded in
            ``posenc-folder.json`` on first use; a folder another command wrote, or one holding files posenc
            did not write, is refused unless ``force``.
    """
    if folder is None:
        return nullcontext()
    from posenc.checkpoint import run_lock

    fix = "wait for it to finish, or give another folder"
    if shards:
        fix += (f"; shards that run at the same time need one --out each: when they are done, copy their cells/ "
                f"folders into one and run `posenc {shards} --report-only --out DIR`")
    lock = run_lock(folder, what="--out folder", fix=fix)
    if command is None:
        return lock
    return _held_and_claimed(lock, folder, command, force)


@contextmanager
def _held_and_claimed(lock: AbstractContextManager[None], folder: str | os.PathLike[str], command: str,
                      force: bool) -> Iterator[None]:
    with lock:
        claim_folder(folder, command, force=force)
        yield


def add_json(parser: argparse.ArgumentParser, *, help: str | None = None) -> None:
    parser.add_argument("--json", default=None, metavar="FILE",
                        help=help or "write the results as JSON to FILE ('-': print them on stdout)")


def json_to_stdout(args: argparse.Namespace) -> bool:
    """True when ``--json -`` asked for JSON on stdout (so other output goes to stderr)."""
    return getattr(args, "json", None) == NO_FILES


def write_json(args: argparse.Namespace, data: Any, *, indent: int | None = 1) -> Path | None:
    """Write ``data`` where ``--json`` says: stdout for ``-``, else atomically to the file; None if not asked."""
    target = getattr(args, "json", None)
    if target is None:
        return None
    from posenc.validation import dumps

    text = dumps(data, indent=indent)  # strict JSON: a non-finite number is written as null
    if target == NO_FILES:
        sys.stdout.write(text + "\n")
        return None
    from posenc.checkpoint import atomic_write_text

    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text + "\n")
    return path


# -- run settings -------------------------------------------------------------------
def add_seed(parser: argparse.ArgumentParser, *, default: int = 0, help: str | None = None) -> None:
    from posenc.validation import seed_arg

    parser.add_argument("--seed", type=seed_arg, default=default, metavar="N",
                        help=f"{help or 'seed of every random choice'} (default {default})")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_threads(parser: argparse.ArgumentParser, *, help: str | None = None) -> None:
    parser.add_argument("--threads", type=positive_int, default=None, metavar="N",
                        help=help or "torch intra-op threads (default: torch's choice)")


def apply_threads(args: argparse.Namespace) -> None:
    """``torch.set_num_threads(--threads)`` when given."""
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def add_device(parser: argparse.ArgumentParser, *, default: str = "cpu") -> None:
    parser.add_argument("--device", choices=DEVICES, default=default, help=f"where to run (default {default})")


def device_of(args: argparse.Namespace) -> "torch.device":
    """The ``--device``; asking for CUDA without a GPU is an error naming the fix."""
    import torch

    name = getattr(args, "device", "cpu") or "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here; use --device cpu")
    return torch.device(name)


def add_dtype(parser: argparse.ArgumentParser, *, default: str = "float32") -> None:
    parser.add_argument("--dtype", choices=DTYPES, default=default,
                        help=f"parameter and activation dtype (default {default})")


def dtype_of(args: argparse.Namespace) -> "torch.dtype":
    import torch

    return getattr(torch, getattr(args, "dtype", "float32") or "float32")


# -- help -----------------------------------------------------------------------------------------------
def plain_text(text: str) -> str:
    """``text`` without reStructuredText markup: ``x``, :func:`x` and `x` become x, ``Example::`` ends in one
    colon."""
    import re

    text = re.sub(r":[a-z]+:`~?([^`]*)`", r"\1", text)
    text = re.sub(r"``(.*?)``", r"\1", text, flags=re.S)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.M)


def command_help(doc: str | None = None, *, description: str | None = None,
                 examples: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """``add_parser`` keywords for a command's help: a plain-text description and an ``examples:`` epilog.

    ``doc`` (a module docstring, written for Sphinx) gives both: its prose, without markup, is the description
    and its indented ``posenc …`` lines (with their ``\\`` continuations and ``#`` comment lines) are the
    examples. ``description`` replaces the prose; ``examples`` come first in the epilog.
    """
    prose: list[str] = []
    found: list[str] = []
    in_example = False
    for line in (doc or "").strip("\n").splitlines():  # a module docstring: no common indent to remove
        stripped = line.strip()
        indented = line.startswith(" ")
        if indented and (stripped.startswith(("posenc ", "torchrun ")) or (in_example and (
                stripped.startswith("#") or found and found[-1].endswith("\\")))):
            if not in_example:  # "… exports as it was found:" now points below
                last = next((i for i in range(len(prose) - 1, -1, -1) if prose[i].strip()), None)
                if last is not None and prose[last].rstrip().endswith(":"):
                    prose[last] = prose[last].rstrip().rstrip(":") + " (see the examples below)."
            found.append(stripped if not stripped.startswith("-") else "    " + stripped)
            in_example = True
            continue
        in_example = in_example and not stripped
        if stripped in ("Example:", "Example::", "Examples:", "Examples::"):
            continue
        prose.append(line)
    text = plain_text("\n".join(prose)).strip()
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    lines = [*examples, *(e for e in found if e not in examples)]
    epilog = "examples:\n" + "\n".join("  " + plain_text(e) for e in lines) if lines else None
    out: dict[str, Any] = {"epilog": epilog, "formatter_class": argparse.RawDescriptionHelpFormatter}
    if description is not None or doc is not None:  # else the caller gives description= itself
        out["description"] = plain_text(description) if description is not None else text
    return out
