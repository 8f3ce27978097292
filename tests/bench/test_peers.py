"""Each peer form, written from its library's documented semantics, computes what posenc computes."""

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.bench import peers
from posenc.positions import RoPE, rotary_kernel
from posenc.positions.absolute import sinusoid_table


@pytest.fixture(autouse=True)
def kernel_at_any_size(monkeypatch):
    monkeypatch.setattr(rotary_kernel, "SMALL_NUMEL", 0)


def _x(gen, dh=16, dtype=torch.float32):
    return torch.randn(2, 3, 11, dh, generator=gen).to(dtype)


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_hf_form_equals_posenc_half(gen, rotary_dim):
    rope = RoPE(head_dim=16, pairing="half", rotary_dim=rotary_dim)
    x, pos = _x(gen), torch.arange(11) + int(torch.randint(0, 5000, (1,), generator=gen))
    cos, sin = rope.cos_sin(pos)
    torch.testing.assert_close(peers.hf_rope(x, *peers.hf_tables(cos, sin, x.dtype)), rope.rotate_one(x, pos))


def test_torchtune_and_meta_forms_equal_posenc_interleaved(gen):
    rope = RoPE(head_dim=16, pairing="interleaved")
    x, pos = _x(gen), torch.arange(11) + int(torch.randint(0, 5000, (1,), generator=gen))
    cos, sin = rope.cos_sin(pos)
    want = rope.rotate_one(x, pos)
    torch.testing.assert_close(peers.torchtune_rope(x, peers.torchtune_cache(cos, sin)), want)
    torch.testing.assert_close(peers.meta_rope(x, peers.meta_freqs_cis(cos, sin)), want)


def test_peer_float32_angles_lose_accuracy_far_out():
    """What the angles suite reports: float32-formed angles drift; posenc's float64-formed ones do not."""
    rope = RoPE(head_dim=64)
    pos = torch.tensor([10**6])
    exact = (pos.double()[:, None] * rope.inv_freq()).cos()
    assert (peers.float32_angles(pos, 64).cos().double() - exact).abs().max() > 1e-3
    assert (rope.cos_sin(pos)[0].double() - exact).abs().max() < 1e-7


def test_naive_attention_equals_sdpa(gen):
    q, k, v = (torch.randn(2, 3, 7, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(peers.naive_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(peers.naive_attention(q, k, v, causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_torch_transformer_peer_adds_posencs_sinusoid_and_ties_head(gen):
    model = peers.TorchTransformerSeq2Seq(vocab_size=20, dim=8, num_heads=2, num_layers=1, ffn_dim=16,
                                          dropout=0.0, max_len=32)
    ids = torch.randint(0, 20, (2, 5), generator=gen)
    want = model.tgt_embed(ids) * math.sqrt(8) + sinusoid_table(torch.arange(5), 8).float()
    torch.testing.assert_close(model.embed(model.tgt_embed, ids), want)
    out = model(ids, ids)
    assert out.shape == (2, 5, 20)
    # causal: a later target token never changes an earlier output
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 20
    torch.testing.assert_close(model(ids, changed)[:, :-1], out[:, :-1])
