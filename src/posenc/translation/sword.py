"""A standard-library reader for SWORD "zText" Bible modules.

A zText module (CrossWire's compressed Bible format, as shipped by Debian's
``sword-text-*`` packages) is a ``mods.d/<name>.conf`` file plus, for each
testament (``ot``, ``nt``), three files:

* ``.bzs`` — block index: per block ``<uint32 offset, uint32 compressed size,
  uint32 uncompressed size>`` (little-endian) into ``.bzz``;
* ``.bzz`` — the blocks, each compressed on its own (``CompressType=ZIP`` is zlib);
* ``.bzv`` — verse index: per *slot* ``<uint32 block, uint32 offset, uint16 size>``
  into the uncompressed block.

Slots follow the module's versification (``Versification=`` in the conf):
slot 0 is empty, slot 1 the testament heading, then for each book an intro
slot, and for each chapter a heading slot followed by one slot per verse
(``posenc.translation.versification``). The text is OSIS XML fragments;
``strip_osis`` turns one into plain text without notes or headings.

Verified against the real Debian modules (``tests/translation/test_sword.py``):
the slot counts equal the versification tables exactly, and every
``<chapter sID="Book.N">`` marker sits in the slot the table predicts.

Example::

    web = ZTextModule.open("engWEB2015eb")
    dict(web.verses(books={"John"}))[Ref("John", 3, 16)]
"""

from __future__ import annotations

import bz2
import html
import lzma
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from posenc.translation.versification import Ref, Versification

DEFAULT_ROOTS = ("/usr/share/sword", "~/.sword")

_DECOMPRESS = {"ZIP": zlib.decompress, "BZIP2": bz2.decompress, "XZ": lzma.decompress}


