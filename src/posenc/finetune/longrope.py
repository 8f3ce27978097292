"""LongRoPE's evolutionary search for per-pair rescale factors (Ding et al., 2024, §3.2 and Algorithm 1).

An individual is (λ, n̂): one rescale factor λ_i ≥ 1 per rotated pair (pair i
is rotated by θ_i / λ_i) and the number n̂ of initial positions left
unscaled (rotated by θ_i). Its fitness is the perplexity of the model with
those factors on a few long samples at the target length s·L₀ (lower is
better). As in the paper:

* search space: λ_i ∈ [1, 1.25·s] on a grid of ``step`` (0.01), n̂ from
  {0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256} (those below the target length);
* optimised initial population: PI (λ_i = s), NTK-aware and YaRN factors, the
  rest mutations of them;
* each generation keeps the ``top_k`` best as parents and adds
  ``mutations`` mutated and ``crossovers`` crossed-over children;
* monotonically non-decreasing constraint: λ_i ≤ λ_{i+1} (lower-frequency
  pairs are interpolated at least as much).

Two choices the paper leaves open, made here: a mutation redraws each λ_i
(with probability ``mutate_prob``) uniformly between its neighbours' current
values, so every mutant satisfies the constraint without rejection (n̂ moves
to a neighbouring grid value with the same probability); a crossover takes
each λ_i and n̂ from either parent and is redrawn (up to 32 times) while it
breaks the constraint — after that the first parent is mutated instead.
Candidates already scored are never scored again.

The result is a ``rope-longrope`` configuration: short factors all 1 and
long factors λ. With n̂ = 0 every position uses λ (``max_seq_len`` fixed at
the target length); with n̂ > 0 the scheme's per-position mode is used with
``original_max_len = n̂`` — positions below n̂ take the short factors (1:
unscaled), the rest λ, exactly the paper's n̂ rule — and the attention
factor is given explicitly as LongRoPE/Phi-3's √(1 + ln s / ln L₀) for the
true L₀ (the scheme would otherwise compute it from n̂).

Reproducible: every random draw comes from one ``random.Random(seed)``.
Resumable: the state (population, every score, the generator's state) is
written atomically after each scored candidate and each generation; the same
call again continues where it stopped and ends with the same result.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc.validation import MAX_SEARCH as SEARCH_MAX

#: the paper's search space for n̂ (Table 9 of the arXiv version)
START_TOKENS = (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256)
STATE_FILE = "search-state.json"
RESULT_FILE = "result.json"


class SearchInterrupted(Exception):
    """The search was stopped by a signal between two scored candidates (its state is saved)."""


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """The search's settings (plain data; a resume must use the same).

    Args:
        factor: s, the extension ratio.
        original_max_len: L₀.
        length: tokens per sample scored (default s·L₀).
        samples: sample windows of the text (the paper: 5 PG19 documents).
        population: individuals per generation (paper 64).
        top_k: parents kept each generation (paper: population / 4).
        mutations, crossovers: children per generation (paper 16 and 16).
        generations: iterations (paper 40).
        mutate_prob: probability each entry mutates (paper 0.3).
        step: grid of the factors (paper 0.01).
        max_scale: λ_i ≤ max_scale·s (paper 1.25).
        start_tokens: candidate n̂ values ((0,) searches the factors only).
        seed: seeds every random choice (initial mutants, mutation, crossover, sample windows).
    """

    factor: float
    original_max_len: int
    length: int | None = None
    samples: int = 3
    population: int = 16
    top_k: int | None = None
    mutations: int = 4
    crossovers: int = 4
    generations: int = 8
    mutate_prob: float = 0.3
    step: float = 0.01
    max_scale: float = 1.25
    start_tokens: tuple[int, ...] = START_TOKENS
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.factor > 1 and math.isfinite(self.factor)):
            raise ValueError(f"the LongRoPE search extends the context: factor must be > 1, got {self.factor}")
        if self.length is None:
            object.__setattr__(self, "length", int(round(self.factor * self.original_max_len)))
        for name in ("samples", "population", "generations"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("samples", "population", "mutations", "crossovers", "generations"):
            value = getattr(self, name)
            if isinstance(value, int) and not 0 <= value <= SEARCH_MAX:  # each individual is scored: forward passes
                raise ValueError(f"--{name} {value}: at most {SEARCH_MAX} (the paper uses population 64, 16 "
                                 f"mutations and crossovers, 40 generations); each one costs forward passes")
        if self.top_k is None:
            object.__setattr__(self, "top_k", max(2, self.population // 4))
        if not 1 <= self.top_k <= self.population:
            raise ValueError(f"top_k must be in [1, population={self.population}], got {self.top_k}")
        if not 0 <= self.mutate_prob <= 1:
            raise ValueError(f"mutate_prob must be in [0, 1], got {self.mutate_prob}")
        bad = [n for n in self.start_tokens if isinstance(n, bool) or not isinstance(n, int) or n < 0]
        if bad:  # n̂ counts the first tokens kept unscaled: a negative one is no count, not one "above the length"
            raise ValueError(f"--start-tokens {', '.join(map(str, bad))}: n̂ (the first tokens left unscaled) must be "
                             "an integer >= 0, e.g. --start-tokens 0,4,8")
        starts = tuple(sorted({int(n) for n in self.start_tokens if 0 <= int(n) < self.length}))
        if not starts:
            raise ValueError(f"no n̂ candidate in {list(self.start_tokens)} is below the length {self.length}")
        object.__setattr__(self, "start_tokens", starts)

    @property
    def upper(self) -> float:
        return self.max_scale * self.factor

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))


Individual = tuple[tuple[float, ...], int]  # (λ per pair, n̂)


def key(ind: Individual) -> str:
    return json.dumps([list(ind[0]), ind[1]])


def monotone(lam: Sequence[float]) -> bool:
    return all(a <= b + 1e-12 for a, b in zip(lam[:-1], lam[1:]))


def attention_factor(factor: float, original_max_len: int) -> float:
    """LongRoPE's (Phi-3's) √(1 + ln s / ln L₀)."""
    return math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def scheme_options(ind: Individual, cfg: SearchConfig) -> dict[str, Any]:
    """The ``rope-longrope`` options that rotate as (λ, n̂) says (see the module docstring)."""
    lam, n_hat = ind
    options: dict[str, Any] = {"short_factor": [1.0] * len(lam), "long_factor": [float(v) for v in lam],
                               "factor": float(cfg.factor),
                               "attention_factor": attention_factor(cfg.factor, cfg.original_max_len)}
    if n_hat == 0:
        options.update(original_max_len=cfg.original_max_len, max_seq_len=int(cfg.length))
    else:
        options.update(original_max_len=int(n_hat), max_seq_len=None)
    return options


def initial_factors(method: str, *, rotary_dim: int, base: float, factor: float, original_max_len: int) -> list[float]:
    """λ_i = θ_i / θ'_i of PI (``linear``), NTK-aware (``ntk``) or YaRN (``yarn``) — the paper's seeds."""
    from posenc.positions.rotary import rope_frequencies
    from posenc.positions.rotary_scaling import ROPE_SCALINGS

    params: dict[str, Any] = {"factor": factor}
    if method == "yarn":
        params["original_max_len"] = original_max_len
    scaled, _ = ROPE_SCALINGS[method](rotary_dim, base, **params)
    return (rope_frequencies(rotary_dim, base) / scaled).tolist()


class Search:
    """The search against one model; ``run()`` returns the best individual's result (and writes it to ``out``).

    Args:
        model: the checkpoint (plain RoPE), e.g. ``posenc.finetune.model.load_start(...).model``.
        tokens: the text the samples are cut from (token ids).
        cfg: the SearchConfig.
        out: folder for the state and the result (None: in memory only, not resumable).
        objective: (model variant) → loss; default mean NLL over the samples.
    """

    def __init__(self, model: nn.Module, tokens: Tensor, cfg: SearchConfig, *, out: str | Path | None = None,
                 progress: bool = True, log: Callable[[str], None] = print) -> None:
        self.model, self.cfg, self.progress, self.log = model, cfg, progress, log
        self.out = None if out is None else Path(out)
        scheme = model.layers[0].attn.position
        self.rotary_dim, self.base = int(scheme.rotary_dim), float(scheme.base)
        self.pairs = self.rotary_dim // 2
        tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(-1)
        if tokens.numel() < cfg.length:
            raise ValueError(f"the search text has {tokens.numel()} tokens, fewer than one sample of {cfg.length}")
        gen = torch.Generator().manual_seed(cfg.seed)
        starts = torch.randint(0, tokens.numel() - cfg.length + 1, (cfg.samples,), generator=gen).tolist()
        self.samples = [tokens[s:s + cfg.length] for s in starts]
        self.scores: dict[str, float] = {}
        self.rng = random.Random(cfg.seed)
        self.generation = 0
        self._stop: dict[str, bool] = {"stop": False}  # set by the first Ctrl-C / SIGTERM during run()
        self.population: list[Individual] = []
        self.history: list[dict[str, Any]] = []
        self.seconds = 0.0
        self._pending: tuple[list[Individual], Any] | None = None

    # -- scoring ---------------------------------------------------------------------------------
    def objective(self, ind: Individual) -> float:
        """Mean next-token loss of the model with (λ, n̂) over the samples (perplexity = exp of it)."""
        from posenc.extend.loss import token_nll
        from posenc.extend.methods import build_variant

        variant = build_variant(self.model, "rope-longrope", factor=self.cfg.factor,
                                original_max_len=self.cfg.original_max_len, searched=scheme_options(ind, self.cfg))
        losses = [token_nll(variant, s).double().mean().item() for s in self.samples]
        return float(sum(losses) / len(losses))

    def score(self, ind: Individual) -> float:
        k = key(ind)
        if k not in self.scores:
            if self._stop["stop"]:  # Ctrl-C / SIGTERM: every scored candidate is saved; a rerun resumes here
                raise SearchInterrupted
            self.scores[k] = self.objective(ind)
            self.save()
        return self.scores[k]

    # -- the operators ---------------------------------------------------------------------------
    def snap(self, value: float) -> float:
        """Onto the grid of ``step``, inside [1, upper]."""
        step = self.cfg.step
        return round(min(self.cfg.upper, max(1.0, round(value / step) * step)), 10)

    def repair(self, lam: Sequence[float]) -> tuple[float, ...]:
        """Snap, then the running maximum (only for the seeds: PI/NTK/YaRN are monotone up to round-off)."""
        out, top = [], 1.0
        for v in lam:
            top = max(top, self.snap(v))
            out.append(top)
        return tuple(out)

    def mutate(self, ind: Individual) -> Individual:
        lam = list(ind[0])
        for i in range(len(lam)):
            if self.rng.random() < self.cfg.mutate_prob:
                lo = lam[i - 1] if i > 0 else 1.0
                hi = lam[i + 1] if i + 1 < len(lam) else self.cfg.upper
                lam[i] = min(hi, max(lo, self.snap(self.rng.uniform(lo, hi))))
        n_hat = ind[1]
        starts = self.cfg.start_tokens
        if len(starts) > 1 and self.rng.random() < self.cfg.mutate_prob:
            j = starts.index(n_hat) if n_hat in starts else 0
            n_hat = starts[min(len(starts) - 1, max(0, j + self.rng.choice((-1, 1))))]
        return tuple(lam), n_hat

    def crossover(self, a: Individual, b: Individual) -> Individual:
        for _ in range(32):
            lam = tuple(x if self.rng.random() < 0.5 else y for x, y in zip(a[0], b[0]))
            if monotone(lam):
                return lam, (a[1] if self.rng.random() < 0.5 else b[1])
        return self.mutate(a)

    def seeds(self) -> list[Individual]:
        """PI, NTK-aware and YaRN factors (with n̂ = 0), each once."""
        out: list[Individual] = []
        for method in ("linear", "ntk", "yarn"):
            lam = self.repair(initial_factors(method, rotary_dim=self.rotary_dim, base=self.base,
                                              factor=self.cfg.factor, original_max_len=self.cfg.original_max_len))
            if (lam, 0) not in out:
                out.append((lam, 0))
        return out

    def fresh_children(self, parents: list[Individual], count: int, make: Callable[[], Individual]) -> list[Individual]:
        """``count`` children not among ``parents`` nor each other (a bounded number of tries)."""
        seen = {key(p) for p in parents}
        out: list[Individual] = []
        for _ in range(count * 20):
            if len(out) == count:
                break
            child = make()
            if key(child) not in seen:
                seen.add(key(child))
                out.append(child)
        return out

    # -- state -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        population, rng = self._pending if self._pending is not None else (self.population, self.rng.getstate())
        version, internal, gauss = rng
        return {"config": self.cfg.to_dict(), "generation": self.generation,
                "population": [[list(lam), n] for lam, n in population], "scores": self.scores,
                "rng": [version, list(internal), gauss], "history": self.history, "seconds": self.seconds}

    def save(self) -> None:
        if self.out is None:
            return
        from posenc.checkpoint import atomic_write_text

        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / STATE_FILE, json.dumps(self.state()))

    def load(self) -> bool:
        """Restore a saved state; False when there is none. A state from other settings is refused."""
        if self.out is None or not (self.out / STATE_FILE).exists():
            return False
        from posenc.validation import UnreadableFile, read_json

        fix = "delete it to start the search again, or give another --out"
        try:
            state = read_json(self.out / STATE_FILE, "search state", fix=fix)
        except UnreadableFile as err:
            raise ValueError(str(err)) from None
        if not isinstance(state.get("config"), dict):
            raise ValueError(f"{self.out / STATE_FILE}: not a search state (no config object); {fix}")
        if state.get("config") != self.cfg.to_dict():
            diff = {k: (state["config"].get(k), v) for k, v in self.cfg.to_dict().items()
                    if state.get("config", {}).get(k) != v}
            raise ValueError(f"{self.out / STATE_FILE} holds a search with other settings ({diff}); resume with "
                             "the same options or give another --out")
        self.generation = int(state["generation"])
        self.population = [(tuple(lam), int(n)) for lam, n in state["population"]]
        self.scores = {k: float(v) for k, v in state["scores"].items()}
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.history, self.seconds = state["history"], float(state.get("seconds", 0.0))
        return True

    # -- the loop --------------------------------------------------------------------------------
    def ranked(self, population: list[Individual]) -> list[Individual]:
        return sorted(population, key=lambda ind: (self.score(ind), key(ind)))

    def run(self) -> dict[str, Any]:
        """The search to its last generation, resuming a saved state; ``interrupted`` in the result (and no
        best candidate) when the first SIGINT/SIGTERM stopped it before its next candidate, every score saved."""
        from posenc.train import _stop_on_signal

        with _stop_on_signal() as self._stop:
            try:
                return self._run()
            except SearchInterrupted:
                self.save()
                return {"interrupted": True, "generation": self.generation, "scored": len(self.scores)}
            finally:
                self._stop = {"stop": False}

    def _run(self) -> dict[str, Any]:
        from tqdm.auto import tqdm

        began = time.perf_counter()
        resumed = self.load()
        if resumed:
            self.log(f"longrope search: resuming at generation {self.generation} ({len(self.scores)} scored)")
        cfg = self.cfg
        bar = tqdm(total=cfg.generations, initial=self.generation, desc="longrope search", leave=False,
                   disable=not self.progress)
        if self.generation == 0:
            if not self.population:  # the initial population is drawn once, then saved before any scoring
                seeds = self.seeds()
                pool = list(seeds)
                extra = self.fresh_children(pool, cfg.population - len(pool),
                                            lambda: self.mutate(self.rng.choice(seeds)))
                self.population = pool + extra
                self.save()
            ranked = self.ranked(self.population)
            self.history.append(self.record(0, ranked))
            self.generation = 1
            self.save()
        while self.generation <= cfg.generations:
            if self._stop["stop"]:
                raise SearchInterrupted
            # while this generation is scored, the saved state is that of its start (the previous
            # population and the generator before drawing): a resume redraws the very same children
            self._pending = (list(self.population), self.rng.getstate())
            parents = self.ranked(self.population)[: cfg.top_k]
            mutants = self.fresh_children(parents, cfg.mutations, lambda: self.mutate(self.rng.choice(parents)))
            crosses = self.fresh_children(parents + mutants, cfg.crossovers,
                                          lambda: self.crossover(*self.rng.sample(parents, 2))
                                          if len(parents) > 1 else self.mutate(parents[0]))
            ranked = self.ranked(parents + mutants + crosses)
            self._pending = None
            self.population = ranked
            self.history.append(self.record(self.generation, ranked))
            self.generation += 1
            now = time.perf_counter()
            self.seconds += now - began
            began = now
            self.save()
            bar.update(1)
            best = self.history[-1]
            self.log(f"generation {best['generation']}: best ppl {best['best_ppl']:.4f} (n̂ = {best['best_start']}, "
                     f"{best['scored']} scored)")
        bar.close()
        return self.result()

    def record(self, generation: int, ranked: list[Individual]) -> dict[str, Any]:
        best = ranked[0]
        return {"generation": generation, "best_loss": self.score(best), "best_ppl": math.exp(self.score(best)),
                "best_start": best[1], "scored": len(self.scores)}

    def result(self) -> dict[str, Any]:
        ranked = self.ranked(self.population)
        best = ranked[0]
        seeds = {name: self.score(s) for name, s in zip(("pi", "ntk", "yarn"), self.seeds())}
        out = {"method": "rope-longrope", "factor": self.cfg.factor, "original_max_len": self.cfg.original_max_len,
               "length": self.cfg.length, "start_tokens": best[1], "rescale_factors": list(best[0]),
               "options": scheme_options(best, self.cfg), "best_loss": self.score(best),
               "best_ppl": math.exp(self.score(best)),
               "seed_losses": seeds, "history": self.history, "scored": len(self.scores),
               "config": self.cfg.to_dict(), "seconds": self.seconds}
        if self.out is not None:
            from posenc.checkpoint import atomic_write_text

            atomic_write_text(self.out / RESULT_FILE, json.dumps(out, indent=1))
        return out
