"""A decoder block's decoding step in one call of posenc's kernel: the block's modules, without Python between them.

On posenc's quantised kernel a SmolLM2 token spends less time in its 211 matrix products than in the ~1,200
PyTorch operators and module calls around them (norms, head reshapes, rotation, cache writes, attention,
residuals). :func:`block_step` runs one pre-norm block — RMSNorm, q/k/v, RoPE, the KV cache write, attention,
the output projection, RMSNorm, SwiGLU — as ``decode_block`` in ``qmatvec.cpp``, reading the modules' own
tensors: nothing is copied or re-packed, and the modules stay the one statement of what the block computes.
Gemma's sandwich block (a norm after each branch too, ``1 + g`` gains, QK-norm, tanh-GELU, sliding windows)
runs the same way.

The kernel (``posenc.kernels``) takes tensors only; this module is the glue that reads them off the modules,
so it lives with the models: ``Decoder.hidden`` offers each block of a decoding step to :func:`block_step`
first, and runs the block's modules where it returns None.

It applies only where it computes what the modules compute: inference (no gradients, not compiling, eval
mode), one sequence and one new token, a ``PreNormBlock`` or ``SandwichBlock`` of ``RMSNorm`` /
``OffsetRMSNorm``, plain ``MultiHeadAttention`` (full or sliding window; no sinks or query scale; QK-norm
allowed) with a RoPE-family scheme that only rotates (every pair, no bias), a SwiGLU or GeGLU
``GatedFFN``, its matrices on posenc's kernel (or float32: a file's Q6_K, held dequantised), and a KV cache
growing in place. Anything else returns None and the modules run. The arithmetic is theirs except attention
and the activation, which round in another order than PyTorch's (``tests/test_fused_decoding.py`` bounds
the difference; greedy decoding of SmolLM2 picks the same tokens). ``POSENC_FUSED=0`` in the environment switches it off.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor, nn

from posenc import kernels
from posenc.attention import MultiHeadAttention
from posenc.models.decoder_parts import GatedFFN, OffsetRMSNorm, PreNormBlock, RMSNorm, SandwichBlock
from posenc.models.quant import QuantLinear
from posenc.positions.rotary import RoPE

_NO_SCALES = torch.empty(0, dtype=torch.int16)  # a float32 matrix's (unused) scales
_CHECKED_METHODS = ("rotate", "rotate_query", "rotate_key", "rotate_one", "logit_bias", "attention_bias",
                    "value_bias", "add")


def enabled() -> bool:
    """Whether fused decoding steps may run in this process (``POSENC_FUSED=0`` switches them off)."""
    return os.environ.get("POSENC_FUSED", "1").strip().lower() not in ("0", "off", "no", "false")


#: a block's norms by type, in the order ``decode_block`` takes them
_NORM_NAMES = {"PreNormBlock": ("attn_norm", "ffn_norm"),
               "SandwichBlock": ("attn_norm", "attn_post_norm", "ffn_norm", "ffn_post_norm")}


def _norms(block: Any) -> tuple[Any, ...]:
    """The block's norms, then its QK-norms if it has them (read from the modules' dicts: fast)."""
    mods, attn = block._modules, block._modules["attn"]._modules
    return (*(mods[n] for n in _NORM_NAMES[type(block).__name__]),
            *(attn[n] for n in ("q_norm", "k_norm") if attn.get(n) is not None))


def _parts(block: Any) -> tuple[Any, ...]:
    """What a plan reads, by identity: a plan is rebuilt when any of it is replaced (LoRA, a reload). Read from
    the modules' own dicts: a decoding step checks this for every block (nn.Module attribute lookups cost)."""
    mods = block._modules
    return (*mods.values(), *mods["attn"]._modules.values(), *mods["ffn"]._modules.values(),
            *(n._parameters.get("weight") for n in _norms(block)))


def _versions(block: Any) -> list[int]:
    """The norms' weights' version counters: an in-place change to one (a gain formed from it) rebuilds the plan."""
    return [n._parameters["weight"]._version for n in _norms(block)]


def _gain(norm: Any) -> Tensor | None:
    """What multiplies x / rms(x) in ``norm`` — its weight (RMSNorm) or 1 + weight (Gemma's), float32 — or None
    where the norm is not one the kernel computes."""
    if norm.weight.dtype != torch.float32:
        return None
    if type(norm) is RMSNorm:
        return norm.weight
    if type(norm) is OffsetRMSNorm:
        return (1.0 + norm.weight.float()).detach()  # as OffsetRMSNorm forms it; refreshed if the weight changes
    return None


