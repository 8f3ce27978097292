"""Builders: a ``ModelConfig`` → finished parts → a model.

The one place that knows how parts fit: which width the token table gets
(the position scheme may append coordinates), whether the head can be tied,
that the stacks share one vocabulary when their tables are shared, and what a
position scheme is told about the model (width, heads, longest sequence,
causal or not). The model classes only run the parts they receive.

A new architecture is a new builder choosing other parts (see
``posenc.models.decoder``: RMSNorm, SwiGLU, grouped-query attention), not flags
on these.
"""

from __future__ import annotations

from torch import nn

from posenc.attention import MultiHeadAttention
from posenc.embedding import OutputHead, TokenEmbedding
from posenc.models.config import ModelConfig
from posenc.models.decoder_only import DecoderOnlyLM
from posenc.models.encoder_decoder import EncoderDecoder
from posenc.models.parts import DecoderLayer, EncoderLayer, FeedForward, InputEmbedding, NormFactory, layer_norm
from posenc.positions import PositionScheme, build


def position_scheme(cfg: ModelConfig, *, causal: bool) -> PositionScheme:
    """The config's scheme, told the model's width, heads, longest sequence and whether the stack is causal."""
    return build(cfg.position, dim=cfg.dim, num_heads=cfg.num_heads, max_length=cfg.max_length, causal=causal,
                 **dict(cfg.position_options))


def token_embedding(cfg: ModelConfig, vocab_size: int, scheme: PositionScheme) -> TokenEmbedding:
    """A token table ``scheme.extra_width`` narrower than the model, so the scheme's output is D wide."""
    return TokenEmbedding(vocab_size=vocab_size, dim=cfg.dim - scheme.extra_width, scale=cfg.scale_embeddings)


def output_head(cfg: ModelConfig, token: TokenEmbedding, vocab_size: int) -> OutputHead:
    """The head over ``vocab_size``: ``token``'s table again when tied (it must then be D wide)."""
    return output_head_for(token, dim=cfg.dim, vocab_size=vocab_size, tie=cfg.tie_embeddings, position=cfg.position)


def output_head_for(token: TokenEmbedding, *, dim: int, vocab_size: int, tie: bool, position: str,
                    bias: bool = False, input_scale: float = 1.0) -> OutputHead:
    """A head D → ``vocab_size``, reusing ``token``'s table when ``tie``: the one tie/width check of every builder.

    Args:
        token: the model's token table; ``dim − token.dim`` is what the scheme ``position`` appends.
        dim: model width D.
        tie: reuse ``token``'s table as the head's weight.
        position: the scheme's name, for the message.
        bias, input_scale: ``OutputHead``'s (Marian's logit bias; T5's D^(−1/2) before a tied head).

    Raises:
        ValueError: ``tie`` with a token table narrower than the model (a widening scheme such as "naive").
    """
    if tie and token.dim != dim:
        raise ValueError(
            f"cannot tie the output head: the {position!r} scheme widens token vectors "
            f"({token.dim} → {dim}); set tie_embeddings=False")
    return OutputHead(dim=dim, vocab_size=vocab_size, tied_to=token if tie else None, bias=bias,
                      input_scale=input_scale)


def norm_factory(cfg: ModelConfig) -> NormFactory:
    return layer_norm(cfg.dim)


def final_norm(cfg: ModelConfig) -> nn.Module:
    """The norm closing a pre-norm stack; post-norm stacks already end normed."""
    return norm_factory(cfg)() if cfg.norm_first else nn.Identity()


def attention(cfg: ModelConfig, position: PositionScheme | None = None) -> MultiHeadAttention:
    return MultiHeadAttention(dim=cfg.dim, num_heads=cfg.num_heads, dropout=cfg.dropout, position=position)


def feed_forward(cfg: ModelConfig) -> FeedForward:
    return FeedForward(dim=cfg.dim, hidden=cfg.hidden_dim, dropout=cfg.dropout, activation=cfg.activation)


def encoder_layer(cfg: ModelConfig, position: PositionScheme) -> EncoderLayer:
    """Self-attention with ``position`` → the config's feed-forward, the config's norms."""
    attn = attention(cfg, position)
    return EncoderLayer(attn=attn, ffn=feed_forward(cfg), norm=norm_factory(cfg), dropout=cfg.dropout,
                        norm_first=cfg.norm_first)


def decoder_layer(cfg: ModelConfig, position: PositionScheme, *, cross_attention: bool) -> DecoderLayer:
    """Causal self-attention with ``position`` → cross-attention (no scheme) if asked → feed-forward."""
    self_attn = attention(cfg, position)
    cross_attn = attention(cfg) if cross_attention else None
    return DecoderLayer(self_attn=self_attn, cross_attn=cross_attn, ffn=feed_forward(cfg), norm=norm_factory(cfg),
                        dropout=cfg.dropout, norm_first=cfg.norm_first)


def build_encoder_decoder(config: ModelConfig) -> EncoderDecoder:
    """The Transformer of Vaswani et al. (2017) with the config's position scheme in each stack.

    Raises:
        ValueError: shared tables with two vocabularies, a tied head with a
            widening scheme, or a bad scheme name/option/width.
    """
    cfg = config
    src_position = position_scheme(cfg, causal=False)
    tgt_position = position_scheme(cfg, causal=True)
    src_token = token_embedding(cfg, cfg.vocab_size, src_position)
    if cfg.share_embeddings:
        if cfg.target_vocab_size != cfg.vocab_size:
            raise ValueError(f"share_embeddings needs one vocabulary, got vocab_size={cfg.vocab_size}, "
                             f"tgt_vocab_size={cfg.target_vocab_size}")
        tgt_token = src_token
    else:
        tgt_token = token_embedding(cfg, cfg.target_vocab_size, tgt_position)
    src_embed = InputEmbedding(token=src_token, position=src_position, dropout=cfg.dropout)
    tgt_embed = InputEmbedding(token=tgt_token, position=tgt_position, dropout=cfg.dropout)
    encoder = [encoder_layer(cfg, src_position) for _ in range(cfg.num_layers)]
    decoder = [decoder_layer(cfg, tgt_position, cross_attention=True) for _ in range(cfg.decoder_layers)]
    return EncoderDecoder(src_embed=src_embed, tgt_embed=tgt_embed, encoder=encoder, decoder=decoder,
                          encoder_norm=final_norm(cfg), decoder_norm=final_norm(cfg),
                          head=output_head(cfg, tgt_token, cfg.target_vocab_size), config=cfg)


def build_decoder_only(config: ModelConfig) -> DecoderOnlyLM:
    """A GPT-style decoder-only language model with the config's position scheme (told it is causal).

    Raises:
        ValueError: a tied head with a widening scheme, or a bad scheme name/option/width.
    """
    cfg = config
    position = position_scheme(cfg, causal=True)
    token = token_embedding(cfg, cfg.vocab_size, position)
    embed = InputEmbedding(token=token, position=position, dropout=cfg.dropout)
    layers = [decoder_layer(cfg, position, cross_attention=False) for _ in range(cfg.num_layers)]
    return DecoderOnlyLM(embed=embed, layers=layers, norm=final_norm(cfg),
                         head=output_head(cfg, token, cfg.vocab_size), config=cfg)
