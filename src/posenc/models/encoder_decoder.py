"""The encoder–decoder Transformer (Vaswani et al., 2017), run from finished parts.

Build one from a config with ``posenc.models.build_encoder_decoder`` (a
``ModelConfig``: the models posenc trains) or ``posenc.models.seq2seq.build_seq2seq``
(a ``Seq2SeqConfig``: T5, Marian and Whisper checkpoints); the class itself only
runs its parts in order. The source side is token ids through an
``InputEmbedding`` or, for speech, log-mel features through an ``AudioFrontEnd``.

Shape legend: B batch, S source length, T target length, D width, V vocabulary,
M mel bins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from posenc.embedding import OutputHead, count_parameters
from posenc.models.config import JSONConfig
from posenc.models.parts import (
    AudioFrontEnd,
    DecoderLayer,
    EncoderLayer,
    InputEmbedding,
    LayerCache,
    describe_scheme,
    greedy,
    positions_for,
)
from posenc.validation import check_batch_positions, check_cache, check_ids


class EncoderDecoder(nn.Module):
    """Encoder stack → memory; decoder stack attending to it → output head.

    The encoder and the decoder each hold their own position scheme (as T5 has
    a bias per stack), reached through their input embeddings; cross-attention
    has none. One scheme instance serves every layer of its stack (T5 computes
    its bias in the first layer and shares it), so its parameters are one
    tensor under several names (``tied_names``).

    Args:
        src_embed: source → vectors with the encoder's position scheme: ids through an
            ``InputEmbedding``, or log-mel features through an ``AudioFrontEnd`` (Whisper).
        tgt_embed: target ids → vectors, with the decoder's position scheme.
        encoder: encoder layers.
        decoder: decoder layers with cross-attention.
        encoder_norm, decoder_norm: final norms (``nn.Identity`` for post-norm stacks).
        head: the output head over the target vocabulary.
        config: the config the parts were built from, when there is one (saved
            with checkpoints, reported by ``describe``).
    """

    def __init__(
        self, *, src_embed: InputEmbedding | AudioFrontEnd, tgt_embed: InputEmbedding,
        encoder: Sequence[EncoderLayer], decoder: Sequence[DecoderLayer], encoder_norm: nn.Module,
        decoder_norm: nn.Module, head: OutputHead, config: JSONConfig | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.src_position = src_embed.position
        self.tgt_position = tgt_embed.position
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.encoder = nn.ModuleList(encoder)
        self.decoder = nn.ModuleList(decoder)
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        self.head = head

    def encode(
        self, src: Tensor, *, src_pos: Tensor | None = None, src_padding_mask: Tensor | None = None,
        src_valid_lens: Tensor | None = None,
    ) -> Tensor:
        """Source ids (B, S) — or log-mel features (B, M, 2·S) with an audio front end — → memory (B, S, D)."""
        src, length = self.src_embed.prepare(src, "src")
        check_batch_positions(src_pos, src.shape[0], "src_pos")
        positions = positions_for(src_pos, length, 0, src.device)
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
        tgt = check_ids(tgt, "tgt")
        check_batch_positions(tgt_pos, tgt.shape[0], "tgt_pos")
        check_cache(cache, len(self.decoder))
        offset = cache[0].self_attn.length if cache else 0
        positions = positions_for(tgt_pos, tgt.shape[1], offset, tgt.device)
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
        """Greedy decoding with the KV cache; returns (B, 1 + generated) target ids starting with BOS.

        ``bos_id``: the decoder's first token (T5 and Marian: ``decoder_start_token_id``, the pad id).
        """
        memory = self.encode(src, src_padding_mask=src_padding_mask)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        return greedy(lambda ids, cache: self.decode(ids, memory, memory_padding_mask=src_padding_mask, cache=cache),
                      out, self.new_cache(), max_new_tokens, eos_id)

    def tied_names(self) -> dict[str, str]:
        """Every parameter name that is another's tensor again → the name it is first registered under.

        A scheme shared by a stack's layers (T5's bias table, a learned table held by the
        input and by each attention), shared encoder/decoder tables and a tied head; a
        loader fills the first name (``posenc.pretrained.stacks.load_named``) and the tie does the rest.
        """
        first: dict[int, str] = {}
        tied: dict[str, str] = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            if id(p) in first:
                tied[name] = first[id(p)]
            else:
                first[id(p)] = name
        return tied

    def describe(self) -> dict[str, Any]:
        """Plain data saying exactly what was built: the config, each stack's position scheme, the tables."""
        src_token = getattr(self.src_embed, "token", None)
        return {
            "kind": "encoder-decoder",
            "config": None if self.config is None else self.config.to_dict(),
            "position": {"encoder": describe_scheme(self.src_position), "decoder": describe_scheme(self.tgt_position),
                         "cross_attention": "none"},
            "source": "token ids" if src_token is not None else f"log-mel features ({self.src_embed.extra_repr()})",
            "embeddings": {"shared": src_token is self.tgt_embed.token, "tied_output": self.head.tied,
                           "scaled_by": self.tgt_embed.token.multiplier},
            "parameters": count_parameters(self),
        }
