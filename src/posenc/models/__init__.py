"""Model families, the parts they are assembled from, and the builders that assemble them.

==================  ================================================================
module              holds
==================  ================================================================
``config``          ``ModelConfig`` (plain, frozen, JSON-able)
``parts``           norms, feed-forward, residual, encoder/decoder layers, input embedding
``builders``        config → parts → model (tying and width checks live here, once)
``encoder_decoder`` ``EncoderDecoder``, run from parts
``decoder_only``    ``DecoderOnlyLM``, run from parts (``hidden`` + ``head``)
``llama``           Llama-family parts and ``build_llama`` (RMSNorm, SwiGLU, GQA)
``seq2seq``         ``Seq2SeqConfig`` and ``build_seq2seq``: T5, Marian, Whisper as ``EncoderDecoder``
==================  ================================================================

>>> import torch
>>> from posenc.models import ModelConfig, build_decoder_only
>>> lm = build_decoder_only(ModelConfig(vocab_size=50, dim=32, num_heads=4, position="nope"))
>>> lm(torch.tensor([[1, 2, 3]])).shape
torch.Size([1, 3, 50])
"""

from posenc.models.builders import build_decoder_only, build_encoder_decoder
from posenc.models.config import ModelConfig
from posenc.models.decoder_only import DecoderOnlyLM
from posenc.models.encoder_decoder import EncoderDecoder
from posenc.models.llama import LlamaConfig, LlamaLM, RMSNorm, SwiGLU, build_llama
from posenc.models.parts import (
    AudioFrontEnd,
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    InputEmbedding,
    LayerCache,
    Residual,
    layer_norm,
)
from posenc.models.seq2seq import Seq2SeqConfig, build_seq2seq

__all__ = [
    "AudioFrontEnd",
    "DecoderLayer",
    "DecoderOnlyLM",
    "EncoderDecoder",
    "EncoderLayer",
    "FeedForward",
    "InputEmbedding",
    "LayerCache",
    "LlamaConfig",
    "LlamaLM",
    "ModelConfig",
    "RMSNorm",
    "Residual",
    "Seq2SeqConfig",
    "SwiGLU",
    "build_decoder_only",
    "build_encoder_decoder",
    "build_llama",
    "build_seq2seq",
    "layer_norm",
]
