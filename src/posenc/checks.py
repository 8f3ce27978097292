"""Input checks that keep their messages in eager mode and cost no graph break under ``torch.compile``.

A check that reads tensor *values* (a token id ≥ V, a negative position)
needs the value on the host: ``int(t.max())`` is a ``Tensor.item()``, which
under ``torch.compile`` breaks the graph and on a GPU is a host–device
synchronisation on every forward pass. Checks of *metadata* (dtype, number of
dimensions, shapes) are free in both modes: the compiler evaluates them once
while tracing and guards on them.

So every value check in posenc goes through ``check_values``:

* **eager** — the condition is evaluated on the host and a failure raises
  the usual ``ValueError`` naming the offending value and the fix;
* **compiling** — the same condition becomes ``torch._assert_async``, an
  assertion inside the graph: no graph break, no host sync (a device-side
  assert on CUDA, a check in the generated C++ on CPU). It raises a
  ``RuntimeError`` with the same message *without* the offending value,
  which only the host could print.

Tables sized from the largest position (RoPE's cos/sin rows, the sinusoidal
table) are a cache for eager mode; their size is a value read, so under
compile the rows are computed directly from the positions instead (the same
float64 formula). docs/compile.md lists every
check and what it becomes under compile.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def compiling() -> bool:
    """True while ``torch.compile`` (dynamo) traces the calling code."""
    return torch.compiler.is_compiling()


def check_values(ok: Tensor, message: Callable[[], str], *, compiled_message: str) -> None:
    """Raise unless every element of the boolean tensor ``ok`` is True.

    Args:
        ok: elementwise condition (any shape; empty passes).
        message: builds the eager error message (may read values: it runs only on failure).
        compiled_message: the message of the in-graph assertion under compile (static text).

    Raises:
        ValueError: in eager mode, when some element is False.
        RuntimeError: under compile, when the assertion fails at run time.
    """
    if compiling():
        torch._assert_async(ok.all(), compiled_message)
    elif not bool(ok.all()):
        raise ValueError(message())
