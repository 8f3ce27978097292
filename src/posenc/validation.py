"""Checks at posenc's boundaries: option values, comma lists, output paths, input files, memory, JSON.

Every check raises ``ValueError`` (``TypeError`` for a value of the wrong
kind) with a message that names the value and says what to do, so a command
can print it as one line and exit 2. They run where values enter posenc —
scheme and model constructors, command-line parsing, file reading — never
inside a forward pass (no data-dependent checks on the hot path).

>>> from posenc.validation import number, parse_list
>>> number(10000.0, "base", above=1)
10000.0
>>> parse_list("copy,reverse", "--task")
['copy', 'reverse']
>>> number(float("nan"), "base", above=1)
Traceback (most recent call last):
...
ValueError: base=nan must be a finite number > 1
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Seeds torch, Python and NumPy all accept: 0 … 2⁶³ − 1 (torch.manual_seed's range).
SEED_MAX = 2**63 - 1
#: Share of physical memory one posenc operation may plan to use (override: POSENC_MEMORY_BUDGET in bytes).
MEMORY_SHARE = 0.5

# -- floating-point ranges (the bounds of scheme options are derived from these) ----------------------------
#: float32's largest finite value (``torch.finfo(torch.float32).max``): activations, logits, parameters.
F32_MAX = 3.4028234663852886e38
#: float32's smallest normal value: a positive option below it becomes 0 (or a denormal) when cast.
F32_TINY = 1.1754943508222875e-38
#: float32's machine epsilon, 2⁻²³: relative changes smaller than this vanish next to 1.
F32_EPS = 2.0**-23
#: Integers float32 holds exactly: 0 … 2²⁴ (positions cast to float32 beyond it are no longer themselves).
F32_EXACT_INT = 2**24
#: float64's largest finite value: angles and frequencies are formed in float64.
F64_MAX = sys.float_info.max
#: The largest position posenc accepts (positions are int64).
POSITION_MAX = 2**63 - 1
#: The largest |z| of a standard normal draw: Box–Muller from 53-bit uniforms gives at most √(2·53·ln 2) ≈ 8.57.
NORMAL_DRAW_MAX = math.sqrt(2 * 53 * math.log(2))
#: Model sizes no real checkpoint reaches; past them a value is a typo or an attack, refused before any
#: allocation. One set for every reader: an HF config.json (``posenc.families.hf_config``), a GGUF file's
#: metadata (``posenc.formats.gguf_header``) and the model configs (``DecoderConfig``, ``Seq2SeqConfig``).
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20  # hidden, head and feed-forward widths
MAX_HEADS = 1 << 14
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 40
#: The largest population, mutations, crossovers, samples or generations of a LongRoPE search (the paper: 64, 16,
#: 16, 5, 40): every individual is scored by forward passes, so a million would run for ever.
MAX_SEARCH = 4096


# -- numbers --------------------------------------------------------------------------------------------
def number(
    value: Any,
    name: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    integer: bool = False,
    fix: str = "",
) -> Any:
    """``value`` if it is a finite real number in range, else an error naming it.

    Args:
        value: the number to check (``bool`` is refused: ``True`` is not a width).
        name: how the user spelled it (``"base"``, ``"--lr"``), used in the message.
        minimum, maximum: inclusive bounds; ``above``, ``below``: exclusive bounds.
        integer: require an integer value (an ``int``, or a float such as ``4.0``; returned as ``int``).
        fix: what to do instead, appended to the message.

    Returns:
        ``value`` as ``int`` (``integer=True``) or ``float``.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, ±inf, not an integer when one is needed, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    bounds = [f"{sign} {bound if isinstance(bound, int) else format(bound, 'g')}" for sign, bound in ((">=", minimum), (">", above), ("<=", maximum), ("<", below))
              if bound is not None]
    wanted = ("an integer" if integer else "a finite number") + (" " + " and ".join(bounds) if bounds else "")
    if integer and bounds == [">= 1"]:
        wanted = "a positive integer"
    tail = f"; {fix}" if fix else ""
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int beyond float64 (10**400): no option takes one
        raise ValueError(f"{name}={value!r} must be {wanted}{tail}") from None
    if (not finite or (integer and int(value) != value)
            or (minimum is not None and value < minimum) or (above is not None and not value > above)
            or (maximum is not None and value > maximum) or (below is not None and not value < below)):
        raise ValueError(f"{name}={value!r} must be {wanted}{tail}")
    return int(value) if integer else float(value)


