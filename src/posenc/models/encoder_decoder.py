"""The encoder–decoder Transformer (Vaswani et al., 2017), run from finished parts.

Build one from a config with ``posenc.models.build_encoder_decoder``; the class
itself only runs its parts in order.

Shape legend: B batch, S source length, T target length, D width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from posenc.embedding import OutputHead, count_parameters
from posenc.models.config import ModelConfig
from posenc.models.parts import (
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
    has none.

    Args:
        src_embed, tgt_embed: ids → vectors, each with its stack's position scheme.
        encoder: encoder layers.
        decoder: decoder layers with cross-attention.
        encoder_norm, decoder_norm: final norms (``nn.Identity`` for post-norm stacks).
        head: the output head over the target vocabulary.
        config: the config the parts were built from, when there is one (saved
            with checkpoints, reported by ``describe``).
    """

    def __init__(
        self, *, src_embed: InputEmbedding, tgt_embed: InputEmbedding, encoder: Sequence[EncoderLayer],
        decoder: Sequence[DecoderLayer], encoder_norm: nn.Module, decoder_norm: nn.Module, head: OutputHead,
        config: ModelConfig | None = None,
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
        """Source ids (B, S) → memory (B, S, D)."""
        src = check_ids(src, "src")
        check_batch_positions(src_pos, src.shape[0], "src_pos")
        positions = positions_for(src_pos, src.shape[1], 0, src.device)
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
        """Greedy decoding with the KV cache; returns (B, 1 + generated) target ids starting with BOS."""
        src = check_ids(src, "src")
        memory = self.encode(src, src_padding_mask=src_padding_mask)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        return greedy(lambda ids, cache: self.decode(ids, memory, memory_padding_mask=src_padding_mask, cache=cache),
                      out, self.new_cache(), max_new_tokens, eos_id)

    def describe(self) -> dict[str, Any]:
        """Plain data saying exactly what was built."""
        return {
            "kind": "encoder-decoder",
            "config": None if self.config is None else self.config.to_dict(),
            "position": {"encoder": describe_scheme(self.src_position), "decoder": describe_scheme(self.tgt_position),
                         "cross_attention": "none"},
            "embeddings": {"shared": self.src_embed.token is self.tgt_embed.token, "tied_output": self.head.tied,
                           "scaled_by": self.src_embed.token.multiplier},
            "parameters": count_parameters(self),
        }