def sword_roots() -> list[Path]:
    """Where modules are looked for: ``$SWORD_PATH`` (colon-separated) first, then the usual places."""
    env = [p for p in os.environ.get("SWORD_PATH", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in (*env, *DEFAULT_ROOTS)]


def read_conf(path: str | Path) -> tuple[str, dict[str, list[str]]]:
    """Parse a SWORD ``.conf``: returns (module name, {key: [values…]}); repeated keys keep every value.

    Lines ending in a backslash continue on the next line; ``#`` starts a comment line.
    """
    name: str | None = None
    entries: dict[str, list[str]] = {}
    pending = ""
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8") if _is_utf8(raw) else raw.decode("latin-1")
    for line in text.splitlines():
        line = pending + line
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + "\n"
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("[") and stripped.endswith("]") and name is None:
            name = stripped[1:-1]
        elif "=" in stripped:
            key, value = stripped.split("=", 1)
            entries.setdefault(key.strip(), []).append(value.strip())
    if name is None:
        raise ValueError(f"{path}: no [ModuleName] section header; not a SWORD module conf")
    return name, entries


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def find_module(name: str, roots: Iterable[Path] | None = None) -> tuple[Path, Path]:
    """Locate module ``name`` (case-insensitive): returns (library root, conf path).

    Raises:
        FileNotFoundError: no conf declares that module; the message lists what was found
            and how to install the Debian packages.
    """
    seen: list[str] = []
    for root in roots if roots is not None else sword_roots():
        for conf in sorted((root / "mods.d").glob("*.conf")) if (root / "mods.d").is_dir() else []:
            found, _ = read_conf(conf)
            seen.append(found)
            if found.lower() == name.lower():
                return root, conf
    raise FileNotFoundError(
        f"SWORD module {name!r} not found under {[str(r) for r in (roots or sword_roots())]} "
        f"(found: {seen or 'none'}); install it, e.g. `apt-get install sword-text-web sword-text-sparv` "
        "(scripts/ensure-sword.sh), or set SWORD_PATH")


@dataclass
class _Testament:
    blocks: list[tuple[int, int, int]]  # (offset, compressed size, uncompressed size)
    slots: list[tuple[int, int, int]]  # (block, offset, size)
    data: bytes
    cache: dict[int, bytes] = field(default_factory=dict)


class ZTextModule:
    """One zText Bible module, read lazily block by block.

    Args:
        name: the module name (``[engWEB2015eb]`` in its conf).
        root: library root holding ``mods.d/`` and ``modules/``; default searches ``sword_roots()``.

    Attributes:
        conf: every key of the conf file ({key: [values]}).
        versification: the slot layout named by ``Versification=`` (default KJV, as in SWORD).
        language: the ``Lang=`` code.
    """

    def __init__(self, name: str, *, root: str | Path | None = None) -> None:
        roots = None if root is None else [Path(root)]
        self.root, conf_path = find_module(name, roots)
        self.name, self.conf = read_conf(conf_path)
        driver = self._get("ModDrv", "").lower()
        if driver != "ztext":
            raise ValueError(f"module {self.name!r} uses ModDrv={driver!r}; this reader handles zText only")
        if self._get("CipherKey", ""):
            raise ValueError(f"module {self.name!r} is enciphered (CipherKey set); locked modules are not supported")
        compress = self._get("CompressType", "LZSS").upper()
        if compress not in _DECOMPRESS:
            raise ValueError(f"module {self.name!r}: CompressType={compress!r} not supported; supported: {sorted(_DECOMPRESS)}")
        self._decompress = _DECOMPRESS[compress]
        self.encoding = "utf-8" if self._get("Encoding", "Latin-1").upper().replace("-", "") == "UTF8" else "latin-1"
        self.language = self._get("Lang", "")
        self.versification = Versification.named(self._get("Versification", "KJV"))
        self.data_path = (self.root / self._get("DataPath", "")).resolve()
        self._testaments: dict[str, _Testament] = {}

    @classmethod
    def open(cls, name: str, *, root: str | Path | None = None) -> "ZTextModule":
        return cls(name, root=root)

    def _get(self, key: str, default: str) -> str:
        values = self.conf.get(key)
        return values[0] if values else default

    def _testament(self, testament: str) -> _Testament | None:
        if testament not in ("ot", "nt"):
            raise ValueError(f"testament must be 'ot' or 'nt', got {testament!r}")
        if testament not in self._testaments:
            base = self.data_path / testament
            if not base.with_suffix(".bzv").exists():
                return None  # e.g. an NT-only module
            bzs = base.with_suffix(".bzs").read_bytes()
            bzv = base.with_suffix(".bzv").read_bytes()
            if len(bzs) % 12 or len(bzv) % 10:
                raise ValueError(f"{base}: index sizes {len(bzs)} (.bzs) / {len(bzv)} (.bzv) are not multiples of 12 / 10")
            self._testaments[testament] = _Testament(
                blocks=[struct.unpack_from("<III", bzs, i) for i in range(0, len(bzs), 12)],
                slots=[struct.unpack_from("<IIH", bzv, i) for i in range(0, len(bzv), 10)],
                data=base.with_suffix(".bzz").read_bytes())
        return self._testaments[testament]

    def num_slots(self, testament: str) -> int:
        t = self._testament(testament)
        return 0 if t is None else len(t.slots)

    def slot_entry(self, testament: str, index: int) -> tuple[int, int, int]:
        """The raw verse-index entry (block, offset, size) of one slot."""
        t = self._testament(testament)
        if t is None:
            raise ValueError(f"module {self.name!r} has no {testament!r} testament")
        return t.slots[index]

    def raw(self, testament: str, index: int) -> str:
        """The OSIS text stored in slot ``index`` of ``testament`` ('' when empty)."""
        t = self._testament(testament)
        if t is None:
            return ""
        block, offset, size = t.slots[index]
        if size == 0:
            return ""
        if block not in t.cache:
            start, csize, usize = t.blocks[block]
            data = self._decompress(t.data[start:start + csize])
            if len(data) != usize:
                raise ValueError(f"{self.name}/{testament}: block {block} inflates to {len(data)} bytes, index says {usize}")
            t.cache[block] = data
        return t.cache[block][offset:offset + size].decode(self.encoding)

    def check_layout(self) -> None:
        """Raise unless each testament's slot count equals what the versification predicts."""
        for testament in ("ot", "nt"):
            have, want = self.num_slots(testament), len(self.versification.slots(testament))
            if have and have != want:
                raise ValueError(
                    f"module {self.name!r}: {testament} has {have} index slots but {self.versification.name} "
                    f"predicts {want}; the Versification= entry does not match the data")

    def verses(self, *, books: Iterable[str] | None = None, raw: bool = False) -> Iterator[tuple[Ref, str]]:
        """Yield (reference, text) for every non-empty verse, in canonical order.

        Args:
            books: only these OSIS book ids (e.g. ``{"John"}``); default all.
            raw: yield the OSIS markup instead of plain text.

        A verse *linked* to the previous one (the same stored entry, SWORD's way
        of holding a combined verse such as "vv. 2–3") is yielded once, under
        its first reference, and the later references are skipped.
        """
        self.check_layout()
        wanted = None if books is None else set(books)
        for testament in ("ot", "nt"):
            if self._testament(testament) is None:
                continue
            previous: tuple[int, int, int] | None = None
            for index, ref in enumerate(self.versification.slots(testament)):
                entry = self.slot_entry(testament, index)
                linked = entry == previous and entry[2] > 0
                previous = entry
                if ref is None or ref.verse == 0 or linked or (wanted is not None and ref.book not in wanted):
                    continue
                text = self.raw(testament, index)
                if not raw:
                    text = strip_osis(text)
                if text:
                    yield ref, text

    def chapter_markers(self, testament: str) -> list[tuple[int, str, int]]:
        """(slot, book, chapter) for every ``<chapter sID="Book.N">`` marker in the module's text."""
        found = []
        for index in range(self.num_slots(testament)):
            for match in _CHAPTER_MARK.finditer(self.raw(testament, index)):
                found.append((index, match.group(1), int(match.group(2))))
        return found

    def __repr__(self) -> str:
        return f"ZTextModule({self.name!r}, lang={self.language!r}, versification={self.versification.name!r})"


_CHAPTER_MARK = re.compile(r'<chapter\b[^>]*\bsID="([^".]+)\.(\d+)"')
_TAG = re.compile(r"<(/?)([A-Za-z][\w:]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)(/?)>")
# Elements whose *content* is not verse text: notes (with their references, readings,
# catch-words), headings (except canonical ones such as psalm titles), and speaker labels.
DROPPED_ELEMENTS = frozenset({"note", "title", "speaker"})
# Divisions that start material which is not part of the verse it is stored with.
NON_VERSE_DIVISIONS = frozenset({"book", "bookGroup", "glossary", "front", "back", "introduction", "colophon",
                                 "appendix", "preface", "index"})
_DIV_TYPE = re.compile(r'\btype="([^"]*)"')


def _div_type(attrs: str) -> str:
    match = _DIV_TYPE.search(attrs)
    return match.group(1) if match else ""
_SPACE_BEFORE_CLOSER = re.compile(r"\s+([,.;:!?)\]”’»])")


def strip_osis(fragment: str) -> str:
    """Plain text of an OSIS fragment: markup removed, notes/titles/speakers dropped, spaces normalised.

    Canonical titles (``<title canonical="true">``: the psalm superscriptions, which
    KJV-style modules store as plain verse-1 text) are kept. A division that opens
    back matter (glossary, another book's introduction) ends the verse.

    Every tag becomes a space boundary (a footnote sits between two words with
    no space around it in some modules), then runs of whitespace collapse to
    one space and a space before closing punctuation is removed.
    """
    out: list[str] = []
    depth = 0  # > 0 while inside a dropped element
    pos = 0
    for match in _TAG.finditer(fragment):
        if depth == 0:
            out.append(fragment[pos:match.start()])
        pos = match.end()
        closing, name, attrs, self_closing = match.group(1) == "/", match.group(2), match.group(3), match.group(4) == "/"
        if name == "div" and not closing and _div_type(attrs) in NON_VERSE_DIVISIONS and "eID=" not in attrs:
            pos = len(fragment)  # back matter (a glossary, the next book's intro) stored after a verse
            break
        if name in DROPPED_ELEMENTS and not self_closing and not (name == "title" and 'canonical="true"' in attrs):
            depth = max(depth - 1, 0) if closing else depth + 1
        # inline word wrappers (<w>, <transChange>, <seg>, <name>…) join their text
        # directly; structural tags (notes, lines, divisions, milestones) separate words.
        if name not in _INLINE:
            out.append(" ")
    if depth == 0:
        out.append(fragment[pos:])
    text = html.unescape("".join(out))
    text = " ".join(text.split())
    return _SPACE_BEFORE_CLOSER.sub(r"\1", text)


_INLINE = frozenset({"w", "transChange", "seg", "name", "divineName", "hi", "foreign", "rdg", "catchWord",
                     "reference", "index", "a", "abbr", "added"})
