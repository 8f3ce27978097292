"""posenc's compiled CPU kernel for decoding with quantised weights, built once per machine.

``qmatvec.cpp`` (beside this file) multiplies a few input rows by a group-quantised weight the way
llama.cpp does: each group of 32 inputs rounded to 8-bit integers, integer dot products with the
4- or 8-bit weights (AVX-512 VNNI ``dpbusd`` where the CPU has it, else AVX2 ``maddubs``), one
float multiply per group (per 32 weights with a scale and a minimum; per 16 for symmetric weights with
a scale alone, GGUF's Q6_K: :func:`pack_scales16`). PyTorch's own int4 kernel
(``_weight_int4pack_mm_for_cpu``) works in bfloat16 and took 32 ms of a 77 ms SmolLM2 token on
this project's 2-core AVX2 machine; see ``benchmarks/realmodels/README.md`` for the measurements.

It is compiled with ``torch.utils.cpp_extension`` (a C++17 compiler, and ninja — a dependency; ``-O3 -march=native -ffp-contract=off``)
the first time a quantised model loads, into ``TORCH_EXTENSIONS_DIR`` (torch's default:
``~/.cache/torch_extensions``) under a name that includes this CPU's instruction-set flags, so a
folder shared between machines never runs code built for another CPU. Where it cannot be built —
no compiler, or ``POSENC_KERNELS=0`` in the environment — posenc says why once and uses PyTorch's
int4 kernel instead (:func:`status` tells which runs).

The same file holds a decoding step's RMSNorm and RoPE rotation, and ``decode_block``: a whole decoder
block's step for one token in one call (pre-norm or Gemma's sandwich), which :mod:`posenc.kernels.fused` runs in place of the block's
modules where it computes what they compute (``POSENC_FUSED=0`` switches it off).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import warnings
from pathlib import Path
from types import ModuleType

import torch

SOURCE = Path(__file__).with_name("qmatvec.cpp")
#: the kernel's paths by level (``module.get_level()``): the widest this CPU and build have is the default
LEVELS = ("portable loop", "AVX2", "AVX-512 VNNI")
_STATE: dict[str, object] = {}


def _cpu_tag() -> str:
    """A short digest of this CPU's instruction-set flags (Linux /proc/cpuinfo; elsewhere the platform)."""
    flags = platform.machine() + platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line
                break
    except OSError:
        pass
    return hashlib.sha256(flags.encode()).hexdigest()[:10]


def load() -> ModuleType | None:
    """The compiled kernel module, or None (the reason in :func:`status`); built on the first call."""
    if "module" in _STATE:
        return _STATE["module"]  # type: ignore[return-value]
    module, why = None, ""
    if os.environ.get("POSENC_KERNELS", "1").strip().lower() in ("0", "off", "no", "false"):
        why = "switched off by POSENC_KERNELS=0"
    else:
        try:
            from torch.utils import cpp_extension

            _find_ninja()
            name = f"posenc_qmatvec_{_cpu_tag()}"
            if not _built(name):
                print("posenc: compiling the quantised decoding kernel for this CPU (once; about a minute)",
                      file=sys.stderr, flush=True)
            module = cpp_extension.load(name=name, sources=[str(SOURCE)], verbose=False,
                                        extra_cflags=["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"],
                                        extra_ldflags=["-fopenmp"])
        except Exception as e:  # noqa: BLE001  (no compiler, no ninja, a failed build: all mean "use torch's")
            why = f"could not be built ({type(e).__name__}: {str(e).strip().splitlines()[-1][:200]})"
            warnings.warn(f"posenc's quantised decoding kernel {why}; using PyTorch's int4 kernel (slower "
                          "decoding). Set POSENC_KERNELS=0 to skip the attempt.", RuntimeWarning, stacklevel=2)
    _STATE["module"], _STATE["why"] = module, why
    return module


def _find_ninja() -> None:
    """Put the ``ninja`` package's binary on PATH when no ninja is there (a venv used without activating it)."""
    import shutil

    if shutil.which("ninja") is None:
        try:
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass  # cpp_extension then says ninja is missing, and posenc falls back


def _built(name: str) -> bool:
    from torch.utils.cpp_extension import _get_build_directory

    try:
        return any(Path(_get_build_directory(name, verbose=False)).glob(f"{name}*.so"))
    except Exception:  # noqa: BLE001
        return False


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
