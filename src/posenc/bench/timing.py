"""Timing that measures the operation, not the allocator or the neighbours.

* **Interleaved contenders.** Every repeat runs each contender once, in a
  rotated order, so a slow minute on a shared machine slows everyone alike;
  the figures are medians, and the comparisons are ratios taken in one run.
* **Allocation effects reported.** A fresh tensor above glibc's mmap threshold
  (32 MiB at most) is new memory from the kernel every time: ~8,200 minor page
  faults for 32 MiB, often more time than the arithmetic. Each timed call
  records its minor page faults (``getrusage``), and ``allocator("reuse")``
  switches glibc to keeping freed memory (``mallopt``: no mmap, no trim), the
  effect a caching allocator such as jemalloc has — so both "a default process"
  and "freed memory reused" can be measured.
* **Peak memory** of a piece of work is measured in a fresh subprocess
  (``ru_maxrss`` after minus before), see ``posenc.bench.worker``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_MMAP_THRESHOLD = -3


@dataclass(frozen=True)
class Stats:
    """Summary of one contender's repeats: times in milliseconds, minor page faults per call."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    repeats: int
    faults_per_call: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def allocator(mode: str) -> str:
    """Set how glibc's malloc treats large blocks in this process; return what was set.

    ``"default"`` leaves glibc alone (large blocks mmapped and unmapped each
    time). ``"reuse"`` serves every block from the heap and never trims it, so
    a freed block is reused without page faults. Returns ``"unavailable"`` off
    glibc (the process keeps its allocator).
    """
    if mode not in ("default", "reuse"):
        raise ValueError(f"allocator mode must be 'default' or 'reuse', got {mode!r}")
    if mode == "default":
        return "default"
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**30) == 1
    except (OSError, AttributeError):
        return "unavailable"
    return "reuse" if ok else "unavailable"


def minor_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(
    contenders: dict[str, Callable[[], Any]],
    *,
    repeats: int,
    warmup: int = 2,
    min_time_s: float = 0.0,
) -> dict[str, Stats]:
    """Time every contender ``repeats`` times, interleaved; return medians and page faults per call.

    Args:
        contenders: name → zero-argument callable doing one call of the work.
        repeats: timed calls per contender (at least this many).
        warmup: untimed calls per contender first.
        min_time_s: keep repeating (up to 4× ``repeats``) until every
            contender has this much timed work, so tiny ops get enough samples.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            contenders[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    faults: dict[str, list[int]] = {n: [] for n in names}
    r = 0
    while True:
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            fn = contenders[name]
            f0 = minor_faults()
            t0 = time.perf_counter()
            result = fn()
            dt = time.perf_counter() - t0
            faults[name].append(minor_faults() - f0)
            times[name].append(dt * 1e3)
            del result
        r += 1
        if r >= repeats and (r >= 4 * repeats or min(sum(t) for t in times.values()) >= min_time_s * 1e3):
            break
    out = {}
    for name in names:
        q = statistics.quantiles(times[name], n=4, method="inclusive") if len(times[name]) > 1 else [times[name][0]] * 3
        out[name] = Stats(median_ms=statistics.median(times[name]), p25_ms=q[0], p75_ms=q[2],
                          repeats=len(times[name]), faults_per_call=statistics.median(faults[name]))
    return out


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, torch build, threads, load."""
    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda_available": torch.cuda.is_available(),
        "load_average": load_average(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
