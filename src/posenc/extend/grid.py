"""The measurement grid: loss cells (method × factor × document) and retrieval cells (task × length × method × factor).

Each method's model is built once per (method, factor) and used for every
cell that needs it; every cell is saved as it finishes (``CellStore``; a
retrieval cell after every trial) and skipped on a rerun with the same
settings. ``GridConfig.shard = (i, n)`` runs every n-th cell from the i-th
(in the grid's fixed order), so n processes — or n sittings — share a grid
and each saves its own cells into one store.

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
from posenc.extend.methods import FACTORLESS, PLAIN, build_variant, method_options, needs_length, set_sequence_length
from posenc.extend.passkey import PrefixCaches, greedy_continuation
from posenc.extend.retrieval import (DEPTH_MODES, TASKS, answer_tokens, build_prompt, cell_trials, depth_setting,
                                     make_trial, score)
from posenc.extend.texts import Document, doc_tokens, load_document


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """What to measure.

    Args:
        methods: method names (``posenc.extend.methods.METHODS``); ``rope`` is measured once, without a factor.
        factors: extension factors s for the scaled methods.
        documents: ``bible``, ``licenses`` or text file paths.
        loss_length: tokens in each loss pass (the longest length measured).
        passkey_lengths: retrieval prompt lengths in tokens (empty: no retrieval cells).
        passkey_trials: trials per (task, length, method, factor); the same prompts for every method.
        original_max_len: L₀ given to the schemes (and the bucket width L₀/2).
        seed: seeds the keys and the needles' depths.
        answer_tokens: greedy tokens decoded per single-key answer (multi-value questions get more).
        chunk: positions per logits block in the loss.
        tasks: retrieval tasks (``retrieval.TASKS``).
        layers: which layers a method changes (``methods.selected_layers``); None: what the family does.
        shard: (i, n): run only the cells whose index in the grid's order is i mod n.
        share_prefixes: a retrieval cell's trials continue the kept caches of the filler before their first
            needle instead of reading it again (``passkey.PrefixCaches``; about half the tokens for passkey
            trials, answers equal up to float rounding); False reads every prompt whole.
        depths: the asked needle's depth, "strata" (a seeded depth in stratum t mod 5 of [0, 1]) or "grid" (0,
            ¼, ½, ¾, 1 in turn: how cells before 2026-12-05 were made; see ``retrieval``). Cells record it.
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
    tasks: tuple[str, ...] = ("passkey",)
    layers: str | None = None
    shard: tuple[int, int] | None = None
    share_prefixes: bool = True
    depths: str = "strata"

    def __post_init__(self) -> None:
        if self.depths not in DEPTH_MODES:
            raise ValueError(f"unknown depth mode {self.depths!r}; valid: {', '.join(DEPTH_MODES)}")
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"unknown retrieval task(s) {unknown}; valid tasks: {', '.join(TASKS)}")
        if self.shard is not None:
            i, n = self.shard
            if not (isinstance(i, int) and isinstance(n, int) and 0 <= i < n):
                raise ValueError(f"shard must be (i, n) with 0 <= i < n, got {self.shard}")

    def variants(self) -> list[tuple[str, float | None]]:
        """(method, factor) pairs: methods without a factor once (plain RoPE, ReRoPE, STRING, DCA), the rest at
        every factor."""
        return [(m, None) for m in self.methods if m in FACTORLESS] + [
            (m, f) for m in self.methods if m not in FACTORLESS for f in self.factors]


