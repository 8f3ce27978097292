"""A BERT-style encoder from posenc's parts: token + token-type + position vectors, post-norm layers, pooling.

BERT (Devlin et al., 2019) adds a learned position vector and a learned
segment ("token type") vector to each token, normalises the sum, and runs
post-norm encoder layers (x ← LN(x + attn(x)); x ← LN(x + ffn(x))). Positions
are any registered *additive* scheme — ``learned`` for every BERT checkpoint —
built through ``posenc.positions.build``; the layers are
``posenc.models.parts.EncoderLayer`` (post-norm) with posenc's attention and
GELU feed-forward. Sentence embeddings are the mean of the token states over
the non-padding tokens (Reimers & Gurevych, 2019, Sentence-BERT), as
sentence-transformers computes them.

Reference used to verify: HF ``transformers`` ``BertModel`` on tiny random
checkpoints and on the real all-MiniLM-L6-v2 weights (hidden states, pooler,
mean-pooled sentence embeddings; ``tests/families/test_bert.py``).

Tiny CPU example::

    import torch
    from posenc.models.encoder import EncoderConfig, build_encoder
    model = build_encoder(EncoderConfig(vocab_size=100, dim=32, num_layers=2, num_heads=4, ffn_dim=64))
    emb = model.sentence_embedding(torch.tensor([[1, 2, 3]]))   # (1, 32)

Shape legend: B batch, T sequence length, D width.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc.attention import MultiHeadAttention
from posenc.embedding import TokenEmbedding, count_parameters
from posenc.models.config import JSONConfig
from posenc.models.parts import ACTIVATIONS, EncoderLayer, FeedForward, layer_norm
from posenc.positions import PositionScheme, build, check_positions, default_positions, lookup


@dataclass(frozen=True, kw_only=True)
class EncoderConfig(JSONConfig):
    """Everything needed to build a BERT-style encoder; plain data (JSON-serialisable).

    Args:
        vocab_size: V.
        dim: model width D (HF ``hidden_size``).
        num_layers: encoder layers.
        num_heads: attention heads.
        ffn_dim: the feed-forward's hidden width (HF ``intermediate_size``).
        norm_eps: every LayerNorm's epsilon (BERT: 1e-12).
        position: an additive scheme's name ("learned" for BERT checkpoints).
        position_options: its options (a learned table's ``max_len``).
        max_position_embeddings: the longest sequence (a learned table's default row count).
        type_vocab_size: token types (segments); 0: none.
        activation: the feed-forward's non-linearity ("gelu" = exact erf GELU, "relu").
        pooler: BERT's pooler (tanh of a dense layer on the first token).
        family: the model family the config was read for; informational.
    """

    vocab_size: int
    dim: int = 256
    num_layers: int = 2
    num_heads: int = 4
    ffn_dim: int = 1024
    norm_eps: float = 1e-12
    position: str = "learned"
    position_options: dict[str, Any] = field(default_factory=dict)
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    activation: str = "gelu"
    pooler: bool = True
    family: str = "bert"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "num_layers", "num_heads", "ffn_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"EncoderConfig.{name} must be a positive integer, got {value!r}")
        if self.dim % self.num_heads:
            raise ValueError(f"EncoderConfig: dim={self.dim} is not divisible by num_heads={self.num_heads}")
        if isinstance(self.type_vocab_size, bool) or not isinstance(self.type_vocab_size, int) \
                or self.type_vocab_size < 0:
            raise ValueError(f"EncoderConfig.type_vocab_size must be an integer >= 0, got {self.type_vocab_size!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"EncoderConfig.activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if lookup(self.position).family != "additive":
            raise ValueError(f"EncoderConfig.position {self.position!r} is not additive; a BERT-style encoder adds "
                             "its positions to the tokens (use 'learned' or 'sinusoidal')")


def mean_pool(hidden: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean of ``hidden`` (B, T, D) over the tokens where ``mask`` (B, T) is 1/True: (B, D).

    sentence-transformers' ``Pooling(mode="mean")``: Σ mask·h / max(Σ mask, 1e-9).
    """
    if mask is None:
        return hidden.mean(dim=1)
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


class Encoder(nn.Module):
    """A BERT-style encoder from built parts; ``build_encoder(config)`` assembles one.

    Args:
        config: the EncoderConfig the parts were built from.
        embed: token table (unscaled).
        position: the additive scheme (its ``add`` hook puts positions on the tokens).
        token_type: the segment table, or None.
        embed_norm: the LayerNorm over token + type + position vectors.
        layers: post-norm ``EncoderLayer``s.
        pooler: BERT's dense layer on the first token, or None.
    """

    def __init__(self, *, config: EncoderConfig, embed: TokenEmbedding, position: PositionScheme,
                 token_type: nn.Embedding | None, embed_norm: nn.Module, layers: list[EncoderLayer],
                 pooler: nn.Linear | None) -> None:
        super().__init__()
        self.config = config
        self.embed, self.position, self.token_type = embed, position, token_type
        self.embed_norm = embed_norm
        self.layers = nn.ModuleList(layers)
        self.pooler = pooler

    def forward(self, ids: Tensor, *, attention_mask: Tensor | None = None, token_types: Tensor | None = None,
                positions: Tensor | None = None) -> Tensor:
        """ids (B, T) → hidden states (B, T, D).

        Args:
            attention_mask: (B, T), 1/True for real tokens, 0/False for padding (HF's convention).
            token_types: (B, T) segment ids, default 0.
            positions: (T,) or (B, T) integer positions, default 0 … T − 1.
        """
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
        positions = default_positions(ids.shape[1], device=ids.device) if positions is None \
            else check_positions(positions).to(ids.device)
        x = self.embed(ids)  # (B, T, D)
        if self.token_type is not None:
            x = x + self.token_type(torch.zeros_like(ids) if token_types is None else token_types)
        x = self.embed_norm(self.position.add(x, positions))
        padding = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(ids.shape):
                raise ValueError(f"attention_mask must have the ids' shape {tuple(ids.shape)}, "
                                 f"got {tuple(attention_mask.shape)}")
            padding = ~attention_mask.bool()  # (B, T), True = a padding key
        for layer in self.layers:
            x, _ = layer(x, positions=positions, key_padding_mask=padding)
        return x

    def pooled(self, hidden: Tensor) -> Tensor:
        """BERT's pooler output: tanh(dense(hidden[:, 0])), (B, D)."""
        if self.pooler is None:
            raise ValueError("this encoder was built without a pooler (EncoderConfig.pooler=False)")
        return torch.tanh(self.pooler(hidden[:, 0]))

    def sentence_embedding(self, ids: Tensor, *, attention_mask: Tensor | None = None,
                           token_types: Tensor | None = None, normalize: bool = False) -> Tensor:
        """Mean-pooled hidden states over the real tokens (B, D); unit length when ``normalize``
        (all-MiniLM-L6-v2's ``Normalize`` module)."""
        emb = mean_pool(self(ids, attention_mask=attention_mask, token_types=token_types), attention_mask)
        return nn.functional.normalize(emb, dim=-1) if normalize else emb

    def describe(self) -> dict[str, Any]:
        """What was built: config, the position scheme, parameters."""
        return {"kind": f"encoder ({self.config.family})", "config": self.config.to_dict(),
                "position": {**self.position.describe(), "parameters": count_parameters(self.position)},
                "parameters": count_parameters(self)}


def build_encoder(config: EncoderConfig, *, device: str | torch.device | None = None) -> Encoder:
    """Assemble a BERT-style encoder: post-norm layers with LayerNorm(eps), GELU feed-forward, biases everywhere.

    Args:
        device: where the parameters are created ("meta" for loading checkpoints tensor by tensor).
    """
    cfg = config
    position = build(cfg.position, dim=cfg.dim, num_heads=cfg.num_heads, max_length=cfg.max_position_embeddings,
                     causal=False, **dict(cfg.position_options))
    norm = layer_norm(cfg.dim, eps=cfg.norm_eps)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        layers = [EncoderLayer(attn=MultiHeadAttention(dim=cfg.dim, num_heads=cfg.num_heads, bias=True),
                               ffn=FeedForward(dim=cfg.dim, hidden=cfg.ffn_dim, activation=cfg.activation),
                               norm=norm, norm_first=False) for _ in range(cfg.num_layers)]
        return Encoder(config=cfg, embed=TokenEmbedding(vocab_size=cfg.vocab_size, dim=cfg.dim, scale=False),
                       position=position,
                       token_type=nn.Embedding(cfg.type_vocab_size, cfg.dim) if cfg.type_vocab_size else None,
                       embed_norm=norm(), layers=layers, pooler=nn.Linear(cfg.dim, cfg.dim) if cfg.pooler else None)
