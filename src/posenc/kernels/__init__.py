"""posenc's compiled CPU kernel for decoding with quantised weights, built once per machine.

``qmatvec.cpp`` (beside this file) multiplies a few input rows by a group-quantised weight the way
llama.cpp does: each group of 32 inputs rounded to 8-bit integers, integer dot products with the
4- or 8-bit weights (AVX-512 VNNI ``dpbusd`` where the CPU has it, else AVX2 ``maddubs``), one
float multiply per group (per 32 weights with a scale and a minimum; per 16 for symmetric weights with
a scale alone, GGUF's Q6_K: :func:`pack_scales16`). PyTorch's own int4 kernel
(``_weight_int4pack_mm_for_cpu``) works in bfloat16 and took 32 ms of a 77 ms SmolLM2 token on
this project's 2-core AVX2 machine; see ``benchmarks/realmodels/README.md`` for the measurements.

It is compiled with ``torch.utils.cpp_extension`` (a C++17 compiler, and ninja — the ``models`` extra brings the
``ninja`` package, ``pip install 'posenc[models]'``, or any ``ninja`` on PATH; the flags
:data:`CFLAGS`, ``-O3 -march=native -ffp-contract=off -fopenmp``) the first time a quantised model loads, into
``TORCH_EXTENSIONS_DIR`` (torch's default: ``~/.cache/torch_extensions/py3XX_cpu``), in the folder
``posenc_qmatvec_<key>``. The key (:func:`cache_key`) is 16 hex digits of a SHA-256 over the bytes of every
compiled file (:data:`SOURCES`, by file name — not by folder), the compiler and linker flags, the compiler's
``--version`` line (``$CXX``, else ``c++``), torch's version and C++ ABI, Python's extension ABI, and this CPU's
instruction-set flags. So two checkouts with the same source share one build, a changed source (or flags,
compiler, torch, Python, CPU) gets a new folder and never loads an old ``.so``, and a folder shared between
machines never runs code built for another CPU. The sources are copied into the folder and compiled from
there (the bytes the key was made of), and a build counts only once ``posenc-build.json`` is written beside
its ``.so``; a warm cache loads that ``.so`` directly, without ninja, a lock or a word.

A build runs under an exclusive ``flock`` on ``posenc_qmatvec_<key>.lock`` in the folder's parent (released
by the kernel when the holder exits, ``kill -9`` included): a second process waits for it, says so, then loads
the first one's result — one compile for any number of processes. A stale ``lock`` file of torch's own
``FileBaton`` (left in the folder by a build killed mid-way; torch would wait on it forever) is removed under
the ``flock``. The first build says on stderr that it is building and where, and how long it took. Builds
of other sources stay in ``TORCH_EXTENSIONS_DIR`` (a few MB each) until removed by hand.

Where it cannot be built — no compiler, or ``POSENC_KERNELS=0`` in the environment — posenc says why once and
uses PyTorch's int4 kernel instead (:func:`status` tells which runs).

The same file holds a decoding step's RMSNorm and RoPE rotation, and ``Block`` / ``decode_blocks``: decoder
blocks' steps for one token (pre-norm or Gemma's sandwich) — a whole token's blocks in one call and one parallel
region, each product's rows, the heads and the activations split between the threads — which
:mod:`posenc.models.fused` runs in place of the blocks' modules where it computes what they compute
(``POSENC_FUSED=0`` switches it off).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import sysconfig
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType

import torch

try:
    import fcntl
except ImportError:  # not POSIX: builds are not serialised between processes (torch's FileBaton still is)
    fcntl = None  # type: ignore[assignment]

SOURCE = Path(__file__).with_name("qmatvec.cpp")
#: every file compiled into the module, all hashed into the cache key (a local header it includes belongs here too)
SOURCES: tuple[Path, ...] = (SOURCE,)
#: the compiler flags the kernel is built with (part of the cache key)
CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp")
#: the linker flags (part of the cache key)
LDFLAGS: tuple[str, ...] = ("-fopenmp",)
#: written into the build folder after a successful build: the key's inputs; its presence marks the build complete
READY = "posenc-build.json"
#: the kernel's paths by level (``module.get_level()``): the widest this CPU and build have is the default
LEVELS = ("portable loop", "AVX2", "AVX-512 VNNI")
_STATE: dict[str, object] = {}


def _cpuinfo_line(*keys: str) -> str | None:
    """The first line of Linux's /proc/cpuinfo that starts with one of ``keys`` (stripped), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(keys):
                    return line.strip()
    except OSError:
        pass
    return None