def at_most(value: float, name: str, bound: float, *, why: str, fix: str = "") -> float:
    """``value`` if ``|value| <= bound``, else an error saying the bound and ``why`` it is one.

    For the scheme options whose size decides whether a float32 (or float64) computation stays
    finite: the caller derives ``bound`` from the range of the dtype and says how in ``why``.
    ``value`` must already be a finite number (see :func:`number`).
    """
    if abs(value) > bound:
        tail = f"; {fix}" if fix else ""
        raise ValueError(f"{name}={value!r} must be at most {bound:.3g}{' in magnitude' if value < 0 else ''}: "
                         f"{why}{tail}")
    return value


def float32_squares(value: float, name: str, *, width: int, reach: float = 1.0, what: str, fix: str = "") -> float:
    """Refuse a scale whose entries would overflow float32 once squared and summed over ``width`` coordinates.

    Attention logits (q·k) and normalisations (Σx²) sum ``width`` products of two entries; entries of
    magnitude up to ``reach·|value|`` keep every such sum finite when ``width·(reach·value)² <= F32_MAX``,
    i.e. ``|value| <= √(F32_MAX/width)/reach``.
    """
    bound = math.sqrt(F32_MAX / width) / reach
    reach_text = f"{reach:.3g}·{name}" if reach != 1 else name
    return at_most(value, name, bound, fix=fix,
                   why=f"{what} reach {reach_text}, and float32 attention and normalisation sum {width} products "
                       f"of two such entries, a sum that overflows float32 (max {F32_MAX:.3g}) beyond "
                       f"√({F32_MAX:.3g}/{width}){'/' + format(reach, '.3g') if reach != 1 else ''}")


def positive_int(value: Any, name: str, *, fix: str = "") -> int:
    """``value`` as an ``int`` >= 1 (refuses 0, negatives, NaN, non-integers)."""
    return number(value, name, minimum=1, integer=True, fix=fix)


def seed(value: Any, name: str = "seed") -> int:
    """A seed every RNG here accepts: an integer in [0, 2⁶³ − 1]."""
    return number(value, name, minimum=0, maximum=SEED_MAX, integer=True,
                  fix="use a seed between 0 and 2**63 - 1")


# -- argparse types ---------------------------------------------------------------------------------------
def arg_type(check: Callable[[Any, str], T], parse: Callable[[str], Any] = int, name: str = "value",
             ) -> Callable[[str], T]:
    """An argparse ``type=`` that parses with ``parse`` and validates with ``check`` (usage error on failure)."""

    def convert(text: str) -> T:
        try:
            return check(parse(text), name)
        except (TypeError, ValueError) as err:
            message = str(err).removeprefix(f"{name}=") if "=" in str(err) else f"{text!r} is not a number"
            raise argparse.ArgumentTypeError(message) from None

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in its messages
    return convert


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer >= ``low`` (and <= ``high`` when given)."""
    return arg_type(lambda v, n: number(v, "value", minimum=low, maximum=high, integer=True), int)


def finite_float(*, above: float | None = None, minimum: float | None = None,
                 below: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    """argparse type: a finite float in the given range."""
    return arg_type(lambda v, n: number(v, "value", above=above, minimum=minimum, below=below, maximum=maximum),
                    float)


def seed_arg(text: str) -> int:
    """argparse type of ``--seed``: an integer in [0, 2⁶³ − 1]."""
    return arg_type(seed, int, "seed")(text)


seed_arg.__name__ = "int"


# -- comma lists ------------------------------------------------------------------------------------------
def parse_list(text: str | None, name: str, *, convert: Callable[[str], T] = str,  # type: ignore[assignment]
               allow_duplicates: bool = False) -> list[T]:
    """The items of a comma-separated option, refusing empty items and duplicates.

    ``"a,,b"``, ``","``, ``""`` and ``"a,a"`` are refused with a message naming
    the option: an empty list that silently runs nothing (or everything), or a
    cell that runs twice, is never what was meant.

    Args:
        text: the option's value.
        name: the option as the user spelled it, e.g. ``"--seeds"``.
        convert: applied to each stripped item (``int`` for seeds); its ValueError names the item.
        allow_duplicates: keep repeated items instead of refusing them.
    """
    if text is None or not text.strip():
        raise ValueError(f"{name} is empty; give one or more comma-separated values")
    items = [part.strip() for part in text.split(",")]
    if any(not item for item in items):
        raise ValueError(f"{name}={text!r} has an empty item; write the values separated by single commas")
    out: list[T] = []
    for item in items:
        try:
            out.append(convert(item))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name}: {item!r} is not a valid value ({err})") from None
    if not allow_duplicates:
        seen: set[Any] = set()
        repeated = [item for item in out if item in seen or seen.add(item)]  # type: ignore[func-returns-value]
        if repeated:
            raise ValueError(f"{name}={text!r} repeats {sorted(set(map(str, repeated)))}; give each value once")
    return out


# -- unknown names ----------------------------------------------------------------------------------------
def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``" (did you mean 'rope'?)"`` for the choice closest to a mistyped ``name`` (difflib), or ``""``.

    Appended to every "unknown NAME" message, before the valid list: ``rope-yarm`` → ``rope-yarn``.
    Case is ignored; the closest name is offered, with up to two more only where they are as close.
    """
    import difflib

    if not isinstance(name, str) or not name:
        return ""
    lowered = {c.lower(): c for c in dict.fromkeys(choices)}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)
    if not close:
        return ""
    score = [difflib.SequenceMatcher(None, name.lower(), c).ratio() for c in close]
    close = [c for c, s in zip(close, score) if s >= score[0] - 0.02]
    return " (did you mean " + " or ".join(repr(lowered[c]) for c in close) + "?)"


