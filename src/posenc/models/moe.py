"""Mixture-of-experts feed-forward: a router picks k of E expert FFNs per token (Shazeer et al., 2017).

Three routers, one per family that uses them, picked by name (``ROUTERS``):

=====================  ============================================================  =============
router                 weights of the chosen experts                                  used by
=====================  ============================================================  =============
``softmax-topk``       top-k of linear(x) (+ bias), softmax over those k logits        GPT-OSS
``sigmoid-topk``       top-k of linear(x), sigmoid of each; scales the expert's        Llama 4
                       *input*, not its output
``grouped-sigmoid``    sigmoid(linear(x)) + a correction bias ranks experts within     DeepSeek-V3
                       the best ``topk_group`` of ``n_group`` groups (a group scores
                       the sum of its two best); weights are the uncorrected
                       sigmoids, normalised to sum 1 (``norm_topk_prob``), ×
                       ``routed_scaling_factor``; in float32
=====================  ============================================================  =============

Experts are an ``nn.ModuleList`` of ordinary gated FFNs (``expert`` names the
kind: ``swiglu``, or GPT-OSS's ``clamped-swiglu``), so a checkpoint's expert e
is the module ``experts.e`` — HF's per-expert tensors load by name, its fused
(E, …) tensors are split per expert by the family. Each expert runs only on
the tokens routed to it (gathered, computed, scattered back with
``index_add_``), as HF's eager experts do. A ``shared`` FFN, where the family
has one (Llama 4, DeepSeek-V3), sees every token and is added.

Reference used to verify: HF ``transformers`` ``GptOssMLP``, ``Llama4TextMoe``
and ``DeepseekV3MoE`` inside their whole models (``tests/families``).

Shape legend: B batch, T tokens, N = B·T flattened tokens, D model width,
F expert hidden width, E experts, k experts per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.models.decoder_parts import GatedFFN

ROUTERS: tuple[str, ...] = ("softmax-topk", "sigmoid-topk", "grouped-sigmoid")
EXPERTS: tuple[str, ...] = ("swiglu", "clamped-swiglu")


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """The plain data of a model's MoE layers (``DecoderConfig.moe`` holds it as a dict).

    Args:
        router: a name of ``ROUTERS``.
        num_experts: E; top_k: k experts per token.
        hidden: F, each expert's hidden width.
        layers: the indices of the layers whose FFN is this MoE (the others are dense).
        expert: a name of ``EXPERTS``.
        bias: biases on the experts' projections (GPT-OSS).
        router_bias: a bias on the router's logits (GPT-OSS).
        shared_hidden: hidden width of the shared expert every token passes through; None: none.
        alpha, limit: ``clamped-swiglu``'s sigmoid gain and clamp (GPT-OSS: 1.702, 7).
        n_group, topk_group, norm_topk_prob, routed_scaling_factor: ``grouped-sigmoid``'s settings.

    Raises:
        ValueError: an unknown router or expert kind, or sizes that do not fit (naming them).
    """

    router: str
    num_experts: int
    top_k: int
    hidden: int
    layers: tuple[int, ...]
    expert: str = "swiglu"
    bias: bool = False
    router_bias: bool = False
    shared_hidden: int | None = None
    alpha: float = 1.702
    limit: float = 7.0
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ValueError(f"moe router must be one of {ROUTERS}, got {self.router!r}")
        if self.expert not in EXPERTS:
            raise ValueError(f"moe expert must be one of {EXPERTS}, got {self.expert!r}")
        for name in ("num_experts", "top_k", "hidden", "n_group", "topk_group"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"moe {name} must be a positive integer, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"moe top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.shared_hidden is not None and (not isinstance(self.shared_hidden, int) or self.shared_hidden < 1):
            raise ValueError(f"moe shared_hidden must be a positive integer or None, got {self.shared_hidden!r}")
        if self.router == "grouped-sigmoid":
            if self.num_experts % self.n_group:
                raise ValueError(f"moe num_experts={self.num_experts} must be a multiple of n_group={self.n_group}")
            per_group = self.num_experts // self.n_group
            if self.topk_group > self.n_group or per_group < 2:
                raise ValueError(f"moe topk_group={self.topk_group} must be <= n_group={self.n_group}, and each "
                                 f"group needs >= 2 experts (it scores the sum of its best two), has {per_group}")
            if self.top_k > self.topk_group * per_group:
                raise ValueError(f"moe top_k={self.top_k} exceeds the {self.topk_group * per_group} experts of the "
                                 f"{self.topk_group} groups kept")
        object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MoESpec":
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown moe field(s) {unknown}; valid: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) if name != "layers" else list(self.layers)
                for name in self.__dataclass_fields__}


class ClampedSwiGLU(nn.Module):
    """GPT-OSS's expert: g, u clamped (g ≤ limit, |u| ≤ limit), then down((u + 1) · g · σ(α·g)).

    Reference used to verify: HF ``GptOssExperts._apply_gate``. Biases on all three projections.
    """

    def __init__(self, *, dim: int, hidden: int, alpha: float, limit: float, bias: bool = True) -> None:
        super().__init__()
        self.alpha, self.limit = float(alpha), float(limit)
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        gate = self.gate_proj(x).clamp(max=self.limit)  # (N, F)
        up = self.up_proj(x).clamp(min=-self.limit, max=self.limit)
        return self.down_proj((up + 1) * (gate * torch.sigmoid(gate * self.alpha)))

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, limit={self.limit}"


class Router(nn.Module):
    """x (N, D) → (expert indices (N, k), weights (N, k)) by one of ``ROUTERS``; see the module docstring."""

    def __init__(self, spec: MoESpec, *, dim: int) -> None:
        super().__init__()
        self.kind, self.top_k, self.num_experts = spec.router, spec.top_k, spec.num_experts
        self.n_group, self.topk_group = spec.n_group, spec.topk_group
        self.norm_topk_prob, self.routed_scaling_factor = spec.norm_topk_prob, float(spec.routed_scaling_factor)
        self.weight = nn.Parameter(torch.empty(spec.num_experts, dim))
        nn.init.normal_(self.weight, std=dim ** -0.5)
        self.bias = nn.Parameter(torch.zeros(spec.num_experts)) if spec.router_bias else None
        # DeepSeek-V3's load-balancing bias: it ranks experts but does not weight them (learned outside the
        # gradient in training, a plain checkpoint tensor here)
        self.correction_bias = (nn.Parameter(torch.zeros(spec.num_experts), requires_grad=False)
                                if spec.router == "grouped-sigmoid" else None)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.kind == "grouped-sigmoid":
            return self._grouped(x)
        logits = F.linear(x, self.weight, self.bias)  # (N, E)
        top, index = logits.topk(self.top_k, dim=-1)  # (N, k)
        if self.kind == "softmax-topk":
            return index, top.softmax(dim=-1)
        return index, torch.sigmoid(top.float()).to(top.dtype)  # sigmoid-topk

    def _grouped(self, x: Tensor) -> tuple[Tensor, Tensor]:
        assert self.correction_bias is not None
        scores = F.linear(x.float(), self.weight.float()).sigmoid()  # (N, E) float32
        ranked = scores + self.correction_bias.float()
        n = scores.shape[0]
        groups = ranked.view(n, self.n_group, -1)  # (N, groups, E / groups)
        group_score = groups.topk(2, dim=-1).values.sum(dim=-1)  # (N, groups)
        keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, 1.0)
        ranked = ranked.masked_fill(~keep.bool()[..., None].expand_as(groups).reshape(n, -1), float("-inf"))
        index = ranked.topk(self.top_k, dim=-1).indices  # (N, k)
        weights = scores.gather(1, index)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return index, weights * self.routed_scaling_factor

    def extra_repr(self) -> str:
        return f"{self.kind!r}, experts={self.num_experts}, top_k={self.top_k}"


class MoEFFN(nn.Module):
    """Routed experts (+ a shared expert): Σ_e∈topk(x) w_e · expert_e(x) + shared(x).

    Llama 4's router scales the expert's input instead: Σ expert_e(w_e · x).

    Args:
        router: a ``Router``; experts: E modules D → D; shared: a module every token passes through, or None.
        scale_inputs: weight the experts' inputs (Llama 4) rather than their outputs.
    """

    def __init__(self, *, router: Router, experts: list[nn.Module], shared: nn.Module | None = None,
                 scale_inputs: bool = False) -> None:
        super().__init__()
        self.router = router
        self.experts = nn.ModuleList(experts)
        self.shared = shared
        self.scale_inputs = scale_inputs

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, D)
        index, weights = self.router(flat)  # (N, k) each
        out = torch.zeros_like(flat)
        for e in index.unique().tolist():  # only the experts some token was routed to
            token, slot = torch.where(index == e)  # the tokens of expert e, and which of their k choices it is
            w = weights[token, slot, None]  # (n_e, 1)
            if self.scale_inputs:
                y = self.experts[e]((flat[token] * w).to(flat.dtype))
            else:
                y = self.experts[e](flat[token]) * w
            out.index_add_(0, token, y.to(out.dtype))
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(shape)


def build_moe(spec: MoESpec, *, dim: int, shared_bias: bool = False) -> MoEFFN:
    """The MoE FFN a spec describes, with fresh weights (a checkpoint overwrites them)."""
    def expert() -> nn.Module:
        if spec.expert == "clamped-swiglu":
            return ClampedSwiGLU(dim=dim, hidden=spec.hidden, alpha=spec.alpha, limit=spec.limit, bias=spec.bias)
        return GatedFFN(dim=dim, hidden=spec.hidden, bias=spec.bias, activation="swiglu")

    shared = None if spec.shared_hidden is None else GatedFFN(dim=dim, hidden=spec.shared_hidden, bias=shared_bias)
    return MoEFFN(router=Router(spec, dim=dim), experts=[expert() for _ in range(spec.num_experts)], shared=shared,
                  scale_inputs=spec.router == "sigmoid-topk")
