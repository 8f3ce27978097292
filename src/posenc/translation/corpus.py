"""A parallel corpus from two Bible modules: verse pairs aligned by reference, and leak-free splits.

Two modules are aligned by (book, chapter, verse), never by slot, because they
may use different versifications (``versification.py``). A reference present in
only one module (the deuterocanon, Revelation 12:18 in NRSVA, a verse one
translation merges into its neighbour) is left out and counted.

Splits hold out whole chapters (default) or whole books, so no verse of a test
chapter is ever seen in training; test pairs whose source text also occurs in
training (the Bible repeats itself: Psalm 14 ≈ Psalm 53) are dropped too.

Example::

    pairs, report = parallel_verses(ZTextModule.open("engWEB2015eb"), ZTextModule.open("spaRV1909eb"))
    split = split_by_chapter(pairs, valid=0.02, test=0.03, seed=0)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from posenc.translation.sword import ZTextModule
from posenc.translation.versification import Ref

DEFAULT_SOURCE = "engWEB2015eb"
DEFAULT_TARGET = "spaRV1909eb"


@dataclass(frozen=True)
class VersePair:
    ref: Ref
    src: str
    tgt: str

    def to_dict(self) -> dict:
        return {"ref": str(self.ref), "src": self.src, "tgt": self.tgt}

    @classmethod
    def from_dict(cls, d: dict) -> "VersePair":
        return cls(Ref.parse(d["ref"]), d["src"], d["tgt"])


@dataclass
class AlignmentReport:
    source: str
    target: str
    source_versification: str
    target_versification: str
    pairs: int = 0
    only_in_source: int = 0
    only_in_target: int = 0
    only_in_source_books: list[str] = field(default_factory=list)
    only_in_target_books: list[str] = field(default_factory=list)


# optional opening punctuation and a one-letter conjunction ("Y ACONTECIÓ"), then the capitalised word
_CAPS_WORD = re.compile(r"^([¡¿«“\"'(]*(?:[YEAOÉ] )?[¡¿«“\"'(]*)([A-ZÁÉÍÓÚÑÜ]{2,})(?=[\s,.;:!?]|$)")


def normalise_drop_cap(text: str) -> str:
    """Undo a chapter's printed drop-cap word ("EN el principio" → "En el principio", "Y ACONTECIÓ" → "Y Aconteció").

    Only the first word changes, and only when it is all capitals while the
    next word is not (so an acronym followed by more capitals is left alone).
    """
    match = _CAPS_WORD.match(text)
    if not match:
        return text
    rest = [w for w in text[match.end():].split() if any(ch.isalpha() for ch in w)]
    if rest and rest[0].isupper():
        return text
    word = match.group(2)
    after_conjunction = any(ch.isalpha() for ch in match.group(1))  # "Y ACONTECIÓ" → "Y aconteció"
    word = word.lower() if after_conjunction else word[0] + word[1:].lower()
    return match.group(1) + word + text[match.end():]


def parallel_verses(source: ZTextModule, target: ZTextModule, *, books: Iterable[str] | None = None,
                    ) -> tuple[list[VersePair], AlignmentReport]:
    """Every reference with text in both modules, in the source's canonical order.

    Args:
        books: only these OSIS book ids (default: all).

    Returns:
        (pairs, report) — the report counts what was left out and from which books.
    """
    books = None if books is None else set(books)
    src = dict(source.verses(books=books))
    tgt = dict(target.verses(books=books))
    report = AlignmentReport(source.name, target.name, source.versification.name, target.versification.name)
    pairs = []
    for ref, text in src.items():
        other = tgt.get(ref)
        if other is None:
            report.only_in_source += 1
            continue
        first = ref.verse == 1
        pairs.append(VersePair(ref, normalise_drop_cap(text) if first else text,
                               normalise_drop_cap(other) if first else other))
    report.pairs = len(pairs)
    src_books = {r.book for r in src}
    missing = [r for r in tgt if r not in src]
    report.only_in_target = len(missing)
    report.only_in_source_books = sorted({r.book for r in src if r not in tgt}, key=_order(source))
    report.only_in_target_books = sorted({r.book for r in missing if r.book not in src_books}, key=_order(target))
    return pairs, report


@dataclass
class FilterReport:
    median_log_ratio: float
    max_log_deviation: float
    shifted_chapters: list[str]
    dropped_in_shifted_chapters: int
    dropped_outliers: int


def filter_misaligned(pairs: Sequence[VersePair], *, max_log_deviation: float = 0.6) -> tuple[list[VersePair], FilterReport]:
    """Drop pairs whose two sides are evidently not translations of each other.

    The same reference can hold different text: a module built from a source
    numbered otherwise (Reina-Valera numbers Numbers 12:16 as 13:1) is squeezed
    into its versification's slots, shifting a chapter by a verse or piling
    overflow verses into the last slot. Two checks, on character lengths:

    * a chapter is *shifted* when pairing verse i with verse i ± 1 gives
      lengths that agree better (mean |log(len_tgt / len_src) − median|) than
      pairing i with i — the whole chapter is dropped;
    * a single pair is dropped when |log(len_tgt / len_src) − median| exceeds
      ``max_log_deviation`` (0.6: one side 1.8× longer than usual).
    """
    ratios = [math.log(len(p.tgt) / len(p.src)) for p in pairs]
    mu = statistics.median(ratios)
    chapters: dict[tuple[str, int], list[VersePair]] = defaultdict(list)
    for p in pairs:
        chapters[(p.ref.book, p.ref.chapter)].append(p)

    def cost(ps: list[VersePair], shift: int) -> float:
        devs = [abs(math.log(len(ps[i + shift].tgt) / len(ps[i].src)) - mu)
                for i in range(max(0, -shift), min(len(ps), len(ps) - shift))]
        return sum(devs) / len(devs) if devs else math.inf

    shifted = {key for key, ps in chapters.items() if cost(ps, 0) > min(cost(ps, 1), cost(ps, -1))}
    kept, in_shifted, outliers = [], 0, 0
    for p, r in zip(pairs, ratios):
        if (p.ref.book, p.ref.chapter) in shifted:
            in_shifted += 1
        elif abs(r - mu) > max_log_deviation:
            outliers += 1
        else:
            kept.append(p)
    names = [f"{b} {c}" for b, c in chapters if (b, c) in shifted]
    return kept, FilterReport(mu, max_log_deviation, names, in_shifted, outliers)


def load_corpus(source: str = DEFAULT_SOURCE, target: str = DEFAULT_TARGET, *, root: str | Path | None = None,
                filter: bool = True, books: Iterable[str] | None = None) -> tuple[list[VersePair], dict]:
    """Read, align and (optionally) filter two installed modules; returns (pairs, a JSON-able report)."""
    pairs, report = parallel_verses(ZTextModule.open(source, root=root), ZTextModule.open(target, root=root),
                                    books=books)
    info: dict = {"alignment": asdict(report)}
    if filter:
        pairs, freport = filter_misaligned(pairs)
        info["filter"] = asdict(freport)
    info["pairs"] = len(pairs)
    return pairs, info


def _order(module: ZTextModule):
    ids = module.versification.book_ids()
    return lambda b: ids.index(b) if b in ids else len(ids)


@dataclass
class Split:
    """Train/valid/test verse pairs plus how they were chosen."""

    train: list[VersePair]
    valid: list[VersePair]
    test: list[VersePair]
    method: str
    held_out: dict[str, list[str]]  # split name -> held-out chapters ("John 3") or books
    dropped_duplicates: int = 0

    def summary(self) -> dict:
        return {"method": self.method, "train": len(self.train), "valid": len(self.valid), "test": len(self.test),
                "dropped_duplicates": self.dropped_duplicates,
                "held_out": {k: (len(v) if len(v) > 12 else v) for k, v in self.held_out.items()}}

    def save(self, path: str | Path) -> None:
        data = {"method": self.method, "held_out": self.held_out, "dropped_duplicates": self.dropped_duplicates,
                **{name: [p.to_dict() for p in getattr(self, name)] for name in ("train", "valid", "test")}}
        Path(path).write_text(json.dumps(data, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Split":
        data = json.loads(Path(path).read_text())
        return cls(**{name: [VersePair.from_dict(d) for d in data[name]] for name in ("train", "valid", "test")},
                   method=data["method"], held_out=data["held_out"], dropped_duplicates=data["dropped_duplicates"])


def _unit_fraction(key: str, seed: int) -> float:
    """A stable pseudo-random number in [0, 1) per key (independent of Python's hash seed)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _finish(groups: dict[str, str], key, pairs: Sequence[VersePair], method: str) -> Split:
    parts: dict[str, list[VersePair]] = {"train": [], "valid": [], "test": []}
    for p in pairs:
        parts[groups.get(key(p), "train")].append(p)
    seen = {p.src for p in parts["train"]}
    dropped = 0
    for name in ("valid", "test"):
        kept = [p for p in parts[name] if p.src not in seen]
        dropped += len(parts[name]) - len(kept)
        parts[name] = kept
    held = {name: sorted({g for g, s in groups.items() if s == name}) for name in ("valid", "test")}
    return Split(parts["train"], parts["valid"], parts["test"], method, held, dropped)


def split_by_chapter(pairs: Sequence[VersePair], *, valid: float = 0.02, test: float = 0.03, seed: int = 0) -> Split:
    """Hold out whole chapters, drawn independently with probabilities ``valid`` and ``test``.

    Raises:
        ValueError: fractions outside [0, 1) or summing to 1 or more.
    """
    if not (0 <= valid < 1 and 0 <= test < 1 and valid + test < 1):
        raise ValueError(f"valid={valid} and test={test} must be fractions in [0, 1) summing to < 1")
    chapters = dict.fromkeys(f"{p.ref.book} {p.ref.chapter}" for p in pairs)
    groups = {}
    for chapter in chapters:
        u = _unit_fraction(chapter, seed)
        groups[chapter] = "test" if u < test else "valid" if u < test + valid else "train"
    return _finish(groups, lambda p: f"{p.ref.book} {p.ref.chapter}", pairs, f"chapters (seed {seed})")


def split_by_book(pairs: Sequence[VersePair], *, valid_books: Iterable[str], test_books: Iterable[str]) -> Split:
    """Hold out whole books (OSIS ids, e.g. ``["Ruth", "Phlm"]``).

    Raises:
        ValueError: a book named twice, or not in the corpus.
    """
    valid_books, test_books = list(valid_books), list(test_books)
    present = {p.ref.book for p in pairs}
    unknown = sorted(set(valid_books + test_books) - present)
    if unknown:
        raise ValueError(f"book(s) {unknown} not in the corpus; books present: {sorted(present)}")
    both = sorted(set(valid_books) & set(test_books))
    if both:
        raise ValueError(f"book(s) {both} are in both the valid and the test split")
    groups = {**{b: "valid" for b in valid_books}, **{b: "test" for b in test_books}}
    return _finish(groups, lambda p: p.ref.book, pairs, "books")


def summary(pairs: Sequence[VersePair], report: AlignmentReport) -> dict:
    return {**asdict(report), "books": len({p.ref.book for p in pairs})}
