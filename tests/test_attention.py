import pytest
import torch
from torch import nn

from posenc.attention import KVCache, MultiHeadAttention, build_mask
from posenc.positions import build


def copy_into_torch_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.dim, ours.num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_equals_torch_mha_with_padding_and_causal(gen, need_weights):
    heads = int(torch.randint(1, 5, (1,), generator=gen))
    dim = heads * 2 * int(torch.randint(1, 9, (1,), generator=gen))
    b, t = 3, int(torch.randint(2, 12, (1,), generator=gen))
    ours = MultiHeadAttention(dim=dim, num_heads=heads).double()
    ref = copy_into_torch_mha(ours)
    x = torch.randn(b, t, dim, generator=gen, dtype=torch.float64)
    lens = torch.randint(1, t + 1, (b,), generator=gen)
    pad = torch.arange(t)[None, :] >= lens[:, None]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    out, w = ours(x, key_padding_mask=pad, causal=True, need_weights=need_weights)
    ref_out, ref_w = ref(x, x, x, key_padding_mask=pad, attn_mask=causal, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out)
    if need_weights:
        torch.testing.assert_close(w, ref_w)


def test_cross_attention_equals_torch_mha(gen):
    dim, heads = 24, 3
    ours = MultiHeadAttention(dim=dim, num_heads=heads).double()
    ref = copy_into_torch_mha(ours)
    x = torch.randn(2, 5, dim, generator=gen, dtype=torch.float64)
    mem = torch.randn(2, 9, dim, generator=gen, dtype=torch.float64)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 6:] = True
    out, _ = ours(x, mem, key_padding_mask=pad)
    torch.testing.assert_close(out, ref(x, mem, mem, key_padding_mask=pad)[0])


def test_valid_lens_d2l_semantics_shape_preserved(gen):
    attn = MultiHeadAttention(dim=100, num_heads=5)
    x = torch.randn(2, 4, 100, generator=gen)
    out, w = attn(x, torch.randn(2, 6, 100, generator=gen), valid_lens=torch.tensor([3, 2]), need_weights=True)
    assert out.shape == x.shape
    assert torch.all(w[0, ..., 3:] == 0) and torch.all(w[1, ..., 2:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5, 4))


def test_fully_masked_row_is_finite():
    attn = MultiHeadAttention(dim=8, num_heads=2)
    out, _ = attn(torch.randn(1, 3, 8), valid_lens=torch.tensor([0]))
    assert torch.isfinite(out).all()


def test_causal_mask_aligns_queries_to_the_end_of_the_keys():
    mask = build_mask(batch=1, q_len=2, k_len=5, causal=True)[0, 0]
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_no_positions_is_permutation_equivariant_and_additive_breaks_it(gen):
    dim, t = 16, 7
    attn = MultiHeadAttention(dim=dim, num_heads=2).double()
    x = torch.randn(1, t, dim, generator=gen, dtype=torch.float64)
    perm = torch.randperm(t, generator=gen)
    while torch.equal(perm, torch.arange(t)):
        perm = torch.randperm(t, generator=gen)
    torch.testing.assert_close(attn(x[:, perm])[0], attn(x)[0][:, perm])
    pe = build("sinusoidal", dim=dim, num_heads=2)
    pos = torch.arange(t)
    with_pos = lambda z: attn(pe.add(z, pos))[0]
    assert not torch.allclose(with_pos(x[:, perm]), with_pos(x)[:, perm])


