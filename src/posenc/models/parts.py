"""The parts Transformers are assembled from.

Each layer receives finished parts — an attention, a feed-forward, a factory
that makes its norms — and only wires them; it never reads a config. A
Llama-style block is therefore the same ``DecoderLayer`` given other parts
(grouped-query attention, a SwiGLU feed-forward, ``norm=lambda: RMSNorm(...)``),
chosen by a builder, not flags threaded through the layers.

Tiny CPU example (one pre-norm decoder layer with RoPE)::

    from posenc.attention import MultiHeadAttention
    from posenc.positions import build
    rope = build("rope", dim=32, num_heads=4)
    layer = DecoderLayer(self_attn=MultiHeadAttention(dim=32, num_heads=4, position=rope),
                         ffn=FeedForward(dim=32, hidden=64), norm=layer_norm(32))
    y = layer(torch.randn(2, 5, 32), positions=torch.arange(5))   # (2, 5, 32)

Shape legend: B batch, T sequence length, D width.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, MultiHeadAttention
from posenc.embedding import TokenEmbedding, count_parameters
from posenc.positions import PositionScheme, check_positions, default_positions
from posenc.validation import check_ids

#: Makes a fresh norm module each call (a layer needs one per residual branch).
NormFactory = Callable[[], nn.Module]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def layer_norm(dim: int, *, eps: float = 1e-5) -> NormFactory:
    """A factory of ``nn.LayerNorm(dim)`` — the norm of the original Transformer and GPT-2."""
    return functools.partial(nn.LayerNorm, dim, eps=eps)


class FeedForward(nn.Module):
    """Position-wise FFN: Linear → activation → dropout → Linear (Vaswani et al., 2017, §3.3)."""

    def __init__(self, *, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.act = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.up(x))))  # (B, T, D)


class Residual(nn.Module):
    """x + dropout(f(norm(x))) (pre-norm) or norm(x + dropout(f(x))) (post-norm), around a given norm."""

    def __init__(self, *, norm: nn.Module, dropout: float = 0.0, norm_first: bool = True) -> None:
        super().__init__()
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], tuple[Tensor, Any]]) -> tuple[Tensor, Any]:
        """Apply ``sublayer`` (returns (y, extra)); return (new x, extra)."""
        if self.norm_first:
            y, extra = sublayer(self.norm(x))
            return x + self.dropout(y), extra
        y, extra = sublayer(x)
        return self.norm(x + self.dropout(y)), extra


class EncoderLayer(nn.Module):
    """Self-attention → feed-forward, each inside a residual with its own norm.

    Args:
        attn: the self-attention (it holds the position scheme whose rotation/bias act here).
        ffn: the feed-forward block, any module (B, T, D) → (B, T, D).
        norm: makes the norm of each residual branch.
        dropout: on each residual branch.
        norm_first: pre-norm (True) or post-norm.
    """

    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, norm: NormFactory, dropout: float = 0.0,
                 norm_first: bool = True) -> None:
        super().__init__()
        self.attn = attn
        self.ffn = ffn
        self.attn_res = Residual(norm=norm(), dropout=dropout, norm_first=norm_first)
        self.ffn_res = Residual(norm=norm(), dropout=dropout, norm_first=norm_first)

    def forward(
        self, x: Tensor, *, positions: Tensor, key_padding_mask: Tensor | None = None,
        valid_lens: Tensor | None = None, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) → (x, attention weights (B, H, T, T) when ``need_weights``)."""
        x, weights = self.attn_res(x, lambda h: self.attn(
            h, q_pos=positions, key_padding_mask=key_padding_mask, valid_lens=valid_lens, need_weights=need_weights))
        x, _ = self.ffn_res(x, lambda h: (self.ffn(h), None))
        return x, weights


@dataclass
class LayerCache:
    """The caches of one decoder layer."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` of both caches (beam search reorders hypotheses each step)."""
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)

    def fork(self) -> LayerCache:
        """Caches that continue from these and leave them as they are (``KVCache.fork``)."""
        return LayerCache(self.self_attn.fork(), self.cross_attn.fork())


