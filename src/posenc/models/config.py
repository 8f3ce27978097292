"""``ModelConfig``: everything needed to build an encoder–decoder or decoder-only Transformer, as plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from posenc.validation import check_model_config


class JSONConfig:
    """``to_dict`` / ``from_dict`` for a frozen config dataclass: plain data in, the same config out."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The config saved by ``to_dict``; dicts written before a field existed get its default."""
        known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class ModelConfig(JSONConfig):
    """Everything needed to build a model; plain data (JSON-serialisable), frozen.

    The builders (``posenc.models.builders``) turn it into parts; nothing else
    reads it to assemble a model.

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
        position: registered scheme name or alias (``posenc.positions.names()``, ``aliases()``).
        position_options: keyword options of that scheme; they override what the
            model supplies (width, heads, ``max_length``, causal or not).
        max_length: the longest sequence the model will see, given to the scheme
            (a learned table gets this many rows); None: the scheme's own default.
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
    max_length: int | None = None
    tie_embeddings: bool = True
    share_embeddings: bool = False
    scale_embeddings: bool = True

    def __post_init__(self) -> None:
        check_model_config(self)  # 0 is refused, not taken for "the default" (None is the default)

    @property
    def target_vocab_size(self) -> int:
        """The decoder's vocabulary: ``tgt_vocab_size`` or, when unset, ``vocab_size``."""
        return self.tgt_vocab_size or self.vocab_size

    @property
    def hidden_dim(self) -> int:
        """The feed-forward width: ``ffn_dim`` or 4·D."""
        return self.ffn_dim or 4 * self.dim

    @property
    def decoder_layers(self) -> int:
        """Decoder layers: ``num_decoder_layers`` or ``num_layers``."""
        return self.num_decoder_layers or self.num_layers
