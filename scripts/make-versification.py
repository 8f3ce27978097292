#!/usr/bin/env python3
"""Regenerate src/posenc/translation/versification.json from SWORD's canon headers.

The verse counts per chapter of each versification are facts published by the
CrossWire Bible Society in libsword's ``canon*.h`` headers (Debian package
``libsword-dev``). This script turns the two systems posenc needs (KJV and
NRSVA) into plain JSON; it is run by hand, not at install time::

    apt-get download libsword-dev && dpkg -x libsword-dev_*.deb /tmp/libsword
    python3 scripts/make-versification.py /tmp/libsword/usr/include/sword \
        > src/posenc/translation/versification.json

The reader checks the tables against each module's own ``<chapter sID=...>``
markers (see ``posenc.translation.sword``), so a wrong table cannot go unnoticed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# (name in the conf's Versification=, header, OT book array, NT book array, verse-max array)
SYSTEMS = [
    ("KJV", "canon.h", "otbooks", "ntbooks", "vm"),
    ("NRSVA", "canon_nrsva.h", "otbooks_nrsva", "ntbooks", "vm_nrsva"),
]


def _array(text: str, decl: str, name: str) -> str:
    match = re.search(rf"{decl}\s+{re.escape(name)}\[\]\s*=\s*\{{(.*?)\n\}};", text, re.S)
    if match is None:
        raise ValueError(f"array {name!r} not found")
    return match.group(1)


def books(text: str, name: str) -> list[tuple[str, str, int]]:
    body = _array(text, "struct sbook", name)
    rows = re.findall(r'\{"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*(\d+)\}', body)
    return [(full, osis, int(chapters)) for full, _abbr, osis, chapters in rows if osis]


def verse_max(text: str, name: str) -> list[int]:
    body = re.sub(r"//[^\n]*", "", _array(text, "int", name))
    return [int(n) for n in re.findall(r"\d+", body)]


def main(include_dir: str) -> None:
    root = Path(include_dir)
    kjv_text = (root / "canon.h").read_text()
    out: dict[str, dict] = {"_source": "libsword canon*.h (CrossWire Bible Society), via scripts/make-versification.py"}
    for system, header, ot, nt, vm in SYSTEMS:
        text = (root / header).read_text()
        ot_books = books(text, ot)
        # canon_nrsva.h says "for ntbooks_nrsva, use ntbooks": the NT book list lives in canon.h
        nt_books = books(text if re.search(rf"sbook\s+{nt}\[\]", text) else kjv_text, nt)
        counts = verse_max(text, vm)
        need = sum(c for _, _, c in ot_books + nt_books)
        if len(counts) != need:
            raise ValueError(f"{system}: {len(counts)} verse counts for {need} chapters")
        system_out: dict[str, list] = {"ot": [], "nt": []}
        i = 0
        for testament, rows in (("ot", ot_books), ("nt", nt_books)):
            for full, osis, chapters in rows:
                system_out[testament].append([osis, full, counts[i:i + chapters]])
                i += chapters
        out[system] = system_out
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
