"""Long real documents that install offline, for loss-by-position and passkey filler.

Three sources, each a named ``Document`` of plain English text:

* ``bible`` — books of the World English Bible (public domain) read from
  Debian's SWORD module ``engWEB2015eb`` (package ``sword-text-web``;
  ``scripts/ensure-sword.sh`` installs it) with posenc's own zText reader.
  Genesis alone is ~50k tokens for a Llama-style BPE tokenizer.
* ``licenses`` — the long licence texts every Debian system ships in
  ``/usr/share/common-licenses`` (GPL-3, GFDL-1.3, GPL-2, LGPL-2.1, MPL-2.0,
  Apache-2.0): legal prose, a different register from scripture.
* any file path — UTF-8 text.

Example::

    doc = load_document("bible")          # Genesis, Exodus, … joined by chapter
    ids = doc_tokens(doc, tokenizer, 16384)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIBLE_MODULE = "engWEB2015eb"
BIBLE_BOOKS = ("Gen", "Exod", "Lev", "Num")
LICENSE_ROOT = Path("/usr/share/common-licenses")
LICENSES = ("GPL-3", "GFDL-1.3", "GPL-2", "LGPL-2.1", "MPL-2.0", "Apache-2.0")
SOURCES = ("bible", "licenses")


@dataclass(frozen=True)
class Document:
    """A named plain-text document and where it came from (said next to every number measured on it)."""

    name: str
    text: str
    source: str


def bible_text(books: Sequence[str] = BIBLE_BOOKS, *, module: str = BIBLE_MODULE) -> str:
    """The given books of a SWORD Bible module, one chapter per line, verses joined by spaces."""
    from posenc.translation.sword import ZTextModule

    try:
        web = ZTextModule.open(module)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{err}; install the World English Bible with scripts/ensure-sword.sh (Debian package "
            f"sword-text-web) or pass --text FILE") from None
    lines: list[str] = []
    chapter: tuple[str, int] | None = None
    for ref, verse in web.verses(books=set(books)):
        if (ref.book, ref.chapter) != chapter:
            chapter = (ref.book, ref.chapter)
            lines.append("")
        lines[-1] = f"{lines[-1]} {verse}".strip()
    if not lines:
        raise ValueError(f"module {module!r} has no verses for books {list(books)}")
    return "\n".join(lines)


def licenses_text(names: Sequence[str] = LICENSES, *, root: Path = LICENSE_ROOT) -> str:
    """The named licence files, concatenated in order with a blank line between them."""
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise FileNotFoundError(f"licence text(s) {missing} not found in {root}; pass --text FILE instead")
    return "\n\n".join((root / n).read_text(encoding="utf-8").strip() for n in names)


def load_document(spec: str, *, flag: str = "--text", names: Sequence[str] = ("bible", "licenses")) -> Document:
    """``bible``, ``licenses``, or a path to a UTF-8 text file.

    Args:
        flag: the option that gave ``spec`` (``--train-text`` for fine-tuning), named in every message.
        names: the built-in texts that option takes, listed when ``spec`` is none of them nor a file.

    Raises:
        FileNotFoundError: nothing at ``spec``.
        ValueError: a FIFO, directory or device (said which — never read), bytes that are not UTF-8, an empty file.
    """
    if spec == "bible":
        return Document("bible", bible_text(), f"World English Bible ({BIBLE_MODULE}): {', '.join(BIBLE_BOOKS)}")
    if spec == "licenses":
        return Document("licenses", licenses_text(), f"{LICENSE_ROOT}: {', '.join(LICENSES)}")
    from posenc.validation import regular_file

    path = Path(spec)
    builtin = ", ".join(repr(n) for n in names)
    try:
        regular_file(path, "text file")
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {spec!r}: not {builtin} or an existing file") from None
    except ValueError as err:  # "PATH is a FIFO (named pipe); posenc reads only regular files — …"
        kind = str(err).removeprefix(str(path)).strip(" :").split(";")[0]
        raise ValueError(f"{flag} {spec!r} {kind}, not a text file; "
                         f"give {builtin} or a regular UTF-8 text file") from None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{flag} {spec!r}: not UTF-8 text (byte {err.start}); give a UTF-8 text file") from None
    if not text.strip():
        raise ValueError(f"{flag} {spec!r} is empty")
    return Document(path.stem, text, str(path))


def bos_prefix(tokenizer: Any) -> list[int]:
    """[BOS] when the tokenizer's model expects one at the start of a sequence (its ``add_bos``), else []."""
    bos_id = getattr(tokenizer, "bos_id", None)
    return [bos_id] if getattr(tokenizer, "add_bos", False) and bos_id is not None else []


def encode_plain(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` alone, without special tokens (pieces are joined by the caller)."""
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # a tokenizer whose encode adds nothing takes no such flag
        return list(tokenizer.encode(text))


def doc_tokens(doc: Document, tokenizer: Any, length: int) -> list[int]:
    """The first ``length`` token ids of ``doc`` (after BOS when the model expects one).

    Raises:
        ValueError: the document is shorter than ``length`` tokens.
    """
    ids = bos_prefix(tokenizer) + encode_plain(tokenizer, doc.text)
    if len(ids) < length:
        raise ValueError(f"document {doc.name!r} has {len(ids)} tokens, fewer than the {length} asked for; "
                         "choose a shorter --lengths/--max-tokens or a longer --text")
    return ids[:length]
