"""LongRoPE's short/long switch at L₀ under a KV cache: which posenc mode is which HF decoding run.

HF's rotary module picks short or long factors per *call* from max(position_ids) + 1, so what a cached
key was rotated with depends on the call that produced it. posenc's two modes are pure functions of the
position; this test drives HF's own module through a cached generation and says which mode it equals:

* prompt of ≤ L₀ tokens, then one token per step past L₀ → ``max_seq_len=None`` (per position): keys
  below L₀ keep the short factors, every later token gets the long ones;
* prompt longer than L₀ → ``max_seq_len=L`` for any L > L₀ (fixed, long everywhere), and the per-position
  mode then differs from HF on the prompt's first L₀ positions.
"""

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0", reason="HF transformers >= 5 is the reference here")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from posenc.positions import build  # noqa: E402


def randint(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def setup(gen):
    head_dim, original = 2 * randint(gen, 2, 16), randint(gen, 8, 32)
    pairs = head_dim // 2
    short = (1 + torch.rand(pairs, generator=gen, dtype=torch.float64)).tolist()
    long = (1 + 30 * torch.rand(pairs, generator=gen, dtype=torch.float64)).tolist()
    factor = 4.0
    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=int(factor * original),
                         rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short,
                                          "long_factor": long, "factor": factor,
                                          "original_max_position_embeddings": original})
    options = {"short_factor": short, "long_factor": long, "factor": factor, "original_max_len": original}
    return head_dim, original, LlamaRotaryEmbedding(config), options


def hf_generation(rope, head_dim, prompt, total):
    """cos HF computes for each token of a cached run: the prompt in one call, then one token per call."""
    x = torch.zeros(1, 1, head_dim)
    calls = [torch.arange(prompt)[None]] + [torch.tensor([[p]]) for p in range(prompt, total)]
    return torch.cat([rope(x, ids)[0][0] for ids in calls])  # (total, Dh): cat(cos, cos) × attention factor


def posenc_cos(head_dim, options, total):
    scheme = build("rope-longrope", dim=2 * head_dim, num_heads=2, pairing="half", **options)
    cos, _ = scheme.cos_sin(torch.arange(total))
    return torch.cat((cos, cos), -1), scheme


def test_short_prompt_then_decoding_is_the_per_position_mode(gen):
    head_dim, original, rope, options = setup(gen)
    total = 3 * original
    ref = hf_generation(rope, head_dim, randint(gen, 1, original), total)
    got, scheme = posenc_cos(head_dim, options | {"max_seq_len": None}, total)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)  # HF's angles are float32
    # and the cache can say which factors each key was rotated with
    used = scheme.frequencies_used(torch.arange(total))
    assert torch.equal(used[:original], scheme.inv_freq_at(original).expand(original, -1))
    assert torch.equal(used[original:], scheme.inv_freq_at(original + 1).expand(total - original, -1))


def test_long_prompt_is_the_fixed_mode(gen):
    head_dim, original, rope, options = setup(gen)
    total, prompt = 3 * original, randint(gen, original + 1, 2 * original)
    ref = hf_generation(rope, head_dim, prompt, total)
    got, _ = posenc_cos(head_dim, options | {"max_seq_len": prompt}, total)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    # the per-position mode is not this run: HF rotated the prompt's first L₀ keys with the long factors
    per_position, _ = posenc_cos(head_dim, options | {"max_seq_len": None}, total)
    assert not torch.allclose(per_position[:original], ref[:original], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(per_position[original:], ref[original:], rtol=1e-4, atol=1e-4)


def test_same_tokens_two_hf_runs_two_rotations(gen):
    """The HF behaviour the modes pin down: one sequence, two prompt lengths, two rotations of key 0 … L₀ − 1."""
    head_dim, original, rope, _ = setup(gen)
    total = 2 * original
    a = hf_generation(rope, head_dim, original, total)
    b = hf_generation(rope, head_dim, original + 1, total)
    assert not torch.allclose(a[1:original], b[1:original], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(a[original + 1:], b[original + 1:])
