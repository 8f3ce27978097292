"""The RoPE rotation written to move as few bytes as eager PyTorch allows.

A rotation reads x once and writes it once; everything else is overhead. The
textbook form ``x*cos + rotate_half(x)*sin`` makes five full-size temporaries
(two halves, a ``cat``, two products) and so passes over memory five or six
times — and on a CPU every fresh large temporary also costs page faults
(a 32 MiB tensor ≈ 8,200 of them). Here:

* **interleaved pairing** — the pairs (x_{2i}, x_{2i+1}) are exactly the
  real/imaginary parts of a complex64 view, so the rotation is *one* complex
  multiply by e^{ip·θ} written straight into the output: one pass, the copy
  floor. The backward is the same multiply by e^{−ip·θ}.
* **half pairing** — the pairs (x_i, x_{i+P}) are P apart, which no complex
  view can express, so the rotation needs three elementwise ops
  (``x·[cos, cos]``, then one ``addcmul`` per half). They run over blocks of
  rows small enough to stay in cache, so memory is crossed about once and
  the other two passes hit the cache.

Either way the output is allocated once (``empty_like``, keeping x's strides)
and nothing else of x's size is created, in the forward or the backward; only
cos and sin (T × P, tiny) are saved for the backward, never x. Inputs in a
16-bit dtype are widened to float32 one cache-sized block at a time and rounded
once on the way out, so memory sees only 16-bit traffic.

Shape legend: B batch, H heads, T sequence length, Dh head width,
R rotated width (≤ Dh), P = R/2 rotated pairs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: Bytes of x per block in the half-pairing loop: small enough to stay in a
#: core's L2/L3 between the three ops, large enough that Python overhead
#: (a few µs per op) stays negligible.
BLOCK_BYTES = 1 << 20
#: Below this many elements ``apply_rotary`` uses the textbook form instead:
#: everything is in cache and the fewest Python-level calls win (decoding steps).
SMALL_NUMEL = 1 << 14


def _complex_ok(t: Tensor) -> bool:
    """Whether ``t[..., :R]`` can be viewed as complex pairs (unit last stride, even strides/offset)."""
    return t.stride(-1) == 1 and t.storage_offset() % 2 == 0 and all(s % 2 == 0 for s in t.stride()[:-1])


def rotate_into(out: Tensor, x: Tensor, cos: Tensor, sin: Tensor, *, pairing: str, inverse: bool = False) -> Tensor:
    """Write the RoPE rotation of ``x`` into ``out`` (which may be ``x`` itself).

    Args:
        out: (..., T, Dh) destination, same shape and dtype as x.
        x: (..., T, Dh) source: float32/float64, or a 16-bit dtype rotated in float32 block by block.
        cos, sin: (..., T, P) in the compute dtype (float32 or float64), broadcastable against
            x's leading dims, with the full T.
        pairing: "half" or "interleaved".
        inverse: rotate by −θ (the transpose: what the backward needs).

    Returns:
        ``out``.
    """
    pairs = cos.shape[-1]
    rot = 2 * pairs
    if pairing not in ("half", "interleaved"):
        raise ValueError(f"pairing must be 'half' or 'interleaved', got {pairing!r}")
    inplace = out.data_ptr() == x.data_ptr()
    if not inplace and rot < x.shape[-1]:
        out[..., rot:].copy_(x[..., rot:])  # the unrotated tail passes through
    narrow = x.dtype != cos.dtype  # 16-bit storage: float32 arithmetic on cache-sized blocks
    if pairing == "interleaved":
        rotation = torch.complex(cos, -sin if inverse else sin)  # (..., T, P) e^{±ipθ}
        if not narrow:  # one complex multiply over everything: the copy floor
            xc = torch.view_as_complex(x[..., :rot].unflatten(-1, (pairs, 2)))  # (..., T, P) complex view
            oc = torch.view_as_complex(out[..., :rot].unflatten(-1, (pairs, 2)))
            torch.mul(xc, rotation, out=oc)
            return out
        tables: tuple[Tensor, ...] = (rotation,)
    else:  # half: out = x·[cos, cos] + [−x2, x1]·[sin, sin]
        tables = (torch.cat((cos, cos), dim=-1), sin)  # (..., T, R), (..., T, P)
    s_lo, s_hi = (1.0, -1.0) if inverse else (-1.0, 1.0)
    seq = x.shape[-2]
    row_bytes = max(1, x.numel() // max(seq, 1) * cos.element_size())  # of the compute-dtype working set
    step = max(1, BLOCK_BYTES // row_bytes)
    if step >= seq:  # one block: no splitting (the common small case, where Python overhead is what counts)
        blocks: Any = ((x, out, *tables),)
    else:
        blocks = zip(x.split(step, dim=-2), out.split(step, dim=-2), *(t.split(step, dim=-2) for t in tables))
    for xb, ob, *tb in blocks:
        src, dst = xb[..., :rot], ob[..., :rot]
        if narrow:
            work = src.to(cos.dtype)  # (..., t, R) float32, fresh and in cache
            if pairing == "interleaved":
                torch.view_as_complex(work.unflatten(-1, (pairs, 2))).mul_(tb[0])
                dst.copy_(work)  # one rounding to the storage dtype
                continue
            src, dst_narrow, dst = work, dst, torch.empty_like(work)
        elif inplace:
            src = src.clone()  # in place needs the original values
        cb, sb = tb
        torch.mul(src, cb, out=dst)
        dst[..., :pairs].addcmul_(src[..., pairs:], sb, value=s_lo)
        dst[..., pairs:].addcmul_(src[..., :pairs], sb, value=s_hi)
        if narrow:
            dst_narrow.copy_(dst)
    return out


class RotaryFunction(torch.autograd.Function):
    """Autograd wrapper of ``rotate_into``: the backward is the inverse rotation of the gradient.

    Only cos and sin are saved. The backward calls this same function, so
    higher-order gradients work too. ``inplace`` rotates x's own memory (the
    caller must own x: a fresh tensor nothing else reads).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, cos: Tensor, sin: Tensor, pairing: str, inverse: bool, inplace: bool) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.pairing, ctx.inverse = pairing, inverse
        if inplace:
            ctx.mark_dirty(x)
            out = x
        else:
            out = torch.empty_like(x)  # dense x: same strides, so every op streams both alike
        return rotate_into(out, x, cos, sin, pairing=pairing, inverse=inverse)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        if not _complex_ok(grad):
            grad = grad.contiguous()
        g = RotaryFunction.apply(grad, cos, sin, ctx.pairing, not ctx.inverse, False)
        return g, None, None, None, None, None


def rotate(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: str) -> Tensor:
    """RoPE rotation of ``x`` (any float dtype) with float32/64 ``cos``/``sin``; differentiable in x.

    One fresh output of x's dtype, forward and backward. 16-bit inputs are
    widened block by block, rotated in float32 while in cache, and rounded
    once on the way out: the memory traffic of a 16-bit copy, float32 accuracy.
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    cos, sin = cos.to(compute), sin.to(compute)
    if not _complex_ok(x):
        x = x.contiguous()
    return RotaryFunction.apply(x, cos, sin, pairing, False, False)
