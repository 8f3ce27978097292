"""Weight-only quantised parts: projections, the output head and the token table held as small integers.

A ``QuantLinear`` computes ``x · Wᵀ (+ b)`` with ``W`` kept as integers and
per-group floats, never as a float matrix, so that a decoding step reads 4 or
8 bits per weight instead of 32. The weight layouts:

- **group-wise** (:class:`GroupQuant`): for each 32 consecutive inputs of an
  output row, ``w = scale · q + minimum`` with ``q`` an unsigned integer of at
  most 8 bits. This is exactly how llama.cpp's GGUF blocks Q4_0, Q4_1, Q4_K,
  Q5_0, Q5_1, Q5_K and Q8_0 are defined (``posenc.formats.gguf.decode_groups``
  turns their bytes into it, value for value); Q6_K is the same with 16 inputs
  per scale and ``minimum = −32 · scale`` (symmetric), which posenc's kernel
  holds too (``kernel_holds``). Few input rows (decoding) run on
  **posenc's own kernel** (:mod:`posenc.kernels`, compiled once per
  machine): the integers packed 4 or 8 bits each with their scales, every group
  of 32 activations rounded to 8-bit integers as llama.cpp does, integer dot
  products, float32 sums — 3–5× faster than PyTorch's int4 kernel per matrix on
  this project's AVX2 machines. Where that kernel is not built (no compiler,
  ``POSENC_KERNELS=0``), they run on
  ``torch.ops.aten._weight_int4pack_mm_for_cpu`` (tinygemm's layout:
  ``w = (q − 8) · s + z`` per group of 32, ``q`` 4 bits): values of 4 bits are
  one packed plane; values of 5–8 bits are split into two 4-bit planes
  ``q = 16 · hi + lo`` and the two products added. (PyTorch's int8 kernel,
  ``_weight_int8pack_mm``, takes one scale per output row only, so it cannot
  hold Q8_0's per-32 scales exactly; the two-plane form keeps every integer.)
- **per-row int8** (:func:`int8_rows`): ``w = scale_row · q``, ``q`` in
  [−127, 127], run on ``torch.ops.aten._weight_int8pack_mm`` — the opt-in
  quantisation of float checkpoints (``posenc generate --weights int8``).

What is exact and what is not: the integers and (posenc's kernel) the scales
always. Posenc's kernel rounds each group of 32 activations to 8-bit integers
with one float scale (error at most half a step per activation; the bound is
tested). PyTorch's kernels are handed scales and zero points in bfloat16 (they
take them in the activation dtype, and on AVX2 only their bfloat16 paths are
vectorised — float32 activations ran 35× slower), so each group's scale is
rounded to 8 significant bits, the activations are rounded to bfloat16 on the
way in and the outputs on the way out. The error this adds to the logits is
measured, not assumed (``benchmarks/realmodels``, ``posenc generate
--weights`` prints it). Long inputs (at least :attr:`QuantLinear.blas_rows`
rows: prefill, scoring) instead multiply by the exact float32 weight,
re-decoded for the call from the stored blocks, through the BLAS matmul —
faster there, and exact. A head given a long pass in chunks (the extension loss, ``perplexity``) is routed
by the pass's rows (``forward(x, pass_rows=T)``), so its logits are as exact as the body's. On a CPU with
AMX tiles, inputs of :data:`AMX_BF16_BLAS_ROWS` rows or more go to BLAS on the weight rounded to bfloat16 (the
CPU's matrix units): bfloat16 inputs at any such length, float32 inputs below ``blas_rows`` — the band the
kernel would otherwise take, with its coarser 8-bit activations (:data:`AMX_FLOAT32_BAND`) — their output
returned in float32. Every such product re-decodes its weight from the kernel's layout in compiled code
(``posenc.kernels.dequantise``, bit-equal to :meth:`GroupQuant.dequantize`).

References used to verify: the ``gguf`` package's numpy dequantisers
(``tests/pretrained/test_quant.py``: the decoded groups equal ``read_gguf``'s
float32 tensors bit for bit), ``F.linear`` with the weight the int4 kernel is
given (equal to bfloat16 rounding), and a float64 evaluation of posenc's
kernel's formula (``tests/test_kernels.py``).

Shape legend: N output features, K input features, G = K / 32 groups, M rows of input.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import kernels

#: Inputs per scale (llama.cpp's block size; the int4 kernel also takes 64, 128, 256).
GROUP = 32
#: Inputs per scale of GGUF's Q6_K (and Q3_K / Q2_K) sub-blocks: posenc's kernel holds symmetric 5–8-bit ones.
GROUP16 = 16
#: The dtype the kernels see: activations, scales and zero points (their vectorised path on AVX2 CPUs).
KERNEL_DTYPE = torch.bfloat16
#: Inputs with at least this many rows multiply by the exact float weight through BLAS when the
#: stored blocks can be re-decoded (measured on 2 AVX2 cores: the int4 kernel is faster below ~256 rows).
DEQUANTISE_ROWS = 256
#: Inputs with at least this many rows go to BLAS on the exact weight when posenc's kernel holds the matrix, by
#: the kernel's path (``posenc.kernels.LEVELS``). SmolLM2's shapes, 1 thread, ``benchmarks/realmodels/kernel_rows.py``:
#: AVX2 (2-core EPYC) equal near 64–128 rows, where re-decoding the weight for BLAS costs as much as the
#: kernel's products; AVX-512 VNNI (2-core EPYC, 4 × 4 blocks) the kernel 2–2.9× faster at 128 rows and
#: 1.3–1.5× at 2,048. There the limit is not speed but exactness: a pass of 4,096 rows or more (scoring, the
#: extension grids) multiplies the exact stored weight, its loss not moved by the 8-bit activations.
KERNEL_BLAS_ROWS_BY_LEVEL = (96, 96, 4096)
KERNEL_BLAS_ROWS = KERNEL_BLAS_ROWS_BY_LEVEL[1]  # the AVX2 figure (a kernel's own: ``kernel_blas_rows()``)
#: The AVX-512 VNNI path's threshold on Intel CPUs, where torch's BLAS (MKL) runs its own AVX-512 float32 GEMM:
#: on a 2-core Intel Xeon (2026-12-08, ``as-stored/xeon-2026-12-08/kernel-rows-*.txt``) the kernel and BLAS on
#: the re-decoded weight were even near 32–64 rows and BLAS 1.6–2.4× faster from 128 rows on (the EPYC figure
#: above is the kernel's: MKL takes a narrower path on AMD CPUs). The exact weight is also the more exact product.
INTEL_AVX512_BLAS_ROWS = 48
#: bfloat16 inputs with at least this many rows go to BLAS on the re-decoded weight, cast to bfloat16, where the
#: CPU has AMX tiles (:data:`AMX_BF16`): there its matrix units multiply bfloat16 at ≈ 1.4 TFLOP/s a core; float32
#: inputs too, below ``blas_rows`` (:data:`AMX_FLOAT32_BAND`). Measured with the weight re-decoded by the compiled
#: ``kernels.dequantise`` (``benchmarks/realmodels/kernel_rows.py 1 16,...,2048 [bfloat16]``, 2-core Intel Xeon,
#: SmolLM2's layer 0 and head, 1 thread, quiet; ``as-stored/intel-2026-12-05-band/kernel-rows-*.txt``): the
#: kernel 1.6–2.5× faster at 16 rows, even at 32 (0.8–1.4×), the matrix units 1.3–2.3× faster at 64, 2.3–3.4× at
#: 128, 3–9× at 2,048 (float32 inputs; bfloat16 ones alike). The kernel's exactness argument (4,096 rows on
#: AVX-512) does not hold here: its own activations are rounded to 8 bits.
AMX_BF16_BLAS_ROWS = 64


def _has_amx() -> bool:
    """Whether this CPU has AMX tiles (torch's own check; False where this torch cannot say)."""
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


#: Whether bfloat16 inputs of many rows take the AMX route above (read at call time: tests switch it).
AMX_BF16 = _has_amx()
#: Where :data:`AMX_BF16`: float32 inputs of :data:`AMX_BF16_BLAS_ROWS` rows up to ``blas_rows`` — the band where
#: the kernel would round every activation to 8 bits (a prefill of a few thousand tokens) — multiply in bfloat16
#: on the matrix units too, the output back in float32: activations and re-decoded weights rounded to 8 bits of
#: mantissa each, no coarser than the kernel's per-32 integers (measured: ``benchmarks/realmodels/README.md``,
#: "The kernel's band in bfloat16"), and Gemma 3's 2,048-token prefill 2.3× faster on an AMX core. Inputs of
#: ``blas_rows`` or more still multiply the exact float32 weight. ``POSENC_AMX_BAND=0`` keeps the kernel there.
AMX_FLOAT32_BAND = os.environ.get("POSENC_AMX_BAND", "1").strip().lower() not in ("0", "off", "no", "false")


def chunk_of_pass(module: nn.Module, x: Tensor, pass_rows: int) -> Tensor:
    """``module(x)`` for ``x`` one chunk of a pass of ``pass_rows`` rows (a loss's head over a long pass): a
    :class:`QuantLinear` routes the chunk as it would the whole pass; any other module just runs on it."""
    return module(x, pass_rows=pass_rows) if isinstance(module, QuantLinear) else module(x)


def kernel_blas_rows() -> int:
    """The input rows from which posenc's kernel hands a product to BLAS here (its path's measured crossover on
    this CPU's vendor); ``POSENC_BLAS_ROWS=N`` in the environment sets it."""
    given = os.environ.get("POSENC_BLAS_ROWS", "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise ValueError(f"POSENC_BLAS_ROWS must be a whole number of rows >= 1, got {given!r}")
        return int(given)
    module = kernels.loaded()
    if module is None:
        return KERNEL_BLAS_ROWS
    level = module.get_level()
    if level == 2 and kernels.cpu_vendor() == "GenuineIntel":
        return INTEL_AVX512_BLAS_ROWS
    return KERNEL_BLAS_ROWS_BY_LEVEL[level]


#: Output rows re-decoded at a time for an input of many rows (``QuantLinear._exact_product``).
EXACT_ROWS = 8192
#: Rows packed per call at load time (the packing op needs int32 values: 4 bytes per weight, bounded here).
PACK_ROWS = 4096


@dataclass(frozen=True)
class GroupQuant:
    """A matrix as integers with one scale and one offset per ``group`` inputs: ``w = scale · q + minimum``.

    Args:
        values: (N, K) uint8 integers in ``[0, 2**bits)``.
        scale, minimum: (N, K // group) float32.
        bits: bits per integer (1–8).
        group: inputs per scale.
    """

    values: Tensor
    scale: Tensor
    minimum: Tensor
    bits: int
    group: int = GROUP

    def __post_init__(self) -> None:
        n, k = self.values.shape
        if not 1 <= self.bits <= 8 or self.values.dtype != torch.uint8:
            raise ValueError(f"GroupQuant holds uint8 integers of 1–8 bits, got {self.values.dtype} with "
                             f"bits={self.bits}")
        if k % self.group or self.scale.shape != (n, k // self.group) or self.minimum.shape != self.scale.shape:
            raise ValueError(f"a ({n} × {k}) GroupQuant needs scale and minimum of shape ({n}, {k // self.group}) "
                             f"with K divisible by group={self.group}; got {tuple(self.scale.shape)} and "
                             f"{tuple(self.minimum.shape)}")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.values.shape)  # type: ignore[return-value]

    def dequantize(self) -> Tensor:
        """(N, K) float32: ``scale · q + minimum`` — a multiply, then an add (the GGUF dequantisers' order)."""
        n, k = self.shape
        q = self.values.view(n, -1, self.group).float()  # (N, G, 32)
        return (q * self.scale[..., None] + self.minimum[..., None]).view(n, k)

    def row_block(self, start: int, stop: int) -> GroupQuant:
        """Rows ``start … stop − 1`` (views, nothing copied)."""
        return GroupQuant(self.values[start:stop], self.scale[start:stop], self.minimum[start:stop], self.bits,
                          self.group)

    def take_rows(self, index: Tensor) -> GroupQuant:
        """The same matrix with its rows reordered (q/k rows between RoPE pairings): exact."""
        return GroupQuant(self.values[index], self.scale[index], self.minimum[index], self.bits, self.group)

    def kernel_layout(self) -> tuple[Tensor, Tensor]:
        """(weight, scales) in posenc's kernel layout: ``kernels.pack`` of the values, and ``kernels.pack_scales16``
        of the scales for groups of 16 (symmetric) or ``kernels.pack_scales`` of scale and minimum for groups of 32.
        """
        scales = (kernels.pack_scales16(self.scale) if self.group == GROUP16
                  else kernels.pack_scales(self.scale, self.minimum))
        return kernels.pack(self.values, self.bits), scales


def quantise_groups(w: Tensor, *, bits: int = 4, group: int = GROUP) -> GroupQuant:
    """Round a float matrix to ``bits``-bit integers per ``group`` inputs, asymmetric (min / max of each group).

    The opt-in quantisation of float checkpoints (``--weights int4``); GGUF files come already quantised.
    """
    n, k = w.shape
    g = w.float().view(n, k // group, group)  # (N, G, 32)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / (2**bits - 1)).clamp_min(torch.finfo(torch.float32).tiny)
    q = ((g - lo[..., None]) / scale[..., None]).round().clamp(0, 2**bits - 1).to(torch.uint8)
    return GroupQuant(q.view(n, k), scale, lo, bits, group)


def kernel_holds(gq: GroupQuant) -> bool:
    """Whether posenc's kernel, built here, multiplies ``gq`` as it is: groups of 32 (any 1–8 bits), or groups of
    16 of symmetric 5–8-bit values (``minimum == −2^(bits−1) · scale`` exactly, as GGUF's Q6_K)."""
    if kernels.load() is None:
        return False
    if gq.group == GROUP:
        return True
    return (gq.group == GROUP16 and 5 <= gq.bits <= 8
            and torch.equal(gq.minimum, gq.scale * -float(1 << (gq.bits - 1))))


def int8_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per output row: (q (N, K) int8 in [−127, 127], scale (N,) float32), ``w ≈ scale · q``."""
    scale = (w.float().abs().amax(-1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    return (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8), scale


def _pack_op(values: Tensor) -> Tensor:
    """PyTorch's own packing op (int32 input), PACK_ROWS rows at a time (row blocks of 32 pack independently)."""
    parts = [torch.ops.aten._convert_weight_to_int4pack_for_cpu(values[i : i + PACK_ROWS].to(torch.int32), 1)
             for i in range(0, values.shape[0], PACK_ROWS)]
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def _pack_uint8(values: Tensor, block: int) -> Tensor:
    """The same layout by reshaping uint8 values: per ``block`` rows, a (K/2, 2, block/2) grid of bytes holding
    rows n (low nibble) and n + block/2 (high nibble) of input pair k//2, parity k%2. PyTorch picks the block
    by the CPU it runs on (32 on AVX2, 64 with AVX-512 measured here), so the block is found by checking
    against the op (:func:`_layout_block`) before use; a torch that packs otherwise falls back to the op."""
    n, k = values.shape
    v = values.view(n // block, 2, block // 2, k // 2, 2)  # (row block, half, row in half, input pair, parity)
    return (v[:, 0] | (v[:, 1] << 4)).permute(0, 2, 3, 1).contiguous().view(n, k // 2)  # the kernel wants it contiguous


_LAYOUT: list[int | None] = []


def _layout_block() -> int | None:
    """The row block of this torch's packed int4 layout on this CPU (64 or 32), or None if neither matches."""
    if not _LAYOUT:
        probe = torch.randint(0, 16, (128, 128), generator=torch.Generator().manual_seed(0)).to(torch.uint8)
        packed = _pack_op(probe)
        _LAYOUT.append(next((b for b in (64, 32) if torch.equal(_pack_uint8(probe, b), packed)), None))
    return _LAYOUT[0]


def _pack(values: Tensor) -> Tensor:
    """(N, K) uint8 integers 0–15 → the int4 kernel's packed (N, K / 2) uint8 layout."""
    block = _layout_block()
    if block is not None and values.shape[0] % block == 0:
        return _pack_uint8(values, block)  # 5–10× faster than the op, which wants 4 bytes per value
    return _pack_op(values)


def int4_planes(gq: GroupQuant) -> list[tuple[Tensor, Tensor]]:
    """A GroupQuant as 4-bit planes for ``_weight_int4pack_mm_for_cpu``: [(packed (N, K/2), scale_zero (G, N, 2))].

    The kernel computes ``(q − 8) · s + z`` per group. Values of ≤ 4 bits: one plane, s = scale,
    z = minimum + 8·scale. Wider values ``q = 16·hi + lo``: a plane of ``hi + c`` (s = 16·scale) and one of
    ``lo`` (s = scale, z = scale / 2); their sum is ``scale · q + minimum`` when the hi plane's zero is
    ``minimum + (2**(bits−1) + 7.5)·scale``. The offset ``c = 8 − 2**(bits−5)`` centres each plane's values
    on zero, so that neither plane's (bfloat16) output is large and cancelled by the other's, and the zero
    points stay small (Q8_0: 7.5·scale; Q5_0: 7.5·scale), so their bfloat16 rounding is too.
    """
    n, k = gq.shape
    if n % 16 or gq.group not in (32, 64, 128, 256):
        raise ValueError(f"the int4 kernel needs N divisible by 16 and a group of 32–256 inputs, got N={n}, "
                         f"group={gq.group}; dequantise this matrix instead (--weights dequantised)")

    def sz(s: Tensor, z: Tensor) -> Tensor:
        return torch.stack((s, z), dim=-1).transpose(0, 1).contiguous().to(KERNEL_DTYPE)  # (G, N, 2)

    if gq.bits <= 4:
        return [(_pack(gq.values), sz(gq.scale, gq.minimum + 8 * gq.scale))]
    c, z_hi = _hi_offset(gq.bits)
    return [(_pack((gq.values >> 4) + c), sz(16 * gq.scale, gq.minimum + z_hi * gq.scale)),
            (_pack(gq.values & 15), sz(gq.scale, gq.scale / 2))]


def _hi_offset(bits: int) -> tuple[int, float]:
    """(c, z / scale) of the high plane of ``bits``-bit values (see :func:`int4_planes`)."""
    return 8 - 2 ** (bits - 5), 2 ** (bits - 1) + 7.5


def kernel_weight(gq: GroupQuant) -> Tensor:
    """(N, K) float32: the weight the int4 kernel multiplies by — :func:`int4_planes` with bfloat16 s and z."""
    n, k = gq.shape
    r = lambda t: t.to(KERNEL_DTYPE).float()[..., None]  # noqa: E731  (N, G, 1)
    q = gq.values.view(n, -1, gq.group).float()  # (N, G, 32)
    if gq.bits <= 4:
        w = (q - 8) * r(gq.scale) + r(gq.minimum + 8 * gq.scale)
    else:
        c, z_hi = _hi_offset(gq.bits)
        hi, lo = torch.div(q, 16, rounding_mode="floor") + c, torch.remainder(q, 16)
        w = ((hi - 8) * r(16 * gq.scale) + r(gq.minimum + z_hi * gq.scale)) + ((lo - 8) * r(gq.scale)
                                                                               + r(gq.scale / 2))
    return w.view(n, k)


class QuantLinear(nn.Module):
    """``y = x · Wᵀ (+ b)`` with ``W`` held as integers (see the module docstring); a drop-in ``nn.Linear``.

    Build one with :meth:`from_groups` (GGUF blocks, or :func:`quantise_groups`) or :meth:`from_int8_rows`.
    Group-wise weights run on posenc's own kernel where it is built (:mod:`posenc.kernels`:
    ``kernel="posenc"``, the integers and scales in its layout), else on PyTorch's int4 kernel
    (``kernel="int4"``, :func:`int4_planes`).

    Args:
        in_features, out_features: K and N.
        packed: (weight, scales, bits) in posenc's kernel layout (``kernels.pack``, ``kernels.pack_scales``).
        planes: int4 kernel planes (:func:`int4_planes`).
        int8: (q (N, K) int8, scale (N,)) for the int8 kernel (exactly one of the three).
        bias: (N,) or None.
        exact: re-decodes the exact weight as a GroupQuant (for GGUF files: from the memory-mapped blocks);
            when given (always, for ``packed``), inputs of ≥ :attr:`blas_rows` rows multiply by it through BLAS.
        stored: what the weight was stored as ("Q4_1", "int8 rows", …), for ``extra_repr``.
    """

    def __init__(self, *, in_features: int, out_features: int, packed: tuple[Tensor, Tensor, int] | None = None,
                 planes: list[tuple[Tensor, Tensor]] | None = None, int8: tuple[Tensor, Tensor] | None = None,
                 bias: Tensor | None = None, exact: Callable[[], GroupQuant] | None = None, stored: str = "") -> None:
        super().__init__()
        if sum(a is not None for a in (packed, planes, int8)) != 1:
            raise ValueError("QuantLinear takes exactly one of packed (posenc's kernel), planes (int4 kernel) or "
                             "int8 (int8 kernel)")
        self.in_features, self.out_features, self.stored = in_features, out_features, stored
        self.kernel = "posenc" if packed is not None else "int4" if planes is not None else "int8"
        # posenc's kernel also holds symmetric 5–8-bit weights in groups of 16 (Q6_K): 2-D scales (N, K / 16)
        self.group = GROUP16 if packed is not None and packed[1].dim() == 2 else GROUP
        self.blas_rows = kernel_blas_rows() if packed is not None else DEQUANTISE_ROWS
        if packed is not None:
            self.register_buffer("qweight", packed[0])
            self.register_buffer("qscales", packed[1])  # float bits as integers: model.to(dtype) leaves them
            self.bits = packed[2]
            self._matvec = kernels.matvec_function()
        # bfloat16 scales are kept as their int16 bit patterns: ``model.to(dtype)`` casts floating buffers,
        # and the kernels need these in bfloat16 whatever the model's dtype
        for i, (q4, scale_zero) in enumerate(planes or []):
            self.register_buffer(f"packed{i}", q4)
            self.register_buffer(f"scale_zero{i}", scale_zero.to(KERNEL_DTYPE).view(torch.int16))
        self.planes = len(planes or [])
        if int8 is not None:
            self.register_buffer("q8", int8[0])
            self.register_buffer("scale8", int8[1].to(KERNEL_DTYPE).view(torch.int16))
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        # a plain attribute: not state, not moved; CPU memory map (posenc's layout re-decodes its own buffers)
        self._exact = exact if exact is not None or packed is None else self.stored_groups

    @classmethod
    def from_groups(cls, gq: GroupQuant, *, bias: Tensor | None = None, exact: Callable[[], GroupQuant] | None = None,
                    stored: str = "", kernel: str | None = None) -> QuantLinear:
        """``kernel`` None: posenc's where it is built (and it takes the groups: see :func:`kernel_holds`), else
        PyTorch's int4 kernel (groups of 32 only); "posenc" or "int4" to choose (``posenc.kernels.status()`` says
        why posenc's may be missing)."""
        n, k = gq.shape
        stored = stored or f"int{gq.bits}/{gq.group}"
        if kernel not in (None, "posenc", "int4"):
            raise ValueError(f"kernel must be 'posenc', 'int4' or None (the best built here), got {kernel!r}")
        if kernel != "int4" and gq.group == GROUP16:
            if not kernel_holds(gq):
                raise ValueError(f"a group of {GROUP16} runs only on posenc's kernel, for symmetric 5–8-bit values "
                                 f"(minimum = −2^(bits−1) · scale); got bits={gq.bits}; kernel status: "
                                 f"{kernels.status()}")
            return cls(in_features=k, out_features=n, packed=(*gq.kernel_layout(), gq.bits), bias=bias,
                       exact=exact, stored=stored)
        if kernel == "posenc" and (gq.group != GROUP or kernels.load() is None):
            raise ValueError(f"posenc's kernel cannot hold this matrix here: group {gq.group} (it takes {GROUP}, "
                             f"or {GROUP16} symmetric); kernel status: {kernels.status()}")
        if gq.group != GROUP:
            raise ValueError(f"PyTorch's int4 kernel here takes groups of {GROUP}, got {gq.group}")
        if kernel != "int4" and kernels.load() is not None:
            return cls(in_features=k, out_features=n, packed=(*gq.kernel_layout(), gq.bits), bias=bias,
                       exact=exact, stored=stored)
        return cls(in_features=k, out_features=n, planes=int4_planes(gq), bias=bias, exact=exact, stored=stored)

    @classmethod
    def from_int8_rows(cls, w: Tensor, *, bias: Tensor | None = None) -> QuantLinear:
        q, scale = int8_rows(w)
        return cls(in_features=w.shape[1], out_features=w.shape[0], int8=(q, scale), bias=bias, stored="int8 rows")

    def stored_groups(self) -> GroupQuant:
        """Posenc's kernel layout back as the GroupQuant it was packed from (exact)."""
        scale, minimum = kernels.unpack_scales(self.qscales, self.bits)
        return GroupQuant(kernels.unpack(self.qweight, self.bits), scale, minimum, self.bits, self.group)

    def exact_weight(self) -> Tensor | None:
        """(N, K) float32 exactly as stored (GGUF: equal to ``read_gguf``'s tensor), or None if not kept."""
        return None if self._exact is None else self._exact().dequantize()

    def forward(self, x: Tensor, *, pass_rows: int | None = None) -> Tensor:
        """(…, K) → (…, N). ``pass_rows``: the rows of a whole pass that ``x`` is one chunk of (a loss's head
        over a long pass): the chunk is routed as that pass would be — kernel, the matrix units (AMX) or the exact
        weight — not by its size."""
        blas_rows = self.blas_rows
        n = x.numel() // self.in_features if pass_rows is None else pass_rows
        if AMX_BF16 and self._exact is not None and n >= AMX_BF16_BLAS_ROWS:  # the CPU's matrix units
            if x.dtype == torch.bfloat16:
                blas_rows = AMX_BF16_BLAS_ROWS
            elif x.dtype == torch.float32 and n < blas_rows and AMX_FLOAT32_BAND:  # the kernel's band, in bfloat16
                return self._finish(self._exact_product(x.reshape(-1, self.in_features).bfloat16()).float(), x)
        if self.kernel == "posenc" and n < blas_rows:  # few rows: one call
            b = self._buffers
            if x.dtype == torch.float32 and x.is_contiguous() and (self.bias is None or self.bias.dtype == x.dtype):
                return self._matvec(x, b["qweight"], b["qscales"], self.bits, self.bias)
            bias = None if self.bias is None else self.bias.float()
            return self._matvec(x.float().contiguous(), b["qweight"], b["qscales"], self.bits, bias).to(x.dtype)
        rows = x.reshape(-1, self.in_features)  # (M, K)
        if self._exact is not None and n >= blas_rows:
            out = self._exact_product(rows)  # long inputs: BLAS on the exact weight
        else:
            xk = rows.to(KERNEL_DTYPE)
            if self.kernel == "int8":
                out = torch.ops.aten._weight_int8pack_mm(xk, self.q8, self.scale8.view(KERNEL_DTYPE)).to(x.dtype)
            else:
                out = None
                for i in range(self.planes):  # (M, N) per plane, added in the activation dtype
                    part = torch.ops.aten._weight_int4pack_mm_for_cpu(
                        xk, getattr(self, f"packed{i}"), self.group,
                        getattr(self, f"scale_zero{i}").view(KERNEL_DTYPE)).to(x.dtype)
                    out = part if out is None else out + part
        return self._finish(out, x)

    def _finish(self, out: Tensor, x: Tensor) -> Tensor:
        """(M, N) product of ``x``'s rows → + bias, in ``x``'s leading shape (…, N)."""
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def _exact_product(self, rows: Tensor) -> Tensor:
        """rows (M, K) × the exact weight, re-decoded EXACT_ROWS output rows at a time: a large head (Gemma 3's
        262,144 × 640) is never whole in float32 (671 MB, and as much again while it is formed)."""
        weight = self._exact_rows(rows.dtype)
        n = self.out_features
        if n <= EXACT_ROWS:
            return F.linear(rows, weight(0, n))
        out = rows.new_empty(rows.shape[0], n)
        for r0 in range(0, n, EXACT_ROWS):
            out[:, r0 : r0 + EXACT_ROWS] = F.linear(rows, weight(r0, min(r0 + EXACT_ROWS, n)))
        return out

    def _exact_rows(self, dtype: torch.dtype) -> Callable[[int, int], Tensor]:
        """``(start, stop) →`` those rows of the exact weight in ``dtype``: from posenc's kernel layout in one
        compiled pass where it holds the weight (the same values: ``stored_groups`` is exact), else re-decoded
        by ``exact`` (for GGUF files, from the memory-mapped blocks)."""
        assert self._exact is not None
        if self.kernel == "posenc" and dtype in (torch.float32, torch.bfloat16):
            b = self._buffers
            return lambda start, stop: kernels.dequantise(b["qweight"], b["qscales"], self.bits, start, stop, dtype)
        gq = self._exact()
        return lambda start, stop: gq.row_block(start, stop).dequantize().to(dtype)

    def describe_kernel(self) -> str:
        """What multiplies few rows: "posenc kernel, 4-bit", "int4 kernel ×2 planes", "int8 kernel"."""
        if self.kernel == "posenc":
            return f"posenc kernel, {self.bits}-bit" + (f", groups of {GROUP16}" if self.group == GROUP16 else "")
        return f"int4 kernel ×{self.planes} planes" if self.kernel == "int4" else "int8 kernel"

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, stored={self.stored}, "
                f"kernel={self.describe_kernel()}, bias={self.bias is not None}")


class QuantHead(QuantLinear):
    """The output head as a QuantLinear (``Decoder.logits`` calls it like ``OutputHead``); ``tied`` is informational.

    ``weight`` is a meta tensor of the head's shape and activation dtype (the values are in the blocks).
    """

    def __init__(self, *, tied: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tied, self.dim, self.vocab_size = tied, self.in_features, self.out_features
        self.weight = torch.empty(self.out_features, self.in_features, device="meta")

    @classmethod
    def of(cls, linear: QuantLinear, *, tied: bool) -> QuantHead:
        packed = (linear.qweight, linear.qscales, linear.bits) if linear.kernel == "posenc" else None
        planes = [(getattr(linear, f"packed{i}"), getattr(linear, f"scale_zero{i}").view(KERNEL_DTYPE))
                  for i in range(linear.planes)]
        int8 = (linear.q8, linear.scale8.view(KERNEL_DTYPE)) if linear.kernel == "int8" else None
        exact = None if linear._exact == linear.stored_groups else linear._exact
        return cls(tied=tied, in_features=linear.in_features, out_features=linear.out_features, packed=packed,
                   planes=planes or None, int8=int8, bias=linear.bias, exact=exact, stored=linear.stored)


class QuantEmbedding(nn.Module):
    """The token table kept as stored blocks: a lookup decodes just the rows it needs, exactly.

    Args:
        stored: (V, bytes per row) the table's blocks (a GGUF memory map: nothing is copied).
        decode: rows of ``stored`` → GroupQuant (``posenc.formats.gguf.decode_groups``).
        dim: D.

        dtype: the activation dtype the rows are returned in (float32: exact).

    ``weight`` is a meta tensor of shape (V, D) in ``dtype`` — shape and dtype only.
    """

    def __init__(self, *, stored: Tensor, decode: Callable[[Tensor], GroupQuant], dim: int, kind: str = "",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.stored, self.decode, self.kind = stored, decode, kind
        self.vocab_size, self.dim, self.scale = stored.shape[0], dim, False
        self.weight = torch.empty(self.vocab_size, dim, device="meta", dtype=dtype)

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) ids → (B, T, D) rows, equal to the dequantised table's (cast to ``weight.dtype``)."""
        from posenc.embedding import check_ids

        check_ids(ids, self.vocab_size)
        flat = ids.reshape(-1)
        rows = self.decode(self.stored[flat.cpu()]).dequantize()  # (B·T, D) float32
        return rows.to(device=ids.device, dtype=self.weight.dtype).view(*ids.shape, self.dim)

    def groups(self) -> GroupQuant:
        """The whole table as a GroupQuant (for a tied head)."""
        return self.decode(self.stored)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, stored={self.kind}"
