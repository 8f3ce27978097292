"""Hypothesis profiles for the reliability suite and a helper to run ``posenc`` in-process.

``HYPOTHESIS_PROFILE=ci`` (default): few examples per property, so the whole
suite stays well under a minute. ``HYPOTHESIS_PROFILE=long``: the recorded run
of docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=10_000, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=1000, deadline=30_000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def posenc(*argv: str) -> Outcome:
    """Run ``posenc ARGV`` in this process and capture its exit code, stdout and stderr."""
    from posenc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as stop:  # argparse's usage errors (2) and --help (0)
            code = stop.code if isinstance(stop.code, int) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_refused(result: Outcome, *fragments: str, code: int = 2) -> None:
    """Exit ``code`` with one ``posenc…error`` line naming every fragment, and no traceback."""
    assert result.code == code, (result.code, result.err[-2000:])
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if "error:" in line]
    assert len(lines) == 1, result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
