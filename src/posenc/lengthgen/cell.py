"""One cell of the benchmark: train a (task, scheme, seed) model until it learns, then test every length.

The convergence gate: every ``train.eval_every`` updates the model answers a
held-out set of *training-length* examples (``gate_examples`` per length, drawn
from their own seed); training stops as soon as its exact match reaches
``threshold``, or when the step budget ``train.steps`` runs out. A cell that
never reached the threshold is reported as *not learned*; the report keeps it
out of every comparison beyond the training lengths (its zeros would say
"did not learn", not "did not generalise").

Then every length from ``train_min`` to ``test_max`` is tested on a fixed set
(``eval_examples`` per length, one seed shared by every scheme and seed), and
each example's verdict (exact match, see :mod:`posenc.tasks.framing`) is kept,
so the report can compute intervals and paired comparisons from the raw hits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from posenc.lengthgen.config import CellConfig
from posenc.positions import lookup
from posenc.tasks import Example, Task, collate, correct, loss_sum, sequence_length
from posenc.train import dist_info, step_generator, train
from posenc.models import build_decoder_only, build_encoder_decoder

TEST_SEED = 2_147_483_629  #: the test set, shared by every scheme and seed
GATE_SEED = 2_147_483_587  #: the gate's held-out training-length set (disjoint draws from the test set's)


def valid_lengths(task: Task, lo: int, hi: int) -> list[int]:
    """Lengths in lo..hi the task can produce (SCAN has gaps)."""
    have = getattr(task, "lengths", None)
    allowed = set(have()) if callable(have) else None
    return [n for n in range(lo, hi + 1) if allowed is None or n in allowed]


def example_set(task: Task, lengths: Sequence[int], per_length: int, seed: int) -> dict[int, list[Example]]:
    """``per_length`` examples of each length, from ``seed`` alone."""
    gen = torch.Generator().manual_seed(seed)
    return {n: task.examples([n] * per_length, gen) for n in lengths}


def position_options(scheme: str, config: CellConfig, *, train_len: int) -> dict[str, Any]:
    """The scheme options the benchmark sets beyond what the model builder gives every scheme.

    The builder hands each scheme the model's context through the registry
    (:func:`posenc.positions.model_context`): ``max_length`` — here the longest *test* sequence,
    set on the cell's ModelConfig by :func:`build_model` — and causal or not. So a learned table gets
    a row for every test position (those past the training lengths get no gradient), randomized
    positions sample from ``[0, max_length)`` while training (Ruoss et al. 2023: every test position
    must lie inside that range), and T5 gets one-directional buckets in a causal decoder.

    What is left is how randomized positions are evaluated and T5's layout.

    randomized: ``eval_positions="sampled"`` — the gate and the test draw a sorted subset of
    ``[0, max_length)`` for every example, as in training, as Ruoss et al. evaluate (their reference
    code draws in every forward pass). With the contiguous positions 0 … T − 1 instead, a model that
    trained only on gapped positions meets an arrangement it never saw and fails the gate in range
    (what an earlier run of this benchmark measured: 61–93 % on copy, reverse and SCAN).

    t5: T5's rule (half the buckets exact distances, half log-spaced up to
    ``max_distance``, farther ones share the last) with 16 buckets and ``max_distance`` = the
    longest training sequence ``train_len``. In a causal model that makes distances 0–7 exact and
    8 … ``train_len`` log-spaced, so training reaches every bucket, and every longer test distance
    shares the last bucket, which training reached. T5's own 32 buckets / 128 would give distances
    0–15 exact buckets and leave most buckets untrained at these lengths (a test distance past the
    training lengths would meet a bias that was never trained — what an earlier run of this
    benchmark measured, not a property of relative bias). The paper trains on sequences long enough
    to use T5's log range.

    fope: ``train_length`` = the longest training sequence (Hua et al. clip the frequencies whose
    wavelength exceeds the training length; the model's ``max_length`` here is the longest test one).

    ``config.model.position_options`` override these.
    """
    options: dict[str, Any] = {}
    if scheme == "randomized":
        options.update(eval_positions="sampled")
    if scheme == "fope":  # FoPE clips the frequencies that do not turn once within the *training* lengths
        options.update(train_length=train_len)
    if scheme == "t5":
        # at least 9: beyond the 8 exact distances of the causal layout (an encoder–decoder's decoder is causal)
        options.update(num_buckets=16, max_distance=max(train_len, 9))
    return {**options, **config.model.position_options}


def build_model(scheme: str, vocab_size: int, config: CellConfig, *, max_len: int, train_len: int) -> nn.Module:
    """The model of one cell: ``config.model`` with this task's vocabulary, this scheme, ``max_len`` positions."""
    cls = lookup(scheme)
    model = replace(config.model, vocab_size=vocab_size, position=scheme, max_length=max_len,
                    position_options=position_options(scheme, config, train_len=train_len),
                    tie_embeddings=config.model.tie_embeddings and cls.extra_width == 0,
                    share_embeddings=config.framing == "encoder-decoder")
    return build_decoder_only(model) if config.framing == "decoder" else build_encoder_decoder(model)


def sequence_lengths(task: Task, config: CellConfig) -> tuple[int, int]:
    """(longest test sequence, longest training sequence) in tokens, for ``task`` under ``config``'s framing."""
    lo, train_max, test_max = config.lengths_for(task)
    longest = (max(sequence_length(*task.size_bound(n), config.framing) for n in valid_lengths(task, lo, hi))
               for hi in (test_max, train_max))
    return next(longest), next(longest)


def position_description(task_name: str, scheme: str, config: CellConfig) -> dict[str, Any]:
    """The position scheme a cell of this config builds, as its saved result describes it (``model.position``).

    A finished cell is current only if this still matches what it recorded: how the benchmark sets
    up a scheme (:func:`position_options`) is not part of the CellConfig, and a change there (e.g.
    randomized positions evaluated on sampled positions) makes earlier cells another experiment.
    """
    task = config.task(task_name)
    max_len, train_len = sequence_lengths(task, config)
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: leave the caller's RNG alone
        model = build_model(scheme, len(task.vocab()), config, max_len=max_len, train_len=train_len)
    return model.describe().get("position")


def hits_by_length(model: nn.Module, examples: dict[int, list[Example]], vocab: Any, framing: str,
                   batch_size: int = 256) -> dict[int, list[bool]]:
    """Per length, each example's exact-match verdict (the model in eval mode, no grad)."""
    device = next(model.parameters()).device
    out: dict[int, list[bool]] = {}
    with torch.no_grad():
        for n, exs in examples.items():
            verdicts: list[bool] = []
            for i in range(0, len(exs), batch_size):
                verdicts += correct(model, collate(exs[i:i + batch_size], vocab, framing).to(device)).tolist()
            out[n] = verdicts
    return out


def _mean(hits: dict[int, list[bool]]) -> float:
    flat = [h for v in hits.values() for h in v]
    return sum(flat) / len(flat) if flat else float("nan")


def train_cell(
    task_name: str,
    scheme: str,
    *,
    seed: int,
    config: CellConfig,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Train one (task, scheme, seed) cell through the convergence gate and test it; plain data back.

    Returns:
        ``task``, ``task_options`` (every option of the task as built, defaults included),
        ``scheme``, ``seed``, ``framing``, ``length_unit``, ``train_lengths`` [lo, hi],
        ``test_max``; ``hits`` {length: "0110…"} (each test example's verdict) and ``accuracy``
        {length: fraction}; ``in_range``/``beyond`` mean exact match; ``learned`` (the gate was
        passed), ``gate`` (threshold, the step it was passed at or None, its accuracy then, and
        the curve of every gate evaluation); ``steps``, ``final_loss``, ``seconds``,
        ``cpu_seconds`` (this process's CPU time, training before an interruption included); ``interrupted``
        after Ctrl-C.
    """
    info = dist_info()
    task = config.task(task_name)
    vocab = task.vocab()
    lo, train_max, test_max = config.lengths_for(task)
    train_lengths = valid_lengths(task, lo, train_max)
    test_lengths = valid_lengths(task, lo, test_max)
    tests = example_set(task, test_lengths, config.eval_examples, TEST_SEED)
    gate_set = example_set(task, train_lengths, config.gate_examples, GATE_SEED)
    max_len, train_len = sequence_lengths(task, config)

    torch.manual_seed(seed)
    model = build_model(scheme, len(vocab), config, max_len=max_len, train_len=train_len).to(info.device)
    pick = torch.tensor(train_lengths)

    def batches(step: int, rank: int, world: int) -> Any:
        gen = step_generator(seed, step)  # the global batch of this step, then this rank's rows
        lengths = pick[torch.randint(0, len(pick), (config.batch_size,), generator=gen)].tolist()
        rows = task.examples(lengths, gen)[rank::world]
        return collate(rows, vocab, config.framing).to(info.device)

    def gate(m: nn.Module, step: int) -> dict[str, float]:
        return {"gate": _mean(hits_by_length(m, gate_set, vocab, config.framing))}

    train_config = replace(config.train, seed=seed, progress=progress)
    extra = {"task": task.describe(), "scheme": scheme, "cell_config": config.identity(), "cell_seed": seed}
    began, cpu_began = time.perf_counter(), time.process_time()
    result = train(model, loss_sum, batches, train_config, evaluate=gate if info.is_main else None,
                   checkpoint_dir=checkpoint_dir, resume=resume, extra_state=extra,
                   stop_when=lambda ev: ev["gate"] >= config.threshold)
    model.eval()
    hits = hits_by_length(model, tests, vocab, config.framing) if info.is_main else {}
    curve = [[e["step"], e["gate"]] for e in result.evals]
    last_gate = curve[-1][1] if curve else float("nan")
    learned = bool(curve) and last_gate >= config.threshold and not result.interrupted
    inside = {n: h for n, h in hits.items() if n <= train_max}
    beyond = {n: h for n, h in hits.items() if n > train_max}
    return {
        "task": task.name, "task_options": task.options(), "scheme": scheme, "seed": seed,
        "framing": config.framing,
        "length_unit": task.length_unit, "train_lengths": [lo, train_max], "test_max": test_max,
        "hits": {str(n): "".join("1" if h else "0" for h in v) for n, v in hits.items()},
        "accuracy": {str(n): sum(v) / len(v) for n, v in hits.items()},
        "in_range": _mean(inside), "beyond": _mean(beyond),
        "learned": learned,
        "gate": {"threshold": config.threshold, "passed_at": curve[-1][0] if learned else None,
                 "accuracy": last_gate, "curve": curve},
        "steps": result.step, "budget": config.train.steps, "final_loss": result.final_loss,
        "interrupted": result.interrupted,
        # the whole cell's time, training before an interruption included; testing added
        "seconds": result.total_seconds + (time.perf_counter() - began - result.seconds),
        "cpu_seconds": result.total_cpu_seconds + (time.process_time() - cpu_began - result.cpu_seconds),
        "history": result.history,
        "model": {"parameters": model.describe()["parameters"], "max_len": max_len,
                  "position": model.describe().get("position")},
    }


#: Bytes per float of activations kept for the backward pass (float32).
_FLOAT = 4
#: Rough bytes per token of an example held in Python (tuples of str references + objects).
_EXAMPLE_TOKEN_BYTES, _EXAMPLE_BYTES = 24, 400


def plan_cell(task_name: str, config: CellConfig) -> dict[str, Any]:
    """Check, before any work, that one cell's sizes fit in memory; return the planned sizes.

    Estimates the largest training step (activations kept for the backward pass,
    attention maps included) and the fixed evaluation set, and refuses either when
    it exceeds the memory budget (:func:`posenc.validation.memory_budget`), naming
    the figure and the option to lower.
    """
    from posenc.validation import check_memory

    task = config.task(task_name)
    lo, train_max, test_max = config.lengths_for(task)
    train_lengths = valid_lengths(task, lo, train_max)
    test_lengths = valid_lengths(task, lo, test_max)
    if not train_lengths:
        raise ValueError(f"task {task_name!r} has no example of length {lo}..{train_max}; raise --train-max")
    t_train = max(sequence_length(*task.size_bound(n), config.framing) for n in train_lengths)
    t_test = max(sequence_length(*task.size_bound(n), config.framing) for n in test_lengths)
    m = config.model
    ffn = m.ffn_dim or 4 * m.dim
    per_layer = t_train * (12 * m.dim + 2 * ffn) + 3 * m.num_heads * t_train * t_train  # floats per example
    vocab = len(task.vocab())
    step_bytes = config.batch_size * (m.num_layers * per_layer + 3 * t_train * vocab) * _FLOAT
    check_memory(step_bytes, f"one training step (batch {config.batch_size} × {t_train} positions, "
                 f"{m.num_layers} layers of width {m.dim})", fix="lower --batch-size, --train-max, --dim or --layers")
    examples = config.eval_examples * len(test_lengths)
    eval_bytes = examples * (_EXAMPLE_BYTES + 2 * t_test * _EXAMPLE_TOKEN_BYTES)
    check_memory(eval_bytes, f"the evaluation set ({config.eval_examples} examples × {len(test_lengths)} lengths "
                 f"up to {t_test} positions)", fix="lower --eval-examples or --test-max")
    return {"train_positions": t_train, "test_positions": t_test, "step_bytes": step_bytes,
            "eval_examples": examples, "eval_bytes": eval_bytes}
