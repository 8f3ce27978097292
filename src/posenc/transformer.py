"""Compatibility re-export: the Transformer models now live in ``posenc.models``.

``from posenc.transformer import ModelConfig, build_decoder_only, ...`` keeps
working; new code imports from ``posenc.models`` (config, parts, builders and
the model classes each have their own module there).
"""

from posenc.models.builders import build_decoder_only, build_encoder_decoder
from posenc.models.config import ModelConfig
from posenc.models.decoder_only import DecoderOnlyLM
from posenc.models.encoder_decoder import EncoderDecoder
from posenc.models.parts import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    InputEmbedding,
    LayerCache,
    Residual,
)

__all__ = [
    "DecoderLayer",
    "DecoderOnlyLM",
    "EncoderDecoder",
    "EncoderLayer",
    "FeedForward",
    "InputEmbedding",
    "LayerCache",
    "ModelConfig",
    "Residual",
    "build_decoder_only",
    "build_encoder_decoder",
]
