"""Multi-head latent attention (MLA; DeepSeek-AI, 2024, "DeepSeek-V2", §2.1): low-rank keys and values.

Every token is compressed to one latent c (width C = ``kv_lora_rank``) shared
by all heads, plus one rotary key slice k_pe (width R = ``qk_rope_head_dim``),
also shared; each head's keys and values are expanded from the latent::

    c, k_pe   = split(kv_a_proj(x), [C, R]);  c = rms_norm(c)
    k_nope, v = split(kv_b_proj(c) per head, [Dn, Dv])
    q         = q_b_proj(rms_norm(q_a_proj(x)))      (or query_proj(x) without a q rank)
    q_nope, q_pe = split(q per head, [Dn, R])
    score     = (q_nope·k_nope + rot(q_pe)·rot(k_pe)) · scale

Positions act on the *decoupled rotary slice* only — q_pe and the shared k_pe —
through the position scheme's rotate hooks (built with head_dim = R), so any
rotary scheme posenc has (RoPE, YaRN with DeepSeek's mscale, …) can be put
there; a bias scheme's bias is added to the scores as in ``MultiHeadAttention``.
The nope part carries no position at all, which is what lets the latent be
cached unrotated.

The KV cache holds the **compressed** state: the normed latent c (B, 1, Tk, C)
as ``KVCache.v`` and the rotated k_pe (B, 1, Tk, R) as ``KVCache.k`` — C + R
numbers per token and layer (576 in DeepSeek-V3) instead of H·(Dn + R + Dv)
for expanded keys and values (40,960): MLA's reason to exist, and what HF
caches too. The price is re-expanding every cached latent through
``kv_b_proj`` at each step; folding ``kv_b_proj`` into the query and output
projections (the "absorbed" form) would avoid that and is not done here.

Only full causal attention (DeepSeek-V2/V3 use no windows); self-attention only.

Reference used to verify: HF ``transformers`` ``DeepseekV3Attention`` inside
``DeepseekV3ForCausalLM``, full forward and cached decoding, both RoPE pairings
of the checkpoint (``rope_interleave``) and YaRN with mscale
(``tests/families/test_deepseek_v3.py``).

Shape legend: B batch, H heads, Tq query length, Tk key length, D model width,
C latent width, R rotary slice width, Dn non-rotary query/key width, Dv value width.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, build_mask
from posenc.models.decoder_parts import RMSNorm
from posenc.plan import FULL, Window
from posenc.positions.base import NoPosition, PositionScheme, check_positions, default_positions

PAIRINGS = ("half", "interleaved")


@dataclass(frozen=True, kw_only=True)
class MLASpec:
    """MLA's sizes (``DecoderConfig.mla`` holds it as a dict).

    Args:
        q_lora_rank: width of the query's low-rank bottleneck; None: one full query projection.
        kv_lora_rank: C, the cached latent's width.
        qk_nope_head_dim: Dn; qk_rope_head_dim: R; v_head_dim: Dv.
        bias: biases on q_a_proj, kv_a_proj and the output projection (HF ``attention_bias``).
        norm_eps: the two latent RMSNorms' epsilon (HF hard-codes 1e-6 there).
        source_pairing: the RoPE pairing of the rotary rows in the checkpoint the config was
            read from (HF ``rope_interleave``: "interleaved"); the loader permutes them to the
            scheme's pairing.

    Raises:
        ValueError: a size that is not a positive integer, an odd R, or an unknown pairing.
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    bias: bool = False
    norm_eps: float = 1e-6
    source_pairing: str = "half"

    def __post_init__(self) -> None:
        for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if name == "q_lora_rank" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"mla {name} must be a positive integer, got {value!r}")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"mla qk_rope_head_dim must be even (it rotates pairs), got {self.qk_rope_head_dim}")
        if self.source_pairing not in PAIRINGS:
            raise ValueError(f"mla source_pairing must be one of {PAIRINGS}, got {self.source_pairing!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MLASpec":
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown mla field(s) {unknown}; valid: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2/V3's multi-head latent attention; see the module docstring.

    Args:
        spec: the sizes.
        dim: model width D; num_heads: H.
        position: the scheme whose hooks act on the rotary slice (built with head_dim = R).
        window: must be full (MLA models use none); taken so that every attention of a plan says its window.
        scale: the softmax scale, default (Dn + R)^−½ (DeepSeek-V3 with YaRN multiplies it by mscale²).
    """

    def __init__(self, spec: MLASpec, *, dim: int, num_heads: int, position: PositionScheme | None = None,
                 window: Window = FULL, scale: float | None = None) -> None:
        super().__init__()
        if not window.full:
            raise ValueError(f"multi-head latent attention runs full causal attention only, got a {window} window")
        if num_heads < 1:
            raise ValueError(f"num_heads must be positive, got {num_heads}")
        if scale is not None and not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"the attention scale must be a finite number > 0, got {scale}")
        self.spec, self.dim, self.num_heads, self.window = spec, dim, num_heads, window
        h, qk = num_heads, spec.qk_head_dim
        if spec.q_lora_rank is None:
            self.query_proj = nn.Linear(dim, h * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(dim, spec.q_lora_rank, bias=spec.bias)
            self.q_a_norm = RMSNorm(spec.q_lora_rank, eps=spec.norm_eps)
            self.q_b_proj = nn.Linear(spec.q_lora_rank, h * qk, bias=False)
        self.kv_a_proj = nn.Linear(dim, spec.kv_lora_rank + spec.qk_rope_head_dim, bias=spec.bias)
        self.kv_a_norm = RMSNorm(spec.kv_lora_rank, eps=spec.norm_eps)
        self.kv_b_proj = nn.Linear(spec.kv_lora_rank, h * (spec.qk_nope_head_dim + spec.v_head_dim), bias=False)
        self.out_proj = nn.Linear(h * spec.v_head_dim, dim, bias=spec.bias)
        self.position = position if position is not None else NoPosition()
        self.scale = qk ** -0.5 if scale is None else float(scale)

    def forward(self, x: Tensor, context: Tensor | None = None, *, q_pos: Tensor | None = None,
                k_pos: Tensor | None = None, valid_lens: Tensor | None = None,
                key_padding_mask: Tensor | None = None, causal: bool = False, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Self-attention of ``x`` (B, Tq, D); the arguments are ``MultiHeadAttention.forward``'s.

        Returns:
            (output (B, Tq, D), weights (B, H, Tq, Tk) or None).
        """
        if context is not None:
            raise ValueError("multi-head latent attention is self-attention only; context must be None")
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, T, {self.dim}), got {tuple(x.shape)}")
        if cache is not None and cache.static:
            raise ValueError("multi-head latent attention takes a growing (self-attention) cache, not a static one")
        s, h = self.spec, self.num_heads
        batch, q_len, _ = x.shape
        offset = cache.length if cache is not None else 0
        q_pos = default_positions(q_len, offset=offset, device=x.device) if q_pos is None \
            else check_positions(q_pos, name="q_pos")
        if k_pos is not None and k_pos is not q_pos:
            raise ValueError("multi-head latent attention is self-attention: its keys sit at q_pos; omit k_pos")

        q = self.query_proj(x) if s.q_lora_rank is None else self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        q = q.view(batch, q_len, h, s.qk_head_dim).transpose(1, 2)  # (B, H, Tq, Dn + R)
        q_nope, q_pe = q.split([s.qk_nope_head_dim, s.qk_rope_head_dim], dim=-1)
        latent, k_pe = self.kv_a_proj(x).split([s.kv_lora_rank, s.qk_rope_head_dim], dim=-1)  # (B, Tq, C), (B, Tq, R)
        latent = self.kv_a_norm(latent)[:, None]  # (B, 1, Tq, C): one "head" shared by all
        k_pe = k_pe[:, None]  # (B, 1, Tq, R)
        raw_pe = k_pe  # what a moving cache keeps to re-rotate the decoupled slice (KVCache.keep_raw)
        q_pe, k_pe = self.position.rotate(q_pe, k_pe, q_pos, q_pos)  # the decoupled rotary slice only
        k_pos = q_pos
        if cache is not None:
            k_pe, latent, k_pos = cache.append(k_pe, latent, q_pos, raw=raw_pe)  # the compressed state (module docstring)
        k_len = latent.shape[-2]

        kv = self.kv_b_proj(latent[:, 0]).view(batch, k_len, h, s.qk_nope_head_dim + s.v_head_dim)
        k_nope, v = kv.transpose(1, 2).split([s.qk_nope_head_dim, s.v_head_dim], dim=-1)  # (B, H, Tk, Dn), (…, Dv)
        k = torch.cat((k_nope, k_pe.expand(-1, h, -1, -1)), dim=-1)  # (B, H, Tk, Dn + R)
        q = torch.cat((q_nope, q_pe), dim=-1)  # (B, H, Tq, Dn + R)

        bias = self.position.attention_bias(q_pos, k_pos, q)
        plain_causal = (causal and q_len == k_len and valid_lens is None and key_padding_mask is None
                        and bias is None and not need_weights)
        allowed = None if plain_causal else build_mask(
            batch=batch, q_len=q_len, k_len=k_len, valid_lens=valid_lens, key_padding_mask=key_padding_mask,
            causal=causal and q_len > 1, device=x.device)
        weights = None
        if need_weights:
            scores = q @ k.transpose(-1, -2) * self.scale  # (B, H, Tq, Tk)
            if bias is not None:
                scores = scores + bias.to(scores.dtype)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            weights = scores.softmax(dim=-1)
            out = weights @ v
        else:
            mask = None if bias is None else bias.to(q.dtype)
            if mask is not None and mask.dim() == 3:
                mask = mask[None]  # (1, H, Tq, Tk)
            if allowed is not None:
                base = mask if mask is not None else torch.zeros((), dtype=q.dtype, device=q.device)
                mask = torch.where(allowed, base, torch.tensor(torch.finfo(q.dtype).min, dtype=q.dtype,
                                                              device=q.device))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=plain_causal, scale=self.scale)
        out = out.transpose(1, 2).reshape(batch, q_len, h * s.v_head_dim)  # (B, Tq, H·Dv)
        return self.out_proj(out), weights

    def extra_repr(self) -> str:
        s = self.spec
        return (f"heads={self.num_heads}, q_rank={s.q_lora_rank}, kv_rank={s.kv_lora_rank}, nope={s.qk_nope_head_dim}, "
                f"rope={s.qk_rope_head_dim}, v={s.v_head_dim}, scale={self.scale:.4g}")
