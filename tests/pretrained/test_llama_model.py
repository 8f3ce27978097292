"""Decoder with every registered position scheme: builds, and cached decoding equals the full forward."""

from __future__ import annotations

import pytest
import torch

from posenc.models.decoder import DecoderConfig, build_decoder, next_token
from posenc.positions import names


#: schemes that take an option to run with fewer key heads than query heads (each refuses GQA otherwise,
#: naming this option)
GQA_OPTIONS = {"fope": {"separate_heads": False}}


@pytest.mark.parametrize("position", names())
def test_every_scheme_runs_in_a_gqa_llama_and_caches(position, seed):
    cfg = DecoderConfig(vocab_size=50, dim=32, num_heads=4, num_kv_heads=2, ffn_dim=64, position=position,
                      position_options=GQA_OPTIONS.get(position, {}), max_position_embeddings=64)
    model = build_decoder(cfg).eval()
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = torch.cat([model(ids[:, i:i + 1], cache=cache) for i in range(9)], dim=1)
        # a future token never changes an earlier output
        prefix = model(ids[:, :5])
    assert full.shape == (2, 9, 50)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(prefix, full[:, :5], rtol=1e-4, atol=1e-5)


def test_top_p_keeps_the_smallest_set_reaching_p(gen):
    """Nucleus filter against a direct count: only tokens inside the smallest prefix with mass ≥ p are drawn."""
    logits = torch.randn(1, 20, generator=gen) * 3
    # the top three within 1 of each other: each kept token is drawn often (with logits · 3 alone the second
    # could hold 0.5 % of the mass and go unseen in 300 draws: seed 1545727711)
    logits[0, logits.topk(3).indices[0]] = logits.max() - torch.rand(3, generator=gen)
    probs = logits.softmax(-1)[0]
    sorted_probs, order = probs.sort(descending=True)
    p = float(sorted_probs[:3].sum()) - 1e-6  # exactly the top 3 reach p
    seen = {int(next_token(logits, temperature=1.0, top_p=p, generator=gen)) for _ in range(300)}
    assert seen <= set(order[:3].tolist()) and len(seen) > 1
    seen_k = {int(next_token(logits, temperature=1.0, top_k=2, generator=gen)) for _ in range(300)}
    assert seen_k == set(order[:2].tolist())


def test_bad_configs_are_named():
    with pytest.raises(ValueError, match="multiple of num_kv_heads=3"):
        DecoderConfig(vocab_size=10, dim=32, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="ffn_dim must be a positive integer"):
        DecoderConfig(vocab_size=10, ffn_dim=0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        build_decoder(DecoderConfig(vocab_size=10, dim=8, num_heads=2, ffn_dim=8)).generate(
            torch.tensor([[1]]), 2, temperature=-1)
