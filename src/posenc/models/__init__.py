"""Model families, the parts they are assembled from, and the builders that assemble them.

==================  ================================================================
module              holds
==================  ================================================================
``config``          ``ModelConfig`` (plain, frozen, JSON-able)
``parts``           norms, feed-forward, residual, encoder/decoder layers, input embedding
``builders``        config → parts → model (tying and width checks live here, once)
``encoder_decoder`` ``EncoderDecoder``, run from parts
``decoder_only``    ``DecoderOnlyLM``, run from parts (``hidden`` + ``head``)
``decoder``         ``DecoderConfig`` / ``Decoder`` / ``build_decoder``: the decoder every pretrained
                    family runs in (``llama``: its former names, deprecated)
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
from posenc.models.decoder import DecoderConfig, Decoder, RMSNorm, SwiGLU, build_decoder
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
    "DecoderConfig",
    "Decoder",
    "ModelConfig",
    "RMSNorm",
    "Residual",
    "Seq2SeqConfig",
    "SwiGLU",
    "build_decoder_only",
    "build_encoder_decoder",
    "build_decoder",
    "build_seq2seq",
    "layer_norm",
]


def __getattr__(name: str):
    """The decoder's former names (``LlamaConfig``, ``LlamaLM``, ``build_llama``): deprecated, one release."""
    from posenc.models import llama

    if name in llama.RENAMED:
        return getattr(llama, name)
    raise AttributeError(f"module 'posenc.models' has no attribute {name!r}")
