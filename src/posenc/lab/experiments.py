"""Run the lab: every experiment of the source articles (docs/lab.md), by id, with progress.

>>> from posenc.lab.experiments import run_lab, LabConfig
>>> findings = run_lab(LabConfig(), only=["sinusoid-norm"])
>>> findings[0].values["norm"]  # doctest: +ELLIPSIS
5.65685424949238...
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm

# importing the article modules registers their experiments, in article order
from posenc.lab import article000, article002, article003  # noqa: F401
from posenc.lab.core import EXPERIMENTS, Finding, LabConfig
from posenc.lab.measures import scheme_properties
from posenc.positions import PositionScheme, build, lookup, names, option_names
from posenc.validation import did_you_mean

__all__ = ["EXPERIMENTS", "GLOBAL_RNG_LOCK", "Finding", "LabConfig", "experiment_ids", "lab_scheme", "property_table",
           "run_lab"]

#: Held by whoever touches torch's global generator from a thread (posenc explore serves requests in
#: parallel): seeding and building a scheme, or a module whose init draws from it, must not interleave.
GLOBAL_RNG_LOCK = threading.Lock()


def experiment_ids() -> list[str]:
    """Every experiment id, in article order."""
    return list(EXPERIMENTS)


def select(only: Sequence[str] | None) -> list[str]:
    """The ids to run; unknown ids raise with the valid list."""
    if not only:
        return experiment_ids()
    unknown = [i for i in only if i not in EXPERIMENTS]
    if unknown:
        hints = "".join(did_you_mean(i, EXPERIMENTS) for i in unknown[:1])
        raise ValueError(f"unknown experiment id(s) {unknown}{hints}; valid ids: {', '.join(EXPERIMENTS)}")
    return [i for i in EXPERIMENTS if i in set(only)]


def run_lab(cfg: LabConfig, *, only: Sequence[str] | None = None, progress: bool = False) -> list[Finding]:
    """Run the selected experiments in article order; each finding records its wall time.

    The experiments work on small tensors, where intra-op threads cost more
    than they save (and oversubscribe a shared machine), so torch runs
    single-threaded for the duration; the previous setting is restored.
    """
    findings = []
    ids = select(only)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bar = tqdm(ids, desc="posenc lab", unit="exp", disable=not progress, leave=False)
        for exp_id in bar:
            bar.set_postfix_str(exp_id)
            start = time.perf_counter()
            finding = EXPERIMENTS[exp_id].run(cfg)
            finding.seconds = time.perf_counter() - start
            findings.append(finding)
    finally:
        torch.set_num_threads(threads)
    return findings


def lab_scheme(name: str, cfg: LabConfig, **scheme_options: Any) -> PositionScheme:
    """The scheme ``name`` as the lab measures it: the lab's width, 4 heads (1 where the width does not
    divide), the lab's base where the scheme takes one (unless ``scheme_options`` set it), and learned
    tables drawn from ``cfg.seed`` — the same rows every run."""
    heads = 4 if cfg.dim % 4 == 0 else 1
    if "base" in option_names(name):
        scheme_options = {"base": cfg.base, **scheme_options}
    with GLOBAL_RNG_LOCK:
        torch.manual_seed(cfg.seed)
        return build(name, dim=cfg.dim, num_heads=heads, **scheme_options)


def property_table(cfg: LabConfig, *, progress: bool = False) -> list[dict[str, Any]]:
    """One row of measured properties per registered scheme (``posenc.positions.names()``).

    Each scheme is built with the lab's width, 4 heads (1 where the width does
    not divide) and, where it takes one, the lab's base. A scheme that cannot
    be built or measured gets a row with ``error`` instead of crashing the table.
    """
    rows = []
    for name in tqdm(names(), desc="properties", unit="scheme", disable=not progress, leave=False):
        try:
            rows.append(scheme_properties(lab_scheme(name, cfg), length=cfg.length))
        except Exception as err:  # noqa: BLE001 - one odd scheme must not hide the others
            rows.append({"name": name, "family": getattr(lookup(name), "family", "?"),
                         "error": f"{type(err).__name__}: {err}"})
    return rows
