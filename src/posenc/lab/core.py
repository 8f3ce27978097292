"""The lab's registry: settings, the experiment decorator, and the result record.

An experiment is a function ``(LabConfig) -> Finding`` registered under an id
(the claims are listed in docs/lab.md). It measures with the library's own modules and returns
plain data: the measured ``values`` (the JSON interface), whether the claim
``holds`` (computed from those values, never a constant), and optional
``series`` (arrays only the figures need).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass(frozen=True, kw_only=True)
class LabConfig:
    """The knobs every experiment reads. Defaults are the articles' settings.

    Args:
        dim: model width d (64 in article 000).
        length: number of positions L (512 in article 000).
        base: sinusoid / RoPE wavelength base.
        seed: seeds every random table, token and weight.
    """

    dim: int = 64
    length: int = 512
    base: float = 10000.0
    seed: int = 0

    def __post_init__(self) -> None:
        from posenc.validation import number, seed

        number(self.dim, "--dim", integer=True)
        number(self.length, "--length", integer=True)
        number(self.base, "--base", above=1, fix="the sinusoid/RoPE base is usually 10000")
        seed(self.seed, "--seed")
        if self.dim < 4 or self.dim % 2:
            raise ValueError(f"--dim must be an even number >= 4, got {self.dim}")
        if self.length < 8:
            raise ValueError(f"--length must be >= 8, got {self.length}")
        if self.base <= 1:
            raise ValueError(f"--base must be > 1, got {self.base}")
        from posenc.validation import check_memory

        length, dim = self.length, self.dim  # experiments hold a few L × L maps and L × d tables in float64
        check_memory(8.0 * (4 * length * length + 16 * length * dim),
                     f"the lab at --length {length:,} --dim {dim:,} (L × L similarity maps, L × d tables, float64)",
                     fix="lower --length or --dim")

    def generator(self, salt: int = 0) -> torch.Generator:
        """A torch generator seeded from ``seed`` and a per-use ``salt``."""
        return torch.Generator().manual_seed(self.seed * 1_000_003 + salt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finding:
    """What one experiment found. ``values`` and ``holds`` are the public interface."""

    id: str
    claim: str
    params: dict[str, Any]
    values: dict[str, Any]
    holds: bool
    series: dict[str, Any] = field(default_factory=dict)
    article: str = ""
    seconds: float = 0.0

    def public(self) -> dict[str, Any]:
        """The JSON record of ``--json``: id, claim, params, values, holds."""
        return {"id": self.id, "claim": self.claim, "params": self.params, "values": self.values, "holds": self.holds}


Experiment = Callable[..., Finding]


@dataclass(frozen=True)
class Entry:
    id: str
    article: str
    title: str
    run: Experiment


#: id → entry, in article order (registration order).
EXPERIMENTS: dict[str, Entry] = {}


def experiment(id: str, *, article: str, title: str) -> Callable[[Experiment], Experiment]:
    """Register ``fn`` as experiment ``id``; the finding gets the id and article stamped on."""

    def wrap(fn: Experiment) -> Experiment:
        if id in EXPERIMENTS:
            raise ValueError(f"experiment id {id!r} registered twice")

        def run(cfg: LabConfig, **options: Any) -> Finding:
            finding = fn(cfg, **options)
            finding.id, finding.article = id, article
            finding.holds = bool(finding.holds)
            return finding

        run.__doc__, run.__name__ = fn.__doc__, fn.__name__
        EXPERIMENTS[id] = Entry(id=id, article=article, title=title, run=run)
        return run

    return wrap


def as_float(x: Any) -> float:
    """A Python float from a tensor or number (for JSON)."""
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)
