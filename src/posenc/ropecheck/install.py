"""Installing the engines ``posenc rope --engines`` compares with, each in its own environment.

``posenc engines install NAME`` creates ``.engines/NAME`` (a venv under the working directory, or
``$POSENC_ENGINES``), makes posenc's own site-packages visible to it (a ``.pth`` that adds them *after* the
engine's own, so torch and posenc are shared and never reinstalled, while a package the engine pins shadows
posenc's inside that venv only), and installs the engine's packages there with pip, binary wheels only (a
package that needs a compiler is refused, not built). The outcome — packages and versions, seconds taken, or
why it failed — is written to ``.engines/NAME/posenc-engine.json``; ``posenc engines`` lists them.

Engines that cannot install from a binary wheel have their reason recorded here (``UNAVAILABLE``), measured on
this project's machine (Linux x86-64, CPU only, Python 3.11). llama.cpp has no wheel either, but its source
does build here: ``posenc engines install llama.cpp`` compiles it (``posenc.ropecheck.llamacpp.build``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

#: engine → (pip requirements, the module that proves it imports). ``hf`` runs in posenc's own venv.
PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "hf": (("transformers",), "transformers"),
    "torchtune": (("torchtune", "torchao>=0.13,<0.17"), "torchtune"),  # 0.6.1 needs nf4tensor (gone in 0.17); <0.13 fails on torch 2.13
    "x-transformers": (("x-transformers",), "x_transformers"),
    "rotary-embedding-torch": (("rotary-embedding-torch",), "rotary_embedding_torch"),
    "mlx": (("mlx[cpu]", "mlx-lm"), "mlx.core"),
    "llama.cpp": (("llama-cpp-python (sdist: its llama.cpp tree, built with cmake + ninja)",), ""),
    "vllm": (("vllm",), "vllm"),
}

#: Engines with no binary wheel usable here, and why (checked with ``pip install --dry-run --only-binary=:all:``).
UNAVAILABLE: dict[str, str] = {
    "vllm": ("no CPU wheel: PyPI's vllm 0.34.0 wheel (239 MB, manylinux x86-64) is the CUDA build — its compiled "
             "ops (vllm._C) need CUDA and its pinned torch, and it requires transformers < 5.23 (posenc's is 5.25); "
             "the CPU backend is a source build (VLLM_TARGET_DEVICE=cpu), not done here"),
}


def root() -> Path:
    """Where engine venvs live: ``$POSENC_ENGINES`` or ``.engines`` in the working directory."""
    return Path(os.environ.get("POSENC_ENGINES") or ".engines")


def python_of(name: str) -> Path:
    return root() / name / "bin" / "python"


def record_of(name: str) -> dict[str, Any] | None:
    """What ``install`` wrote for this engine (None: never installed)."""
    path = root() / name / "posenc-engine.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def install(name: str, *, say: Any = print) -> dict[str, Any]:
    """Create ``.engines/NAME`` and pip-install the engine's packages there (binary wheels only).

    Returns the record (also written to ``.engines/NAME/posenc-engine.json``): ``{"engine", "status":
    "installed"|"failed"|"unavailable"|"in-process", "seconds", "packages", "versions", "reason"}``.

    Raises:
        ValueError: an engine posenc does not know.
    """
    if name not in PACKAGES:
        raise ValueError(f"unknown engine {name!r}: choose one of {', '.join(PACKAGES)}")
    packages, module = PACKAGES[name]
    if name == "hf":
        return {"engine": name, "status": "in-process", "seconds": 0.0, "packages": list(packages),
                "reason": "runs in posenc's own environment (transformers is a posenc dependency)"}
    if name in UNAVAILABLE:
        return {"engine": name, "status": "unavailable", "seconds": 0.0, "packages": list(packages),
                "reason": UNAVAILABLE[name]}
    if name == "llama.cpp":
        return _install_llamacpp(packages, say)
    start = time.monotonic()
    where = root() / name
    where.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"engine": name, "packages": list(packages), "python": str(python_of(name))}
    try:
        if not python_of(name).exists():
            say(f"creating {where} (a venv that sees posenc's own packages)")
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
        site = Path(subprocess.run([str(python_of(name)), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                    "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
        base = sysconfig.get_paths()["purelib"]
        (site / "_posenc_base.pth").write_text(f"import site; site.addsitedir({base!r})\n")
        say(f"pip install --only-binary=:all: {' '.join(packages)} into {where}")
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python_of(name)), "install",
                               "--only-binary=:all:", "--disable-pip-version-check", *packages],
                              capture_output=True, text=True)
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RuntimeError("pip failed: " + " | ".join(tail))
        check = subprocess.run([str(python_of(name)), "-c", f"import {module}"], capture_output=True, text=True)
        if check.returncode:
            tail = check.stderr.strip().splitlines()[-1:] or ["?"]
            raise RuntimeError(f"installed, but `import {module}` fails: {tail[0]}")
        names = [re.split(r"[\[<>=!~]", p)[0] for p in packages]
        versions = subprocess.run([str(python_of(name)), "-c", "import json, importlib.metadata as m; print(json."
                                   f"dumps({{p: m.version(p) for p in {names!r}}}))"],
                                  capture_output=True, text=True, check=True)
        record |= {"status": "installed", "versions": json.loads(versions.stdout), "reason": None}
    except (OSError, subprocess.CalledProcessError, RuntimeError) as err:
        record |= {"status": "failed", "reason": str(err)[:600]}
    record["seconds"] = round(time.monotonic() - start, 1)
    (where / "posenc-engine.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _install_llamacpp(packages: tuple[str, ...], say: Any) -> dict[str, Any]:
    """llama.cpp is no wheel: its tree from PyPI's llama-cpp-python sdist is compiled (``llamacpp.build``)."""
    from posenc.ropecheck import llamacpp

    start = time.monotonic()
    where = root() / "llama.cpp"
    where.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"engine": "llama.cpp", "packages": list(packages)}
    try:
        existing = os.environ.get("POSENC_LLAMACPP_BUILD")
        if existing:  # a llama.cpp build the user already has (benchmarks/llamacpp/setup.sh makes one)
            say(f"using the llama.cpp build in POSENC_LLAMACPP_BUILD={existing}")
            llamacpp.binaries(Path(existing))
            built = {"build": existing, "version": llamacpp.version(Path(existing))}
        else:
            built = llamacpp.build(where.resolve(), say=say)  # an absolute build path: the record is read from any folder
        record |= {"status": "installed", "build": built["build"], "versions": {"llama.cpp": built["version"]},
                   "reason": None if not existing else f"an existing build (POSENC_LLAMACPP_BUILD={existing})"}
    except (OSError, RuntimeError, llamacpp.Unavailable, subprocess.SubprocessError) as err:
        record |= {"status": "failed", "reason": str(err)[:600]}
    record["seconds"] = round(time.monotonic() - start, 1)
    (where / "posenc-engine.json").write_text(json.dumps(record, indent=1) + "\n")
    return record
