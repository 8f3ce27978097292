"""A decoder-only language model (GPT-style), run from finished parts.

Build one from a config with ``posenc.models.build_decoder_only``::

    from posenc.models import ModelConfig, build_decoder_only
    lm = build_decoder_only(ModelConfig(vocab_size=100, dim=64, num_heads=4, position="rope"))
    out = lm.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=5)   # (1, 8)

Shape legend: B batch, T sequence length, D width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from posenc.embedding import OutputHead, count_parameters
from posenc.models.config import ModelConfig
from posenc.models.parts import DecoderLayer, InputEmbedding, LayerCache, describe_scheme, greedy, positions_for
from posenc.validation import check_batch_positions, check_cache, check_ids


class DecoderOnlyLM(nn.Module):
    """Input embedding → causal decoder layers → final norm → output head.

    Args:
        embed: ids → vectors, with the model's position scheme (reached as ``position``).
        layers: decoder layers without cross-attention.
        norm: the final norm (``nn.Identity`` for a post-norm stack).
        head: the output head (tied to ``embed.token`` or its own matrix).
        config: the config the parts were built from, when there is one.
    """

    def __init__(
        self, *, embed: InputEmbedding, layers: Sequence[DecoderLayer], norm: nn.Module, head: OutputHead,
        config: ModelConfig | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.position = embed.position
        self.embed = embed
        self.layers = nn.ModuleList(layers)
        self.norm = norm
        self.head = head

    def hidden(
        self, ids: Tensor, *, positions: Tensor | None = None, cache: list[LayerCache] | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """ids (B, T) → hidden states (B, T, D) after the final norm (what ``head`` reads).

        With ``cache``, ids holds only the new tokens, their positions continue
        after the cached ones, and ``key_padding_mask`` covers every key so far.
        """
        ids = check_ids(ids)
        check_batch_positions(positions, ids.shape[0])
        check_cache(cache, len(self.layers))
        offset = cache[0].self_attn.length if cache else 0
        positions = positions_for(positions, ids.shape[1], offset, ids.device)
        x = self.embed(ids, positions)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions=positions, key_padding_mask=key_padding_mask,
                      cache=None if cache is None else cache[i])
        return self.norm(x)

    def forward(
        self, ids: Tensor, *, positions: Tensor | None = None, key_padding_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        """ids (B, T) → logits (B, T, V); see ``hidden`` for the cache."""
        return self.head(self.hidden(ids, positions=positions, cache=cache, key_padding_mask=key_padding_mask))

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.layers]

    @torch.no_grad()
    def generate(self, prompt: Tensor, *, max_new_tokens: int, eos_id: int | None = None) -> Tensor:
        """Greedy continuation with the KV cache; each new token gets its true position."""
        prompt = check_ids(prompt, "prompt")
        return greedy(lambda ids, cache: self(ids, cache=cache), prompt, self.new_cache(), max_new_tokens, eos_id)

    def describe(self) -> dict[str, Any]:
        """Plain data saying exactly what was built."""
        return {
            "kind": "decoder-only",
            "config": None if self.config is None else self.config.to_dict(),
            "position": describe_scheme(self.position),
            "embeddings": {"tied_output": self.head.tied, "scaled_by": self.embed.token.multiplier},
            "parameters": count_parameters(self),
        }
