"""llama.cpp as an engine of ``posenc rope --engines``: its own reading of a GGUF file, its own RoPE kernel.

For a ``.gguf`` model, two of llama.cpp's own programs answer, so nothing of llama.cpp is re-derived here:

1. **Its reading of the file.** ``llama-completion -m FILE -n 0 -v`` loads the model and prints what its loader
   read (``print_info``): ``rope type`` (0 = NORM, pairs (x₂ᵢ, x₂ᵢ₊₁), "interleaved"; 2 = NEOX, pairs (xᵢ, xᵢ₊P),
   "half"), ``n_rot``, ``freq_base_train`` / ``freq_scale_train``, and for models with sliding layers
   ``freq_base_swa`` / ``freq_scale_swa`` / ``n_rot_swa``, ``n_swa``, and per layer ``is_swa``; ``rope scaling``
   and ``n_ctx_orig_yarn``.
2. **Its RoPE.** ``posenc-ggml-rope`` (``ggml_rope.c``, built against that llama.cpp's ggml libraries) rotates
   posenc's probe vector at the case's positions with ``ggml_rope_ext`` on ggml's CPU backend — the kernel
   llama.cpp's graph calls — with the parameters of step 1 for the layer group's first layer.

The rotated probe is judged like every engine's (``engines.judge``), in the pairing llama.cpp uses. A group whose
layers llama.cpp does not all treat alike (one sliding, another global) is compared at its first layer and the
reason names the others. YaRN and LongRoPE files are reported unsupported: llama.cpp computes YaRN's attention
factor inside its context (``llama-context.cpp``) without printing it, and posenc does not re-derive it.

Installed by ``posenc engines install llama.cpp`` (:func:`build`: the llama.cpp tree in PyPI's
``llama-cpp-python`` sdist, compiled with cmake and ninja into ``.engines/llama.cpp``, about five minutes on two
cores), or found through ``POSENC_LLAMACPP_BUILD`` (an existing llama.cpp CMake build folder, e.g. the one
``benchmarks/llamacpp/setup.sh`` makes).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

#: The sdist whose vendored llama.cpp tree is built.
SDIST = "llama-cpp-python==0.3.36"
#: print_info keys read (name → parser).
KEYS = {"arch": str, "n_layer": int, "n_rot": int, "n_rot_swa": int, "n_swa": int, "rope type": int,
        "rope scaling": str, "freq_base_train": float, "freq_scale_train": float, "freq_base_swa": float,
        "freq_scale_swa": float, "n_ctx_orig_yarn": int, "n_embd_head_k": int, "n_embd_head_k_swa": int}
#: llama.cpp's rope type → posenc's pairing name.
PAIRING = {0: "interleaved", 2: "half"}


class Unavailable(Exception):
    """llama.cpp cannot answer here (the message says why and what to run)."""


def binaries(build: Path) -> tuple[Path, Path]:
    """(llama-completion, posenc-ggml-rope) of a build folder; the probe is compiled on first use."""
    completion = build / "bin" / "llama-completion"
    if not completion.is_file():
        raise Unavailable(f"{completion}: no such program; build llama.cpp's llama-completion there, or run "
                          "`posenc engines install llama.cpp`")
    probe = build / "bin" / "posenc-ggml-rope"
    source = Path(__file__).with_name("ggml_rope.c")
    if not probe.is_file() or probe.stat().st_mtime < source.stat().st_mtime:
        compile_probe(build, probe)
    return completion, probe


def perplexity_binary(build: Path) -> Path:
    """llama.cpp's ``llama-perplexity`` of a build folder (the logits check runs it)."""
    program = Path(build) / "bin" / "llama-perplexity"
    if not program.is_file():
        raise Unavailable(f"{program}: no such program (an install before the logits check built only "
                          "llama-completion); run `posenc engines install llama.cpp` again, or build llama.cpp's "
                          "llama-perplexity target in that folder")
    return program


def compile_probe(build: Path, out: Path) -> None:
    """Compile ``ggml_rope.c`` against the build's static ggml libraries (or its shared ones)."""
    src_root = source_root(build)
    libs = [build / "ggml" / "src" / n for n in ("libggml.a", "libggml-cpu.a", "libggml-base.a")]
    if not all(p.is_file() for p in libs):
        shared = sorted((build / "bin").glob("libggml*.so")) + sorted((build / "ggml" / "src").glob("libggml*.so"))
        if not shared:
            raise Unavailable(f"{build}: no ggml libraries (libggml*.a or .so) to link posenc's RoPE probe against")
        libs = shared
    cmd = [os.environ.get("CC", "gcc"), "-O2", str(Path(__file__).with_name("ggml_rope.c")),
           f"-I{src_root / 'ggml' / 'include'}", *map(str, libs), "-lstdc++", "-lm", "-lpthread", "-fopenmp",
           f"-Wl,-rpath,{libs[0].parent}", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise Unavailable("compiling posenc's ggml RoPE probe failed: "
                          + " | ".join(done.stderr.strip().splitlines()[-3:]))


def source_root(build: Path) -> Path:
    """The llama.cpp source tree a CMake build folder was configured from (its CMakeCache.txt says)."""
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.+)$", cache.read_text(errors="replace"), re.M)
        if m:
            return Path(m[1].strip())
    return build.parent


