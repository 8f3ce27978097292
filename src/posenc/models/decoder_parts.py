"""The parts decoder families are assembled from: norms, gated feed-forwards, and three block layouts.

Each family picks its parts by name (``NORMS``, ``FFNS``, ``BLOCKS``) in its
config; the builder (``posenc.models.decoder.build_decoder``) looks the names up
here and nothing else asks which family it holds.

=================  ==============================================================  ==========================
name               what                                                            used by
=================  ==============================================================  ==========================
norm ``rms``       x / rms(x) · g, cast before the gain                            Llama, Qwen, SmolLM, Phi-3, T5
norm ``rms-offset`` x / rms(x) · (1 + g) in float32, cast after (zero-centred g)   Gemma 3 / 4
norm ``layer``     (x − mean) / std · g, no bias, float32                          Cohere 2
norm ``rms-unit``  x / rms(x), no gain                                             Llama 4 QK-norm, Gemma 4 v-norm
norm ``rms-float`` x / rms(x) · g, all in float32, cast after (g starts at 1)      Gemma 4
norm ``layernorm`` (x − mean) / std · g + b, in the activation dtype (torch's)      GPT-2, OPT, BLOOM, NeoX, GPT-J
ffn ``swiglu``     down(silu(gate(x)) · up(x))                                     Llama family
ffn ``geglu``      down(gelu_tanh(gate(x)) · up(x))                                Gemma, T5 v1.1 (gated-gelu)
ffn ``gelu-tanh-mlp`` fc_out(gelu_tanh(fc_in(x))), not gated                       GPT-2, GPT-J, BLOOM
ffn ``gelu-mlp``   fc_out(gelu(fc_in(x))) (exact erf GELU)                         GPT-NeoX / Pythia, MPT
ffn ``relu-mlp``   fc_out(relu(fc_in(x)))                                          OPT
ffn ``silu-mlp``   fc_out(silu(fc_in(x))) (HF's "swish")                             Marian (opus-mt)
block ``pre``      x + attn(n₁(x)); x + ffn(n₂(x))                                  Llama family, GPT-2, BLOOM
block ``sandwich`` x + n₂(attn(n₁(x))); x + n₄(ffn(n₃(x)))                           Gemma 2 / 3 / 4
block ``parallel`` x + attn(n(x)) + ffn(n(x))                                       Cohere, GPT-J
block ``parallel-two`` x + attn(n₁(x)) + ffn(n₂(x))                                 GPT-NeoX / Pythia
block ``post``     x ← n₁(x + attn(x)); x ← n₂(x + ffn(x))                          OPT-350m (post-norm)
=================  ==============================================================  ==========================

Besides, ``ClippedLinear`` clamps a projection's output to [−c, c] (MPT's
``clip_qkv``).

References used to verify: HF ``transformers`` ``LlamaRMSNorm``,
``Gemma3RMSNorm``, ``Gemma4RMSNorm``, ``CohereLayerNorm``, ``Llama4TextL2Norm``, ``Gemma3MLP``
and the decoder layers of Llama, Gemma 3 and Cohere 2; the blocks and MLPs of
GPT-2, OPT, BLOOM, GPT-NeoX, GPT-J and MPT (``tests/families``).

Shape legend: B batch, T sequence length, D model width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, MultiHeadAttention
from posenc import kernels


def _fused_norm(x: Tensor, gain: Callable[[], Tensor], eps: float) -> Tensor | None:
    """``gain() · x / rms(x)`` in one compiled call, or None where that kernel does not apply: float32 CPU
    inference with the kernel loaded (``kernels.loaded()``: a model on posenc's quantised kernel).

    Within 4 ulp of torch's (the squares summed in another order) and 3–15× faster at any size measured here
    (a decoding step's row 0.8 vs 12 µs; 8,192 × 576 rows 0.7 vs 10.7 ms at 2 threads).
    """
    if (x.dtype != torch.float32 or torch.is_grad_enabled()
            or not x.is_contiguous() or x.device.type != "cpu" or torch.compiler.is_compiling()):
        return None
    fused = kernels.loaded()  # a model on posenc's quantised kernel: one call, not ten
    if fused is None:
        return None
    g = gain()
    return fused.rms_norm(x, g, eps) if g.dtype == torch.float32 else None


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang & Sennrich, 2019): x / rms(x) · g, no mean, no bias.

    Computed in float32 and cast back before the gain, as HF ``LlamaRMSNorm``
    does, so 16-bit models round where the reference rounds.
    """

    def __init__(self, dim: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if (out := _fused_norm(x, lambda: self.weight, self.eps)) is not None:
            return out
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # (..., D) float32
        return self.weight * normed.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class OffsetRMSNorm(RMSNorm):
    """Gemma's RMSNorm: x / rms(x) · (1 + g) with a zero-centred gain g, multiplied in float32, then cast.

    A checkpoint stores g (zeros = identity); the float32 product before the
    cast is where Gemma rounds differently from Llama (HF ``Gemma3RMSNorm``).
    """

    def __init__(self, dim: int, *, eps: float = 1e-6) -> None:
        super().__init__(dim, eps=eps)
        nn.init.zeros_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        if (out := _fused_norm(x, lambda: 1.0 + self.weight.float(), self.eps)) is not None:
            return out  # the same (1 + g) · normed: one rounding of the gain, one of the product
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)


class UnitRMSNorm(nn.Module):
    """x / rms(x) with no gain (Llama 4's QK-norm, HF ``Llama4TextL2Norm``), in float32, cast back."""

    def __init__(self, dim: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class BiasFreeLayerNorm(nn.Module):
    """LayerNorm with a gain and no bias, in float32 (HF ``CohereLayerNorm``)."""

    def __init__(self, dim: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return (F.layer_norm(x.float(), (x.shape[-1],), eps=self.eps) * self.weight.float()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class LayerNorm(nn.LayerNorm):
    """LayerNorm with a gain and a bias (Ba et al., 2016), in the activation dtype: torch's ``nn.LayerNorm``,
    as GPT-2, OPT, BLOOM, GPT-NeoX and GPT-J use it."""

    def __init__(self, dim: int, *, eps: float = 1e-5) -> None:
        super().__init__(dim, eps=eps)


class FloatRMSNorm(RMSNorm):
    """x / rms(x) · g with the gain multiplied in float32 and the product cast (HF ``Gemma4RMSNorm``).

    Unlike Gemma 3's norm the gain is not zero-centred (a checkpoint stores g; ones =
    identity); unlike Llama's the cast comes after the gain, so 16-bit models round once.
    """

    def forward(self, x: Tensor) -> Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return (normed * self.weight.float()).to(x.dtype)


#: norm name → class(dim, eps=...).
NORMS: dict[str, Callable[..., nn.Module]] = {"rms": RMSNorm, "rms-offset": OffsetRMSNorm, "layer": BiasFreeLayerNorm,
                                             "rms-unit": UnitRMSNorm, "layernorm": LayerNorm, "rms-float": FloatRMSNorm}


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


#: gated-FFN name → activation of the gate.
FFNS: dict[str, Callable[[Tensor], Tensor]] = {"swiglu": F.silu, "geglu": _gelu_tanh}


class GatedFFN(nn.Module):
    """Gated feed-forward (Shazeer, 2020, "GLU Variants Improve Transformer"): down(act(gate(x)) · up(x)).

    Args:
        dim: D; hidden: F; bias: biases on the three projections;
        activation: a name of ``FFNS`` ("swiglu": SiLU gate, "geglu": tanh-GELU gate).
    """

    def __init__(self, *, dim: int, hidden: int, bias: bool = False, activation: str = "swiglu") -> None:
        super().__init__()
        if activation not in FFNS:
            raise ValueError(f"ffn must be one of {sorted(FFNS)}, got {activation!r}")
        self.activation = activation
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(FFNS[self.activation](self.gate_proj(x)) * self.up_proj(x))  # (B, T, F) → (B, T, D)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


#: plain (non-gated) MLP name → its activation.
MLPS: dict[str, Callable[[Tensor], Tensor]] = {"gelu-tanh-mlp": _gelu_tanh, "gelu-mlp": F.gelu, "relu-mlp": F.relu,
                                             "silu-mlp": F.silu}


class MLP(nn.Module):
    """The two-layer MLP of the original Transformer and GPT: fc_out(act(fc_in(x))), not gated.

    Args:
        dim: D; hidden: F; bias: biases on both projections;
        activation: a name of ``MLPS`` ("gelu-tanh-mlp": GPT-2's ``gelu_new``, "gelu-mlp": exact GELU,
            "relu-mlp": OPT, T5 v1.0; "silu-mlp": Marian).
    """

    def __init__(self, *, dim: int, hidden: int, bias: bool = True, activation: str = "gelu-tanh-mlp") -> None:
        super().__init__()
        if activation not in MLPS:
            raise ValueError(f"mlp activation must be one of {sorted(MLPS)}, got {activation!r}")
        self.activation = activation
        self.fc_in = nn.Linear(dim, hidden, bias=bias)
        self.fc_out = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc_out(MLPS[self.activation](self.fc_in(x)))  # (B, T, F) → (B, T, D)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


#: every feed-forward name a config may give: the gated ones and the plain MLPs.
FFN_NAMES: tuple[str, ...] = (*FFNS, *MLPS)


def build_ffn(name: str, *, dim: int, hidden: int, bias: bool) -> nn.Module:
    """The feed-forward called ``name`` (a gated FFN of ``FFNS`` or an MLP of ``MLPS``)."""
    if name in MLPS:
        return MLP(dim=dim, hidden=hidden, bias=bias, activation=name)
    if name in FFNS:
        return GatedFFN(dim=dim, hidden=hidden, bias=bias, activation=name)
    raise ValueError(f"ffn must be one of {sorted(FFN_NAMES)}, got {name!r}")


class ClippedLinear(nn.Linear):
    """A linear projection whose output is clamped to [−clip, clip] (MPT's ``clip_qkv`` on q, k and v)."""

    def __init__(self, in_features: int, out_features: int, *, clip: float, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        if not (isinstance(clip, (int, float)) and 0 < clip < float("inf")):
            raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
        self.clip = float(clip)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x).clamp(min=-self.clip, max=self.clip)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, clip={self.clip}"


def clip_projections(attn: MultiHeadAttention, clip: float) -> MultiHeadAttention:
    """Replace ``attn``'s q, k and v projections by ``ClippedLinear`` ones of the same shape (fresh weights)."""
    for name in ("q_proj", "k_proj", "v_proj"):
        old: nn.Linear = getattr(attn, name)
        setattr(attn, name, ClippedLinear(old.in_features, old.out_features, clip=clip, bias=old.bias is not None))
    return attn


class PreNormBlock(nn.Module):
    """x + attn(norm(x)), then x + ffn(norm(x)): the pre-norm residual block of the Llama family."""

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_norm: nn.Module, ffn_norm: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn = attn_norm, attn
        self.ffn_norm, self.ffn = ffn_norm, ffn

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        h, _ = self.attn(self.attn_norm(x), q_pos=positions, causal=True, cache=cache)
        x = x + h
        return x + self.ffn(self.ffn_norm(x))


class SandwichBlock(nn.Module):
    """x + post(attn(pre(x))), then x + post(ffn(pre(x))): a norm before and after each branch (Gemma)."""

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_norm: nn.Module, attn_post_norm: nn.Module,
                 ffn_norm: nn.Module, ffn_post_norm: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.attn_post_norm = attn_norm, attn, attn_post_norm
        self.ffn_norm, self.ffn, self.ffn_post_norm = ffn_norm, ffn, ffn_post_norm

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        h, _ = self.attn(self.attn_norm(x), q_pos=positions, causal=True, cache=cache)
        x = x + self.attn_post_norm(h)
        return x + self.ffn_post_norm(self.ffn(self.ffn_norm(x)))


class ParallelBlock(nn.Module):
    """x + attn(norm(x)) + ffn(norm(x)): both branches read one norm of the same input (Cohere, GPT-J)."""

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_norm: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.ffn = attn_norm, attn, ffn

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        h = self.attn_norm(x)
        a, _ = self.attn(h, q_pos=positions, causal=True, cache=cache)
        return x + a + self.ffn(h)


class ParallelTwoNormBlock(nn.Module):
    """x + attn(n₁(x)) + ffn(n₂(x)): parallel branches, each with its own norm (GPT-NeoX ``use_parallel_residual``)."""

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_norm: nn.Module, ffn_norm: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn = attn_norm, attn
        self.ffn_norm, self.ffn = ffn_norm, ffn

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        a, _ = self.attn(self.attn_norm(x), q_pos=positions, causal=True, cache=cache)
        return x + a + self.ffn(self.ffn_norm(x))


class PostNormBlock(nn.Module):
    """x ← n₁(x + attn(x)), then x ← n₂(x + ffn(x)): the original Transformer's post-norm (OPT-350m)."""

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_norm: nn.Module, ffn_norm: nn.Module) -> None:
        super().__init__()
        self.attn, self.attn_norm = attn, attn_norm
        self.ffn, self.ffn_norm = ffn, ffn_norm

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        a, _ = self.attn(x, q_pos=positions, causal=True, cache=cache)
        x = self.attn_norm(x + a)
        return self.ffn_norm(x + self.ffn(x))


#: block name → (class, the norms it takes besides the attention and the FFN).
BLOCKS: dict[str, tuple[type[nn.Module], tuple[str, ...]]] = {
    "pre": (PreNormBlock, ("attn_norm", "ffn_norm")),
    "sandwich": (SandwichBlock, ("attn_norm", "attn_post_norm", "ffn_norm", "ffn_post_norm")),
    "parallel": (ParallelBlock, ("attn_norm",)),
    "parallel-two": (ParallelTwoNormBlock, ("attn_norm", "ffn_norm")),
    "post": (PostNormBlock, ("attn_norm", "ffn_norm")),
}
