"""posenc — token embeddings, position schemes of every family, attention and Transformers,
with a lab that measures what each piece does."""

from posenc.attention import KVCache, MultiHeadAttention
from posenc.embedding import OutputHead, TokenEmbedding, count_parameters, neighbours, one_hot_lookup
from posenc.positions import build as build_position
from posenc.positions import names as position_names
from posenc.models import (
    DecoderOnlyLM,
    EncoderDecoder,
    ModelConfig,
    build_decoder_only,
    build_encoder_decoder,
)

__version__ = "0.1.0"

__all__ = [
    "DecoderOnlyLM",
    "EncoderDecoder",
    "KVCache",
    "ModelConfig",
    "MultiHeadAttention",
    "OutputHead",
    "TokenEmbedding",
    "build_decoder_only",
    "build_encoder_decoder",
    "build_position",
    "count_parameters",
    "neighbours",
    "one_hot_lookup",
    "position_names",
]
