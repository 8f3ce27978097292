"""Position remapping (Self-Extend, ReRoPE, Leaky ReRoPE, STRING, DCA) against a naive per-pair reference.

The reference states each method's relative position r(i, j) from its paper (DCA: from the position
tables vLLM builds for Qwen2.5-1M), rotates every query by r(i, j) for every key, takes a full
softmax in float64 — O(T²·Dh), small inputs only — and never touches the schemes' pieces.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.attention import MultiHeadAttention
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.plan import FULL, Window
from posenc.positions import build, remap
from posenc.positions.rotary import apply_rotary_reference

# -- the methods' relative positions, from the papers ------------------------------------------------------


def fdiv(x, n):
    return torch.div(x, n, rounding_mode="floor")


def r_self_extend(g, w):  # Jin et al. 2024, Eq. 4: neighbour below W, grouped ⌊i/G⌋ − ⌊j/G⌋ shifted by W − ⌊W/G⌋
    return lambda i, j: torch.where(i - j < w, i - j, fdiv(i, g) - fdiv(j, g) + (w - w // g)).double()


def r_rerope(w):  # Su 2023: min(d, W)
    return lambda i, j: torch.minimum(i - j, torch.tensor(w)).double()


def r_leaky(w, k):  # Su 2023: W + (d − W)/k past the window
    return lambda i, j: torch.where(i - j < w, (i - j).double(), w + (i - j - w).double() / k)


def r_string(s, w):  # An et al. 2024, Algorithm 1: queries at i − S + W for d ≥ S
    return lambda i, j: torch.where(i - j < s, i - j, i - j - s + w).double()


def r_dca(chunk_size, local_size, length=4096):
    """vLLM DualChunkRotaryEmbedding's tables: k_t = p mod L, q_t = p mod L, qc_t = clamp(p mod L + L, chunk_size),
    the inter-chunk query at qc_t[L − 1]; which table by the chunk index of query and key."""
    n = chunk_size - local_size
    q_t = torch.arange(n)
    qc_t = (torch.arange(n) + n).clamp(max=chunk_size)
    k_t = torch.arange(length) % n

    def r(i, j):
        ci, cj = i // n, j // n
        q_pos = torch.where(ci == cj, q_t[i % n], torch.where(ci == cj + 1, qc_t[i % n], qc_t[n - 1]))
        return (q_pos - k_t[j]).double()
    return r


CASES = {  # name: (options, r for i ≥ j) — windows small enough that a 40-token sequence crosses them
    "self-extend": ({"group_size": 3, "neighbor_window": 5}, r_self_extend(3, 5)),
    "rerope": ({"window": 6}, r_rerope(6)),
    "rerope-leaky": ({"window": 6, "leak_factor": 2.5}, r_leaky(6, 2.5)),
    "string": ({"shift": 9, "local_window": 3}, r_string(9, 3)),
    "dca": ({"chunk_size": 10, "local_size": 3}, r_dca(10, 3)),
}


def both_signs(r):
    return lambda i, j: torch.where(i >= j, r(i, j), -r(j, i))


def naive(r, scheme, q, k, v, q_pos, k_pos, *, scale, allowed=None, sinks=None):
    """Explicit positions per (query, key) pair, full softmax, float64: (out, weights)."""
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, Tk, Dh)
    qi, kj = q_pos.reshape(-1, 1), k_pos.reshape(1, -1)
    rel = r(qi, kj)  # (Tq, Tk)
    theta = scheme.inv_freq().double()
    a = scheme.attention_factor
    angles = rel.unsqueeze(-1) * theta  # (Tq, Tk, P)
    qx = q.unsqueeze(-2).expand(*q.shape[:3], kj.shape[-1], q.shape[-1])  # (B, H, Tq, Tk, Dh)
    rotated = apply_rotary_reference(qx, angles.cos() * a * a, angles.sin() * a * a, pairing=scheme.pairing)
    scores = (rotated * k.unsqueeze(2)).sum(-1) * scale  # (B, H, Tq, Tk)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        sink = sinks.double().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.cat((scores, sink), -1).softmax(-1)[..., :-1]
    else:
        weights = scores.softmax(-1)
    return weights @ v, weights


def qkv(gen, batch=2, heads=4, kv_heads=2, q_len=40, k_len=40, dh=8):
    q = torch.randn(batch, heads, q_len, dh, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, k_len, dh, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, k_len, dh, generator=gen, dtype=torch.float64)
    return q, k, v


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("blocks", [(7, 5), (512, 1024)])
def test_blockwise_equals_the_naive_reference_causal(name, pairing, blocks, gen):
    options, r = CASES[name]
    scheme = build(name, dim=32, num_heads=4, pairing=pairing, base=50.0, **options).double()
    q, k, v = qkv(gen)
    pos = torch.arange(40)
    out, _ = remap.remap_attention(scheme, q, k, v, pos, pos, scale=0.3, causal=True, q_block=blocks[0],
                                   k_block=blocks[1])
    want, _ = naive(r, scheme, q, k, v, pos, pos, scale=0.3, allowed=torch.ones(40, 40, dtype=torch.bool).tril())
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bidirectional_uses_the_mirrored_pieces(name, gen):
    """Without a causal mask, j > i sees r = −r(j, i); also a partial rotary width and an attention factor of 1."""
    options, r = CASES[name]
    scheme = build(name, dim=32, num_heads=4, rotary_dim=4, base=30.0, **options).double()
    q, k, v = qkv(gen, q_len=23, k_len=31)
    q_pos, k_pos = torch.arange(8, 31), torch.arange(31)
    out, _ = remap.remap_attention(scheme, q, k, v, q_pos, k_pos, scale=0.4, q_block=6, k_block=9)
    want, _ = naive(both_signs(r), scheme, q, k, v, q_pos, k_pos, scale=0.4)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pieces_partition_every_causal_pair(name):
    scheme = build(name, dim=32, num_heads=4, **CASES[name][0])
    i, j = torch.arange(200)[None, :, None], torch.arange(200)[None, None, :]
    count = sum(p.region(i, j).long() for p in scheme.pieces())[0]
    lower = torch.ones(200, 200, dtype=torch.bool).tril()
    assert bool((count[lower] == 1).all())
    # and each piece's q_at − k_at is the closed form on its region
    rel = torch.zeros(200, 200, dtype=torch.float64)
    for p in scheme.pieces():
        d = p.q_at(i[..., 0])[0][:, None] - p.k_at(j[:, 0])[0][None, :]
        rel = torch.where(p.region(i, j)[0], d, rel)
    torch.testing.assert_close(rel[lower], CASES[name][1](i[0], j[0])[lower], rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_module_sinks_weights_and_gqa_equal_the_reference(name, gen):
    """Through MultiHeadAttention: projections, grouped heads, sinks and the returned weights."""
    options, r = CASES[name]
    scheme = build(name, dim=32, num_heads=4, **options)
    attn = MultiHeadAttention(dim=32, num_heads=4, num_kv_heads=2, position=scheme, sinks=True).double()
    with torch.no_grad():
        attn.sinks.copy_(torch.randn(4, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 33, 32, generator=gen, dtype=torch.float64)
    out, weights = attn(x, causal=True, need_weights=True)
    plain, _ = attn(x, causal=True)
    q = attn._heads(attn.q_proj(x), 4)
    k, v = attn._heads(attn.k_proj(x), 2), attn._heads(attn.v_proj(x), 2)
    pos = torch.arange(33)
    want, want_w = naive(r, scheme, q, k, v, pos, pos, scale=attn.scale, sinks=attn.sinks,
                         allowed=torch.ones(33, 33, dtype=torch.bool).tril())
    want = attn.out_proj(want.transpose(1, 2).reshape(2, 33, 32))
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(plain, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, want_w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_padding_masks_and_a_sliding_window(name, gen):
    options, r = CASES[name]
    scheme = build(name, dim=32, num_heads=4, **options)
    attn = MultiHeadAttention(dim=32, num_heads=4, position=scheme, window=Window("sliding", 11)).double()
    x = torch.randn(2, 30, 32, generator=gen, dtype=torch.float64)
    pad = torch.zeros(2, 30, dtype=torch.bool)
    pad[1, :4] = True  # left padding on row 1
    q, k, v = attn._heads(attn.q_proj(x), 4), attn._heads(attn.k_proj(x), 4), attn._heads(attn.v_proj(x), 4)
    pos = torch.arange(30)
    window = torch.ones(30, 30, dtype=torch.bool).tril() & ~torch.ones(30, 30, dtype=torch.bool).tril(-11)
    got, _ = attn(x, causal=True, key_padding_mask=pad)
    allowed = window & ~pad[:, None, None, :]
    want, _ = naive(r, scheme, q, k, v, pos, pos, scale=attn.scale, allowed=allowed)
    want = attn.out_proj(want.transpose(1, 2).reshape(2, 30, 32))
    keep = torch.ones(2, 30, dtype=torch.bool)
    keep[1, :4] = False  # padded queries see no key in row 1 at all: undefined, dropped by callers
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("window", [None, Window("sliding", 12)])
def test_cached_decoding_equals_the_full_pass(name, window, seed):
    """A KV cache holds raw keys with their true positions; every step re-rotates them per piece."""
    options = CASES[name][0]
    spec = {"position": name, "position_options": options, **({"window": window.to_dict()} if window else {})}
    cfg = DecoderConfig(vocab_size=40, dim=32, num_heads=4, num_kv_heads=2, ffn_dim=48, num_layers=2,
                      position=name, position_options=options, layer_plan=[spec, {"position": "rope"}])
    model = build_decoder(cfg).double().eval()
    ids = torch.randint(0, 40, (2, 37))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        steps = [model(ids[:, :13], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(13, 30)]
        steps.append(model(ids[:, 30:], cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
    if window is not None:  # the windowed layer's cache keeps only what its window sees
        assert cache[0].stored <= window.size + 7


def test_neutral_settings_are_plain_rope(gen):
    """G = 1, a window past the sequence, k = 1: every method is RoPE itself."""
    x = torch.randn(1, 25, 32, generator=gen, dtype=torch.float64)
    rope = MultiHeadAttention(dim=32, num_heads=4, position=build("rope", dim=32, num_heads=4)).double()
    want, _ = rope(x, causal=True)
    for name, opts in [("self-extend", {"group_size": 1, "neighbor_window": 4}), ("rerope", {"window": 25}),
                       ("rerope-leaky", {"window": 3, "leak_factor": 1.0}), ("string", {"shift": 25, "local_window": 2}),
                       ("dca", {"chunk_size": 40, "local_size": 10})]:
        attn = MultiHeadAttention(dim=32, num_heads=4, position=build(name, dim=32, num_heads=4, **opts)).double()
        attn.load_state_dict(rope.state_dict())
        got, _ = attn(x, causal=True)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=name)


def test_no_block_of_logits_is_larger_than_the_blocks(gen, monkeypatch):
    """A 3,000-token pass never forms a (T, T) product: every matmul output is at most one block."""
    scheme = build("self-extend", dim=16, num_heads=2, group_size=4, neighbor_window=64)
    q, k, v = (torch.randn(1, 2, 3000, 8, generator=gen) for _ in range(3))
    largest = []
    original = torch.Tensor.__matmul__

    def spy(a, b):
        out = original(a, b)
        largest.append(out.numel())
        return out
    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    pos = torch.arange(3000)
    remap.remap_attention(scheme, q, k, v, pos, pos, scale=0.3, causal=True, q_block=256, k_block=512)
    monkeypatch.undo()
    assert max(largest) <= 2 * 256 * 512 < 3000 * 3000 // 10


def test_largest_relative_positions_follow_the_formulas():
    se = build("self-extend", dim=16, num_heads=2, group_size=4, neighbor_window=64)
    assert se.largest_relative_position(1000) == (999 // 4) - 0 + 64 - 16
    assert build("rerope", dim=16, num_heads=2, window=50).largest_relative_position(1000) == 50
    leaky = build("rerope-leaky", dim=16, num_heads=2, window=50, leak_factor=4.0)
    assert leaky.largest_relative_position(1000) == pytest.approx(50 + 949 / 4)
    dca = build("dca", dim=16, num_heads=2, chunk_size=100, local_size=10)
    assert dca.largest_relative_position(5000) <= 100
    string = build("string", dim=16, num_heads=2, shift=300, local_window=20)
    assert string.largest_relative_position(1000) == max(299, 999 - 300 + 20)


def test_similarity_is_the_rotated_dot_product_at_the_remapped_position():
    scheme = build("string", dim=16, num_heads=2, shift=7, local_window=2, base=20.0).double()
    i, j = torch.arange(0, 30), torch.arange(5, 25)
    sim = scheme.similarity(i, j)
    ones = torch.ones(1, 1, 1, 8, dtype=torch.float64)
    rel = both_signs(r_string(7, 2))
    for a in (0, 9, 29):
        for b in (5, 14, 24):
            r = rel(torch.tensor(a), torch.tensor(b))
            rotated = scheme.rotate_at(ones, r.reshape(1, 1))  # q at r, k at 0
            assert float(sim[a, b - 5]) == pytest.approx(float((rotated * ones).sum()), abs=1e-12)


@pytest.mark.parametrize("name, option, value, fragment", [
    ("self-extend", "group_size", 0, "group_size=0"), ("rerope", "window", 2**60, "window="),
    ("rerope-leaky", "leak_factor", 0.5, "leak_factor=0.5"), ("string", "local_window", 9, "below shift"),
    ("dca", "local_size", 4096, "below chunk_size"), ("string", "shift", math.nan, "shift="),
])
def test_bad_options_are_refused_by_name(name, option, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        build(name, dim=16, num_heads=2, **({"shift": 9} if option == "local_window" else {}), **{option: value})


# -- half precision: the fused CPU kernel, one call per piece and block ----------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("q_block", [7, 512])
@pytest.mark.parametrize("layout", ["padded", "sliding", "full"])
def test_half_precision_runs_fused_and_equals_the_reference(name, dtype, q_block, layout, gen, monkeypatch):
    """bfloat16 / float16 causal attention takes ``_remap_flash`` (each piece's pairs in fused calls, merged
    by log-sum-exp), GQA and a query offset into longer keys (a continued cache) included, with padding and a
    sliding window (masked calls over each piece's slice of keys), or without padding (consecutive positions:
    one unmasked call over the keys every query of a block sees, masked ones only over the ragged edges):
    equal to the float64 reference up to half-precision rounding, and as close to it as the exact float32
    loop run on the same rounded inputs."""
    options, r = CASES[name]
    scheme = build(name, dim=32, num_heads=4, base=50.0, **options)
    q, k, v = qkv(gen, q_len=25, k_len=40)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    k_pos, q_pos = torch.arange(40) + 3, torch.arange(15, 40) + 3
    window = FULL if layout == "full" else Window("sliding", 17)
    pad = None
    if layout == "padded":
        pad = torch.ones(2, 1, 1, 40, dtype=torch.bool)
        pad[1, ..., :3] = False
    calls, real = [], remap._remap_flash
    monkeypatch.setattr(remap, "_remap_flash", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    spans = _spy_on_calls(monkeypatch)
    out, _ = remap.remap_attention(scheme, q, k, v, q_pos, k_pos, scale=0.3, causal=True, q_index=15,
                                   window=window, allowed=pad, q_block=q_block)
    assert calls and out.dtype == dtype
    visible = k_pos[None] <= q_pos[:, None]  # (Tq, Tk)
    if not window.full:
        visible = visible & (k_pos[None] > q_pos[:, None] - 17)
    allowed = visible if pad is None else visible & pad
    want, _ = naive(r, scheme.double(), q, k, v, q_pos, k_pos, scale=0.3, allowed=allowed)
    loop, _ = remap.remap_attention(scheme.float(), q.float(), k.float(), v.float(), q_pos, k_pos, scale=0.3,
                                    causal=True, q_index=15, window=window, allowed=pad)
    err, loop_err = (out.double() - want).abs().max(), (loop.double() - want).abs().max()
    unit = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    assert err <= 8 * unit * float(want.abs().max()), (err, loop_err)
    assert len(calls) == 1
    assert bool(spans) == (pad is None)  # consecutive positions without padding: the calls from the spans


def test_half_precision_unmasked_calls_cover_the_long_range(gen, monkeypatch):
    """At length, the keys a block's queries all see are read by calls without a mask: per block and piece the
    masked columns are the two ragged edges, at most a block wide each, not the whole key range (what makes
    long prompts cheap)."""
    scheme, r = build("rerope", dim=32, num_heads=4, base=50.0, window=100), r_rerope(100)
    q, k, v = qkv(gen, q_len=300, k_len=300)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    pos = torch.arange(300)
    spans = _spy_on_calls(monkeypatch)
    out, _ = remap.remap_attention(scheme, q, k, v, pos, pos, scale=0.3, causal=True, q_block=32)
    masked = [sum(b - a for a, b, m in block if m) for block in spans]  # per block and piece
    unmasked = sum(b - a for block in spans for a, b, m in block if not m)
    assert len(spans) == 2 * 10 and max(masked) <= 2 * 31 and unmasked > sum(masked)
    want, _ = naive(r, scheme.double(), q, k, v, pos, pos, scale=0.3, allowed=pos[None] <= pos[:, None])
    assert (out.double() - want).abs().max() <= 8 * 2.0**-8 * float(want.abs().max())


def _spy_on_calls(monkeypatch) -> list:
    """The fused calls ``_remap_flash`` plans per block and piece (``remap._calls``' answers), recorded as made."""
    spans, real = [], remap._calls
    monkeypatch.setattr(remap, "_calls", lambda *a: spans.append(real(*a)) or spans[-1])
    return spans


def test_half_precision_piece_boundaries_are_not_lost(gen):
    """Every pair falls in exactly one piece's call: with all values equal to one, each output is one (the
    weights over the union of the pieces' regions sum to one), and a query that sees no key gets the mean."""
    options, _ = CASES["self-extend"]
    scheme = build("self-extend", dim=32, num_heads=4, **options)
    q, k, _ = qkv(gen, q_len=40, k_len=40)
    v = torch.ones(2, 2, 40, 8, dtype=torch.bfloat16)
    allowed = torch.ones(2, 1, 40, 40, dtype=torch.bool)
    allowed[1, :, 5] = False  # row 5 of sequence 1 sees nothing
    out, _ = remap.remap_attention(scheme, q.bfloat16(), k.bfloat16(), v, torch.arange(40), torch.arange(40),
                                   scale=0.3, causal=True, allowed=allowed, q_block=8)
    assert torch.equal(out, torch.ones_like(out))
