"""A decoder block's decoding step in one call of posenc's kernel: the block's modules, without Python between them.

On posenc's quantised kernel a SmolLM2 token spends less time in its 211 matrix products than in the ~1,200
PyTorch operators and module calls around them (norms, head reshapes, rotation, cache writes, attention,
residuals). :func:`block_step` runs one pre-norm block — RMSNorm, q/k/v, RoPE, the KV cache write, attention,
the output projection, RMSNorm, SwiGLU — as ``decode_block`` in ``qmatvec.cpp``, reading the modules' own
tensors: nothing is copied or re-packed, and the modules stay the one statement of what the block computes.

It applies only where it computes what the modules compute: inference (no gradients, not compiling, eval
mode), one sequence and one new token, a ``PreNormBlock`` of ``RMSNorm``, plain ``MultiHeadAttention``
(no window, sinks, QK-norm or query scale) with a RoPE-family scheme that only rotates (every pair, no bias),
a SwiGLU ``GatedFFN``, every matrix on posenc's kernel, and a KV cache growing in place. Anything else
returns None and the modules run. The arithmetic is theirs except attention and SiLU, which round in
another order than PyTorch's (``tests/test_kernels.py`` bounds the difference; greedy decoding of SmolLM2
picks the same tokens). ``POSENC_FUSED=0`` in the environment switches it off.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from posenc import kernels

_CHECKED_METHODS = ("rotate", "rotate_query", "rotate_key", "rotate_one", "logit_bias", "attention_bias",
                    "value_bias", "add")


def enabled() -> bool:
    """Whether fused decoding steps may run in this process (``POSENC_FUSED=0`` switches them off)."""
    return os.environ.get("POSENC_FUSED", "1").strip().lower() not in ("0", "off", "no", "false")


def _parts(block: Any) -> tuple[Any, ...]:
    """The modules a plan reads, by identity: a plan is rebuilt when any of them is replaced (LoRA, a reload)."""
    attn, ffn, norm1, norm2 = block.attn, block.ffn, block.attn_norm, block.ffn_norm
    return (norm1, norm2, getattr(norm1, "weight", None), getattr(norm2, "weight", None), attn, ffn,
            attn.position, getattr(attn, "q_proj", None),
            getattr(attn, "k_proj", None), getattr(attn, "v_proj", None), getattr(attn, "out_proj", None),
            getattr(ffn, "gate_proj", None), getattr(ffn, "up_proj", None), getattr(ffn, "down_proj", None))


def _plan(block: Any) -> dict[str, Any] | None:
    """What ``decode_block`` needs from this block, or None where the block is not one it computes."""
    from posenc.attention import MultiHeadAttention
    from posenc.models.decoder_parts import GatedFFN, PreNormBlock, RMSNorm
    from posenc.models.quant import QuantLinear
    from posenc.positions.rotary import RoPE

    module = kernels.loaded()
    if module is None or type(block) is not PreNormBlock:
        return None
    attn, ffn, norms = block.attn, block.ffn, (block.attn_norm, block.ffn_norm)
    if type(attn) is not MultiHeadAttention or not isinstance(ffn, GatedFFN) or ffn.activation != "swiglu":
        return None
    if type(ffn).forward is not GatedFFN.forward or any(type(n) is not RMSNorm for n in norms):
        return None
    if (attn.q_norm is not None or attn.k_norm is not None or attn.query_scale is not None or attn.sinks is not None
            or not attn.window.full):
        return None
    scheme = attn.position
    if (not isinstance(scheme, RoPE) or scheme.remaps or scheme.uses_weights or scheme.rotary_dim != scheme.head_dim
            or any(getattr(type(scheme), m) is not getattr(RoPE, m) for m in _CHECKED_METHODS)):
        return None
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj, ffn.gate_proj, ffn.up_proj, ffn.down_proj)
    if any(type(m) is not QuantLinear or m.kernel != "posenc" for m in linears):
        return None
    if any(m.bias is not None and m.bias.dtype != torch.float32 for m in linears):
        return None
    if any(n.weight.dtype != torch.float32 for n in norms):
        return None
    return {
        "parts": _parts(block),
        "norms": [n.weight for n in norms],
        "eps": [float(n.eps) for n in norms],
        "weights": [m._buffers["qweight"] for m in linears],
        "scales": [m._buffers["qscales"] for m in linears],
        "bits": [int(m.bits) for m in linears],
        "biases": [m.bias for m in linears],
        "scheme": scheme,
        "half": scheme.pairing == "half",
        "scale": float(attn.scale),
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
    if plan is None or (plan and any(a is not b for a, b in zip(plan["parts"], _parts(block)))):
        plan = (_plan(block) if enabled() else None) or False
        block.__dict__["_fused_plan"] = plan
    if not plan or x.shape[2] != plan["dim"] or positions.shape != (1,):
        return None
    cos, sin, _ = plan["scheme"].rows_for(plan["template"], positions, torch.float32)
    slot = cache.reserve(positions)
    if slot is None:
        return None
    keys, values, start, index = slot
    return plan["module"].decode_block(x, plan["norms"], plan["eps"], plan["weights"], plan["scales"], plan["bits"],
                                       plan["biases"], cos.contiguous(), sin.contiguous(), plan["half"], keys,
                                       values, start, index, plan["scale"])


def count(model: Any) -> tuple[int, int]:
    """(blocks of ``model.layers`` whose decoding steps run fused, all blocks) — what ``posenc generate`` reports."""
    layers = list(getattr(model, "layers", []))
    return sum(enabled() and _plan(layer) is not None for layer in layers), len(layers)
