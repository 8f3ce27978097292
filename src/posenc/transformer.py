"""Encoder, decoder, encoder–decoder and decoder-only Transformers.

One position scheme per model, chosen by name from the registry; the model
places it where its family acts (input, q/k rotation, logit bias) and adds
nothing else behind the user's back. ``describe()`` says exactly what was built.

Tiny CPU example::

    from posenc import ModelConfig, build_decoder_only
    model = build_decoder_only(ModelConfig(vocab_size=100, dim=64, num_heads=4, position="rope"))
    out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=5)

Shape legend: B batch, S source length, T target length, D width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, MultiHeadAttention
from posenc.embedding import OutputHead, TokenEmbedding, count_parameters
from posenc.positions import PositionScheme, build, check_positions, default_positions


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Everything needed to build a model; plain data (JSON-serialisable).

    Args:
        vocab_size: source vocabulary (and target, unless ``tgt_vocab_size``).
        tgt_vocab_size: target vocabulary of an encoder–decoder, if different.
        dim: model width D (the width after the position scheme).
        num_heads: attention heads.
        num_layers: encoder layers (decoder layers too, unless ``num_decoder_layers``).
        num_decoder_layers: decoder layers, default ``num_layers``.
        ffn_dim: hidden width of the feed-forward block, default 4·D.
        dropout: dropout on embeddings, attention weights, and residual branches.
        norm_first: pre-norm (LayerNorm before each sub-block; a final norm
            closes the stack) or post-norm (the original paper's LN after the add).
        activation: FFN non-linearity.
        position: registered scheme name (``posenc.positions.names()``).
        position_options: keyword options of that scheme.
        tie_embeddings: output head reuses the (target) token table.
        share_embeddings: encoder and decoder share one token table (same vocabulary).
        scale_embeddings: multiply token vectors by √(width).
    """

    vocab_size: int
    tgt_vocab_size: int | None = None
    dim: int = 128
    num_heads: int = 4
    num_layers: int = 2
    num_decoder_layers: int | None = None
    ffn_dim: int | None = None
    dropout: float = 0.0
    norm_first: bool = True
    activation: Literal["relu", "gelu"] = "relu"
    position: str = "sinusoidal"
    position_options: dict[str, Any] = field(default_factory=dict)
    tie_embeddings: bool = True
    share_embeddings: bool = False
    scale_embeddings: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {unknown}; valid: {sorted(known)}")
        return cls(**data)


class FeedForward(nn.Module):
    """Position-wise FFN: Linear → activation → dropout → Linear."""

    def __init__(self, *, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.act = F.relu if activation == "relu" else F.gelu
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.up(x))))


class Residual(nn.Module):
    """x + dropout(f(norm(x))) (pre-norm) or norm(x + dropout(f(x))) (post-norm)."""

    def __init__(self, *, dim: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Any) -> tuple[Tensor, Any]:
        """Apply ``sublayer`` (returns (y, extra)); return (new x, extra)."""
        if self.norm_first:
            y, extra = sublayer(self.norm(x))
            return x + self.dropout(y), extra
        y, extra = sublayer(x)
        return self.norm(x + self.dropout(y)), extra


