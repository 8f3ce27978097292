"""Attention temperature by position: queries scaled by a function of their position.

Two schemes of 2025 sharpen attention as the context grows by multiplying each
query by a factor that depends on its position p (equivalently, every logit of
that query by the same factor):

* **Llama 4** (Meta, 2025; HF ``transformers`` ``Llama4TextAttention``, applied
  to the queries of its NoPE layers when ``attn_temperature_tuning``):
  τ(p) = 1 + attn_scale · ln(1 + ⌊(p + 1)/floor_scale⌋). Mistral's
  ``llama_4_scaling_beta`` (HF ``ministral3``, ``mistral4``: every layer, after
  RoPE) is the same formula with ⌊p/L₀⌋ — no + 1 — which posenc offers as
  ``plus_one=False``.
* **Scalable-Softmax** (SSMax; Nakanishi 2025, "Scalable-Softmax Is Superior for
  Attention", arXiv:2501.19399): softmax((s·ln n)·z) in place of softmax(z),
  n the number of keys a query sees, s learned per head; implemented, as the
  paper says, by multiplying the query by s·ln n. posenc counts n = p + 1 (a
  causal query at position p sees keys 0 … p), so the factor is a function of
  the position alone — cached decoding equals full decoding. In bidirectional
  attention the paper's n is the key count, which this form does not use.

Each is a small module with one call, ``scale_queries(q, q_pos) -> q``, that
attention or a layer plan applies after the rotation, and ``factor(q_pos)``, the
float64 factors. Positions are integers, factors are formed in float64 (the
floor of an integer division is exact at every position) and cast to the query
dtype at the end; HF forms them from float32 positions, exact only to 2²⁴.

Each also exists as a registered scheme without other positions
(``llama4-temperature``, ``ssmax``: NoPE plus the temperature), acting through
the rotary hook: ``rotate_query`` scales the queries, ``rotate_key`` leaves the
keys alone, so attention needs nothing new.

Shape legend: B batch, H heads, T query length, Dh head width.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.positions.base import ModelContext, RotaryScheme, check_positions
from posenc.validation import POSITION_MAX, float32_squares, number, positive_int


def _check_queries(q: Tensor, q_pos: Tensor, who: str) -> Tensor:
    q_pos = check_positions(q_pos, name="q_pos")
    if q.dim() < 2 or q_pos.shape[-1] != q.shape[-2]:
        raise ValueError(f"{who}: {q_pos.shape[-1]} query positions for queries of shape {tuple(q.shape)}")
    return q_pos


def _broadcast(factor: Tensor, q: Tensor) -> Tensor:
    """(T,) or (B, T) [or (B, H, T)] factors → broadcastable against q (B, H, T, Dh)."""
    if factor.dim() == 2 and q.dim() == 4:
        factor = factor.unsqueeze(1)  # (B, 1, T): the same for every head
    return factor.unsqueeze(-1)


class Llama4QueryScale(nn.Module):
    """Llama 4's attention temperature: queries × 1 + attn_scale·ln(1 + ⌊(p + 1)/floor_scale⌋).

    Reference used to verify: HF ``transformers`` ``Llama4TextAttention`` (``attn_scale``,
    ``floor_scale``; queries of NoPE layers) and ``ministral3.get_llama_4_attn_scale``
    (``plus_one=False``).

    Args:
        floor_scale: the step length; the factor changes every ``floor_scale`` positions (Llama 4: 8192).
        attn_scale: the coefficient of the log (Llama 4: 0.1).
        plus_one: floor (p + 1)/floor_scale as Llama 4 does; False floors p/floor_scale (Ministral 3, Mistral 4).
    """

    def __init__(self, *, floor_scale: int = 8192, attn_scale: float = 0.1, plus_one: bool = True) -> None:
        super().__init__()
        self.floor_scale = number(positive_int(floor_scale, "floor_scale"), "floor_scale", maximum=POSITION_MAX,
                                  integer=True, fix="Llama 4 uses 8192")
        # the factor reaches 1 + attn_scale·ln(1 + 2^63) ≈ 1 + 43.7·attn_scale at the largest position
        self.attn_scale = number(attn_scale, "attn_scale", minimum=-1 / math.log1p(2.0**63), maximum=1e30,
                                 fix="Llama 4 uses 0.1; a negative value would turn the factor negative far out")
        self.plus_one = bool(plus_one)

    def factor(self, q_pos: Tensor) -> Tensor:
        """τ(p), float64, the shape of ``q_pos``."""
        q_pos = check_positions(q_pos, name="q_pos")
        steps = torch.div(q_pos + int(self.plus_one), self.floor_scale, rounding_mode="floor")  # exact int64
        return 1.0 + self.attn_scale * torch.log1p(steps.double())

    def scale_queries(self, q: Tensor, q_pos: Tensor) -> Tensor:
        """q (B, H, T, Dh) or (T, Dh) times τ(q_pos), in q's dtype."""
        q_pos = _check_queries(q, q_pos, "llama4 query scale")
        factor = _broadcast(self.factor(q_pos.to(q.device)), q)  # float64
        return (q * factor.to(torch.promote_types(q.dtype, torch.float32))).to(q.dtype)  # HF: float32 product

    def extra_repr(self) -> str:
        return f"floor_scale={self.floor_scale}, attn_scale={self.attn_scale}, plus_one={self.plus_one}"


