"""M-RoPE: packed (t, h, w) triples, text positions are RoPE bit for bit, and HF Qwen2-VL / Qwen3-VL on random triples."""

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.positions import RoPE, build, pack_positions, unpack_positions
from posenc.positions.mrope import AXIS_MAX, axis_of_pair


def randint(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def random_triples(gen, batch, t, hi=5000):
    """(B, 3, T) triples: some text tokens (p, p, p), the rest arbitrary."""
    triples = torch.randint(0, hi, (batch, 3, t), generator=gen)
    text = torch.rand(batch, t, generator=gen) < 0.3
    triples[:, 1:][text[:, None].expand(-1, 2, -1)] = triples[:, 0][text].repeat(2)
    return triples


def test_pack_round_trip_and_text_positions_stay_plain(gen):
    triples = random_triples(gen, 2, 20, hi=AXIS_MAX + 1)
    packed = pack_positions(triples)
    assert packed.shape == (2, 20) and packed.dtype == torch.long
    assert torch.equal(unpack_positions(packed), triples)
    equal = (triples[:, 0] == triples[:, 1]) & (triples[:, 1] == triples[:, 2])
    assert torch.equal(packed[equal], triples[:, 0][equal])  # a text token's position is its plain position
    p = torch.randint(0, 2**62, (7,), generator=gen)
    assert torch.equal(unpack_positions(p), p[None].expand(3, -1))
    assert torch.equal(pack_positions(p[None].expand(3, -1)), p)


def test_text_positions_are_rope_exactly(gen):
    """Plain positions (t = h = w) through M-RoPE equal RoPE bit for bit, either layout."""
    head_dim = 2 * randint(gen, 3, 64)
    for layout in ("sections", "interleaved"):
        mrope = build("mrope", dim=head_dim, num_heads=1, layout=layout).double()
        rope = RoPE(head_dim=head_dim).double()
        q = torch.randn(2, 1, 9, head_dim, generator=gen, dtype=torch.float64)
        pos = torch.randint(0, 10**6, (2, 9), generator=gen)
        assert torch.equal(mrope.rotate_query(q, pos), rope.rotate_query(q, pos))
        assert torch.equal(mrope.angles(pos), rope.angles(pos))


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_matches_hf_on_random_triples(family, gen):
    pytest.importorskip("transformers", minversion="5.0")
    from transformers import Qwen2VLTextConfig, Qwen3VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding, apply_rotary_pos_emb
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding
    for _ in range(10):
        pairs = randint(gen, 3, 64)
        head_dim = 2 * pairs
        layout = "sections" if family == "qwen2_vl" else "interleaved"
        if layout == "sections":
            cut = sorted(torch.randint(0, pairs + 1, (2,), generator=gen).tolist())
            sections = [cut[0], cut[1] - cut[0], pairs - cut[1]]
        else:
            s_h, s_w = randint(gen, 0, (pairs + 1) // 3), randint(gen, 0, (pairs + 2) // 3)
            sections = [pairs - s_h - s_w, s_h, s_w]
        base = 10 ** (2 + 4 * float(torch.rand((), generator=gen)))
        params = {"rope_type": "default", "rope_theta": base, "mrope_section": sections}
        if family == "qwen2_vl":
            hf = Qwen2VLRotaryEmbedding(Qwen2VLTextConfig(hidden_size=2 * head_dim, num_attention_heads=2,
                                                          rope_parameters=params))
        else:
            hf = Qwen3VLTextRotaryEmbedding(Qwen3VLTextConfig(hidden_size=2 * head_dim, num_attention_heads=2,
                                                              head_dim=head_dim, rope_parameters=params))
        triples = random_triples(gen, 2, 11, hi=512)
        q = torch.randn(2, 3, 11, head_dim, generator=gen)
        k = torch.randn(2, 3, 11, head_dim, generator=gen)
        cos, sin = hf(q, triples.transpose(0, 1))  # HF takes (3, B, T)
        q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
        scheme = build("mrope", dim=3 * head_dim, num_heads=3, base=base, sections=sections, layout=layout)
        pos = pack_positions(triples)
        q_got, k_got = scheme.rotate(q, k, pos, pos)
        bound = 4 * 512 * 2.0**-24 * float(torch.cat([q, k]).abs().max())  # HF's float32 angles
        torch.testing.assert_close(q_got, q_ref, atol=max(bound, 1e-5), rtol=1e-4)
        torch.testing.assert_close(k_got, k_ref, atol=max(bound, 1e-5), rtol=1e-4)


def test_qwen_default_sections_and_layouts():
    assert build("mrope", dim=128, num_heads=1).sections == [16, 24, 24]
    assert build("mrope", dim=128, num_heads=1, layout="interleaved").sections == [24, 20, 20]
    axis = axis_of_pair([24, 20, 20], "interleaved")
    assert axis[:6].tolist() == [0, 1, 2, 0, 1, 2] and axis[60:].tolist() == [0, 0, 0, 0]
    assert [int((axis == a).sum()) for a in range(3)] == [24, 20, 20]


def test_packed_positions_run_through_attention_with_a_cache(gen):
    """The triples ride in ordinary (B, T) positions: cached decoding equals the full forward, nothing special."""
    scheme = build("mrope", dim=32, num_heads=4)
    attn = MultiHeadAttention(dim=32, num_heads=4, position=scheme).double().eval()
    x = torch.randn(2, 8, 32, generator=gen, dtype=torch.float64)
    pos = pack_positions(random_triples(gen, 2, 8, hi=300))
    full, _ = attn(x, q_pos=pos, causal=True)
    from posenc.attention import KVCache
    cache = KVCache()
    steps = [attn(x[:, :3], q_pos=pos[:, :3], causal=True, cache=cache)[0]]
    steps += [attn(x[:, i:i + 1], q_pos=pos[:, i:i + 1], causal=True, cache=cache)[0] for i in range(3, 8)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    # an image patch is not its text position: the triple matters
    plain, _ = attn(x, q_pos=unpack_positions(pos)[:, 0], causal=True)
    assert not torch.allclose(plain, full)


@pytest.mark.parametrize(("options", "match"), [
    ({"sections": [1, 2, 3]}, r"summing to rotary_dim/2 = 4"),
    ({"sections": [1.5, 1.5, 1]}, r"sections\[0\]=1.5 must be an integer"),
    ({"layout": "diagonal"}, "layout must be one of"),
    ({"layout": "interleaved", "sections": [0, 2, 2]}, "3·S_h − 1"),
])
def test_bad_sections(options, match):
    with pytest.raises(ValueError, match=match):
        build("mrope", dim=8, num_heads=1, **options)


def test_pack_errors():
    with pytest.raises(ValueError, match=r"shape \(3, T\) or \(B, 3, T\)"):
        pack_positions(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="at most 1048575"):
        pack_positions(torch.tensor([[0], [1], [2**20]]))
    with pytest.raises(TypeError, match="integer tensor"):
        pack_positions(torch.zeros(3, 4))
