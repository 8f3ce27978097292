"""The measures of ``posenc extend``, taken during fine-tuning: loss by position and passkey retrieval.

``MeasureSpec`` says what to measure; ``Measurer(spec, tokenizer)(model)``
returns plain data: per document the perplexity in buckets of L₀/2 positions
(``posenc.extend.loss.bucket_perplexity`` over one causal pass of
``length`` tokens) and the mean loss, and per passkey length the keys found
with a Wilson interval (``posenc.extend.passkey``; the same keys and depths
at every step and for every method: seeded by (seed, length)).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from posenc.extend.loss import bucket_edges, bucket_perplexity, token_nll
from posenc.extend.passkey import build_prompt, greedy_continuation, make_trial, score, wilson
from posenc.extend.texts import doc_tokens, load_document


@dataclass(frozen=True, kw_only=True)
class MeasureSpec:
    """What to measure (plain data, stored with every result).

    Args:
        documents: ``bible``, ``licenses`` or text files, each read for ``length`` tokens.
        length: tokens of each loss pass (the farthest position measured); 0: no loss part.
        original_max_len: L₀ (bucket width L₀/2).
        passkey_lengths: prompt lengths (empty: no passkey).
        passkey_trials: trials per length.
        seed: seeds the passkey keys and depths.
        answer_tokens: greedy tokens decoded per answer.
        chunk: positions per logits block.
    """

    documents: tuple[str, ...] = ("bible",)
    length: int
    original_max_len: int
    passkey_lengths: tuple[int, ...] = ()
    passkey_trials: int = 0
    seed: int = 0
    answer_tokens: int = 8
    chunk: int = 1024

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["documents"], data["passkey_lengths"] = list(self.documents), list(self.passkey_lengths)
        return data


class Measurer:
    """Measures a model as ``MeasureSpec`` says; the documents are read and tokenised once."""

    def __init__(self, spec: MeasureSpec, tokenizer: Any) -> None:
        self.spec, self.tokenizer = spec, tokenizer
        self._ids: dict[str, list[int]] = {}
        self._sources: dict[str, str] = {}
        for length in spec.passkey_lengths if spec.passkey_trials else ():  # too short a length fails now
            build_prompt(tokenizer, make_trial(random.Random(0), length))

    def ids(self, spec: str) -> list[int]:
        if spec not in self._ids:
            doc = load_document(spec)
            self._ids[spec] = doc_tokens(doc, self.tokenizer, self.spec.length)
            self._sources[spec] = doc.source
        return self._ids[spec]

    def __call__(self, model: nn.Module) -> dict[str, Any]:
        began = time.perf_counter()
        out: dict[str, Any] = {"loss": {}, "passkey": {}}
        l0 = self.spec.original_max_len
        if self.spec.length:
            edges = bucket_edges(self.spec.length, l0)
            for spec in self.spec.documents:
                nll = token_nll(model, self.ids(spec), chunk=self.spec.chunk)
                within = nll[: l0 - 1].double().mean().item()
                out["loss"][spec] = {"source": self._sources[spec], "mean_nll": float(nll.double().mean()),
                                     "mean_nll_within_l0": float(within),
                                     "buckets": bucket_perplexity(nll, edges)}
        for length in self.spec.passkey_lengths if self.spec.passkey_trials else ():
            rng = random.Random(f"{self.spec.seed}-{length}")
            found = 0
            for _ in range(self.spec.passkey_trials):
                trial = make_trial(rng, length)
                prompt = build_prompt(self.tokenizer, trial)
                answer = self.tokenizer.decode(greedy_continuation(model, prompt.ids, self.spec.answer_tokens))
                found += score(answer, trial.key)
            lo, hi = wilson(found, self.spec.passkey_trials)
            out["passkey"][str(length)] = {"correct": found, "trials": self.spec.passkey_trials,
                                           "accuracy": found / self.spec.passkey_trials, "wilson95": [lo, hi]}
        out["seconds"] = time.perf_counter() - began
        return out