class ScalableSoftmax(nn.Module):
    """Scalable-Softmax (Nakanishi 2025): queries × (s_h·ln(p + 1) + b_h), s (and b) learned per head.

    Reference used to verify: the paper's definition, softmax of (s·ln n)·z with
    n = p + 1 keys, as an explicit float64 computation of the attention weights.

    Args:
        num_heads: H; one s (and one b) per head.
        scale_init: the initial s (posenc's default 0.43 is the value of the paper's Fig. 1).
        bias: also learn b_h (initial 0), the paper's s·ln n + b variant.
    """

    def __init__(self, *, num_heads: int, scale_init: float = 0.43, bias: bool = False) -> None:
        super().__init__()
        self.num_heads = positive_int(num_heads, "num_heads")
        # the factor reaches s·ln(2^63) ≈ 43.7·s; the logits it multiplies must stay finite in float32
        self.scale_init = float32_squares(number(scale_init, "scale_init"), "scale_init", width=1,
                                          reach=math.log(2.0**63),
                                          what="the query factor s·ln(p + 1) at the largest position",
                                          fix="the paper's illustration uses 0.43")
        self.scale = nn.Parameter(torch.full((self.num_heads,), self.scale_init))  # (H,)
        self.bias = nn.Parameter(torch.zeros(self.num_heads)) if bias else None  # (H,)

    def factor(self, q_pos: Tensor) -> Tensor:
        """s_h·ln(p + 1) (+ b_h): (H, T) for (T,) positions, (B, H, T) for (B, T); the parameters' dtype."""
        q_pos = check_positions(q_pos, name="q_pos")
        log_n = torch.log1p(q_pos.double()).to(self.scale.dtype)  # ln(p + 1), formed in float64
        out = self.scale[:, None] * log_n.unsqueeze(-2)  # (..., H, T)
        return out if self.bias is None else out + self.bias[:, None]

    def scale_queries(self, q: Tensor, q_pos: Tensor) -> Tensor:
        """q (B, H, T, Dh) times the per-head factor, in q's dtype.

        A single head (B, 1, T, Dh) — the lab's probe of a scheme's position vectors — gets head 0's factor.
        """
        q_pos = _check_queries(q, q_pos, "scalable softmax")
        if q.dim() != 4 or q.shape[1] not in (1, self.num_heads):
            raise ValueError(f"scalable softmax: queries must be (B, {self.num_heads}, T, Dh), got {tuple(q.shape)}")
        factor = self.factor(q_pos.to(q.device))  # (H, T) | (B, H, T)
        if q.shape[1] == 1:
            factor = factor[..., :1, :]
        return (q * factor.unsqueeze(-1).to(torch.promote_types(q.dtype, torch.float32))).to(q.dtype)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, scale_init={self.scale_init}, bias={self.bias is not None}"