class EncoderLayer(nn.Module):
    """Self-attention → FFN, each wrapped in a residual + LayerNorm."""

    def __init__(
        self, *, dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0,
        norm_first: bool = True, activation: str = "relu", position: PositionScheme | None = None,
    ) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(dim=dim, num_heads=num_heads, dropout=dropout, position=position)
        self.ffn = FeedForward(dim=dim, hidden=ffn_dim, dropout=dropout, activation=activation)
        self.attn_res = Residual(dim=dim, dropout=dropout, norm_first=norm_first)
        self.ffn_res = Residual(dim=dim, dropout=dropout, norm_first=norm_first)

    def forward(
        self, x: Tensor, *, positions: Tensor, key_padding_mask: Tensor | None = None,
        valid_lens: Tensor | None = None, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
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


class DecoderLayer(nn.Module):
    """Causal self-attention → cross-attention to the encoder output (optional) → FFN."""

    def __init__(
        self, *, dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0, norm_first: bool = True,
        activation: str = "relu", position: PositionScheme | None = None, cross_attention: bool = True,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(dim=dim, num_heads=num_heads, dropout=dropout, position=position)
        self.self_res = Residual(dim=dim, dropout=dropout, norm_first=norm_first)
        self.cross_attn = MultiHeadAttention(dim=dim, num_heads=num_heads, dropout=dropout) if cross_attention else None
        self.cross_res = Residual(dim=dim, dropout=dropout, norm_first=norm_first) if cross_attention else None
        self.ffn = FeedForward(dim=dim, hidden=ffn_dim, dropout=dropout, activation=activation)
        self.ffn_res = Residual(dim=dim, dropout=dropout, norm_first=norm_first)

    def forward(
        self, x: Tensor, memory: Tensor | None = None, *, positions: Tensor,
        key_padding_mask: Tensor | None = None, memory_padding_mask: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        x, _ = self.self_res(x, lambda h: self.self_attn(
            h, q_pos=positions, key_padding_mask=key_padding_mask, causal=True,
            cache=None if cache is None else cache.self_attn))
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention: pass the encoder output as memory")
            assert self.cross_res is not None
            x, _ = self.cross_res(x, lambda h: self.cross_attn(
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

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
        return self.dropout(self.position.add(self.token(ids), positions))  # (B, T, D)


def _positions(positions: Tensor | None, length: int, offset: int, device: torch.device) -> Tensor:
    if positions is None:
        return default_positions(length, offset=offset, device=device)
    positions = check_positions(positions)
    if positions.shape[-1] != length:
        raise ValueError(f"{positions.shape[-1]} positions given for a sequence of length {length}")
    return positions.to(device)


def _token_embedding(cfg: ModelConfig, vocab_size: int, scheme: PositionScheme) -> TokenEmbedding:
    return TokenEmbedding(vocab_size=vocab_size, dim=cfg.dim - scheme.extra_width, scale=cfg.scale_embeddings)


def _describe_scheme(scheme: PositionScheme) -> dict[str, Any]:
    return {**scheme.describe(), "parameters": count_parameters(scheme)}


class EncoderDecoder(nn.Module):
    """The Transformer of Vaswani et al. (2017), with a choosable position scheme.

    Build with ``build_encoder_decoder(config)``. The encoder and the decoder
    each get their own instance of the scheme (as T5 has a bias per stack);
    cross-attention has none.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        cfg = config
        self.config = cfg
        tgt_vocab = cfg.tgt_vocab_size or cfg.vocab_size
        ffn = cfg.ffn_dim or 4 * cfg.dim
        n_dec = cfg.num_decoder_layers or cfg.num_layers
        opts = dict(cfg.position_options)
        self.src_position = build(cfg.position, dim=cfg.dim, num_heads=cfg.num_heads, **opts)
        self.tgt_position = build(cfg.position, dim=cfg.dim, num_heads=cfg.num_heads, **opts)
        src_token = _token_embedding(cfg, cfg.vocab_size, self.src_position)
        if cfg.share_embeddings:
            if tgt_vocab != cfg.vocab_size:
                raise ValueError(
                    f"share_embeddings needs one vocabulary, got vocab_size={cfg.vocab_size}, tgt_vocab_size={tgt_vocab}")
            tgt_token = src_token
        else:
            tgt_token = _token_embedding(cfg, tgt_vocab, self.tgt_position)
        self.src_embed = InputEmbedding(token=src_token, position=self.src_position, dropout=cfg.dropout)
        self.tgt_embed = InputEmbedding(token=tgt_token, position=self.tgt_position, dropout=cfg.dropout)
        layer_args = dict(dim=cfg.dim, num_heads=cfg.num_heads, ffn_dim=ffn, dropout=cfg.dropout,
                          norm_first=cfg.norm_first, activation=cfg.activation)
        self.encoder = nn.ModuleList(
            EncoderLayer(**layer_args, position=self.src_position) for _ in range(cfg.num_layers))
        self.decoder = nn.ModuleList(
            DecoderLayer(**layer_args, position=self.tgt_position) for _ in range(n_dec))
        self.encoder_norm = nn.LayerNorm(cfg.dim) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.dim) if cfg.norm_first else nn.Identity()
        if cfg.tie_embeddings and tgt_token.dim != cfg.dim:
            raise ValueError(
                f"cannot tie the output head: the {cfg.position!r} scheme widens token vectors "
                f"({tgt_token.dim} → {cfg.dim}); set tie_embeddings=False")
        self.head = OutputHead(dim=cfg.dim, vocab_size=tgt_vocab, tied_to=tgt_token if cfg.tie_embeddings else None)

    def encode(
        self, src: Tensor, *, src_pos: Tensor | None = None, src_padding_mask: Tensor | None = None,
        src_valid_lens: Tensor | None = None,
    ) -> Tensor:
        """Source ids (B, S) → memory (B, S, D)."""
        positions = _positions(src_pos, src.shape[1], 0, src.device)
        x = self.src_embed(src, positions)
        for layer in self.encoder:
            x, _ = layer(x, positions=positions, key_padding_mask=src_padding_mask, valid_lens=src_valid_lens)
        return self.encoder_norm(x)

    def decode(
        self, tgt: Tensor, memory: Tensor, *, tgt_pos: Tensor | None = None,
        tgt_padding_mask: Tensor | None = None, memory_padding_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        """Target ids (B, T) and memory → logits (B, T, V). With ``cache``, ``tgt`` holds only new tokens."""
        offset = cache[0].self_attn.length if cache else 0
        positions = _positions(tgt_pos, tgt.shape[1], offset, tgt.device)
        x = self.tgt_embed(tgt, positions)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, positions=positions, key_padding_mask=tgt_padding_mask,
                      memory_padding_mask=memory_padding_mask, cache=None if cache is None else cache[i])
        return self.head(self.decoder_norm(x))

    def forward(
        self, src: Tensor, tgt: Tensor, *, src_padding_mask: Tensor | None = None,
        tgt_padding_mask: Tensor | None = None,
    ) -> Tensor:
        memory = self.encode(src, src_padding_mask=src_padding_mask)
        return self.decode(tgt, memory, tgt_padding_mask=tgt_padding_mask, memory_padding_mask=src_padding_mask)

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.decoder]

    @torch.no_grad()
    def generate(
        self, src: Tensor, *, bos_id: int, max_new_tokens: int, eos_id: int | None = None,
        src_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Greedy decoding with the KV cache; returns (B, 1 + generated) target ids starting with BOS."""
        memory = self.encode(src, src_padding_mask=src_padding_mask)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        return _greedy(lambda ids, cache: self.decode(ids, memory, memory_padding_mask=src_padding_mask, cache=cache),
                       out, self.new_cache(), max_new_tokens, eos_id)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "encoder-decoder",
            "config": self.config.to_dict(),
            "position": {"encoder": _describe_scheme(self.src_position), "decoder": _describe_scheme(self.tgt_position),
                         "cross_attention": "none"},
            "embeddings": {"shared": self.config.share_embeddings, "tied_output": self.head.tied,
                           "scaled_by": self.src_embed.token.multiplier},
            "parameters": count_parameters(self),
        }


class DecoderOnlyLM(nn.Module):
    """A decoder-only language model (GPT-style) with a choosable position scheme."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        cfg = config
        self.config = cfg
        ffn = cfg.ffn_dim or 4 * cfg.dim
        self.position = build(cfg.position, dim=cfg.dim, num_heads=cfg.num_heads, **dict(cfg.position_options))
        token = _token_embedding(cfg, cfg.vocab_size, self.position)
        self.embed = InputEmbedding(token=token, position=self.position, dropout=cfg.dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(dim=cfg.dim, num_heads=cfg.num_heads, ffn_dim=ffn, dropout=cfg.dropout,
                         norm_first=cfg.norm_first, activation=cfg.activation, position=self.position,
                         cross_attention=False)
            for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.dim) if cfg.norm_first else nn.Identity()
        if cfg.tie_embeddings and token.dim != cfg.dim:
            raise ValueError(
                f"cannot tie the output head: the {cfg.position!r} scheme widens token vectors "
                f"({token.dim} → {cfg.dim}); set tie_embeddings=False")
        self.head = OutputHead(dim=cfg.dim, vocab_size=cfg.vocab_size, tied_to=token if cfg.tie_embeddings else None)

    def forward(
        self, ids: Tensor, *, positions: Tensor | None = None, key_padding_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        """ids (B, T) → logits (B, T, V). With ``cache``, ids holds only the new tokens and
        ``key_padding_mask`` covers every key so far (cached + new)."""
        offset = cache[0].self_attn.length if cache else 0
        positions = _positions(positions, ids.shape[1], offset, ids.device)
        x = self.embed(ids, positions)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions=positions, key_padding_mask=key_padding_mask,
                      cache=None if cache is None else cache[i])
        return self.head(self.norm(x))

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.layers]

    @torch.no_grad()
    def generate(self, prompt: Tensor, *, max_new_tokens: int, eos_id: int | None = None) -> Tensor:
        """Greedy continuation with the KV cache; each new token gets its true position."""
        return _greedy(lambda ids, cache: self(ids, cache=cache), prompt, self.new_cache(), max_new_tokens, eos_id)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "decoder-only",
            "config": self.config.to_dict(),
            "position": _describe_scheme(self.position),
            "embeddings": {"tied_output": self.head.tied, "scaled_by": self.embed.token.multiplier},
            "parameters": count_parameters(self),
        }


def _greedy(step: Any, ids: Tensor, cache: list[LayerCache], max_new_tokens: int, eos_id: int | None) -> Tensor:
    """Feed ``ids`` once, then one argmax token at a time; stop when every row has emitted EOS."""
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


def build_encoder_decoder(config: ModelConfig) -> EncoderDecoder:
    return EncoderDecoder(config)


def build_decoder_only(config: ModelConfig) -> DecoderOnlyLM:
    return DecoderOnlyLM(config)
