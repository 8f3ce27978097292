"""posenc.kernels' build cache: the folder's key follows the compiled bytes and flags (not the checkout's folder),
concurrent processes compile once under the folder's lock, and a second checkout of the same source loads the
first one's build without compiling."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc import kernels

#: a fixed machine, so that the key tests compare sources and flags alone
MACHINE = {"compiler": "c++: c++ (Debian 12.2.0-14) 12.2.0", "cpu": "flags : fpu avx2", "torch_version": "2.13.0",
           "python_abi": ".cpython-311-x86_64-linux-gnu.so"}
BUILDING = "building the decode kernel for this CPU"


def checkout(folder: Path) -> Path:
    """A copy of ``src/posenc/kernels`` in ``folder`` (another clone's files, byte for byte)."""
    shutil.copytree(kernels.SOURCE.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def test_the_key_is_the_source_bytes_not_the_folder(tmp_path: Path) -> None:
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b")
    key = kernels.cache_key([a / "qmatvec.cpp"], **MACHINE)
    assert len(key) == 16 and int(key, 16) >= 0
    assert kernels.cache_key([b / "qmatvec.cpp"], **MACHINE) == key  # same bytes elsewhere: one build
    assert kernels.cache_key([kernels.SOURCE], **MACHINE) == key
    data = (b / "qmatvec.cpp").read_bytes()
    (b / "qmatvec.cpp").write_bytes(data.replace(b"return level;", b"return level + 0;", 1))
    assert kernels.cache_key([b / "qmatvec.cpp"], **MACHINE) != key  # one changed line: a new folder
    (b / "qmatvec.cpp").write_bytes(data + b"\n")
    assert kernels.cache_key([b / "qmatvec.cpp"], **MACHINE) != key  # one byte more
    (b / "qmatvec.cpp").write_bytes(data)
    assert kernels.cache_key([b / "qmatvec.cpp"], **MACHINE) == key
    (b / "extra.h").write_text("#pragma once\n")  # a second compiled file is part of the key
    assert kernels.cache_key([b / "qmatvec.cpp", b / "extra.h"], **MACHINE) != key


def test_the_key_follows_the_flags_and_the_machine() -> None:
    key = kernels.cache_key(**MACHINE)
    assert kernels.cache_key(kernels.SOURCES, kernels.CFLAGS, kernels.LDFLAGS, **MACHINE) == key
    assert kernels.cache_key(kernels.SOURCES, (*kernels.CFLAGS[:-1], "-O2"), **MACHINE) != key
    assert kernels.cache_key(kernels.SOURCES, kernels.CFLAGS, (), **MACHINE) != key
    for field, other in (("compiler", "c++: clang 18"), ("cpu", "flags : fpu avx512f"), ("torch_version", "2.14.0"),
                         ("python_abi", ".cpython-312-x86_64-linux-gnu.so")):
        assert kernels.cache_key(**{**MACHINE, field: other}) != key, field
    assert kernels.cache_key() == kernels.cache_key()  # this machine's own: nothing random in it
    inputs = kernels.key_inputs({"qmatvec.cpp": kernels.SOURCE.read_bytes()})
    assert inputs["cflags"] == list(kernels.CFLAGS) and inputs["ldflags"] == list(kernels.LDFLAGS)
    assert inputs["sources"] == {"qmatvec.cpp": hashlib.sha256(kernels.SOURCE.read_bytes()).hexdigest()}
    with pytest.raises(ValueError, match="two kernel sources named"):
        kernels.cache_key([kernels.SOURCE, kernels.SOURCE])


def run_loader(package: Path | None, env: dict[str, str]) -> subprocess.Popen:
    """A fresh process that loads the kernel — posenc's own, or the copy in ``package`` — and prints its file."""
    if package is None:
        script = "from posenc import kernels\n"
    else:  # the copied folder imported as a package of its own: its SOURCE is the copy's qmatvec.cpp
        script = ("import importlib.util, sys\n"
                  f"spec = importlib.util.spec_from_file_location('copied_kernels', {str(package / '__init__.py')!r},"
                  f" submodule_search_locations=[{str(package)!r}])\n"
                  "kernels = importlib.util.module_from_spec(spec); sys.modules['copied_kernels'] = kernels\n"
                  "spec.loader.exec_module(kernels)\n")
    script += ("m = kernels.load()\n"
               "print('source', kernels.SOURCE)\n"
               "print('module', None if m is None else m.__file__, kernels.status())\n")
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out, err


def module_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("module "))


@pytest.mark.slow
def test_two_processes_on_an_empty_cache_build_once(tmp_path: Path) -> None:
    """Compiles the kernel once (about a minute on 2 cores) into an empty TORCH_EXTENSIONS_DIR."""
    if os.environ.get("POSENC_KERNELS", "1").strip().lower() in ("0", "off", "no", "false"):
        pytest.skip("POSENC_KERNELS=0")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler")
    root = tmp_path / "extensions"
    name = f"posenc_qmatvec_{kernels.cache_key()}"
    (root / name).mkdir(parents=True)
    (root / name / "lock").touch()  # torch's FileBaton left by a build killed mid-way: torch alone would wait forever
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(root), "OMP_NUM_THREADS": "1", "POSENC_KERNELS": "1"}
    first, second = run_loader(None, env), run_loader(None, env)
    (out1, err1), (out2, err2) = finish(first, 540), finish(second, 60)
    errors = err1 + err2
    assert errors.count(BUILDING) == 1, errors
    assert "decode kernel built in" in errors
    print("the second process waited for the first:", "waiting for it" in errors)  # else it came after: silent
    library = root / name / f"{name}.so"
    assert module_line(out1) == module_line(out2)
    assert module_line(out1).startswith(f"module {library} posenc's int8-activation kernel ("), out1
    log = (root / name / ".ninja_log").read_text()  # "start end mtime output hash" per command ninja ran
    outputs = [line.split("\t")[3] for line in log.splitlines() if not line.startswith("#")]
    assert sorted(outputs) == sorted(["qmatvec.o", f"{name}.so"]), log  # compiled once, linked once
    assert (root / name / kernels.READY).is_file() and not (root / name / "lock").exists()
    assert sorted(p.name for p in root.iterdir()) == [name, f"{name}.lock"]
    # a third process finds the build complete: no lock, no ninja, not a word
    out3, err3 = finish(run_loader(None, env), 60)
    assert module_line(out3) == module_line(out1) and "posenc:" not in err3, err3


def test_a_second_checkout_of_the_same_source_loads_the_first_ones_build(tmp_path: Path) -> None:
    """Another clone (the kernel folder copied elsewhere, same bytes) loads this checkout's build: no compile."""
    module = kernels.load()  # builds into this machine's cache if it is cold (as tests/test_kernels.py does)
    if module is None:
        pytest.skip(f"posenc's kernel is not built here: {kernels.status()}")
    assert Path(module.__file__).parent.name == f"posenc_qmatvec_{kernels.cache_key()}"
    copy = checkout(tmp_path / "clone" / "kernels")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "POSENC_KERNELS": "1"}
    start = time.perf_counter()
    out, err = finish(run_loader(copy, env), 120)
    seconds = time.perf_counter() - start
    assert f"source {copy / 'qmatvec.cpp'}" in out  # it hashed the copy's source, not this checkout's
    assert module_line(out) == f"module {module.__file__} {kernels.status()}"
    assert "posenc:" not in err, err  # no build, no wait: silent
    assert seconds < 60, seconds  # python + torch start; a compile is about a minute
