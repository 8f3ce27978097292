"""A baseline built on ``torch.nn.Transformer`` with the usual sinusoidal encoding.

The same budget comparison needs a model that is *not* posenc's: PyTorch's own
``nn.Transformer`` (Vaswani et al., 2017), token tables scaled by √d, the
sinusoidal table added once at the input, a tied output head. It offers the
``encode / decode / new_cache`` interface of ``posenc.models.EncoderDecoder``
so the same training, greedy and beam-search code drives both. ``nn.Transformer``
has no KV cache, so its "cache" keeps the target prefix and each step re-runs the
decoder on the whole prefix (slower, same numbers).

Shape legend: B batch, S source length, T target length, D width, V vocabulary.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.positions import sinusoid_table


@dataclass(frozen=True, kw_only=True)
class BaselineConfig:
    vocab_size: int
    tgt_vocab_size: int | None = None
    dim: int = 256
    num_heads: int = 4
    num_layers: int = 3
    num_decoder_layers: int | None = None
    ffn_dim: int | None = None
    dropout: float = 0.1
    norm_first: bool = True
    max_len: int = 4096  # rows of the precomputed sinusoid table
    kind: str = "torch.nn.Transformer"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BaselineConfig":
        return cls(**data)


class PrefixCache:
    """Stands in for a KV cache: remembers the target prefix decoded so far."""

    def __init__(self) -> None:
        self.prefix: Tensor | None = None  # (B, T)

    @property
    def length(self) -> int:
        return 0 if self.prefix is None else self.prefix.shape[1]

    def reorder(self, index: Tensor) -> None:
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


class TorchTransformer(nn.Module):
    """``nn.Transformer`` + √d-scaled shared token table + sinusoidal encoding + tied output head."""

    def __init__(self, config: BaselineConfig) -> None:
        super().__init__()
        cfg = config
        self.config = cfg
        if cfg.tgt_vocab_size not in (None, cfg.vocab_size):
            raise ValueError("the baseline shares one vocabulary; got different source and target sizes")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        nn.init.normal_(self.embed.weight, std=cfg.dim ** -0.5)
        self.register_buffer("pe", sinusoid_table(torch.arange(cfg.max_len), cfg.dim).float(), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor … norm_first": a note about a fast path, not a problem
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = self._build(cfg)
        self.scale = math.sqrt(cfg.dim)

    @staticmethod
    def _build(cfg: BaselineConfig) -> nn.Transformer:
        return nn.Transformer(
            d_model=cfg.dim, nhead=cfg.num_heads, num_encoder_layers=cfg.num_layers,
            num_decoder_layers=cfg.num_decoder_layers or cfg.num_layers, dim_feedforward=cfg.ffn_dim or 4 * cfg.dim,
            dropout=cfg.dropout, batch_first=True, norm_first=cfg.norm_first)

    def _embed(self, ids: Tensor) -> Tensor:
        if ids.shape[1] > self.pe.shape[0]:
            raise ValueError(f"sequence of length {ids.shape[1]} exceeds the sinusoid table ({self.pe.shape[0]} rows)")
        return self.dropout(self.embed(ids) * self.scale + self.pe[: ids.shape[1]])  # (B, T, D)

    def encode(self, src: Tensor, *, src_padding_mask: Tensor | None = None) -> Tensor:
        return self.transformer.encoder(self._embed(src), src_key_padding_mask=src_padding_mask)  # (B, S, D)

    def decode(self, tgt: Tensor, memory: Tensor, *, memory_padding_mask: Tensor | None = None,
               cache: list[PrefixCache] | None = None, **_: Any) -> Tensor:
        new = tgt.shape[1]
        if cache:
            c = cache[0]
            c.prefix = tgt if c.prefix is None else torch.cat((c.prefix, tgt), dim=1)
            tgt = c.prefix
        t = tgt.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf"), device=tgt.device), diagonal=1)
        h = self.transformer.decoder(self._embed(tgt), memory, tgt_mask=causal,
                                     memory_key_padding_mask=memory_padding_mask)
        logits = h @ self.embed.weight.T  # (B, T, V), tied head
        return logits[:, -new:]

    def forward(self, src: Tensor, tgt: Tensor, *, src_padding_mask: Tensor | None = None, **_: Any) -> Tensor:
        memory = self.encode(src, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, memory_padding_mask=src_padding_mask)

    def new_cache(self) -> list[PrefixCache]:
        return [PrefixCache()]

    def describe(self) -> dict[str, Any]:
        return {"kind": "torch.nn.Transformer baseline", "config": self.config.to_dict(),
                "position": "sinusoidal (added at the input)",
                "parameters": sum(p.numel() for p in self.parameters())}
