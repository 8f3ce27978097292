"""The versification tables against well-known totals, and the slot layout."""

from __future__ import annotations

import pytest

from posenc.translation.versification import Ref, Versification, systems


def test_kjv_totals_are_the_well_known_ones() -> None:
    kjv = Versification.named("KJV")
    assert len(kjv.books) == 66 and kjv.books[0].osis == "Gen" and kjv.books[-1].osis == "Rev"
    assert sum(b.chapters for b in kjv.books) == 1189
    assert len(kjv.refs()) == 31102
    assert kjv.book("Ps").verses[118] == 176 and kjv.book("Ps").verses[116] == 2  # Psalm 119 and Psalm 117
    assert kjv.book("3John").verses == (14,) and kjv.book("Rev").verses[11] == 17


def test_nrsva_differs_from_kjv_where_expected() -> None:
    kjv, nrsva = Versification.named("KJV"), Versification.named("NRSVA")
    assert {"Tob", "Sir", "1Macc"} <= set(nrsva.book_ids()) and "Tob" not in kjv.book_ids()
    diffs = {(b.osis, c + 1) for b in kjv.books for c, (x, y) in enumerate(zip(b.verses, nrsva.book(b.osis).verses))
             if x != y}
    assert diffs == {("3John", 1), ("Rev", 12)}  # 3 John 1:15 and Revelation 12:18 exist only in NRSVA
    assert set(systems()) >= {"KJV", "NRSVA"}
    with pytest.raises(ValueError, match="unknown versification"):
        Versification.named("Vulgate-ish")


def test_slot_layout() -> None:
    kjv = Versification.named("KJV")
    ot = kjv.slots("ot")
    # 0 empty, 1 testament heading, 2 Genesis intro, 3 Gen 1 heading, 4 Gen 1:1
    assert ot[:5] == [None, None, None, Ref("Gen", 1, 0), Ref("Gen", 1, 1)]
    assert ot[-1] == Ref("Mal", 4, 6) and len(ot) == 2 + 39 + 929 + 23145
    assert kjv.slots("nt")[-1] == Ref("Rev", 22, 21)
    assert Ref.parse("John 3:16") == Ref.parse("John.3.16") == Ref("John", 3, 16)
    assert str(Ref("1John", 5, 7)) == "1John 5:7"
    with pytest.raises(ValueError, match="John 3:16"):
        Ref.parse("John three")
