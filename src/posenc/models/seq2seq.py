"""The encoder–decoder families' config and builder: T5, Marian and Whisper on posenc's parts.

``Seq2SeqConfig`` is the plain data a family's HF-config reader
(``posenc.families.t5``, ``marian``, ``whisper``) returns: sizes per stack,
each stack's position scheme *as posenc's own* (registry name + options), and
the parts by name — the norm (``decoder_parts.NORMS``), the feed-forward
(``decoder_parts.FFN_NAMES``), the block layout ("pre" or "post"), which
attention projections carry biases, the attention's logit scale, the head.
``build_seq2seq`` assembles ``posenc.models.encoder_decoder.EncoderDecoder``
from them; the model class is the one posenc's own translation models run on.

=========  ======================  ===================  ==========================  ==============
family     encoder positions       decoder positions    parts                       head
=========  ======================  ===================  ==========================  ==============
T5         ``t5`` buckets (bidir.)  ``t5`` (causal)      pre-norm RMS, no biases,    tied ×D^(−1/2)
                                                        logit scale 1, ReLU / GeGLU or untied
Marian     ``sinusoidal``          the same             post-norm LayerNorm,        tied + logit
           [sin | cos] halves                           ×√D tokens, SiLU/GELU MLP   bias
Whisper    ``sinusoidal`` halves,  ``learned`` table    conv front end, pre-norm    tied
           ω_i = b^(−i/(D/2 − 1))                       LayerNorm, no k bias
=========  ======================  ===================  ==========================  ==============

Tiny CPU example (a T5-like model)::

    import torch
    from posenc.models.seq2seq import Seq2SeqConfig, build_seq2seq
    cfg = Seq2SeqConfig(vocab_size=100, dim=32, encoder_heads=4, decoder_heads=4, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, encoder_position="t5", decoder_position="t5", norm="rms",
                        ffn="geglu", ffn_bias=False, attn_bias="none", attn_scale=1.0)
    model = build_seq2seq(cfg)
    logits = model(torch.tensor([[5, 6, 7]]), torch.tensor([[0, 5]]))   # (1, 2, 100)

Shape legend: B batch, S source length, T target length, D width, V vocabulary.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from posenc.attention import MultiHeadAttention
from posenc.embedding import TokenEmbedding
from posenc.models.builders import output_head_for
from posenc.models.config import JSONConfig
from posenc.models.decoder_parts import FFN_NAMES, NORMS, build_ffn
from posenc.models.encoder_decoder import EncoderDecoder
from posenc.models.parts import AudioFrontEnd, DecoderLayer, EncoderLayer, InputEmbedding
from posenc.positions import PositionScheme, build, lookup
from posenc.validation import check_memory, number

#: Which attention projections carry a bias: all four (Marian), none (T5), all but the key's (Whisper).
AttnBias = Literal["all", "none", "no-key"]
ATTN_BIASES = ("all", "none", "no-key")
BLOCK_LAYOUTS = ("pre", "post")
FRONT_ENDS = ("tokens", "audio")


@dataclass(frozen=True, kw_only=True)
class Seq2SeqConfig(JSONConfig):
    """Everything needed to build an encoder–decoder checkpoint's model; plain data (JSON-serialisable), frozen.

    Args:
        vocab_size: the source vocabulary (and the target's, unless ``tgt_vocab_size``).
        tgt_vocab_size: the decoder's vocabulary when it differs (Marian without shared tables).
        dim: model width D.
        encoder_layers, decoder_layers: layers per stack.
        encoder_heads, decoder_heads: attention heads per stack.
        head_dim: per-head width when heads × head_dim ≠ D (T5's ``d_kv``); None: D / heads.
        encoder_ffn_dim, decoder_ffn_dim: the feed-forward's hidden width per stack.
        encoder_position, decoder_position: registered scheme names ("t5", "sinusoidal", "learned", "none").
        encoder_position_options, decoder_position_options: their options (T5's buckets,
            a sinusoid's layout, a learned table's ``max_len``); causal or not comes from the stack.
        norm: a norm of ``decoder_parts.NORMS`` ("rms": T5's, "layernorm": Marian's and Whisper's).
        norm_eps: every norm's epsilon.
        block: "pre" (x + f(norm(x)); a final norm closes each stack) or "post" (norm(x + f(x))).
        ffn: a feed-forward of ``decoder_parts.FFN_NAMES`` ("relu-mlp", "geglu", "silu-mlp", "gelu-mlp", …).
        ffn_bias: biases on the feed-forward's projections.
        attn_bias: which attention projections carry a bias (``ATTN_BIASES``).
        attn_scale: the softmax scale of q·k; None: 1/√head_dim (T5: 1, folded into its weights).
        scale_embeddings: token vectors × √D (Marian's ``scale_embedding``).
        share_embeddings: one token table for both stacks.
        tie_embeddings: the head is the decoder's token table.
        head_bias: a learned bias on the logits (Marian's ``final_logits_bias``).
        output_scale: the decoder's output × this before the head (T5 with a tied head: D^(−1/2)).
        front_end: "tokens" (source ids) or "audio" (Whisper's convolutions over log-mel features).
        num_mel_bins: the audio front end's input channels.
        source_length: the audio encoder's positions (Whisper's ``max_source_positions``; the
            features have twice as many frames).
        decoder_start_token_id: the decoder's first token (``EncoderDecoder.generate``'s ``bos_id``).
        eos_token_id, pad_token_id: as in config.json, for generation; informational otherwise.
        family: the model family the config was read for.
    """

    vocab_size: int
    tgt_vocab_size: int | None = None
    dim: int = 128
    encoder_layers: int = 2
    decoder_layers: int = 2
    encoder_heads: int = 4
    decoder_heads: int = 4
    head_dim: int | None = None
    encoder_ffn_dim: int = 512
    decoder_ffn_dim: int = 512
    encoder_position: str = "sinusoidal"
    encoder_position_options: dict[str, Any] = field(default_factory=dict)
    decoder_position: str = "sinusoidal"
    decoder_position_options: dict[str, Any] = field(default_factory=dict)
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    block: Literal["pre", "post"] = "pre"
    ffn: str = "gelu-mlp"
    ffn_bias: bool = True
    attn_bias: AttnBias = "all"
    attn_scale: float | None = None
    scale_embeddings: bool = False
    share_embeddings: bool = True
    tie_embeddings: bool = True
    head_bias: bool = False
    output_scale: float = 1.0
    front_end: Literal["tokens", "audio"] = "tokens"
    num_mel_bins: int | None = None
    source_length: int | None = None
    decoder_start_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    family: str = "seq2seq"

    def __post_init__(self) -> None:
        from posenc import validation as bounds

        limits = {"vocab_size": bounds.MAX_VOCAB, "tgt_vocab_size": bounds.MAX_VOCAB, "dim": bounds.MAX_WIDTH,
                  "encoder_layers": bounds.MAX_LAYERS, "decoder_layers": bounds.MAX_LAYERS,
                  "encoder_heads": bounds.MAX_HEADS, "decoder_heads": bounds.MAX_HEADS, "head_dim": bounds.MAX_WIDTH,
                  "encoder_ffn_dim": bounds.MAX_WIDTH, "decoder_ffn_dim": bounds.MAX_WIDTH,
                  "num_mel_bins": bounds.MAX_WIDTH, "source_length": bounds.MAX_CONTEXT}
        optional = ("tgt_vocab_size", "head_dim", "num_mel_bins", "source_length")
        for name, limit in limits.items():  # bounded before build_seq2seq makes modules of these sizes
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
                raise ValueError(f"Seq2SeqConfig.{name} must be a positive integer <= {limit:,}, got {value!r}")
        for name in ("decoder_start_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < self.target_vocab_size):
                raise ValueError(f"Seq2SeqConfig.{name} must be a token id in [0, {self.target_vocab_size}) or None, "
                                 f"got {value!r}")
        for heads in (self.encoder_heads, self.decoder_heads):
            if self.head_dim is None and self.dim % heads:
                raise ValueError(f"Seq2SeqConfig: dim={self.dim} is not divisible by {heads} heads; give head_dim")
        for name, choices in (("norm", tuple(NORMS)), ("ffn", FFN_NAMES), ("block", BLOCK_LAYOUTS),
                              ("attn_bias", ATTN_BIASES), ("front_end", FRONT_ENDS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"Seq2SeqConfig.{name} must be one of {sorted(choices)}, got {getattr(self, name)!r}")
        number(self.norm_eps, "Seq2SeqConfig.norm_eps", above=0, maximum=1,
               fix="a norm divides by sqrt(variance + eps): a zero or negative eps gives NaN outputs")
        number(self.output_scale, "Seq2SeqConfig.output_scale", above=0, fix="T5 with a tied head: dim ** -0.5")
        if self.attn_scale is not None:
            number(self.attn_scale, "Seq2SeqConfig.attn_scale", above=0, fix="None: 1/sqrt(head_dim); T5: 1.0")
        for stack in ("encoder", "decoder"):
            lookup(getattr(self, f"{stack}_position"))  # an unknown name raises with the valid list
            if not isinstance(getattr(self, f"{stack}_position_options"), dict):
                raise ValueError(f"Seq2SeqConfig.{stack}_position_options must be a dict of scheme options")
        if self.front_end == "audio" and (self.num_mel_bins is None or self.source_length is None):
            raise ValueError("Seq2SeqConfig: an audio front end needs num_mel_bins and source_length "
                             "(Whisper's num_mel_bins and max_source_positions)")
        if self.front_end == "audio" and self.share_embeddings:
            raise ValueError("Seq2SeqConfig: an audio encoder has no token table to share; set share_embeddings=False")
        if self.share_embeddings and self.target_vocab_size != self.vocab_size:
            raise ValueError(f"Seq2SeqConfig: share_embeddings needs one vocabulary, got vocab_size={self.vocab_size}, "
                             f"tgt_vocab_size={self.tgt_vocab_size}")
        check_memory(2.0 * self.parameter_count(), f"an encoder–decoder of {self.parameter_count():,} parameters "
                     "(2 bytes each at least)",
                     fix="the config is not a real model's, or set POSENC_MEMORY_BUDGET (bytes) higher")

    @property
    def target_vocab_size(self) -> int:
        """The decoder's vocabulary: ``tgt_vocab_size`` or, when unset, ``vocab_size``."""
        return self.tgt_vocab_size or self.vocab_size

    def parameter_count(self) -> int:
        """About how many parameters the config describes (projections, feed-forwards, tables)."""
        d = self.dim
        inner = lambda heads: heads * (self.head_dim or d // heads)  # noqa: E731
        gated = 3 if self.ffn in ("swiglu", "geglu") else 2
        enc = self.encoder_layers * (4 * d * inner(self.encoder_heads) + gated * d * self.encoder_ffn_dim)
        dec = self.decoder_layers * (8 * d * inner(self.decoder_heads) + gated * d * self.decoder_ffn_dim)
        tables = self.target_vocab_size * d * (1 if self.tie_embeddings else 2)
        if not self.share_embeddings and self.front_end == "tokens":
            tables += self.vocab_size * d
        return enc + dec + tables


def _attention(cfg: Seq2SeqConfig, heads: int, position: PositionScheme | None) -> MultiHeadAttention:
    """One attention of the config: its biases, head width and logit scale."""
    attn = MultiHeadAttention(dim=cfg.dim, num_heads=heads, head_dim=cfg.head_dim, bias=cfg.attn_bias != "none",
                              scale=cfg.attn_scale, position=position)
    if cfg.attn_bias == "no-key":  # Whisper: q, v and out have biases, k has none
        attn.k_proj = nn.Linear(cfg.dim, attn.num_kv_heads * attn.head_dim, bias=False)
    return attn


def stack_position(cfg: Seq2SeqConfig, stack: Literal["encoder", "decoder"]) -> PositionScheme:
    """The position scheme of one stack, through the registry: causal in the decoder.

    An additive scheme is told the model width; a bias or rotary scheme the attention's
    (heads × head width, which T5's ``d_kv`` may make differ from D).
    """
    name, heads = getattr(cfg, f"{stack}_position"), getattr(cfg, f"{stack}_heads")
    dim = cfg.dim if cfg.head_dim is None or lookup(name).family == "additive" else heads * cfg.head_dim
    return build(name, dim=dim, num_heads=heads, causal=stack == "decoder",
                 **dict(getattr(cfg, f"{stack}_position_options")))


def build_seq2seq(config: Seq2SeqConfig, *, device: str | torch.device | None = None) -> EncoderDecoder:
    """Assemble the ``EncoderDecoder`` a ``Seq2SeqConfig`` describes (see the module docstring).

    Each stack builds its scheme once, through the registry (told whether it is causal),
    and hands that one instance to its input and to every self-attention; cross-attention
    has no scheme.

    Args:
        device: where the parameters are created ("meta" for loading checkpoints tensor by tensor).

    Raises:
        ValueError: a scheme option it does not take, or a tied head the table cannot serve.
    """
    cfg = config
    norm = functools.partial(NORMS[cfg.norm], cfg.dim, eps=cfg.norm_eps)
    pre = cfg.block == "pre"
    with torch.device(device) if device is not None else contextlib.nullcontext():
        src_position, tgt_position = stack_position(cfg, "encoder"), stack_position(cfg, "decoder")
        src_embed: InputEmbedding | AudioFrontEnd
        if cfg.front_end == "audio":
            assert cfg.num_mel_bins is not None and cfg.source_length is not None
            src_embed = AudioFrontEnd(num_mel_bins=cfg.num_mel_bins, dim=cfg.dim, length=cfg.source_length,
                                      position=src_position)
            tgt_token = TokenEmbedding(vocab_size=cfg.target_vocab_size, dim=cfg.dim, scale=cfg.scale_embeddings)
        else:
            src_token = TokenEmbedding(vocab_size=cfg.vocab_size, dim=cfg.dim, scale=cfg.scale_embeddings)
            src_embed = InputEmbedding(token=src_token, position=src_position)
            tgt_token = src_token if cfg.share_embeddings else TokenEmbedding(
                vocab_size=cfg.target_vocab_size, dim=cfg.dim, scale=cfg.scale_embeddings)
        tgt_embed = InputEmbedding(token=tgt_token, position=tgt_position)
        encoder = [EncoderLayer(attn=_attention(cfg, cfg.encoder_heads, src_position),
                                ffn=build_ffn(cfg.ffn, dim=cfg.dim, hidden=cfg.encoder_ffn_dim, bias=cfg.ffn_bias),
                                norm=norm, norm_first=pre) for _ in range(cfg.encoder_layers)]
        decoder = [DecoderLayer(self_attn=_attention(cfg, cfg.decoder_heads, tgt_position),
                                cross_attn=_attention(cfg, cfg.decoder_heads, None),
                                ffn=build_ffn(cfg.ffn, dim=cfg.dim, hidden=cfg.decoder_ffn_dim, bias=cfg.ffn_bias),
                                norm=norm, norm_first=pre) for _ in range(cfg.decoder_layers)]
        head = output_head_for(tgt_token, dim=cfg.dim, vocab_size=cfg.target_vocab_size, tie=cfg.tie_embeddings,
                               position=cfg.decoder_position, bias=cfg.head_bias, input_scale=cfg.output_scale)
        final = (lambda: norm()) if pre else nn.Identity  # a post-norm stack already ends normed
        return EncoderDecoder(src_embed=src_embed, tgt_embed=tgt_embed, encoder=encoder, decoder=decoder,
                              encoder_norm=final(), decoder_norm=final(), head=head, config=cfg)
