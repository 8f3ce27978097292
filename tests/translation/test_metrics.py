"""sacreBLEU BLEU/chrF on strings whose scores are worked out by hand here."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from posenc.translation.metrics import score


def hand_bleu(hyp: str, ref: str) -> float:
    """Sentence BLEU (Papineni et al., 2002) for whitespace-tokenised text without smoothing, in percent."""
    h, r = hyp.split(), ref.split()
    logs = []
    for n in range(1, 5):
        hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
        rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
        logs.append(math.log(sum(min(c, rc[g]) for g, c in hc.items()) / sum(hc.values())))
    bp = 1.0 if len(h) > len(r) else math.exp(1 - len(r) / len(h))
    return 100 * bp * math.exp(sum(logs) / 4)


def test_bleu_matches_the_formula_on_known_strings() -> None:
    hyp = "el perro grande come la comida del gato en la casa"
    ref = "el perro grande come la comida de el gato en casa"
    # no punctuation, lower case: sacreBLEU's 13a tokenisation splits exactly on spaces here
    assert score([hyp], [ref])["bleu"] == pytest.approx(hand_bleu(hyp, ref), abs=0.01)
    short = "el perro grande come la comida"
    assert score([short], [ref])["bleu"] == pytest.approx(hand_bleu(short, ref), abs=0.01)  # brevity penalty < 1


def test_perfect_and_disjoint_scores() -> None:
    refs = ["En el principio crió Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía."]
    perfect = score(refs, refs)
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0 and perfect["n"] == 2
    assert "tok:13a" in perfect["bleu_signature"]
    disjoint = score(["xyz qqq www", "zzz yyy"], refs)
    assert disjoint["bleu"] < 1.0 and disjoint["chrf"] < 5.0


def test_score_validates_lengths() -> None:
    with pytest.raises(ValueError, match="as many hypotheses"):
        score(["a"], ["a", "b"])