def _cpu_flags() -> str:
    """This CPU's instruction-set flags (the ``flags`` line of Linux /proc/cpuinfo; elsewhere the platform)."""
    line = _cpuinfo_line("flags", "Features")
    return platform.machine() + platform.processor() if line is None else line


@functools.cache
def cpu_vendor() -> str:
    """This CPU's vendor as Linux names it (``vendor_id`` of /proc/cpuinfo: "GenuineIntel", "AuthenticAMD"), or ""."""
    line = _cpuinfo_line("vendor_id")
    return "" if line is None else line.split(":", 1)[1].strip()


def _compiler() -> str:
    """The C++ compiler torch's cpp_extension runs and the first line of its ``--version`` (a few ms)."""
    cxx = os.environ.get("CXX", "cl" if sys.platform == "win32" else "c++")
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
        return f"{cxx}: {out.strip().splitlines()[0] if out.strip() else '?'}"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cxx}: unavailable ({type(e).__name__})"


def _python_abi() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag) + getattr(sys, "abiflags", "")


def key_inputs(contents: Mapping[str, bytes], cflags: Iterable[str] = CFLAGS, ldflags: Iterable[str] = LDFLAGS, *,
               compiler: str | None = None, cpu: str | None = None, torch_version: str | None = None,
               python_abi: str | None = None) -> dict[str, object]:
    """What the cache key is made of, readable (``posenc-build.json`` holds it): each source's name and
    SHA-256, the flags, the compiler, torch, Python and the CPU flags. ``None`` means this machine's own."""
    return {
        "sources": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(contents.items())},
        "cflags": list(cflags), "ldflags": list(ldflags),
        "compiler": _compiler() if compiler is None else compiler,
        "torch": (torch.__version__ if torch_version is None else torch_version)
        + f" cxx11abi={int(bool(getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', False)))}",
        "python": _python_abi() if python_abi is None else python_abi,
        "cpu": hashlib.sha256((_cpu_flags() if cpu is None else cpu).encode()).hexdigest(),
    }


