"""The mini-scale replication of the fine-tuning claims (PI, YaRN, LongRoPE papers): pretrain, search, fine-tune, report.

Stages, each resumable, all under one folder ``OUT``:

1. ``pretrain`` — a small causal LM (``DecoderConfig``: pre-norm, RMSNorm,
   SwiGLU, RoPE) trained from scratch at L₀ on ``bible-rest`` with the byte
   tokenizer (``OUT/pretrain``; its loss curve is in ``result.json``).
2. ``search`` — LongRoPE's factors for every extension factor s
   (``OUT/longrope-x<s>``), against the pretrained model, on ``bible-rest``.
3. ``cells`` — one fine-tuning run per (method, s, seed) at length s·L₀
   (``OUT/cells/<method>-x<s>-seed<n>.json``): the same windows for every
   method (the seed draws them), measured before fine-tuning (step 0) and at
   every step of ``steps``. The learning rate is constant after the warm-up,
   so the model at step 50 of a 400-step run is the model a 50-step run would
   give. Cells are sharded (``shard=(i, n)``: cells i, i + n, …) or taken as
   a queue (``shard=ANY``: each process the next cell no other holds — s = 8
   cells cost 2–3× s = 4 ones, so fixed shards end hours apart), saved as
   they finish, resumed from their checkpoints when stopped.
4. ``report`` — ``results.json``, ``results.md`` and PNG plots of perplexity
   against position, per factor and step count, with intervals over seeds.

Measures (``posenc.finetune.measure``): perplexity by position up to
``eval_factor``·L₀ on ``bible`` (Genesis–Numbers) and ``licenses`` — text
that neither pretraining nor fine-tuning reads — and passkey retrieval.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from posenc.checkpoint import RunInUse, atomic_write_text, run_lock
from posenc.validation import dumps

METHODS = ("rope", "rope-linear", "rope-ntk", "rope-yarn", "rope-longrope")
#: ``Replication.run(shard=ANY)``: processes share the cells as a queue (``--shard any``)
ANY = "any"


@dataclass(frozen=True, kw_only=True)
class ReplicationConfig:
    """The whole replication (plain data; every stage checks its part on resume).

    Model (pretraining): ``dim``, ``layers``, ``heads``, ``ffn_dim`` at L₀ = ``original_max_len``, byte
    tokens, ``pretrain_steps`` updates of ``pretrain_batch`` windows at ``pretrain_lr`` (warm-up + cosine).
    Fine-tuning: every method × factor × seed, ``max(steps)`` updates of ``batch_size`` windows of s·L₀
    at a constant ``lr`` after ``warmup_steps``; measured at every entry of ``steps`` (0 = training-free).
    Search: LongRoPE's (``posenc.finetune.longrope.SearchConfig``) with these sizes.
    Measures: ``eval_factor``·L₀ tokens of each of ``documents``; passkey at ``passkey_factors``·L₀.
    Text: pretraining, search and fine-tuning read ``train_text`` (none of the measured documents).
    ``train_factor``: fine-tune on windows of train_factor·L₀ instead of s·L₀ (None: each factor's own s). Below
    s it asks the YaRN paper's "train short" question — a scale made for s·L₀ fine-tuned on shorter data: does it
    hold on [train_factor·L₀, s·L₀)? (Peng et al. fine-tune their s = 32 model on 64k-token windows and read it
    to 128k.)
    """

    original_max_len: int = 256
    dim: int = 256
    layers: int = 6
    heads: int = 4
    ffn_dim: int = 688
    pretrain_steps: int = 4000
    pretrain_batch: int = 16
    pretrain_lr: float = 1e-3
    pretrain_warmup: int = 200
    methods: tuple[str, ...] = METHODS
    factors: tuple[float, ...] = (4.0, 8.0)
    steps: tuple[int, ...] = (0, 50, 200, 400)
    seeds: tuple[int, ...] = (0, 1, 2)
    batch_size: int = 2
    lr: float = 1e-4
    warmup_steps: int = 20
    search_population: int = 16
    search_generations: int = 8
    search_samples: int = 3
    eval_factor: int = 16
    documents: tuple[str, ...] = ("bible", "licenses")
    passkey_factors: tuple[float, ...] = (4.0, 8.0)
    passkey_trials: int = 10
    train_text: str = "bible-rest"
    threads: int | None = None
    train_factor: float | None = None

    def __post_init__(self) -> None:
        from posenc.extend.methods import check_methods

        check_methods(self.methods, searched=True)
        if self.train_factor is not None:
            bad = [f for f in self.factors if not 1 < self.train_factor <= f]
            if bad or not math.isfinite(self.train_factor):
                raise ValueError(f"train_factor must be finite, above 1 and at most every factor (the data are "
                                 f"shorter than the scale, not longer); got {self.train_factor} with factors "
                                 f"{list(self.factors)}")
        if sorted(set(self.steps)) != list(self.steps) or self.steps[0] < 0:
            raise ValueError(f"steps must be increasing and >= 0, got {list(self.steps)}")
        for name in ("methods", "factors", "steps", "seeds", "documents", "passkey_factors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    def cells(self) -> list[tuple[str, float, int]]:
        """(method, factor, seed), seeds outermost (a partial run covers every method first)."""
        return [(m, f, s) for s in self.seeds for f in self.factors for m in self.methods]

    def train_length(self, factor: float) -> int:
        """Tokens per fine-tuning window at extension factor s: s·L₀, or train_factor·L₀ when set."""
        return int((self.train_factor or factor) * self.original_max_len)

    def trains_short(self, factor: float) -> bool:
        """Whether the fine-tuning windows end before the scale's s·L₀ (a train-short grid)."""
        return self.train_length(factor) < int(factor * self.original_max_len)

    def cell_name(self, method: str, factor: float, seed: int) -> str:
        return cell_name(method, factor, seed, None if self.train_factor == factor else self.train_factor)

    @property
    def max_steps(self) -> int:
        return max(self.steps)

    @property
    def eval_every(self) -> int:
        positive = [s for s in self.steps if s > 0]
        return math.gcd(*positive) if positive else 0


QUICK = ReplicationConfig(original_max_len=64, dim=64, layers=2, heads=2, ffn_dim=172, pretrain_steps=300,
                          pretrain_batch=8, pretrain_lr=3e-3, pretrain_warmup=30, factors=(4.0,), steps=(0, 10, 20),
                          seeds=(0,), batch_size=2, lr=3e-4, warmup_steps=5, search_population=6,
                          search_generations=2, search_samples=2, eval_factor=16, documents=("bible",),
                          passkey_factors=(8.0,), passkey_trials=4)


def cell_name(method: str, factor: float, seed: int, train_factor: float | None = None) -> str:
    """``rope-yarn-x8-seed0``; fine-tuned on shorter windows than the scale: ``rope-yarn-x8-ft4-seed0``."""
    return f"{method}-x{factor:g}" + ("" if train_factor is None else f"-ft{train_factor:g}") + f"-seed{seed}"


class Replication:
    """Runs the stages of a ``ReplicationConfig`` in ``out``."""

    def __init__(self, cfg: ReplicationConfig, out: str | Path, *, progress: bool = True,
                 log: Callable[[str], None] = print) -> None:
        self.cfg, self.out, self.progress, self.log = cfg, Path(out), progress, log
        self._tokens: torch.Tensor | None = None
        self.interrupted = False  #: a cell was stopped by Ctrl-C / SIGTERM (its checkpoint saved); no report then

    # -- shared pieces ---------------------------------------------------------------------------
    def tokens(self) -> torch.Tensor:
        """``train_text`` (``bible-rest``) as bytes (read once)."""
        from posenc.finetune.data import ByteTokenizer, token_stream, training_document

        if self._tokens is None:
            self._tokens = token_stream(training_document(self.cfg.train_text), ByteTokenizer())
        return self._tokens

    def measure_spec(self) -> Any:
        from posenc.finetune.measure import MeasureSpec

        l0 = self.cfg.original_max_len
        return MeasureSpec(documents=self.cfg.documents, length=self.cfg.eval_factor * l0, original_max_len=l0,
                           passkey_lengths=tuple(int(f * l0) for f in self.cfg.passkey_factors),
                           passkey_trials=self.cfg.passkey_trials, seed=0)

    def _done(self, folder: Path, steps: int) -> bool:
        data = self._read(folder / "result.json", "run result")
        return data is not None and data.get("step") == steps and not data.get("interrupted")

    def _read(self, path: Path, what: str) -> dict[str, Any] | None:
        """A JSON file of the results folder (``posenc.validation.read_json``); None when absent or not one —
        then named, and the work it stood for done again."""
        from posenc.validation import UnreadableFile, read_json

        if not path.exists() and not path.is_symlink():
            return None
        try:
            return read_json(path, what, fix="the grid redoes what it stood for")
        except UnreadableFile as err:
            self.log(f"not a {what}, redone: {err.path} ({err.reason})")
            return None
        except FileNotFoundError:
            return None

    # -- 1. pretraining ----------------------------------------------------------------------------
    def pretrain(self) -> Path:
        from posenc.finetune.data import ByteTokenizer
        from posenc.finetune.model import Start
        from posenc.finetune.run import FinetuneConfig, finetune
        from posenc.models.decoder import DecoderConfig, build_decoder

        c, folder = self.cfg, self.out / "pretrain"
        if self._done(folder, c.pretrain_steps):
            self.log(f"pretrain: done earlier ({folder})")
            return folder / "checkpoints"
        l0 = c.original_max_len
        torch.manual_seed(0)
        model = build_decoder(DecoderConfig(vocab_size=256, dim=c.dim, num_layers=c.layers, num_heads=c.heads,
                                        ffn_dim=c.ffn_dim, max_position_embeddings=l0, tie_embeddings=True,
                                        position="rope", position_options={"pairing": "interleaved"}))
        start = Start(model, ByteTokenizer(), l0, f"fresh Decoder (seed 0) {c.dim}x{c.layers}", "fresh")
        ft = FinetuneConfig(method="rope", factor=None, original_max_len=l0, length=l0, batch_size=c.pretrain_batch,
                            steps=c.pretrain_steps, lr=c.pretrain_lr, min_lr=c.pretrain_lr / 10,
                            warmup_steps=c.pretrain_warmup, weight_decay=0.1, betas=(0.9, 0.95), seed=0,
                            eval_every=max(1, c.pretrain_steps // 4), checkpoint_every=max(1, c.pretrain_steps // 20),
                            log_every=10,
                            measure=replace(self.measure_spec(), length=2 * l0, passkey_lengths=(), passkey_trials=0))
        resume = (folder / "checkpoints" / "latest").exists()
        self.log(f"pretrain: {c.pretrain_steps} steps at L0 = {l0}" + (" (resuming)" if resume else ""))
        finetune(start, ft, out_dir=folder, resume=resume, progress=self.progress, tokens=self.tokens(), log=self.log)
        return folder / "checkpoints"

    def start(self) -> Any:
        from posenc.finetune.model import load_start

        folder = self.out / "pretrain"
        if not self._done(folder, self.cfg.pretrain_steps):
            raise FileNotFoundError(f"{folder}: the pretrained model is not finished; run the pretrain stage first "
                                    "(shard 0, or --stage pretrain)")
        return load_start(folder / "checkpoints")

    # -- 2. LongRoPE search ------------------------------------------------------------------------
    def search_config(self, factor: float) -> Any:
        from posenc.finetune.longrope import SearchConfig

        c = self.cfg
        return SearchConfig(factor=factor, original_max_len=c.original_max_len, samples=c.search_samples,
                            population=c.search_population, mutations=max(1, c.search_population // 4),
                            crossovers=max(1, c.search_population // 4), generations=c.search_generations, seed=0)

    def search(self, factor: float) -> dict[str, Any]:
        from posenc.finetune.longrope import RESULT_FILE, Search

        folder = self.out / f"longrope-x{factor:g}"
        cfg = self.search_config(factor)
        saved = self._read(folder / RESULT_FILE, "search result")
        if saved is not None and saved.get("config") == cfg.to_dict():
            return saved
        self.log(f"search: LongRoPE factors for s = {factor:g}")
        return Search(self.start().model, self.tokens(), cfg, out=folder, progress=self.progress, log=self.log).run()

    def searched(self, factor: float) -> dict[str, Any]:
        from posenc.finetune.model import read_searched

        folder = self.out / f"longrope-x{factor:g}"
        if not (folder / "result.json").exists():
            raise FileNotFoundError(f"{folder}: no LongRoPE search result; run the search stage first")
        return read_searched(folder)

    # -- 3. the fine-tuning cells ----------------------------------------------------------------
    def cell(self, method: str, factor: float, seed: int, start: Any, *, claim: bool = False
             ) -> dict[str, Any] | None:
        """One cell: its saved result, or its fine-tuning run (None: interrupted). With ``claim`` the cell's run
        folder is held first (``run_lock``): a cell another process holds raises ``RunInUse`` at once."""
        from posenc.finetune.run import FinetuneConfig

        c, l0 = self.cfg, self.cfg.original_max_len
        name = c.cell_name(method, factor, seed)
        ft = FinetuneConfig(method=method, factor=None if method == "rope" else factor, original_max_len=l0,
                            searched=self.searched(factor) if method == "rope-longrope" else None,
                            length=c.train_length(factor), batch_size=c.batch_size, steps=max(1, c.max_steps), lr=c.lr,
                            min_lr=c.lr, warmup_steps=c.warmup_steps, seed=seed, eval_every=c.eval_every,
                            eval_steps=tuple(s for s in c.steps if s > 0),
                            checkpoint_every=max(1, c.eval_every), measure=self.measure_spec())
        saved = self._saved(name, ft)
        if saved is not None:
            return saved
        if not claim:
            return self._fine_tune(name, method, factor, seed, ft, start)
        with run_lock(self.out / "runs" / name, what=f"cell {name}",
                      fix="another process of this grid is fine-tuning it (--shard any takes the next free cell)"):
            # the holder may have finished it between the check above and the lock
            return self._saved(name, ft) or self._fine_tune(name, method, factor, seed, ft, start)

    def _saved(self, name: str, ft: Any) -> dict[str, Any] | None:
        """The cell's saved result, if one was made with this configuration."""
        saved = self._read(self.out / "cells" / f"{name}.json", "cell")
        if saved is not None and saved.get("config") == ft.to_dict():
            self.log(f"{name}: done earlier, kept")
            return saved
        return None

    def _fine_tune(self, name: str, method: str, factor: float, seed: int, ft: Any, start: Any
                   ) -> dict[str, Any] | None:
        from posenc.finetune.run import finetune

        c = self.cfg
        path = self.out / "cells" / f"{name}.json"
        run = self.out / "runs" / name
        for other in c.seeds:  # the measures before fine-tuning do not depend on the seed: reuse another's
            sibling = self.out / "runs" / c.cell_name(method, factor, other) / "before.json"
            if other != seed and sibling.exists() and not (run / "before.json").exists():
                run.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(sibling, run / "before.json")
                break
        resume = (run / "checkpoints" / "latest").exists()
        self.log(f"{name}: fine-tuning {ft.steps} steps at {ft.length} tokens" + (" (resuming)" if resume else ""))
        began = time.perf_counter()
        res = finetune(start, ft, out_dir=run, resume=resume, progress=self.progress, tokens=self.tokens(),
                       log=self.log)
        if res.interrupted:
            self.log(f"{name}: interrupted; run the same command again to continue")
            return None
        wanted = set(c.steps)
        measures = {"0": res.before} if 0 in wanted else {}
        measures.update({str(e["step"]): {k: v for k, v in e.items() if k != "step"} for e in res.evals
                         if e["step"] in wanted})
        cell = {"name": name, "method": method, "factor": factor, "seed": seed, "config": ft.to_dict(),
                "measures": measures, "history": res.history, "seconds": res.total_seconds,
                "seconds_this_call": time.perf_counter() - began, "peak_memory_mb": res.peak_memory_mb,
                "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, dumps(cell, indent=1))
        shutil.rmtree(run / "checkpoints", ignore_errors=True)  # the cell's JSON is the result
        return cell

    def run(self, *, stages: tuple[str, ...] = ("pretrain", "search", "cells", "report"),
            shard: tuple[int, int] | str = (0, 1)) -> list[dict[str, Any]]:
        """The stages asked for. ``shard``: (i, n) runs cells i, i + n, … (shard 0 also pretrains and searches,
        one shard also reports); ``ANY`` takes the cells as a queue — each process the next cell that is neither
        saved nor held by another (pretraining and search done before; no report)."""
        queue = shard == ANY
        if not queue and not (isinstance(shard, tuple) and len(shard) == 2 and 0 <= shard[0] < shard[1]):
            raise ValueError(f"shard must be INDEX/COUNT with 0 <= INDEX < COUNT or {ANY!r}, got {shard!r}")
        index, count = (0, 0) if queue else shard  # a queue process neither pretrains, searches nor reports
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / "replication.json", dumps(self.cfg.to_dict(), indent=1))
        if "pretrain" in stages and index == 0 and not queue:
            self.pretrain()
        if "search" in stages and index == 0 and not queue and "rope-longrope" in self.cfg.methods:
            for factor in self.cfg.factors:
                self.search(factor)
        cells = []
        if "cells" in stages:
            from posenc.progress import Overall

            start = self.start()
            todo = self.cfg.cells() if queue else self.cfg.cells()[index::count]
            # the grid's bar (cell k of n, elapsed, time left) above each cell's training bar, never restarted
            with Overall(len(todo), "finetune grid", enabled=self.progress) as overall:
                for method, factor, seed in todo:
                    name = self.cfg.cell_name(method, factor, seed)
                    overall.start(name)
                    began = time.perf_counter()
                    try:
                        cell = self.cell(method, factor, seed, start, claim=queue)
                    except RunInUse as held:
                        if not queue:
                            raise
                        self.log(f"{name}: skipped, {str(held).split(';')[0]}")
                        overall.done(kept=True)
                        continue
                    if cell is None:  # interrupted (Ctrl-C / SIGTERM): the cell's checkpoint is saved
                        self.interrupted = True
                        break
                    cells.append(cell)
                    overall.done(kept=time.perf_counter() - began < 0.05)  # a saved cell read back
        if "report" in stages and count == 1 and not self.interrupted:
            from posenc.finetune.report import write_report

            write_report(self.out, self.cfg)
        return cells