def test_bad_shapes_raise():
    attn = MultiHeadAttention(dim=8, num_heads=2)
    with pytest.raises(ValueError, match=r"shape \(B, T, 8\)"):
        attn(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn(torch.randn(2, 3, 8), key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(dim=10, num_heads=3)


def test_kv_cache_reorder_selects_batch_rows(gen: torch.Generator) -> None:
    k, v = torch.randn(3, 2, 4, 5, generator=gen), torch.randn(3, 2, 4, 5, generator=gen)
    cache = KVCache()
    cache.append(k, v, torch.arange(4).expand(3, 4))
    index = torch.tensor([2, 2, 0])
    cache.reorder(index)
    torch.testing.assert_close(cache.k, k[index])
    torch.testing.assert_close(cache.v, v[index])
    assert cache.positions is not None and cache.positions.shape == (3, 4)
    empty = KVCache()
    empty.reorder(index)  # nothing cached yet: a no-op
    assert empty.k is None


@pytest.mark.parametrize("num_kv_heads", [1, 2, 3])
@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_query_attention_equals_repeated_heads(gen, num_kv_heads, need_weights):
    """GQA/MQA equals plain attention whose k/v heads are repeated per query group (HF ``repeat_kv`` order)."""
    dim, heads, head_dim = 24, 6, 8  # head_dim · heads ≠ dim on purpose
    rope = build("rope", dim=heads * head_dim, num_heads=heads, pairing="interleaved")
    gqa = MultiHeadAttention(dim=dim, num_heads=heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                             bias=True, out_bias=False, position=rope)
    assert gqa.out_proj.bias is None and gqa.k_proj.out_features == num_kv_heads * head_dim
    groups = heads // num_kv_heads
    full = MultiHeadAttention(dim=dim, num_heads=heads, head_dim=head_dim, bias=True, out_bias=False, position=rope)
    with torch.no_grad():
        for p in gqa.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
        full.q_proj.load_state_dict(gqa.q_proj.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for name in ("k_proj", "v_proj"):  # kv head j → query heads j·g … j·g + g − 1
            src = getattr(gqa, name)
            getattr(full, name).weight.copy_(src.weight.view(num_kv_heads, 1, head_dim, dim)
                                             .expand(-1, groups, -1, -1).reshape(heads * head_dim, dim))
            getattr(full, name).bias.copy_(src.bias.view(num_kv_heads, 1, head_dim)
                                           .expand(-1, groups, -1).reshape(-1))
    x = torch.randn(2, 7, dim, generator=gen)
    out, weights = gqa(x, causal=True, need_weights=need_weights)
    ref, ref_weights = full(x, causal=True, need_weights=need_weights)
    # unit-normal weights make outputs of tens: float32 round-off is relative to that scale, not to each element
    # (an element that cancels to ~1e-3 may differ by 1e-4)
    atol = 1e-5 * float(ref.abs().max())
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=atol)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
    # cached decoding stores the kv heads unrepeated and gives the same outputs
    cache = KVCache()
    steps = torch.cat([gqa(x[:, i:i + 1], causal=True, cache=cache)[0] for i in range(7)], dim=1)
    assert tuple(cache.k.shape) == (2, num_kv_heads, 7, head_dim)
    torch.testing.assert_close(steps, ref, rtol=1e-4, atol=atol)


def test_grouped_query_attention_bad_head_counts():
    with pytest.raises(ValueError, match="multiple of num_kv_heads=4"):
        MultiHeadAttention(dim=24, num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="pass head_dim"):
        MultiHeadAttention(dim=25, num_heads=6)


def test_kv_cache_grows_in_place_and_equals_concatenation(gen):
    """Appends past the first fill write into spare room (no copy of the held keys per step), regrow by a
    fraction of what is held, and hold exactly what concatenation would; earlier views keep their values."""
    from posenc.attention import GROWTH, GROWTH_TOKENS

    b, h, d = 2, 3, 4
    chunks = [torch.randn(b, h, t, d, generator=gen) for t in [5, *([1] * 150), 7, *([1] * 40)]]
    cache, seen, views, moves = KVCache(), [], [], 0
    for i, k in enumerate(chunks):
        before = None if cache.k is None else cache.k.untyped_storage().data_ptr()
        k_all, v_all, p_all = cache.append(k, 2 * k, torch.arange(cache.length, cache.length + k.shape[-2]))
        moves += before is not None and k_all.untyped_storage().data_ptr() != before
        seen.append(k)
        assert cache._room is None or cache._room[0][0].shape[-2] <= (
            cache.stored + max(GROWTH_TOKENS, cache.stored // GROWTH))  # room bounded by what is held
        if i % 37 == 0:
            views.append((k_all, torch.cat(seen, dim=-2).clone()))
    torch.testing.assert_close(cache.k, torch.cat(seen, dim=-2), rtol=0, atol=0)
    torch.testing.assert_close(cache.v, 2 * torch.cat(seen, dim=-2), rtol=0, atol=0)
    assert torch.equal(cache.positions, torch.arange(cache.length))
    assert 1 <= moves <= 6  # 192 appends, a handful of moves (a concatenating cache moves at every one)
    for view, expected in views:
        assert torch.equal(view, expected)
    # reorder, then growing again from the reordered rows
    cache.reorder(torch.tensor([1, 0]))
    k = torch.randn(b, h, 1, d, generator=gen)
    cache.append(k, k, torch.tensor([cache.length]))
    assert torch.equal(cache.k, torch.cat((torch.cat(seen, dim=-2)[[1, 0]], k), dim=-2))


@pytest.mark.parametrize("position, kv_heads, sinks", [("rope", 2, False), ("alibi", 4, True), ("t5", 1, False)])
def test_many_queries_continuing_a_cache_equal_the_whole_pass(gen, monkeypatch, position, kv_heads, sinks):
    """A prompt read in two calls — a cached prefix, then many more queries (``_continued``: the fused kernel
    twice, cached keys unmasked and new keys causally, merged by log-sum-exp; or one masked call for a biased
    scheme or sinks) — equals one causal pass over the whole, with a rotary, an additive-bias and a
    bucketed-bias scheme, grouped or single key heads, attention sinks."""
    from posenc.attention import CONTINUATION_MIN

    heads, dim = 4, 32
    scheme = build(position, dim=dim, num_heads=heads, causal=True)
    attn = MultiHeadAttention(dim=dim, num_heads=heads, num_kv_heads=kv_heads, position=scheme,
                              sinks=sinks).double().eval()
    past = int(torch.randint(50, 400, (1,), generator=gen))
    more = CONTINUATION_MIN + int(torch.randint(1, 300, (1,), generator=gen))
    x = torch.randn(2, past + more, dim, generator=gen, dtype=torch.float64)
    blocks = []
    real = MultiHeadAttention._continued
    monkeypatch.setattr(MultiHeadAttention, "_continued", lambda self, q, *a: blocks.append(q.shape[-2]) or
                        real(self, q, *a))
    with torch.no_grad():
        whole, _ = attn(x, causal=True)
        cache = KVCache()
        first, _ = attn(x[:, :past], causal=True, cache=cache)
        rest, _ = attn(x[:, past:], causal=True, cache=cache)
    assert blocks == [more]  # the continuation, not the first fill
    torch.testing.assert_close(torch.cat((first, rest), dim=1), whole, rtol=1e-10, atol=1e-10)
