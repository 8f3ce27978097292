"""Attention's fast paths give the same answers as the explicit ones, and bias masks stay (H, T, T)."""

import pytest
import torch

from posenc import attention as attention_module
from posenc.attention import MultiHeadAttention
from posenc.positions import build


def test_square_causal_uses_sdpa_causal_and_matches_explicit_mask(gen):
    mha = MultiHeadAttention(dim=12, num_heads=3).eval()
    x = torch.randn(2, 6, 12, generator=gen)
    fast, _ = mha(x, causal=True)
    explicit, _ = mha(x, causal=True, need_weights=True)  # builds the boolean mask and softmaxes itself
    torch.testing.assert_close(fast, explicit)


@pytest.mark.parametrize("kwargs, batch_dim", [({}, False), ({"causal": True}, False),
                                                ({"key_padding_mask": "pad"}, True)])
def test_alibi_mask_handed_to_sdpa_has_no_batch_dim_unless_padding_needs_it(gen, monkeypatch, kwargs, batch_dim):
    b, h, t = 3, 2, 5
    mha = MultiHeadAttention(dim=8, num_heads=h, position=build("alibi", dim=8, num_heads=h)).eval()
    seen = []
    real = attention_module.F.scaled_dot_product_attention

    def spy(*args, **kw):
        seen.append(kw.get("attn_mask"))
        return real(*args, **kw)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    if kwargs.get("key_padding_mask") == "pad":
        pad = torch.zeros(b, t, dtype=torch.bool)
        pad[0, -1] = True
        kwargs = {"key_padding_mask": pad}
    mha(torch.randn(b, t, 8, generator=gen), **kwargs)
    mask = seen[-1]
    assert mask is not None and mask.shape[-3:] == (h, t, t)
    assert mask.dim() == 4  # a 3-D mask sends CPU SDPA to its slow, batch-expanding path
    assert (mask.shape[0] == b) == batch_dim