# -- output paths -----------------------------------------------------------------------------------------
def check_output(path: str | os.PathLike[str] | None, name: str, *, kind: str = "file") -> Path | None:
    """Refuse, before any work, an output path that could not be written afterwards.

    ``kind="file"``: the path must not be a directory, and its parent must be (or
    become) a directory. ``kind="dir"``: the path must not be a file. In both
    cases no existing file may sit where a parent directory is needed, and the
    nearest existing parent must be writable. Nothing is created. ``None`` and
    ``"-"`` (stdout / no files) pass unchanged.

    Returns:
        The path (``None`` for ``None``/``"-"``).
    """
    if path is None or str(path) == "-":
        return None
    p = Path(path)
    if kind == "file" and p.is_dir():
        raise ValueError(f"{name} {p} is a directory; give a file name such as {p / 'results.json'}")
    if kind == "dir" and p.exists() and not p.is_dir():
        raise ValueError(f"{name} {p} is a file, not a directory; give a new or existing directory")
    parent = p.parent if kind == "file" else p
    probe = parent
    while not probe.exists():
        if probe.is_symlink():
            raise ValueError(f"{name} {p}: {probe} is a broken symbolic link; remove it or choose another path")
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{name} {p}: {probe} is a file, so {parent} cannot be a directory; "
                         "choose a path under a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {p}: directory {probe} is not writable; choose a path you can write to")
    if kind == "file" and p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{name} {p} exists and is not writable; choose another file")
    return p