def _plan(block: Any) -> dict[str, Any] | None:
    """What ``decode_block`` needs from this block, or None where the block is not one it computes."""
    module = kernels.loaded()
    if module is None or type(block) not in (PreNormBlock, SandwichBlock):
        return None
    attn, ffn, every = block.attn, block.ffn, _norms(block)
    if (type(attn) is not MultiHeadAttention or not isinstance(ffn, GatedFFN)
            or type(ffn).forward is not GatedFFN.forward):
        return None
    if (attn.query_scale is not None or attn.sinks is not None or attn.window.kind not in ("full", "sliding")
            or (attn.q_norm is None) != (attn.k_norm is None)):
        return None
    scheme = attn.position
    if (not isinstance(scheme, RoPE) or scheme.remaps or scheme.uses_weights or scheme.rotary_dim != scheme.head_dim
            or any(getattr(type(scheme), m) is not getattr(RoPE, m) for m in _CHECKED_METHODS)):
        return None
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj, ffn.gate_proj, ffn.up_proj, ffn.down_proj)
    quantised = [type(m) is QuantLinear and m.kernel == "posenc" for m in linears]
    # a float32 nn.Linear among them (a file's Q6_K, held dequantised) is multiplied in float32; none at all on
    # the kernel: not a quantised model, left to its modules
    if not any(quantised) or not all(q or (type(m) is nn.Linear and m.weight.dtype == torch.float32
                                           and m.weight.is_contiguous()) for q, m in zip(quantised, linears)):
        return None
    if any(m.bias is not None and m.bias.dtype != torch.float32 for m in linears):
        return None
    blocks_norms = len(_NORM_NAMES[type(block).__name__])
    norms, qk = every[:blocks_norms], every[blocks_norms:]
    gains = [_gain(n) for n in every]
    if any(g is None for g in gains) or (qk and qk[0].eps != qk[1].eps):
        return None
    return {
        "parts": _parts(block),
        "versions": _versions(block),
        "norms": gains[:blocks_norms],
        "eps": [float(n.eps) for n in norms],
        "qk_norms": gains[blocks_norms:],
        "qk_eps": float(qk[0].eps) if qk else 0.0,
        "weights": [m._buffers["qweight"] if q else m.weight for q, m in zip(quantised, linears)],
        "scales": [m._buffers["qscales"] if q else _NO_SCALES for q, m in zip(quantised, linears)],
        "bits": [int(m.bits) if q else 0 for q, m in zip(quantised, linears)],
        "biases": [m.bias for m in linears],
        "scheme": scheme,
        "half": scheme.pairing == "half",
        "scale": float(attn.scale),
        "window": attn.window,
        "activation": 0 if ffn.activation == "swiglu" else 1,
        "template": torch.empty(1, scheme.head_dim),  # what rows_for checks the positions against: (T=1, Dh)
        "dim": attn.dim,
        "module": module,
    }


def block_step(block: Any, x: Tensor, positions: Tensor, cache: Any) -> Tensor | None:
    """``block(x, positions=positions, cache=cache)`` for one token of one sequence in one kernel call, or None
    (nothing done) where the fused step does not apply — the caller then runs the modules."""
    if (cache is None or x.shape[0] != 1 or x.shape[1] != 1 or x.dtype != torch.float32 or block.training
            or torch.is_grad_enabled() or torch.compiler.is_compiling() or not x.is_contiguous()
            or x.device.type != "cpu"):
        return None
    plan = block.__dict__.get("_fused_plan")
    if plan is None or (plan and (any(a is not b for a, b in zip(plan["parts"], _parts(block)))
                                  or plan["versions"] != _versions(block))):
        plan = (_plan(block) if enabled() else None) or False
        block.__dict__["_fused_plan"] = plan
    if not plan or x.shape[2] != plan["dim"] or positions.shape != (1,):
        return None
    cos, sin, _ = plan["scheme"].rows_for(plan["template"], positions, torch.float32)
    sequence_index = cache.length  # of the new token
    slot = cache.reserve(positions)
    if slot is None:
        return None
    keys, values, start, index = slot
    window = plan["window"]
    start += max(0, window.first_visible(sequence_index) - cache.dropped)  # a sliding window's first key
    out = plan["module"].decode_block(x, plan["norms"], plan["eps"], plan["weights"], plan["scales"], plan["bits"],
                                      plan["biases"], plan["qk_norms"], plan["qk_eps"], cos.contiguous(),
                                      sin.contiguous(), plan["half"], keys, values, start, index, plan["scale"],
                                      plan["activation"])
    if not window.full:
        cache.keep_from(window.first_visible(sequence_index + 1))  # what the next query can still see
    return out


def count(model: Any) -> tuple[int, int]:
    """(blocks of ``model.layers`` whose decoding steps run fused, all blocks) — what ``posenc generate`` reports."""
    layers = list(getattr(model, "layers", []))
    return sum(enabled() and _plan(layer) is not None for layer in layers), len(layers)
