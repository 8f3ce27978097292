"""The zText reader: a synthetic module written from the format description, then the real Debian modules."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from posenc.translation.sword import ZTextModule, read_conf, strip_osis
from posenc.translation.versification import Ref, Versification


def write_ztext(root: Path, name: str, texts: dict[Ref, str], *, versification: str = "KJV", per_block: int = 7) -> None:
    """An independent writer: slots laid out per the versification, `per_block` entries per zlib block."""
    v11n = Versification.named(versification)
    data_path = root / "modules" / "texts" / "ztext" / name.lower()
    data_path.mkdir(parents=True)
    (root / "mods.d").mkdir(exist_ok=True)
    (root / "mods.d" / f"{name.lower()}.conf").write_text(
        f"[{name}]\nDataPath=./modules/texts/ztext/{name.lower()}/\nModDrv=zText\nCompressType=ZIP\n"
        f"Encoding=UTF-8\nLang=xx\nVersification={versification}\nAbout=line one\\\nline two\n")
    for testament in ("ot", "nt"):
        slots = v11n.slots(testament)
        blocks: list[bytes] = []
        current: list[bytes] = []
        index = []
        for ref in slots:
            text = texts.get(ref, "").encode() if ref is not None else b""
            if not text:
                index.append((0, 0, 0))
                continue
            offset = sum(map(len, current))
            current.append(text)
            index.append((len(blocks), offset, len(text)))
            if len(current) == per_block:
                blocks.append(b"".join(current))
                current = []
        if current:
            blocks.append(b"".join(current))
        bzz, bzs, pos = b"", b"", 0
        for raw in blocks:
            comp = zlib.compress(raw)
            bzs += struct.pack("<III", pos, len(comp), len(raw))
            bzz += comp
            pos += len(comp)
        (data_path / f"{testament}.bzz").write_bytes(bzz)
        (data_path / f"{testament}.bzs").write_bytes(bzs)
        (data_path / f"{testament}.bzv").write_bytes(b"".join(struct.pack("<IIH", *e) for e in index))


def test_synthetic_module_round_trip(tmp_path: Path) -> None:
    texts = {Ref("Gen", 1, 1): "<w>In</w> the beginning", Ref("Gen", 50, 26): "last of Genesis",
             Ref("Mal", 4, 6): "<note>n</note>end of OT", Ref("Matt", 1, 1): "first of NT",
             Ref("Rev", 22, 21): "Amen.", Ref("Ps", 119, 176): "long psalm end"}
    write_ztext(tmp_path, "Toy", texts)
    module = ZTextModule.open("toy", root=tmp_path)  # names match case-insensitively
    assert module.language == "xx" and module.versification.name == "KJV"
    assert module.conf["About"] == ["line one\nline two"]
    got = dict(module.verses())
    assert got == {ref: strip_osis(text) for ref, text in texts.items()}
    assert list(got) == sorted(got, key=Versification.named("KJV").refs().index)  # canonical order
    assert dict(module.verses(books={"Mal"})) == {Ref("Mal", 4, 6): "end of OT"}


def test_missing_module_and_bad_conf(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apt-get install sword-text-web"):
        ZTextModule.open("NoSuchModule", root=tmp_path)
    (tmp_path / "bad.conf").write_text("DataPath=x\n")
    with pytest.raises(ValueError, match="no \\[ModuleName\\]"):
        read_conf(tmp_path / "bad.conf")


def test_layout_mismatch_is_reported(tmp_path: Path) -> None:
    write_ztext(tmp_path, "Toy", {Ref("Gen", 1, 1): "x"}, versification="KJV")
    conf = tmp_path / "mods.d" / "toy.conf"
    conf.write_text(conf.read_text().replace("Versification=KJV", "Versification=NRSVA"))
    with pytest.raises(ValueError, match="predicts"):
        list(ZTextModule.open("Toy", root=tmp_path).verses())


def test_strip_osis_drops_notes_titles_and_back_matter() -> None:
    raw = ('<w lemma="strong:H1">God</w><note placement="foot"><reference>1:1 </reference>Elohim.</note>'
           '<w lemma="x">created</w> <title type="section">Heading</title>the earth<q who="Jesus">“Hi.”</q>Then'
           '<div type="glossary" sID="g1"/>Abba means father.')
    assert strip_osis(raw) == "God created the earth “Hi.” Then"
    psalm = '<title canonical="true" type="psalm">A Psalm by David.</title> <l sID="a"/>Yahweh, how<l eID="a"/>'
    assert strip_osis(psalm) == "A Psalm by David. Yahweh, how"
    assert strip_osis('<speaker>Beloved</speaker> Let him kiss me &amp; go <note>x</note>, now') == "Let him kiss me & go, now"


def test_real_modules_match_their_versification(web: ZTextModule, rv: ZTextModule) -> None:
    for module, system in ((web, "NRSVA"), (rv, "KJV")):
        assert module.versification.name == system
        module.check_layout()  # slot counts equal the tables exactly
        for testament in ("ot", "nt"):
            slots = module.versification.slots(testament)
            books = set(module.versification.book_ids())
            markers = module.chapter_markers(testament)
            for slot, book, chapter in markers:
                if book in books:  # every chapter marker sits in the heading slot the table predicts
                    assert slots[slot] == Ref(book, chapter, 0), (module.name, slot, book, chapter)
                else:  # a book outside the versification (WEB's Greek Daniel) lands in a non-verse slot
                    assert slots[slot] is None
            marked = {(b, c) for _, b, c in markers if b in books}
            expected = {(b.osis, c + 1) for b in module.versification.books if b.testament == testament
                        for c in range(b.chapters)}
            assert marked <= expected


def test_real_spot_checks(web: ZTextModule, rv: ZTextModule) -> None:
    en = dict(web.verses(books={"Gen", "John", "Ps", "Mal", "Rev", "3John"}))
    es = dict(rv.verses(books={"Gen", "John", "Ps", "Mal", "Rev", "3John"}))
    assert en[Ref("Gen", 1, 1)] == "In the beginning, God created the heavens and the earth."
    assert es[Ref("Gen", 1, 1)] == "EN el principio crió Dios los cielos y la tierra."
    assert en[Ref("John", 3, 16)].startswith("For God so loved the world")
    assert es[Ref("John", 3, 16)].startswith("Porque de tal manera amó Dios al mundo")
    # psalm superscriptions are verse text in both (canonical title in WEB, plain text in RV)
    assert en[Ref("Ps", 3, 1)].startswith("A Psalm by David, when he fled from Absalom his son.")
    assert es[Ref("Ps", 3, 1)].startswith("Salmo de David, cuando huía de delante de Absalom su hijo.")
    # the last verses: Malachi 4:6 and Revelation 22:21 (WEB's glossary after it is cut off)
    assert es[Ref("Mal", 4, 6)].endswith("con destrucción hiera la tierra.")
    assert en[Ref("Mal", 4, 6)].endswith("strike the earth with a curse.”")
    assert en[Ref("Rev", 22, 21)] == "The grace of the Lord Jesus Christ be with all the saints. Amen."
    assert es[Ref("Rev", 22, 21)].startswith("La gracia de nuestro Señor Jesucristo")
    # NRSVA-only slots exist in WEB's index but hold no text; KJV has no such slot at all
    assert Ref("Rev", 12, 18) not in en and Ref("3John", 1, 15) not in en
    assert Ref("Rev", 12, 18) not in Versification.named("KJV").refs()
    assert all("<" not in t and ">" not in t for t in [*en.values(), *es.values()])