class _TemperatureScheme(RotaryScheme):
    """NoPE plus a query temperature: ``rotate_query`` scales, ``rotate_key`` is the identity."""

    temperature: nn.Module

    def __init__(self, *, head_dim: int) -> None:
        super().__init__()
        self.head_dim = positive_int(head_dim, "head_dim")

    def rotate_query(self, q: Tensor, q_pos: Tensor) -> Tensor:
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"{self.name}: head width is {q.shape[-1]} but the scheme was built with "
                             f"head_dim={self.head_dim}")
        return self.temperature.scale_queries(q, q_pos)

    def rotate_key(self, k: Tensor, k_pos: Tensor) -> Tensor:
        check_positions(k_pos, name="k_pos")
        return k

    def similarity(self, pos_i: Tensor, pos_j: Tensor) -> Tensor:
        """Scaled all-ones queries against all-ones keys: Dh·τ(i) for every j (first head), float64."""
        pos_i, pos_j = check_positions(pos_i, name="pos_i"), check_positions(pos_j, name="pos_j")
        heads = getattr(self.temperature, "num_heads", 1)
        with torch.no_grad():
            q = torch.ones(1, heads, pos_i.shape[-1], self.head_dim, dtype=torch.float64)
            q = self.rotate_query(q, pos_i)[0, 0].double().cpu()  # (Ti, Dh)
        return q @ torch.ones(self.head_dim, pos_j.shape[-1], dtype=torch.float64)


class Llama4Temperature(_TemperatureScheme):
    """NoPE with Llama 4's attention temperature on the queries (Meta 2025; HF ``Llama4TextAttention``).

    Reference used to verify: HF ``transformers`` Llama 4 attention (NoPE layers, ``attn_temperature_tuning``).
    See ``Llama4QueryScale``.

    Args:
        head_dim: head width (from the model).
        floor_scale, attn_scale, plus_one: as for ``Llama4QueryScale``.
    """

    name: ClassVar[str] = "llama4-temperature"

    def __init__(self, *, head_dim: int, floor_scale: int = 8192, attn_scale: float = 0.1,
                 plus_one: bool = True) -> None:
        super().__init__(head_dim=head_dim)
        self.temperature = Llama4QueryScale(floor_scale=floor_scale, attn_scale=attn_scale, plus_one=plus_one)

    def options(self) -> dict[str, Any]:
        t = self.temperature
        return {"head_dim": self.head_dim, "floor_scale": t.floor_scale, "attn_scale": t.attn_scale,
                "plus_one": t.plus_one}


class SSMax(_TemperatureScheme):
    """NoPE with Scalable-Softmax (Nakanishi 2025): queries × s_h·ln(p + 1) (+ b_h), learned per head.

    Reference used to verify: the paper's definition (softmax((s·ln n)·z), n = p + 1) as float64 weights.
    See ``ScalableSoftmax``.

    Args:
        head_dim, num_heads: from the model.
        scale_init, bias: as for ``ScalableSoftmax``.
    """

    name: ClassVar[str] = "ssmax"

    def __init__(self, *, head_dim: int, num_heads: int, scale_init: float = 0.43, bias: bool = False) -> None:
        super().__init__(head_dim=head_dim)
        self.temperature = ScalableSoftmax(num_heads=num_heads, scale_init=scale_init, bias=bias)

    @classmethod
    def context_args(cls, ctx: ModelContext) -> dict[str, Any]:
        return {**super().context_args(ctx), "num_heads": ctx.num_heads}

    def options(self) -> dict[str, Any]:
        t = self.temperature
        return {"head_dim": self.head_dim, "num_heads": t.num_heads, "scale_init": t.scale_init,
                "bias": t.bias is not None}


TEMPERATURES: tuple[type[_TemperatureScheme], ...] = (Llama4Temperature, SSMax)
