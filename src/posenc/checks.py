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

The other check here is of the installation: :func:`require` imports an optional package
(``pyproject.toml``'s extras; :data:`OPTIONAL_PARTS`) where a feature needs it, and refuses with
the ``pip install 'posenc[EXTRA]'`` that brings it when it is absent.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

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


# -- optional packages ------------------------------------------------------------------------------------------
#: The optional packages posenc imports where a feature needs them: (import name, what needs it, the extra of
#: pyproject.toml that installs it). ``posenc --version`` lists them; :func:`require` names the extra.
OPTIONAL_PARTS: tuple[tuple[str, str, str], ...] = (
    ("tokenizers", "real models' tokenizers", "models"),
    ("jinja2", "chat templates", "models"),
    ("gguf", "reading and writing .gguf files", "models"),
    ("ninja", "building the quantised decoding kernel", "models"),
    ("transformers", "HF comparisons: posenc rope, bench", "hf"),
    ("sacrebleu", "translation: BLEU and chrF scores", "text"),
    ("ipykernel", "the course notebooks", "notebooks"),
)
_EXTRA = {module: extra for module, _, extra in OPTIONAL_PARTS} | {"IPython": "notebooks", "nbclient": "notebooks"}


class MissingPart(ModuleNotFoundError, ValueError):
    """An optional package a feature needs is not installed; the message names the extra that brings it.

    A ``ModuleNotFoundError`` (code that can do without the package catches ``ImportError``) and a
    ``ValueError`` (the command line prints the message as one line and exits 2).
    """

    def __init__(self, module: str, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the '{module}' package: pip install 'posenc[{extra}]'", name=module)
        self.extra = extra


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """Import the optional package ``module``, or raise :class:`MissingPart` naming its extra.

    Args:
        module: the import name (``"gguf"``).
        what: the feature that needs it, the start of the message (``"reading .gguf files"``).
        extra: the extra that installs it (default: its entry in :data:`OPTIONAL_PARTS`).

    Raises:
        MissingPart: the package is absent: "reading .gguf files needs the 'gguf' package:
            pip install 'posenc[models]'". An installed package that fails to import for another reason (a
            dependency of its own missing) raises its own error.

    >>> require("json", "reading JSON", "models").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and err.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there, one of its own dependencies is not: its error says which
        raise MissingPart(module, what, extra or _EXTRA[module.split(".")[0]]) from None
