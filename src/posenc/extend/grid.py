"""The measurement grid: loss cells (method × factor × document) and passkey cells (length × method × factor).

Each method's model is built once per (method, factor) and used for every
cell that needs it; every cell is saved as it finishes (``CellStore``) and
skipped on a rerun with the same settings.

Example (a tiny random model; see ``posenc extend`` for a real checkpoint)::

    cfg = GridConfig(methods=("rope", "rope-yarn"), factors=(2.0,), documents=("licenses",),
                     loss_length=512, passkey_lengths=(256,), passkey_trials=2, original_max_len=256)
    cells = run_grid(model, tokenizer, cfg, CellStore(None), model_id="tiny")
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from posenc.extend.cells import CellStore, cell_name
from posenc.extend.forward import sdpa_spy
from posenc.extend.loss import bucket_edges, bucket_perplexity, smoothed_curve, token_nll
from posenc.extend.methods import PLAIN, build_variant, method_options
from posenc.extend.passkey import build_prompt, greedy_continuation, make_trial, score
from posenc.extend.texts import Document, doc_tokens, load_document


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """What to measure.

    Args:
        methods: method names (``posenc.extend.methods.METHODS``); ``rope`` is measured once, without a factor.
        factors: extension factors s for the scaled methods.
        documents: ``bible``, ``licenses`` or text file paths.
        loss_length: tokens in each loss pass (the longest length measured).
        passkey_lengths: prompt lengths in tokens (empty: no passkey cells).
        passkey_trials: trials per (length, method, factor); the same prompts for every method.
        original_max_len: L₀ given to the schemes (and the bucket width L₀/2).
        seed: seeds the passkey keys and depths.
        answer_tokens: greedy tokens decoded per passkey answer.
        chunk: positions per logits block in the loss.
    """

    methods: tuple[str, ...]
    factors: tuple[float, ...]
    documents: tuple[str, ...]
    loss_length: int
    passkey_lengths: tuple[int, ...] = ()
    passkey_trials: int = 0
    original_max_len: int
    seed: int = 0
    answer_tokens: int = 8
    chunk: int = 1024

    def variants(self) -> list[tuple[str, float | None]]:
        """(method, factor) pairs: plain RoPE once, every other method at every factor."""
        return [(m, None) for m in self.methods if m == PLAIN] + [
            (m, f) for m in self.methods if m != PLAIN for f in self.factors]


def _factor_tag(factor: float | None) -> str | None:
    return None if factor is None else f"x{factor:g}"


@contextmanager
def layer_progress(model: nn.Module, bar: Any) -> Iterator[None]:
    """Advance ``bar`` once per decoder layer finished (a long pass shows progress inside the pass)."""
    layers = getattr(model, "layers", None)

    def tick(*_: Any) -> None:  # returns None: a forward hook's return value would replace the layer's output
        bar.update(1)

    hooks = [] if bar is None or layers is None else [layer.register_forward_hook(tick) for layer in layers]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


class Grid:
    """Runs the cells of a ``GridConfig`` against one checkpoint."""

    def __init__(self, model: nn.Module, tokenizer: Any, cfg: GridConfig, store: CellStore, *, model_id: str,
                 builder: Callable[[Any], nn.Module] | None = None, progress: bool = True,
                 log: Callable[[str], None] = print) -> None:
        self.model, self.tokenizer, self.cfg, self.store = model, tokenizer, cfg, store
        self.model_id, self.builder, self.progress, self.log = model_id, builder, progress, log
        self._variant: tuple[tuple[str, float | None], nn.Module] | None = None
        self._docs: dict[str, Document] = {}

    def variant(self, method: str, factor: float | None) -> nn.Module:
        """The (method, factor) model, built once and kept until another is asked for."""
        key = (method, factor)
        if self._variant is None or self._variant[0] != key:
            self._variant = None  # free the previous variant before building the next
            model = build_variant(self.model, method, factor=factor, original_max_len=self.cfg.original_max_len,
                                  builder=self.builder)
            self._variant = (key, model)
        return self._variant[1]

    def document(self, spec: str) -> Document:
        if spec not in self._docs:
            self._docs[spec] = load_document(spec)
        return self._docs[spec]

    def _bar(self, total: int, desc: str) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="layer", leave=False, disable=not self.progress)

    # -- loss by position ------------------------------------------------------------------------

    def loss_settings(self, doc: Document) -> dict[str, Any]:
        return {"model": self.model_id, "document": doc.source, "length": self.cfg.loss_length,
                "original_max_len": self.cfg.original_max_len}

    def loss_cell(self, spec: str, method: str, factor: float | None) -> dict[str, Any]:
        doc = self.document(spec)
        name = cell_name("loss", doc.name, method, _factor_tag(factor), f"T{self.cfg.loss_length}")
        settings = self.loss_settings(doc)
        saved = self.store.load(name, settings)
        if saved is not None:
            self.log(f"{name}: done earlier, kept")
            return saved
        ids = doc_tokens(doc, self.tokenizer, self.cfg.loss_length)
        model = self.variant(method, factor)
        began = time.perf_counter()
        bar = self._bar(len(getattr(model, "layers", [])), name)
        with sdpa_spy() as calls, layer_progress(model, bar):
            nll = token_nll(model, ids, chunk=self.cfg.chunk)
        bar.close()
        seconds = time.perf_counter() - began
        edges = bucket_edges(self.cfg.loss_length, self.cfg.original_max_len)
        cell = {"kind": "loss", "name": name, "document": doc.name, "source": doc.source, "method": method,
                "factor": factor, "options": method_options(method, factor=factor,
                                                            original_max_len=self.cfg.original_max_len),
                "length": self.cfg.loss_length, "original_max_len": self.cfg.original_max_len,
                "mean_nll": float(nll.double().mean()), "buckets": bucket_perplexity(nll, edges),
                "curve": smoothed_curve(nll), "nll": [round(float(x), 4) for x in nll],
                "seconds": seconds, "sdpa": calls.to_dict(), "settings": settings}
        self.store.save(name, cell)
        in_range = cell["buckets"][0]["ppl"]
        self.log(f"{name}: ppl first bucket {in_range:.2f}, last {cell['buckets'][-1]['ppl']:.2f}  ({seconds:.0f} s)")
        return cell

    def control_cell(self, spec: str) -> dict[str, Any]:
        """Plain RoPE on the last L₀ tokens of the loss text alone: the same tokens as past L₀, at in-range positions.

        Text difficulty varies along a document; this pass says what perplexity those later tokens have
        when the model reads them within its trained context (with less context before them), so a
        method's perplexity past L₀ can be compared with the same tokens rather than with earlier text.
        """
        doc = self.document(spec)
        l0, length = self.cfg.original_max_len, self.cfg.loss_length
        offset = length - l0
        name = cell_name("control", doc.name, PLAIN, f"T{length}")
        settings = {**self.loss_settings(doc), "offset": offset}
        saved = self.store.load(name, settings)
        if saved is not None:
            self.log(f"{name}: done earlier, kept")
            return saved
        ids = doc_tokens(doc, self.tokenizer, length)[offset:]
        began = time.perf_counter()
        bar = self._bar(len(getattr(self.model, "layers", [])), name)
        with layer_progress(self.model, bar):
            nll = token_nll(self.model, ids, chunk=self.cfg.chunk)
        bar.close()
        cell = {"kind": "control", "name": name, "document": doc.name, "source": doc.source, "method": PLAIN,
                "factor": None, "offset": offset, "length": length, "original_max_len": l0,
                "buckets": bucket_perplexity(nll, bucket_edges(length, l0), offset=offset),
                "seconds": time.perf_counter() - began, "settings": settings}
        self.store.save(name, cell)
        self.log(f"{name}: the tokens past L₀ read in range: " + ", ".join(
            f"{b['start']}–{b['end']}: {b['ppl']:.2f}" for b in cell["buckets"] if b["ppl"] and b["start"] >= l0))
        return cell

    # -- passkey ---------------------------------------------------------------------------------

    def trials(self, length: int) -> list[Any]:
        """The trials at ``length``: the same keys and depths for every method (seeded by seed and length)."""
        rng = random.Random(f"{self.cfg.seed}-{length}")
        return [make_trial(rng, length) for _ in range(self.cfg.passkey_trials)]

    def passkey_cell(self, length: int, method: str, factor: float | None) -> dict[str, Any]:
        name = cell_name("passkey", method, _factor_tag(factor), f"L{length}")
        settings = {"model": self.model_id, "length": length, "original_max_len": self.cfg.original_max_len,
                    "seed": self.cfg.seed, "answer_tokens": self.cfg.answer_tokens}
        cell = self.store.load(name, settings) or {
            "kind": "passkey", "name": name, "method": method, "factor": factor, "length": length,
            "original_max_len": self.cfg.original_max_len, "trials": [], "settings": settings}
        todo = self.trials(length)[len(cell["trials"]):]
        if not todo:
            self.log(f"{name}: done earlier, kept")
            return cell
        model = self.variant(method, factor)
        for trial in todo:
            prompt = build_prompt(self.tokenizer, trial)
            began = time.perf_counter()
            bar = self._bar(len(getattr(model, "layers", [])) * self.cfg.answer_tokens, name)
            with layer_progress(model, bar):
                answer = self.tokenizer.decode(greedy_continuation(model, prompt.ids, self.cfg.answer_tokens))
            bar.close()
            cell["trials"].append({"key": trial.key, "depth": trial.depth, "prompt_tokens": len(prompt.ids),
                                   "needle_at": prompt.needle_start, "answer": answer,
                                   "correct": score(answer, trial.key), "seconds": time.perf_counter() - began})
            self.store.save(name, cell)
        correct = sum(t["correct"] for t in cell["trials"])
        self.log(f"{name}: {correct}/{len(cell['trials'])} keys found")
        return cell

    # -- everything ------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        """Loss cells first (document by document, every variant), then passkey cells (by length, every variant)."""
        for length in self.cfg.passkey_lengths:  # a too-short passkey length fails now, not after hours of loss cells
            build_prompt(self.tokenizer, make_trial(random.Random(0), length))
        cells = []
        for spec in self.cfg.documents:
            for method, factor in self.cfg.variants():
                cells.append(self.loss_cell(spec, method, factor))
                if method == PLAIN and self.cfg.loss_length > self.cfg.original_max_len:
                    cells.append(self.control_cell(spec))
        for length in self.cfg.passkey_lengths:
            for method, factor in self.cfg.variants():
                cells.append(self.passkey_cell(length, method, factor))
        self._variant = None
        return cells


def config_dict(cfg: GridConfig) -> dict[str, Any]:
    return asdict(cfg)