# -- input files ------------------------------------------------------------------------------------------
def regular_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` if it is a regular file; FIFOs, devices, sockets and symlink loops are refused.

    Reading a FIFO blocks until someone writes to it, and a device can be
    endless: neither is a checkpoint or a tokenizer.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        if p.is_symlink():
            raise FileNotFoundError(f"{p}: a broken symbolic link; point it at an existing {what}") from None
        raise FileNotFoundError(f"{p}: no such {what}") from None
    except OSError as err:  # ELOOP: a symlink loop; ENAMETOOLONG; EACCES
        raise ValueError(f"{p}: cannot be opened ({err.strerror}); give the path of a regular {what}") from None
    if not stat.S_ISREG(mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a regular file")
        raise ValueError(f"{p} is {kind}; posenc reads only regular files — give the path of the {what}")
    return p


# -- memory -------------------------------------------------------------------------------------------------
def memory_budget() -> int:
    """Bytes one operation may plan to allocate: ``POSENC_MEMORY_BUDGET`` or half the physical memory."""
    env = os.environ.get("POSENC_MEMORY_BUDGET")
    if env:
        return positive_int(int(float(env)), "POSENC_MEMORY_BUDGET")
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        total = 8 << 30
    return int(total * MEMORY_SHARE)


def check_memory(nbytes: float, what: str, *, fix: str) -> None:
    """Refuse work whose planned allocation ``nbytes`` exceeds :func:`memory_budget`, naming the figure."""
    budget = memory_budget()
    if nbytes > budget:
        source = ("POSENC_MEMORY_BUDGET" if os.environ.get("POSENC_MEMORY_BUDGET")
                  else "half the machine's memory; set POSENC_MEMORY_BUDGET in bytes to change it")
        raise ValueError(f"{what} needs about {format_bytes(nbytes)}, more than the memory budget of "
                         f"{format_bytes(budget)} ({source}); {fix}")


def check_table(rows: int, width: int, what: str, *, option: str) -> None:
    """Refuse a learned table (rows × width) whose training footprint exceeds the memory budget.

    Counts float32 weights, gradients and AdamW's two moments (16 bytes per entry),
    checked when the table is built — before anything is allocated.
    """
    check_memory(16.0 * rows * width, f"a {rows} × {width} learned {what} (weights, gradients, AdamW moments)",
                 fix=f"lower {option}")


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


# -- strict JSON --------------------------------------------------------------------------------------------
def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (JSON ``null``), recursively.

    Standard JSON has no NaN or Infinity; Python writes them as bare tokens
    that strict parsers (``jq``, JavaScript's ``JSON.parse``, Go, Rust) reject.
    A NaN measure means "undefined here" and becomes ``null``.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`json_safe` (obj) with ``allow_nan=False``: output strict parsers accept."""
    return json.dumps(json_safe(obj), allow_nan=False, **kwargs)


#: The largest JSON file posenc reads from a results folder or an option (cells, states, settings): 256 MiB.
JSON_MAX_BYTES = 256 << 20
#: The deepest nesting of arrays and objects posenc reads (its own files nest a handful of levels).
JSON_MAX_DEPTH = 256
_JSON_STRING = None  # compiled on first use


class UnreadableFile(ValueError):
    """A file posenc was to read is not what it writes: not regular, too large, not UTF-8, not JSON, or not
    the expected shape. ``path`` and ``reason`` say which and why; the message also says the fix."""

    def __init__(self, path: Path, reason: str, fix: str = "") -> None:
        self.path, self.reason, self.fix = path, reason, fix
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))


def _json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` outside strings (linear; no recursion)."""
    import re

    global _JSON_STRING
    if _JSON_STRING is None:
        _JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
    brackets = re.sub(r"[^\[\]{}]+", "", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def read_text_file(path: str | os.PathLike[str], what: str = "file", *, fix: str = "",
                   max_bytes: int = JSON_MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``, else :class:`UnreadableFile` naming it.

    A FIFO, device or directory is refused before it is opened (it would block or never end), a file over
    the bound before it is read, and bytes that are not UTF-8 by their offset.

    Raises:
        FileNotFoundError: no such file.
        UnreadableFile: (a ``ValueError``) anything else.
    """
    p = Path(path)
    try:
        regular_file(p, what)
    except FileNotFoundError:
        raise
    except ValueError as err:  # "PATH is a FIFO (named pipe); posenc reads only regular files — …"
        reason = str(err).removeprefix(str(p)).lstrip(": ").split(";")[0]
        raise UnreadableFile(p, f"{reason}, not a regular file", fix) from None
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise UnreadableFile(p, f"{format_bytes(size)}, larger than the {format_bytes(max_bytes)} a {what} "
                                    "may be", fix)
        with open(p, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as err:
        raise UnreadableFile(p, f"cannot be read ({err.strerror or err})", fix) from None
    if len(raw) > max_bytes:  # grew since the stat
        raise UnreadableFile(p, f"larger than the {format_bytes(max_bytes)} a {what} may be", fix)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnreadableFile(p, f"not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r})", fix) from None


def read_json(path: str | os.PathLike[str], what: str = "JSON file", *, fix: str = "",
              expect: type | tuple[type, ...] | None = dict, max_bytes: int = JSON_MAX_BYTES,
              max_depth: int = JSON_MAX_DEPTH) -> Any:
    """The one reader of every JSON file posenc keeps or is given (results-folder cells and states, search
    state, ``--longrope`` and ``--setting`` files): a regular file (:func:`regular_file`) of at most
    ``max_bytes``, UTF-8, JSON nested at most ``max_depth`` deep, whose top
    level is an ``expect`` (a dict by default; None: anything).

    Args:
        path: the file.
        what: what it is, in the message ("cell", "search state", "--longrope file").
        fix: what to do about a bad one, appended to the message ("delete it to recompute the cell").

    Raises:
        FileNotFoundError: no such file.
        UnreadableFile: (a ``ValueError``) naming the file, the reason and ``fix``.
    """
    p = Path(path)
    text = read_text_file(p, what, fix=fix, max_bytes=max_bytes)
    depth = _json_depth(text)
    if depth > max_depth:
        raise UnreadableFile(p, f"JSON nested {depth} deep, deeper than the {max_depth} a {what} may be", fix)
    try:
        data = json.loads(text)
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise UnreadableFile(p, "JSON nested too deep", fix) from None
    except ValueError as err:
        raise UnreadableFile(p, f"not a valid JSON {what} ({err})", fix) from None
    if expect is not None and not isinstance(data, expect):
        names = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        kinds = {"dict": "an object", "list": "an array", "str": "a string", "int": "a number", "float": "a number"}
        wanted = " or ".join(kinds.get(n, n) for n in names.split(" or "))
        raise UnreadableFile(p, f"holds {kinds.get(type(data).__name__, type(data).__name__)} where a {what} is "
                                f"{wanted}" if data is not None else f"holds null where a {what} is {wanted}", fix)
    return data


# -- model inputs and configs ------------------------------------------------------------------------------
def check_model_config(cfg: Any) -> None:
    """Refuse a ModelConfig whose sizes are zero, negative, non-integer or non-finite.

    ``None`` keeps meaning "the default" (``ffn_dim`` 4·dim, ``num_decoder_layers``
    ``num_layers``, ``tgt_vocab_size`` ``vocab_size``); 0 is refused instead of
    silently taken for the default, and a model with no layers is refused.
    """
    positive_int(cfg.vocab_size, "vocab_size")
    positive_int(cfg.dim, "dim")
    positive_int(cfg.num_heads, "num_heads")
    positive_int(cfg.num_layers, "num_layers", fix="a model needs at least one layer")
    for name in ("tgt_vocab_size", "num_decoder_layers", "ffn_dim"):
        value = getattr(cfg, name)
        if value is not None:
            positive_int(value, name, fix="leave it unset (None) for the default")
    number(cfg.dropout, "dropout", minimum=0, below=1)
    if cfg.dim % cfg.num_heads:
        raise ValueError(f"dim={cfg.dim} must be a multiple of num_heads={cfg.num_heads}")
    if not isinstance(cfg.position_options, dict):
        raise TypeError(f"position_options must be a dict of the scheme's options, got {cfg.position_options!r}")
    ffn = cfg.ffn_dim or 4 * cfg.dim
    vocab = cfg.vocab_size + (cfg.tgt_vocab_size or cfg.vocab_size)
    layers = cfg.num_layers + (cfg.num_decoder_layers or cfg.num_layers)
    parameters = vocab * cfg.dim * 2 + layers * (8 * cfg.dim * cfg.dim + 2 * cfg.dim * ffn)  # upper bound
    check_memory(16.0 * parameters, f"a model of about {parameters:,} parameters (weights, gradients, AdamW "
                 "moments)", fix="lower dim, ffn_dim, num_layers or the vocabulary")


def check_ids(ids: Any, name: str = "ids") -> Any:
    """Token ids must be a 2-D integer tensor (B, T) with T >= 1 (a shape check, no data read).

    Returns:
        ``ids``, widened to int64 when held in a narrower integer dtype (exact).
    """
    import torch

    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, T), got {type(ids).__name__}; "
                        "wrap it: torch.tensor([ids])")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(ids.shape)}"
                         + ("; add a batch dimension: ids[None]" if ids.dim() == 1 else ""))
    if ids.shape[1] == 0:
        raise ValueError(f"{name} has shape {tuple(ids.shape)}: at least one token per row is needed")
    # uint8/int16/... hold the same ids exactly; embedding lookups take int64 (or int32)
    return ids if ids.dtype in (torch.long, torch.int32) else ids.long()