def _ppl(value: float | None) -> str:
    """A bucket's perplexity for a log line; ``n/a`` for a bucket with no scored token (L₀ = 2: bucket 0–1 holds
    only the first token, which nothing predicts)."""
    return "n/a" if value is None else f"{value:.2f}"


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
        self._stop: dict[str, bool] = {"stop": False}  # set by the first Ctrl-C / SIGTERM during run()
        self.interrupted = False  #: run() stopped early on a signal, every finished cell (and trial) saved

    def variant(self, method: str, factor: float | None) -> nn.Module:
        """The (method, factor) model, built once and kept until another is asked for."""
        key = (method, factor)
        if self._variant is None or self._variant[0] != key:
            self._variant = None  # free the previous variant before building the next
            model = build_variant(self.model, method, factor=factor, original_max_len=self.cfg.original_max_len,
                                  builder=self.builder, layers=self.cfg.layers,
                                  length=self.cfg.original_max_len if needs_length(method) else None)
            self._variant = (key, model)
        return self._variant[1]

    def document(self, spec: str) -> Document:
        if spec not in self._docs:
            self._docs[spec] = load_document(spec)
        return self._docs[spec]

    def _bar(self, total: int, desc: str) -> Any:
        from tqdm import tqdm

        from posenc.progress import detail_disabled, detail_position

        # beneath the grid's overall bar (cell k of n); a terminal's only: in a log file one line per cell says enough
        return tqdm(total=total, desc=desc, unit="layer", leave=False, disable=detail_disabled(self.progress),
                    position=detail_position())

    # -- loss by position ------------------------------------------------------------------------

    def loss_settings(self, doc: Document) -> dict[str, Any]:
        out = {"model": self.model_id, "document": doc.source, "length": self.cfg.loss_length,
               "original_max_len": self.cfg.original_max_len}
        return out if self.cfg.layers is None else {**out, "layers": self.cfg.layers}

    def options(self, method: str, factor: float | None, length: int) -> dict[str, Any]:
        return method_options(method, factor=factor, original_max_len=self.cfg.original_max_len,
                              length=length if needs_length(method) else None)

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
        if needs_length(method):  # fixed-mode dynamic NTK: the base of the whole pass
            set_sequence_length(model, len(ids))
        began = time.perf_counter()
        bar = self._bar(len(getattr(model, "layers", [])), name)
        with sdpa_spy() as calls, layer_progress(model, bar):
            nll = token_nll(model, ids, chunk=self.cfg.chunk)
        bar.close()
        seconds = time.perf_counter() - began
        edges = bucket_edges(self.cfg.loss_length, self.cfg.original_max_len)
        cell = {"kind": "loss", "name": name, "document": doc.name, "source": doc.source, "method": method,
                "factor": factor, "options": self.options(method, factor, len(ids)), "layers": self.cfg.layers,
                "length": self.cfg.loss_length, "original_max_len": self.cfg.original_max_len,
                "mean_nll": float(nll.double().mean()), "buckets": bucket_perplexity(nll, edges),
                "curve": smoothed_curve(nll), "nll": [round(float(x), 4) for x in nll],
                "seconds": seconds, "sdpa": calls.to_dict(), "settings": settings}
        self.store.save(name, cell)
        first, last = (_ppl(cell["buckets"][i]["ppl"]) for i in (0, -1))  # None: a bucket with no token scored
        self.log(f"{name}: ppl first bucket {first}, last {last}  ({seconds:.0f} s)")
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

    # -- retrieval --------------------------------------------------------------------------------

    def trials(self, length: int, task: str = "passkey") -> list[Any]:
        """The trials of a task at ``length``: the same keys and depths for every method (seeded by seed, task and
        length; trial t in depth stratum t mod 5)."""
        return cell_trials(self.cfg.seed, task, length, self.cfg.passkey_trials, depths=self.cfg.depths)

    def _refuse_other_depths(self, name: str, settings: dict[str, Any]) -> None:
        """A saved cell made the same way but for its depth mode is recorded work: not recomputed over, refused by
        name (cells saved before the modes existed say "grid-5")."""
        saved = self.store.saved(name)
        theirs = None if saved is None else saved.get("settings", {}).get("depths")
        if theirs is None or theirs == settings["depths"]:
            return
        if {k: v for k, v in saved["settings"].items() if k != "depths"} == {
                k: v for k, v in settings.items() if k != "depths"}:
            mode = theirs.split("-")[0]
            raise ValueError(f"cell {name} in {self.store.root} holds {len(saved.get('trials', []))} trials made with "
                             f"--depths {mode}; pass --depths {mode} to continue it, or write to another --out")

    def passkey_cell(self, length: int, method: str, factor: float | None, task: str = "passkey") -> dict[str, Any]:
        """One (task, length, method, factor) cell, saved after every trial (a rerun resumes at the next)."""
        name = cell_name(task, method, _factor_tag(factor), f"L{length}")
        settings = {"model": self.model_id, "task": task, "length": length,
                    "original_max_len": self.cfg.original_max_len, "seed": self.cfg.seed,
                    "answer_tokens": self.cfg.answer_tokens, "depths": depth_setting(self.cfg.depths)}
        if self.cfg.layers is not None:
            settings["layers"] = self.cfg.layers
        self._refuse_other_depths(name, settings)
        cell = self.store.load(name, settings) or {
            "kind": "passkey", "task": task, "name": name, "method": method, "factor": factor, "length": length,
            "original_max_len": self.cfg.original_max_len, "layers": self.cfg.layers, "trials": [],
            "settings": settings}
        todo = self.trials(length, task)[len(cell["trials"]):]
        if not todo:
            self.log(f"{name}: done earlier, kept")
            return cell
        model = self.variant(method, factor)
        # the trials share everything before their first needle: keep those prefixes' caches (3 prompt
        # lengths hold one prefix per depth stratum); not where the base depends on each prompt's own length
        share = self.cfg.share_prefixes and not needs_length(method)
        prefixes = PrefixCaches(model, budget=3 * length) if share else None
        for trial in todo:
            if self._stop["stop"]:  # Ctrl-C / SIGTERM: the trials so far are saved; a rerun resumes at the next
                break
            prompt = build_prompt(self.tokenizer, trial)
            steps = answer_tokens(trial, self.cfg.answer_tokens)
            if needs_length(method):  # fixed-mode dynamic NTK: one base for prompt + answer
                set_sequence_length(model, len(prompt.ids) + steps)
            began = time.perf_counter()
            held, reused, _ = prefixes.plan(prompt.ids, prompt.first_needle) if prefixes else (0, 0, False)
            bar = self._bar(len(getattr(model, "layers", [])) * (steps + (held > reused)), name)  # + the prefix's pass
            with layer_progress(model, bar):
                answer = self.tokenizer.decode(greedy_continuation(
                    model, prompt.ids, steps, prefixes=prefixes, shared=prompt.first_needle))
            bar.close()
            found, fraction = score(answer, trial)
            cell["trials"].append({"keys": list(trial.answers), "key": trial.answers[0], "depth": trial.depth,
                                   "needles": [[n.key, n.depth] for n in trial.needles], "asked": trial.asked,
                                   "prompt_tokens": len(prompt.ids), "needle_at": prompt.spans[0][0],
                                   "reused_tokens": prefixes.reused if prefixes else 0,
                                   "answer": answer, "correct": found, "fraction": fraction,
                                   "seconds": time.perf_counter() - began})
            self.store.save(name, cell)
        correct = sum(t["correct"] for t in cell["trials"])
        self.log(f"{name}: {correct}/{len(cell['trials'])} found")
        return cell

    # -- everything ------------------------------------------------------------------------------

    def plan(self) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
        """Every cell in the grid's fixed order: (kind, run). Loss cells document by document, every variant (the
        in-range control after plain RoPE); then retrieval by task and length, every variant."""
        cells: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        for spec in self.cfg.documents:
            for method, factor in self.cfg.variants():
                cells.append(("loss", lambda s=spec, m=method, f=factor: self.loss_cell(s, m, f)))
                if method == PLAIN and self.cfg.loss_length > self.cfg.original_max_len:
                    cells.append(("control", lambda s=spec: self.control_cell(s)))
        for task in self.cfg.tasks:
            for length in self.cfg.passkey_lengths:
                for method, factor in self.cfg.variants():
                    cells.append(("passkey", lambda t=task, n=length, m=method, f=factor: self.passkey_cell(n, m, f, t)))
        return cells

    def run(self) -> list[dict[str, Any]]:
        """Every cell of the grid (or of its shard), in order; finished ones are read back, not recomputed."""
        for task in self.cfg.tasks:  # a too-short retrieval length fails now, not after hours of loss cells
            for length in self.cfg.passkey_lengths:
                build_prompt(self.tokenizer, make_trial(random.Random(0), task, length, index=0))
        from posenc.progress import Overall

        i, n = self.cfg.shard or (0, 1)
        todo = [(kind, run) for index, (kind, run) in enumerate(self.plan()) if index % n == i]
        from posenc.train import _stop_on_signal

        cells = []
        # the first SIGINT/SIGTERM stops after the current cell (a retrieval cell: its current trial), all saved
        with _stop_on_signal() as self._stop, Overall(len(todo), "extend", enabled=self.progress) as overall:
            for kind, run in todo:
                if self._stop["stop"]:
                    break
                overall.start(kind)
                began = time.perf_counter()
                cells.append(run())
                overall.done(kept=time.perf_counter() - began < 0.05)  # read back from an earlier run
        self.interrupted = self._stop["stop"]
        self._stop = {"stop": False}
        self._variant = None
        return cells


def config_dict(cfg: GridConfig) -> dict[str, Any]:
    return asdict(cfg)
