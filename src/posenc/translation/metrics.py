"""Corpus BLEU and chrF computed by sacreBLEU (Post, 2018), the field's reference implementation.

Scores are sacreBLEU's defaults (BLEU: 13a tokenisation, exponential smoothing;
chrF: character 6-grams, β = 2) on detokenised text, and each result carries
sacreBLEU's signature string so a number can be reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Sequence


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """Corpus BLEU and chrF of ``hypotheses`` against one reference each.

    Raises:
        ValueError: the two lists differ in length or are empty.
    """
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"need as many hypotheses as references (≥ 1); got {len(hypotheses)} and {len(references)}")
    from posenc.checks import require

    require("sacrebleu", "translation scores (BLEU, chrF)", "text")
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2), "n": len(hypotheses),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}
