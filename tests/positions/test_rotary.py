import pytest
import torch

from posenc.positions import RoPE, convert_qk_weight


def reference_rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Meta/torchtune form: complex multiply of consecutive pairs, float64."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * theta)
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2))
    return torch.view_as_real(xc * rot).flatten(-2)


def test_interleaved_matches_complex_reference(gen):
    d = 2 * int(torch.randint(1, 33, (1,), generator=gen))
    base = float(torch.randint(10, 10**6, (1,), generator=gen))
    pos = torch.randint(0, 10**5, (7,), generator=gen)
    x = torch.randn(2, 3, 7, d, generator=gen, dtype=torch.float64)
    rope = RoPE(head_dim=d, base=base, pairing="interleaved")
    torch.testing.assert_close(rope.rotate_one(x, pos), reference_rope_interleaved(x, pos, base))


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_scores_depend_only_on_distance(gen, pairing):
    d = 2 * int(torch.randint(2, 33, (1,), generator=gen))
    rope = RoPE(head_dim=d, pairing=pairing)
    q, k = torch.randn(1, 1, 1, d, generator=gen, dtype=torch.float64), torch.randn(1, 1, 1, d, generator=gen, dtype=torch.float64)
    m, n = torch.randint(0, 5000, (2,), generator=gen).tolist()
    shift = int(torch.randint(1, 10**5, (1,), generator=gen))
    def score(a: int, b: int) -> torch.Tensor:
        qq, kk = rope.rotate(q, k, torch.tensor([a]), torch.tensor([b]))
        return (qq * kk).sum()
    torch.testing.assert_close(score(m, n), score(m + shift, n + shift), rtol=1e-9, atol=1e-9)


def test_pairing_conversion_gives_the_same_scores(gen):
    heads, hd, width = 3, 8, 24
    w_q, w_k = torch.randn(heads * hd, width, generator=gen, dtype=torch.float64), torch.randn(heads * hd, width, generator=gen, dtype=torch.float64)
    x = torch.randn(5, width, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 1000, (5,), generator=gen)
    def scores(wq, wk, pairing):
        rope = RoPE(head_dim=hd, pairing=pairing)
        q = (x @ wq.T).view(5, heads, hd).transpose(0, 1)  # (H, T, Dh)
        k = (x @ wk.T).view(5, heads, hd).transpose(0, 1)
        return rope.rotate_one(q, pos) @ rope.rotate_one(k, pos).transpose(-1, -2)
    inter = scores(w_q, w_k, "interleaved")
    conv = lambda w: convert_qk_weight(w, num_heads=heads, head_dim=hd, source="interleaved", target="half")
    torch.testing.assert_close(scores(conv(w_q), conv(w_k), "half"), inter)
    # without the conversion the two pairings disagree
    assert not torch.allclose(scores(w_q, w_k, "half"), inter)
    # and the conversion round-trips
    back = convert_qk_weight(conv(w_q), num_heads=heads, head_dim=hd, source="half", target="interleaved")
    assert torch.equal(back, w_q)


def test_partial_rotation_leaves_tail_untouched(gen):
    rope = RoPE(head_dim=16, rotary_dim=8)
    x = torch.randn(1, 2, 4, 16, generator=gen)
    out = rope.rotate_one(x, torch.arange(4) + 3)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert not torch.allclose(out[..., :8], x[..., :8])


def test_angles_in_float64_at_large_positions():
    rope = RoPE(head_dim=64)
    pos = torch.tensor([10**6])
    cos, _ = rope.cos_sin(pos)
    exact = torch.cos(torch.tensor(10**6, dtype=torch.float64) * rope.inv_freq())
    assert (cos.double() - exact).abs().max() < 1e-7


def test_bf16_input_keeps_dtype_and_accuracy(gen):
    rope = RoPE(head_dim=32)
    x = torch.randn(1, 1, 4, 32, generator=gen)
    pos = torch.arange(4) + 50000
    out = rope.rotate_one(x.to(torch.bfloat16), pos)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), rope.rotate_one(x, pos), atol=3e-2, rtol=2e-2)


def test_bad_widths_raise():
    with pytest.raises(ValueError, match="rotary_dim=7"):
        RoPE(head_dim=7)
    with pytest.raises(ValueError, match="cannot exceed"):
        RoPE(head_dim=8, rotary_dim=16)
    with pytest.raises(ValueError, match="pairing"):
        RoPE(head_dim=8, pairing="neox")  # type: ignore[arg-type]


def test_similarity_is_sum_of_cosines():
    rope = RoPE(head_dim=16, base=100.0)
    i, j = torch.arange(10), torch.arange(10)
    theta = 100.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    ref = 2 * torch.cos((i[:, None, None] - j[None, :, None]).double() * theta).sum(-1)
    torch.testing.assert_close(rope.similarity(i, j), ref)


def test_module_apply_recurses_through_rope():
    """``model.apply(init_fn)`` must reach every submodule, RoPE's ``apply(x, positions)`` notwithstanding."""
    from posenc import ModelConfig, build_decoder_only
    model = build_decoder_only(ModelConfig(vocab_size=11, dim=16, num_heads=2, position="rope"))
    seen = []
    model.apply(lambda m: seen.append(type(m).__name__))
    assert "RoPE" in seen and "DecoderOnlyLM" in seen
