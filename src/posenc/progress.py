"""Progress on stderr for every wait over about two seconds: stages of a long step, and a grid's overall bar.

Two pieces, both silent under ``--quiet`` (``set_quiet``) and both on stderr, so stdout keeps the result:

* ``Stages``: a long step in named stages (loading a model: reading the file, building the tokenizer,
  loading weights N/M tensors). Nothing is shown for a step done within ``DELAY`` seconds; past that the
  current stage is announced, and every later one as it begins. ``stage(text)`` and ``counted(items)``
  reach the innermost open ``Stages`` from code that does not hold it (a no-op when none is open).
* ``Overall``: a grid's bar, "cell k of n" with elapsed time and time left, never restarted by a cell. A
  cell's own bar (``detail_position``) goes on the line beneath it. On a terminal both are tqdm bars;
  where stderr is not a terminal (a log file, CI) the overall bar is one line per cell, and the per-cell
  bars are off.

    with Overall(len(cells), "extend", enabled=progress) as overall:
        for name, run in cells:
            overall.start(name)     # "extend: cell 3 of 12 loss-bible-rope (0:42 elapsed, ~2:10 left)"
            run()
            overall.done()
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: seconds a step may take before its stages are shown
DELAY = 2.0

_quiet = False
_overall_depth = 0
_stages: list["Stages"] = []


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no stage lines and no bars for the rest of this process (the CLI sets it from the flag)."""
    global _quiet
    _quiet = bool(quiet)


def quiet() -> bool:
    return _quiet


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def detail_position() -> int:
    """tqdm ``position`` of a bar beneath the open overall bars (0 when none is open)."""
    return _overall_depth


def detail_disabled(progress: bool = True) -> bool:
    """``disable`` for a per-cell or per-step tqdm bar: off when not asked, under --quiet, or off a terminal."""
    return not progress or _quiet or not stderr_is_tty()


def clock(seconds: float) -> str:
    """``0:42``, ``12:05``, ``3:02:11``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Stages:
    """A long step in named stages, shown on stderr once it has taken more than ``delay`` seconds.

    Args:
        what: the step, as a line begins ("loading SmolLM2-135M.gguf").
        enabled: False shows nothing (``--quiet`` shows nothing whatever this says).
    """

    def __init__(self, what: str, *, enabled: bool = True, delay: float = DELAY) -> None:
        self.what, self.enabled, self.delay = what, enabled and not _quiet, delay
        self.began = time.perf_counter()
        self.current: str | None = None
        self.shown = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Stages":
        _stages.append(self)
        if self.enabled:
            self._timer = threading.Timer(self.delay, self._late)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self in _stages:
            _stages.remove(self)
        if self.shown and exc[0] is None:
            _say(f"{self.what}: done in {clock(time.perf_counter() - self.began)}")

    def _late(self) -> None:  # the timer: the step has taken longer than delay
        with self._lock:
            if not self.shown and self.current is not None:
                self.shown = True
                _say(f"{self.what}: {self.current} …")
            elif self.current is None:
                self.shown = True

    def stage(self, text: str) -> None:
        """The step's next stage begins; shown at once once the step has been shown."""
        with self._lock:
            self.current = text
            if self.enabled and not self.shown and time.perf_counter() - self.began > self.delay:
                self.shown = True
            if self.enabled and self.shown:
                _say(f"{self.what}: {text} …")

    def counted(self, items: Iterable[T], total: int, text: str, unit: str = "tensor") -> Iterator[T]:
        """Yield ``items`` as stage ``text`` with a count: a tqdm bar "N/M tensors" on a terminal once the step has
        been shown (or has taken longer than ``delay``); elsewhere a line at the start and the count at the end."""
        self.stage(f"{text} ({total} {unit}s)")
        bar = None
        done = 0
        try:
            for item in items:
                if bar is None and self.enabled and stderr_is_tty() and (
                        self.shown or time.perf_counter() - self.began > self.delay):
                    from tqdm import tqdm

                    bar = tqdm(total=total, initial=done, desc=f"{self.what}: {text}", unit=unit, leave=False,
                               file=sys.stderr, position=detail_position())
                yield item
                done += 1
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if self.enabled and self.shown:
            _say(f"{self.what}: {text}: {done}/{total} {unit}s")


def stage(text: str) -> None:
    """Announce ``text`` as the next stage of the innermost open ``Stages`` (nothing when none is open)."""
    if _stages:
        _stages[-1].stage(text)


def counted(items: Iterable[T], total: int, text: str, unit: str = "tensor") -> Iterable[T]:
    """``Stages.counted`` on the innermost open ``Stages``; ``items`` unchanged when none is open."""
    return _stages[-1].counted(items, total, text, unit) if _stages else items


class Overall:
    """A grid's overall bar: "cell k of n", elapsed, time left; one per grid, never restarted.

    Time left is the mean time of the cells computed so far (cells kept from an earlier run are not
    counted: they take no time) times the cells still to go.

    Args:
        total: the cells of this run (this shard's).
        what: the command, as each line begins ("extend").
        enabled: False shows nothing (nor does ``--quiet``).
    """

    def __init__(self, total: int, what: str, *, enabled: bool = True, unit: str = "cell") -> None:
        self.total, self.what, self.unit = total, what, unit
        self.enabled = enabled and not _quiet and total > 0
        self.began = time.perf_counter()
        self.index = 0  # the cell running (1-based), 0 before the first
        self.finished = 0
        self.computed = 0
        self.computed_seconds = 0.0
        self._cell_began = self.began
        self.bar: Any = None

    def __enter__(self) -> "Overall":
        global _overall_depth
        if self.enabled and stderr_is_tty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=self.what, unit=self.unit, position=_overall_depth, leave=True,
                            file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc} |{bar}| {postfix}")
        _overall_depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        global _overall_depth
        _overall_depth -= 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.finished} of {self.total} {self.unit}s done, "
                                     f"{clock(time.perf_counter() - self.began)} elapsed", refresh=False)
            self.bar.close()
        elif self.enabled and self.index:
            _say(f"{self.what}: {self.finished} of {self.total} {self.unit}s done in "
                 f"{clock(time.perf_counter() - self.began)}")

    def left(self) -> float | None:
        """Seconds left, estimated; None before the first computed cell."""
        if not self.computed:
            return None
        return self.computed_seconds / self.computed * (self.total - self.finished)

    def status(self) -> str:
        left = self.left()
        return (f"{clock(time.perf_counter() - self.began)} elapsed, "
                + ("time left unknown yet" if left is None else f"~{clock(left)} left"))

    def start(self, name: str = "") -> None:
        """The next cell begins."""
        self.index = min(self.index + 1, self.total)
        self._cell_began = time.perf_counter()
        if not self.enabled:
            return
        head = f"{self.unit} {self.index} of {self.total}" + (f" {name}" if name else "")
        if self.bar is not None:
            self.bar.set_description_str(f"{self.what}: {head}", refresh=False)
            self.bar.set_postfix_str(self.status())
        else:
            _say(f"{self.what}: {head} ({self.status()})")

    def done(self, *, kept: bool = False) -> None:
        """The running cell finished (``kept``: read back from an earlier run, so not counted for time left)."""
        self.finished += 1
        if not kept:
            self.computed += 1
            self.computed_seconds += time.perf_counter() - self._cell_began
        if self.bar is not None:
            self.bar.set_postfix_str(self.status(), refresh=False)
            self.bar.update(1)