def check_batch_positions(positions: Any, batch: int, name: str = "positions") -> None:
    """Positions of shape (B, T) must have B equal to the ids' batch (or 1, broadcast)."""
    if positions is not None and getattr(positions, "dim", lambda: 0)() == 2 and positions.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch {positions.shape[0]} but the ids have batch {batch}; "
                         "give (T,) positions, (1, T), or one row per sequence")


def check_cache(cache: Any, layers: int) -> None:
    """A KV cache must hold one entry per layer (make it with ``model.new_cache()``)."""
    if cache is not None and len(cache) != layers:
        raise ValueError(f"the cache has {len(cache)} layer entries but the model has {layers} layers; "
                         "make it with model.new_cache()")


__all__ = [
    "SEED_MAX",
    "arg_type",
    "check_batch_positions",
    "check_cache",
    "check_ids",
    "check_memory",
    "check_model_config",
    "check_output",
    "check_table",
    "did_you_mean",
    "JSON_MAX_BYTES",
    "JSON_MAX_DEPTH",
    "UnreadableFile",
    "read_json",
    "read_text_file",
    "F32_EPS",
    "F32_EXACT_INT",
    "F32_MAX",
    "F32_TINY",
    "F64_MAX",
    "NORMAL_DRAW_MAX",
    "POSITION_MAX",
    "at_most",
    "dumps",
    "float32_squares",
    "finite_float",
    "format_bytes",
    "int_at_least",
    "json_safe",
    "memory_budget",
    "number",
    "parse_list",
    "positive_int",
    "regular_file",
    "seed",
    "seed_arg",
]
