"""The fast RoPE kernel against the textbook formula, for every layout it must handle."""

import pytest
import torch

from posenc.positions import rotary_kernel

from posenc.positions import RoPE
from posenc.positions.rotary import apply_rotary, apply_rotary_reference


@pytest.fixture(autouse=True)
def kernel_at_any_size(monkeypatch):
    """Small test inputs would take the textbook path; make them take the kernel."""
    monkeypatch.setattr(rotary_kernel, "SMALL_NUMEL", 0)


def _tables(gen, lead, seq, pairs, dtype=torch.float64):
    angles = torch.rand(*lead, seq, pairs, generator=gen, dtype=torch.float64) * 100
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("partial", [False, True])
def test_kernel_equals_reference_on_strided_inputs(gen, pairing, partial):
    b, h, t, dh = 2, 3, 5, 8
    rot = 4 if partial else dh
    x = torch.randn(b, t, h, dh, generator=gen, dtype=torch.float64).transpose(1, 2)  # (B, H, T, Dh), as attention has it
    cos, sin = _tables(gen, (b, 1), t, rot // 2)  # per-sequence positions
    out = apply_rotary(x, cos, sin, pairing=pairing)
    torch.testing.assert_close(out, apply_rotary_reference(x, cos, sin, pairing=pairing), rtol=1e-12, atol=1e-12)
    assert out.stride() == x.stride()


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_kernel_gradients_first_and_second_order(gen, pairing):
    x = torch.randn(2, 2, 3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    cos, sin = _tables(gen, (), 3, 2)  # partial: 4 of 6 coordinates rotated
    fn = lambda v: apply_rotary(v, cos, sin, pairing=pairing)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_blocks_cover_every_row(gen, pairing, dtype, monkeypatch):
    monkeypatch.setattr(rotary_kernel, "BLOCK_BYTES", 64)  # force many small (and one ragged) blocks
    x = torch.randn(3, 7, 8, generator=gen).to(dtype)
    cos, sin = _tables(gen, (), 7, 3, torch.float32)  # partial: 6 of 8 coordinates
    torch.testing.assert_close(apply_rotary(x, cos, sin, pairing=pairing),
                               apply_rotary_reference(x, cos, sin, pairing=pairing))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_16bit_inputs_round_once(gen, dtype, pairing):
    x = torch.randn(2, 4, 9, 16, generator=gen).to(dtype).requires_grad_()
    cos, sin = _tables(gen, (), 9, 8, torch.float32)
    out = apply_rotary(x, cos, sin, pairing=pairing)
    exact = apply_rotary_reference(x.detach().double(), cos.double(), sin.double(), pairing=pairing)
    assert out.dtype == dtype
    # float32 arithmetic and one final rounding: within half an ulp of the exact value (+ float32 noise)
    half_ulp = torch.finfo(dtype).eps / 2
    assert ((out.detach().double() - exact).abs() <= half_ulp * exact.abs() * 1.001 + 1e-6).all()
    g = torch.randn(out.shape, generator=gen).to(dtype)
    out.backward(g)
    # the gradient is the inverse rotation of g, also computed in float32 and rounded once
    xd = x.detach().double().requires_grad_()
    apply_rotary_reference(xd, cos.double(), sin.double(), pairing=pairing).backward(g.double())
    assert x.grad is not None and x.grad.dtype == dtype
    assert ((x.grad.double() - xd.grad).abs() <= half_ulp * xd.grad.abs() * 1.001 + 1e-6).all()


def test_cos_sin_cache_is_exact_and_follows_options(gen):
    rope = RoPE(head_dim=16)
    pos = torch.randint(0, 3000, (2, 9), generator=gen)
    cos, sin = rope.cos_sin(pos)
    theta = pos.double().unsqueeze(-1) * rope.inv_freq()
    assert torch.equal(cos, theta.cos().float()) and torch.equal(sin, theta.sin().float())
    rope.base = 500.0  # options changed: the cached table must not be reused
    theta = pos.double().unsqueeze(-1) * rope.inv_freq()
    assert torch.equal(rope.cos_sin(pos)[0], theta.cos().float())
    far = torch.tensor([10**7])  # past TABLE_LIMIT: computed directly, still float64 angles
    assert torch.equal(rope.cos_sin(far)[1], (far.double()[:, None] * rope.inv_freq()).sin().float())


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_apply_through_kernel_equals_textbook(gen, pairing, monkeypatch):
    rope = RoPE(head_dim=12, rotary_dim=8, pairing=pairing)
    x = torch.randn(2, 3, 6, 12, generator=gen)
    pos = torch.randint(0, 5000, (2, 6), generator=gen)
    fast = rope.rotate_one(x, pos)
    monkeypatch.setattr(rotary_kernel, "SMALL_NUMEL", 1 << 30)  # everything takes the textbook path
    torch.testing.assert_close(fast, rope.rotate_one(x, pos))

