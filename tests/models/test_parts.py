"""Layers wire the parts they are given: a reference forward from the same parts, other norms and FFNs."""

import pytest
import torch
from torch import nn

from posenc.attention import MultiHeadAttention
from posenc.models.parts import DecoderLayer, EncoderLayer, FeedForward, Residual, layer_norm
from posenc.positions import build


class GatedFFN(nn.Module):
    """A stand-in for a different feed-forward (SwiGLU-shaped): the layer must not care which it holds."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(dim, hidden), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_is_the_residual_formula_over_its_parts(norm_first, gen):
    dim, heads = 16, 4
    rope = build("rope", dim=dim, num_heads=heads)
    attn = MultiHeadAttention(dim=dim, num_heads=heads, position=rope).double()
    ffn = GatedFFN(dim, 24).double()
    layer = DecoderLayer(self_attn=attn, ffn=ffn, norm=lambda: nn.RMSNorm(dim, dtype=torch.float64),
                         norm_first=norm_first).eval()
    x = torch.randn(2, 5, dim, generator=gen, dtype=torch.float64)
    pos = torch.arange(5)
    n1, n2 = layer.self_res.norm, layer.ffn_res.norm
    assert isinstance(n1, nn.RMSNorm) and n1 is not n2  # one fresh norm per branch
    with torch.no_grad():
        if norm_first:
            h = x + attn(n1(x), q_pos=pos, causal=True)[0]
            want = h + ffn(n2(h))
        else:
            h = n1(x + attn(x, q_pos=pos, causal=True)[0])
            want = n2(h + ffn(h))
        torch.testing.assert_close(layer(x, positions=pos), want)


def test_encoder_layer_is_the_residual_formula_over_its_parts(gen):
    dim, heads = 12, 3
    attn = MultiHeadAttention(dim=dim, num_heads=heads, position=build("alibi", dim=dim, num_heads=heads)).double()
    ffn = FeedForward(dim=dim, hidden=20, activation="gelu").double()
    layer = EncoderLayer(attn=attn, ffn=ffn, norm=lambda: nn.LayerNorm(dim, dtype=torch.float64)).eval()
    x = torch.randn(3, 4, dim, generator=gen, dtype=torch.float64)
    pos = torch.arange(4)
    with torch.no_grad():
        h = x + attn(layer.attn_res.norm(x), q_pos=pos)[0]
        want = h + ffn(layer.ffn_res.norm(h))
        got, weights = layer(x, positions=pos, need_weights=True)
    torch.testing.assert_close(got, want)
    assert weights.shape == (3, heads, 4, 4)


def test_decoder_layer_with_cross_attention_needs_memory():
    dim = 8
    layer = DecoderLayer(self_attn=MultiHeadAttention(dim=dim, num_heads=2), ffn=FeedForward(dim=dim, hidden=8),
                         norm=layer_norm(dim), cross_attn=MultiHeadAttention(dim=dim, num_heads=2))
    with pytest.raises(ValueError, match="pass the encoder output as memory"):
        layer(torch.randn(1, 3, dim), positions=torch.arange(3))


def test_residual_post_norm_normalises_the_sum(gen):
    res = Residual(norm=nn.LayerNorm(6, elementwise_affine=False), norm_first=False)
    x = torch.randn(2, 3, 6, generator=gen)
    y, extra = res(x, lambda h: (2 * h, "kept"))
    torch.testing.assert_close(y, nn.functional.layer_norm(3 * x, (6,)))
    assert extra == "kept"


def test_unknown_activation_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"\['gelu', 'relu'\], got 'swish'"):
        FeedForward(dim=4, hidden=8, activation="swish")