def _digest(inputs: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def cache_key(sources: Iterable[str | os.PathLike] = SOURCES, cflags: Iterable[str] = CFLAGS,
              ldflags: Iterable[str] = LDFLAGS, **machine: str | None) -> str:
    """16 hex digits naming the build (``posenc_qmatvec_<key>``): a SHA-256 over the sources' bytes (by file
    name, so two folders holding the same files give the same key), the flags, and — unless given in
    ``machine`` (``compiler``, ``cpu``, ``torch_version``, ``python_abi``) — this machine's compiler, torch,
    Python ABI and CPU flags. See :func:`key_inputs`."""
    contents = _read_sources(sources)
    return _digest(key_inputs(contents, cflags, ldflags, **machine))


def _read_sources(sources: Iterable[str | os.PathLike]) -> dict[str, bytes]:
    contents: dict[str, bytes] = {}
    for path in map(Path, sources):
        if path.name in contents:
            raise ValueError(f"two kernel sources named {path.name}")
        contents[path.name] = path.read_bytes()
    return contents


def load() -> ModuleType | None:
    """The compiled kernel module, or None (the reason in :func:`status`); built on the first call."""
    if "module" in _STATE:
        return _STATE["module"]  # type: ignore[return-value]
    module, why = None, ""
    if os.environ.get("POSENC_KERNELS", "1").strip().lower() in ("0", "off", "no", "false"):
        why = "switched off by POSENC_KERNELS=0"
    else:
        try:
            module = _load_or_build()
        except Exception as e:  # noqa: BLE001  (no compiler, no ninja, a failed build: all mean "use torch's")
            why = f"could not be built ({type(e).__name__}: {str(e).strip().splitlines()[-1][:200]})"
            warnings.warn(f"posenc's quantised decoding kernel {why}; using PyTorch's int4 kernel (slower "
                          "decoding). Set POSENC_KERNELS=0 to skip the attempt.", RuntimeWarning, stacklevel=2)
    _STATE["module"], _STATE["why"] = module, why
    return module


def build_directory(name: str) -> Path:
    """The build folder of ``name`` under ``TORCH_EXTENSIONS_DIR`` (or torch's default root), created."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(name, verbose=False))


def _load_or_build() -> ModuleType:
    """The module from a complete build of this key, else built now under the folder's lock."""
    contents = _read_sources(SOURCES)  # read once: the key is made of exactly the bytes that get compiled
    inputs = key_inputs(contents)
    name = f"posenc_qmatvec_{_digest(inputs)}"
    folder = build_directory(name)
    library = folder / f"{name}{'.pyd' if sys.platform == 'win32' else '.so'}"
    if (folder / READY).is_file() and library.is_file():
        return _import(name, library)
    with _locked(folder.parent / f"{name}.lock", folder):
        if (folder / READY).is_file() and library.is_file():  # another process built it while this one waited
            return _import(name, library)
        return _build(name, folder, contents, inputs)


@contextlib.contextmanager
def _locked(path: Path, folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` for the block; says so on stderr when another process holds it."""
    if fcntl is None:
        yield
        return
    with open(path, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"posenc: another process is building the decode kernel; waiting for it ({folder})",
                  file=sys.stderr, flush=True)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _build(name: str, folder: Path, contents: Mapping[str, bytes], inputs: Mapping[str, object]) -> ModuleType:
    """Compile ``contents`` (copied into ``folder``) as module ``name``; the caller holds the lock."""
    from torch.utils import cpp_extension

    _find_ninja()
    print(f"posenc: building the decode kernel for this CPU, once (about a minute; cached in {folder})",
          file=sys.stderr, flush=True)
    start = time.perf_counter()
    (folder / READY).unlink(missing_ok=True)
    (folder / "lock").unlink(missing_ok=True)  # torch's FileBaton of a build killed mid-way: no posenc build is live
    sources = []
    for file_name, data in contents.items():
        copy = folder / file_name
        if not copy.is_file() or copy.read_bytes() != data:  # unchanged bytes keep their mtime: ninja's up-to-date check
            copy.write_bytes(data)
        sources.append(str(copy))
    module = cpp_extension.load(name=name, sources=sources, build_directory=str(folder), verbose=False,
                                extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS))
    seconds = time.perf_counter() - start
    partial = folder / f"{READY}.{os.getpid()}"
    partial.write_text(json.dumps({**inputs, "built_seconds": round(seconds, 1)}, indent=1) + "\n")
    os.replace(partial, folder / READY)
    print(f"posenc: decode kernel built in {seconds:.0f} s", file=sys.stderr, flush=True)
    return module


def _import(name: str, library: Path) -> ModuleType:
    """Import the compiled module ``name`` from ``library`` (as torch's cpp_extension does after a build)."""
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: why the kernel cannot be built without ninja (the words of ``posenc.checks.require``, which this ground-floor
#: module does not import: the layers of .importlinter keep its siblings apart)
NO_NINJA = "building the quantised decoding kernel needs the 'ninja' package: pip install 'posenc[models]'"


def _find_ninja() -> None:
    """Put the ``ninja`` package's binary on PATH when no ninja is there (a venv used without activating it).

    Raises:
        ModuleNotFoundError: no ninja on PATH and no ``ninja`` package (:data:`NO_NINJA`); posenc falls back.
    """
    import shutil

    if shutil.which("ninja") is None:
        try:
            import ninja
        except ImportError:
            raise ModuleNotFoundError(NO_NINJA, name="ninja") from None
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def status() -> str:
    """One line: which kernel decodes quantised weights here, and why."""
    module = load()
    if module is None:
        return f"PyTorch's int4 kernel (posenc's {_STATE['why']})"
    return f"posenc's int8-activation kernel ({LEVELS[module.get_level()]})"


def pack(values, bits: int):
    """(N, K) uint8 integers of ``bits`` bits → the kernel's weight layout (see ``qmatvec.cpp``).

    ≤ 4 bits: (N, K / 2) uint8, per group of 32 byte j = q[j] | q[j + 16] << 4; 5–8 bits: (N, K) int8 q − 2^(bits−1).
    """
    n, k = values.shape
    if bits > 4:
        return (values.to(torch.int16) - (1 << (bits - 1))).to(torch.int8)
    v = values.view(n, k // 32, 2, 16)
    return (v[:, :, 0] | (v[:, :, 1] << 4)).reshape(n, k // 2)


def unpack(weight, bits: int):
    """The inverse of :func:`pack`: (N, K) uint8 integers."""
    if bits > 4:
        return (weight.to(torch.int16) + (1 << (bits - 1))).to(torch.uint8)
    n = weight.shape[0]
    b = weight.view(n, -1, 16)
    return torch.stack((b & 15, b >> 4), dim=2).reshape(n, -1)


def pack_scales(scale, minimum):
    """(N, G) scale and minimum → the kernel's (N, G, 2) pairs as float16 bits (int16) when every value is
    exactly a float16 (GGUF's Q4_0, Q4_1, Q8_0), else as float32 bits (int32). Bits, not floats, so that
    ``model.to(dtype)`` leaves them alone."""
    pairs = torch.stack((scale.float(), minimum.float()), dim=-1).contiguous()
    half = pairs.to(torch.float16)
    if torch.equal(half.float(), pairs):
        return half.view(torch.int16)
    return pairs.view(torch.int32)


def pack_scales16(scale):
    """(N, K / 16) float32 scales of a symmetric weight in groups of 16 (GGUF's Q6_K: ``w = scale · (q − c)``)
    → the kernel's (N, K / 16) float32 bits (int32)."""
    return scale.float().contiguous().view(torch.int32)


def unpack_scales(scales, bits: int):
    """The kernel's scales → (scale, minimum) float32, exactly as given to :func:`pack_scales`; for
    :func:`pack_scales16`'s (N, K / 16) the minimum is ``−2^(bits−1) · scale`` (exact: a power of two)."""
    if scales.dim() == 2:
        scale = scales.view(torch.float32)
        return scale, scale * -float(1 << (bits - 1))
    pairs = scales.view(torch.float16 if scales.dtype == torch.int16 else torch.float32).float()
    return pairs[..., 0], pairs[..., 1]


def dequantise(weight, scales, bits: int, start: int, stop: int, dtype=None):
    """Rows ``start … stop − 1`` of a weight in the kernel's layout as a float matrix, (stop − start, K) float32
    or bfloat16 (``dtype``): ``scale · q + minimum`` rounded as :meth:`GroupQuant.dequantize` rounds it (a
    multiply, then an add), then to bfloat16 where asked — equal to dequantising :func:`unpack` and
    :func:`unpack_scales`, without forming them. The exact weight of a product of many rows."""
    module = load()
    if module is None:
        raise RuntimeError(f"posenc's kernel is not built here: {status()}")
    return module.dequantise(weight, scales, bits, start, stop, dtype == torch.bfloat16)


def matvec_function():
    """The kernel's ``matvec(x (…, K) float32, weight, scales, bits, bias=None) → (…, N)``, or None where it is
    not built.

    Eager calls go straight to the compiled function (no dispatcher: a decoded token makes ~200 of them);
    under ``torch.compile`` it is the custom operator ``posenc::qmatvec``, which Dynamo traces without a break.
    """
    module = load()
    if module is None:
        return None
    if "op" not in _STATE:
        @torch.library.custom_op("posenc::qmatvec", mutates_args=())
        def qmatvec(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, bits: int,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
            return module.matvec(x, weight, scales, bits, bias)

        @qmatvec.register_fake
        def _(x, weight, scales, bits, bias=None):
            return x.new_empty(*x.shape[:-1], weight.shape[0])

        def matvec(x, weight, scales, bits, bias=None):
            if torch.compiler.is_compiling():
                return qmatvec(x, weight, scales, bits, bias)
            return module.matvec(x, weight, scales, bits, bias)

        _STATE["op"] = matvec
    return _STATE["op"]


def loaded() -> ModuleType | None:
    """The kernel module if a quantised model already loaded it in this process, else None (never builds):
    the decoding fast paths of float parts (``RMSNorm``) use it only where posenc's kernel already runs."""
    return _STATE.get("module")  # type: ignore[return-value]