def version(build: Path) -> str:
    done = subprocess.run([str(build / "bin" / "llama-completion"), "--version"], capture_output=True, text=True,
                          timeout=60)
    m = re.search(r"version: (.+)", done.stdout + done.stderr)
    return m[1].strip() if m else "?"


def read_gguf(completion: Path, path: str | Path) -> dict[str, Any]:
    """llama.cpp's own reading of a GGUF file's position parameters (``print_info``) and per-layer ``is_swa``."""
    done = subprocess.run([str(completion), "-m", str(path), "-p", "x", "-n", "0", "-c", "256", "-no-cnv", "-v",
                           "-t", "1"], capture_output=True, text=True, timeout=600)
    return parse_print_info(done.stdout + done.stderr, source=str(path), returncode=done.returncode)


def parse_print_info(log: str, *, source: str = "?", returncode: int = 0) -> dict[str, Any]:
    """The keys of :data:`KEYS` and ``is_swa`` (layer → bool) from llama.cpp's verbose load log.

    Raises:
        Unavailable: the log holds no ``print_info`` block (llama.cpp refused the file: its last line is quoted).
    """
    info: dict[str, Any] = {}
    for m in re.finditer(r"print_info: ([a-z_ ]+?)\s+= (.+)", log):
        key, value = m[1].strip(), m[2].strip()
        if key in KEYS and key not in info:
            try:
                info[key] = KEYS[key](value)
            except ValueError:
                info[key] = value
    info["is_swa"] = {int(m[1]): m[2] == "1" for m in re.finditer(r"layer\s+(\d+) assigned to device \S+, is_swa = (\d)",
                                                                   log)}
    if "rope type" not in info or "freq_base_train" not in info:
        tail = [line for line in log.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
        raise Unavailable(f"llama.cpp did not load {source} (exit {returncode}): {tail[0][:300]}")
    return info


def layer_parameters(info: dict[str, Any], layer: int) -> dict[str, Any]:
    """The RoPE parameters llama.cpp uses for one layer: sliding layers take the ``_swa`` values."""
    swa = bool(info["is_swa"].get(layer, False)) and "freq_base_swa" in info
    pick = lambda key: info.get(f"{key}_swa", info.get(key)) if swa else info.get(key)  # noqa: E731
    return {"sliding": swa, "n_rot": int(pick("n_rot") or info["n_rot"]),
            "freq_base": float(info["freq_base_swa"] if swa else info["freq_base_train"]),
            "freq_scale": float(info["freq_scale_swa"] if swa else info.get("freq_scale_train", 1.0)),
            "mode": int(info["rope type"]), "n_ctx_orig": int(info.get("n_ctx_orig_yarn") or 0)}


def rotate(probe_bin: Path, params: dict[str, Any], x: list[float], positions: list[int]) -> list[list[float]]:
    """ggml_rope_ext on the probe ``x`` at ``positions`` (no YaRN: ext_factor 0, attention factor 1)."""
    args = [str(probe_bin), str(params["n_rot"]), str(params["mode"]), str(params["n_ctx_orig"]),
            repr(params["freq_base"]), repr(params["freq_scale"]), "0", "1", "32", "1", str(len(x)),
            str(len(positions))]
    stdin = " ".join(f"{v:.9g}" for v in x) + "\n" + " ".join(str(p) for p in positions) + "\n"
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise Unavailable(f"posenc-ggml-rope failed: {done.stderr.strip()[:300]}")
    return [[float(v) for v in line.split()] for line in done.stdout.strip().splitlines()]


def build(where: Path, *, say: Any = print) -> dict[str, Any]:
    """Build llama.cpp's ``llama-completion`` and ``llama-perplexity`` and posenc's ggml RoPE probe into
    ``where`` from the sdist.

    On x86-64, llama.cpp's AMX kernels are compiled out (``-mno-amx-*``): a CPU that reports AMX to the
    compiler may still refuse its tile instructions to a process that did not ask the kernel for them
    (SIGILL in ``tinygemm_kernel_amx``, benchmarks/llamacpp/README.md); without them llama.cpp runs its AVX
    kernels, which compute the same model.

    Returns {"build": the CMake build folder, "version"}. Raises RuntimeError with the failing step's output.
    """
    for tool in ("cmake", "ninja"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            raise RuntimeError(f"{tool} is not on PATH (llama.cpp builds with cmake and ninja; `pip install cmake "
                               "ninja` brings both)")
    where.mkdir(parents=True, exist_ok=True)
    name = SDIST.replace("==", "-").replace("-", "_", 2)  # llama_cpp_python-0.3.36
    archive = where / f"{name}.tar.gz"
    if not archive.is_file():
        say(f"pip download --no-binary :all: {SDIST} into {where}")
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "--dest",
              str(where), SDIST])
    tree = where / name
    if not tree.is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(where, filter="data")
    src = tree / "vendor" / "llama.cpp"
    out = src / "build"
    say(f"cmake + ninja llama-completion and llama-perplexity in {out} (about five minutes on two cores)")
    start = time.monotonic()
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if platform.machine() in ("x86_64", "AMD64") else ""
    _run(["cmake", "-S", str(src), "-B", str(out), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
          "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
          "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_TOOLS=ON",
          f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"])
    _run(["ninja", "-C", str(out), "llama-completion", "llama-perplexity"])
    binaries(out)
    say(f"built in {time.monotonic() - start:.0f} s")
    return {"build": str(out), "version": version(out)}


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{Path(cmd[0]).name} failed: " + " | ".join(tail))
