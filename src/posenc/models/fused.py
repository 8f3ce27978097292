"""A decoder block's decoding step in one call of posenc's kernel: the block's modules, without Python between them.

On posenc's quantised kernel a SmolLM2 token spends less time in its 211 matrix products than in the ~1,200
PyTorch operators and module calls around them (norms, head reshapes, rotation, cache writes, attention,
residuals). :func:`block_step` runs one pre-norm block — RMSNorm, q/k/v, RoPE, the KV cache write, attention,
the output projection, RMSNorm, SwiGLU — as ``decode_block`` in ``qmatvec.cpp``, reading the modules' own
tensors: nothing is copied or re-packed, and the modules stay the one statement of what the block computes.
Gemma's sandwich block (a norm after each branch too, ``1 + g`` gains, QK-norm, tanh-GELU, sliding windows)
runs the same way.

The kernel (``posenc.kernels``) takes tensors only; this module is the glue that reads them off the modules,
so it lives with the models: ``Decoder.hidden`` offers a decoding step's blocks to :func:`steps` — the whole token
in one kernel call (one parallel region: a token's matrices are microseconds of work each, and at two threads
SmolLM2 ran 1.3–1.6× faster than with a region per matrix) — and where one block is not fused, each block to
:func:`block_step`, running the block's modules where it returns None.

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
from collections.abc import Sequence
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
    # the block's tensors and settings as decode_block takes them
    tensors = {
        "norms": gains[:blocks_norms],
        "eps": [float(n.eps) for n in norms],
        "weights": [m._buffers["qweight"] if q else m.weight for q, m in zip(quantised, linears)],
        "scales": [m._buffers["qscales"] if q else _NO_SCALES for q, m in zip(quantised, linears)],
        "bits": [int(m.bits) if q else 0 for q, m in zip(quantised, linears)],
        "biases": [m.bias for m in linears],
        "qk_norms": gains[blocks_norms:],
        "qk_eps": float(qk[0].eps) if qk else 0.0,
    }
    return {
        "parts": _parts(block),
        "versions": _versions(block),
        **tensors,
        "scheme": scheme,
        "window": attn.window,
        "template": torch.empty(1, scheme.head_dim),  # what rows_for checks the positions against: (T=1, Dh)
        "dim": attn.dim,
        "module": module,
        # the block as the kernel reads it, checked once: its decoding steps pass only the cache slot
        "block": module.Block(**tensors, head_dim=scheme.head_dim, half=scheme.pairing == "half",
                              scale=float(attn.scale), activation=0 if ffn.activation == "swiglu" else 1),
    }


def _current(block: Any) -> dict[str, Any] | bool:
    """The block's plan, rebuilt where any part of it was replaced or a norm's weight changed; False where the
    fused step does not apply to the block."""
    plan = block.__dict__.get("_fused_plan")
    if plan is None or (plan and (any(a is not b for a, b in zip(plan["parts"], _parts(block)))
                                  or plan["versions"] != _versions(block))):
        plan = (_plan(block) if enabled() else None) or False
        block.__dict__["_fused_plan"] = plan
    return plan


def steps(blocks: Sequence[Any], x: Tensor, positions: Tensor, caches: Sequence[Any]) -> Tensor | None:
    """``x`` through ``blocks`` — ``block(x, positions=positions, cache=cache)`` for each block and its cache in
    turn — for one token of one sequence in one kernel call (one parallel region for the whole token), or None
    (nothing done, no cache touched) unless the fused step applies to every block."""
    if (x.dim() != 3 or x.shape[0] != 1 or x.shape[1] != 1 or x.dtype != torch.float32 or positions.shape != (1,)
            or torch.is_grad_enabled() or torch.compiler.is_compiling() or not x.is_contiguous()
            or x.device.type != "cpu" or len(blocks) != len(caches) or not blocks):
        return None
    plans = []
    for block, cache in zip(blocks, caches):
        if cache is None or block.training or not cache.can_reserve(positions):
            return None
        plan = _current(block)
        if not plan or x.shape[2] != plan["dim"]:
            return None
        plans.append(plan)
    rows: dict[int, tuple[Tensor, Tensor]] = {}  # the new token's cos and sin, once per scheme
    cos, sin, keys, values, starts, indexes = [], [], [], [], [], []
    for plan, cache in zip(plans, caches):
        scheme = plan["scheme"]
        if id(scheme) not in rows:
            c, s, _ = scheme.rows_for(plan["template"], positions, torch.float32)
            rows[id(scheme)] = (c.contiguous(), s.contiguous())
        c, s = rows[id(scheme)]
        sequence_index = cache.length  # of the new token
        k, v, start, index = cache.reserve(positions)
        start += max(0, plan["window"].first_visible(sequence_index) - cache.dropped)  # a sliding window's first key
        cos.append(c), sin.append(s), keys.append(k), values.append(v), starts.append(start), indexes.append(index)
    out = plans[0]["module"].decode_blocks(x, [p["block"] for p in plans], cos, sin, keys, values, starts, indexes)
    for plan, cache in zip(plans, caches):
        window = plan["window"]
        if not window.full:
            cache.keep_from(window.first_visible(cache.length))  # what the next query can still see
    return out


def block_step(block: Any, x: Tensor, positions: Tensor, cache: Any) -> Tensor | None:
    """``block(x, positions=positions, cache=cache)`` for one token of one sequence in one kernel call, or None
    (nothing done) where the fused step does not apply — the caller then runs the modules."""
    return steps([block], x, positions, [cache])


def count(model: Any) -> tuple[int, int]:
    """(blocks of ``model.layers`` whose decoding steps run fused, all blocks) — what ``posenc generate`` reports."""
    layers = list(getattr(model, "layers", []))
    return sum(enabled() and _plan(layer) is not None for layer in layers), len(layers)