class DecoderLayer(nn.Module):
    """Causal self-attention → cross-attention to the encoder output (optional) → feed-forward.

    Args:
        self_attn: the causal self-attention (it holds the position scheme).
        ffn: the feed-forward block (GELU/ReLU MLP, SwiGLU, ...).
        norm: makes the norm of each residual branch (LayerNorm, RMSNorm, ...).
        cross_attn: attention to the encoder output; None for a decoder-only model.
        dropout: on each residual branch.
        norm_first: pre-norm (True) or post-norm.
    """

    def __init__(
        self, *, self_attn: MultiHeadAttention, ffn: nn.Module, norm: NormFactory,
        cross_attn: MultiHeadAttention | None = None, dropout: float = 0.0, norm_first: bool = True,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.self_res = Residual(norm=norm(), dropout=dropout, norm_first=norm_first)
        self.cross_attn = cross_attn
        self.cross_res = Residual(norm=norm(), dropout=dropout, norm_first=norm_first) if cross_attn is not None else None
        self.ffn = ffn
        self.ffn_res = Residual(norm=norm(), dropout=dropout, norm_first=norm_first)

    def forward(
        self, x: Tensor, memory: Tensor | None = None, *, positions: Tensor,
        key_padding_mask: Tensor | None = None, memory_padding_mask: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """x (B, T, D), memory (B, S, D) or None → (B, T, D)."""
        x, _ = self.self_res(x, lambda h: self.self_attn(
            h, q_pos=positions, key_padding_mask=key_padding_mask, causal=True,
            cache=None if cache is None else cache.self_attn))
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention: pass the encoder output as memory")
            assert self.cross_res is not None
            cross_attn = self.cross_attn
            x, _ = self.cross_res(x, lambda h: cross_attn(
                h, memory, key_padding_mask=memory_padding_mask,
                cache=None if cache is None else cache.cross_attn))
        x, _ = self.ffn_res(x, lambda h: (self.ffn(h), None))
        return x


class InputEmbedding(nn.Module):
    """ids → token vectors (×√width) → the position scheme's additive hook → dropout."""

    def __init__(self, *, token: TokenEmbedding, position: PositionScheme, dropout: float = 0.0) -> None:
        super().__init__()
        self.token = token
        self.position = position
        self.dropout = nn.Dropout(dropout)

    def prepare(self, ids: Tensor, name: str = "ids") -> tuple[Tensor, int]:
        """``ids`` checked (a 2-D integer tensor, widened to int64) and the sequence length they give."""
        ids = check_ids(ids, name)
        return ids, ids.shape[1]

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
        return self.dropout(self.position.add(self.token(ids), positions))  # (B, T, D)


class AudioFrontEnd(nn.Module):
    """Whisper's convolutional stem (Radford et al., 2022): log-mel features → a sequence of D-wide vectors.

    GELU(conv1d, kernel 3) then GELU(conv1d, kernel 3, stride 2) halve the
    frames; the position scheme's additive hook then adds its vectors (Whisper:
    a fixed sinusoid, posenc's ``sinusoidal`` with ``layout="concatenated"`` and
    ``denominator="half-minus-one"``). The input has exactly 2·``length`` frames,
    as Whisper's encoder requires (its features are padded to 30 s).

    Reference used to verify: HF ``WhisperEncoder`` (``tests/families/test_whisper.py``).

    Args:
        num_mel_bins: M, feature channels of the input.
        dim: D, the model width.
        length: S, positions after the stride-2 convolution (Whisper's ``max_source_positions``).
        position: the scheme whose ``add`` puts positions on the convolved frames.
    """

    def __init__(self, *, num_mel_bins: int, dim: int, length: int, position: PositionScheme) -> None:
        super().__init__()
        self.num_mel_bins, self.dim, self.length = num_mel_bins, dim, length
        self.conv1 = nn.Conv1d(num_mel_bins, dim, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, kernel_size=3, stride=2, padding=1)
        self.position = position

    def prepare(self, features: Tensor, name: str = "features") -> tuple[Tensor, int]:
        """``features`` checked against the front end's shape (B, M, 2·S) and the length S they give."""
        frames = 2 * self.length
        if not isinstance(features, Tensor) or not features.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor of log-mel features (B, {self.num_mel_bins}, "
                            f"{frames}), got {type(features).__name__ if not isinstance(features, Tensor) else features.dtype}")
        if features.dim() != 3 or features.shape[1] != self.num_mel_bins:
            raise ValueError(f"{name} has shape {tuple(features.shape)}; the encoder takes (B, {self.num_mel_bins}, "
                             f"{frames}): {self.num_mel_bins} mel bins (num_mel_bins) — compute the features with "
                             f"the model's own feature extractor")
        if features.shape[2] != frames:
            raise ValueError(f"{name} has {features.shape[2]} frames; the encoder takes exactly {frames} "
                             f"(2 × max_source_positions = 2 × {self.length}): pad or trim the log-mel features to "
                             f"{frames} frames")
        return features, self.length

    def forward(self, features: Tensor, positions: Tensor) -> Tensor:
        x = F.gelu(self.conv1(features))  # (B, D, 2S)
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # (B, D, S) → (B, S, D)
        return self.position.add(x, positions)

    def extra_repr(self) -> str:
        return f"num_mel_bins={self.num_mel_bins}, dim={self.dim}, length={self.length}"


def describe_scheme(scheme: PositionScheme) -> dict[str, Any]:
    """The scheme's own description plus its parameter count."""
    return {**scheme.describe(), "parameters": count_parameters(scheme)}


def positions_for(positions: Tensor | None, length: int, offset: int, device: torch.device) -> Tensor:
    """The given positions checked against ``length``, or ``offset … offset + length − 1``."""
    if positions is None:
        return default_positions(length, offset=offset, device=device)
    positions = check_positions(positions)
    if positions.shape[-1] != length:
        raise ValueError(f"{positions.shape[-1]} positions given for a sequence of length {length}")
    return positions.to(device)


@torch.no_grad()
def greedy(step: Callable[[Tensor, list[LayerCache]], Tensor], ids: Tensor, cache: list[LayerCache],
           max_new_tokens: int, eos_id: int | None) -> Tensor:
    """Feed ``ids`` once, then one argmax token at a time; stop when every row has emitted EOS.

    ``step(new_ids, cache)`` returns logits (B, t, V) for the new ids, extending ``cache``.
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    new = ids
    for _ in range(max_new_tokens):
        for layer_cache in cache:  # under torch.compile: one decoding graph for every cache length
            layer_cache.self_attn.mark_dynamic()
        logits = step(new, cache)  # (B, t, V)
        nxt = logits[:, -1].argmax(-1)  # (B,)
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
            done |= nxt == eos_id
        new = nxt[:, None]
        ids = torch.cat((ids, new), dim=1)
        if eos_id is not None and bool(done.all()):
            break
    return ids
