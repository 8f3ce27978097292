"""TableCache: exact rows, keyed on everything the values depend on, grown as needed, bounded."""

import pytest
import torch

from posenc.positions import build
from posenc.positions.cache import TableCache


def direct(scale: float):
    calls = []

    def build_rows(p):
        calls.append(int(p.shape[0]))
        x = p.double()[:, None] * torch.arange(1, 4, dtype=torch.float64) * scale  # (L, 3)
        return x.sin().float(), x.cos().float()

    return build_rows, calls


def test_rows_are_the_built_rows_and_grow_by_doubling(gen):
    cache = TableCache(limit=1 << 20, min_rows=16)
    build_rows, calls = direct(0.1)
    pos = torch.randint(0, 10, (2, 5), generator=gen)
    sin, cos = cache.rows(pos, key="a", width=3, dtype=torch.float32, build=build_rows)
    want_sin, want_cos = build_rows(torch.arange(16))
    assert torch.equal(sin, want_sin[pos]) and torch.equal(cos, want_cos[pos]) and sin.shape == (2, 5, 3)
    cache.rows(pos, key="a", width=3, dtype=torch.float32, build=build_rows)
    assert calls == [16, 16]  # second call served from the cache (the 16 in between is the reference)
    far = torch.tensor([100])
    (row, _) = cache.rows(far, key="a", width=3, dtype=torch.float32, build=build_rows)
    assert calls[-1] == 128 and torch.equal(row, build_rows(torch.arange(101))[0][far])


def test_a_new_key_or_dtype_never_serves_old_rows():
    cache = TableCache(limit=1 << 20)
    pos = torch.tensor([3, 7])
    a, _ = direct(0.1)
    b, _ = direct(0.2)
    first = cache.rows(pos, key=("s", 0.1), width=3, dtype=torch.float32, build=a)[0]
    second = cache.rows(pos, key=("s", 0.2), width=3, dtype=torch.float32, build=b)[0]
    assert not torch.equal(first, second) and torch.equal(second, b(torch.arange(8))[0][pos])
    as64 = cache.rows(pos, key=("s", 0.2), width=3, dtype=torch.float64,
                      build=lambda p: tuple(t.double() for t in b(p)))[0]
    assert as64.dtype == torch.float64 and len(cache) == 2


def test_over_the_limit_or_empty_returns_none():
    cache = TableCache(limit=256 * 3)
    build_rows, calls = direct(1.0)
    assert cache.rows(torch.tensor([255]), key=0, width=3, dtype=torch.float32, build=build_rows) is not None
    assert cache.rows(torch.tensor([256]), key=0, width=3, dtype=torch.float32, build=build_rows) is None
    assert cache.rows(torch.zeros(0, dtype=torch.long), key=0, width=3, dtype=torch.float32, build=build_rows) is None
    with pytest.raises(ValueError, match="limit=0"):
        TableCache(limit=0)


@pytest.mark.parametrize("name", ["rope", "rope-linear", "rope-yarn"])
def test_rope_cos_sin_follow_option_changes(name, gen):
    rope = build(name, dim=32, num_heads=4)
    pos = torch.randint(0, 300, (7,), generator=gen)
    before = rope.cos_sin(pos)[0]
    rope.base = rope.base * 3  # options changed after the table was cached
    after = rope.cos_sin(pos)[0]
    assert not torch.equal(before, after)
    torch.testing.assert_close(after, rope._cos_sin_direct(pos, torch.float32)[0], rtol=0, atol=0)


def _rotate_reference(scheme, x, positions):
    """The rotation from freshly formed cos/sin (no cache involved): float64 angles, cast at the end."""
    from posenc.positions.rotary import apply_rotary_reference

    theta = positions.double()[:, None] * scheme.inv_freq()
    return apply_rotary_reference(x, theta.cos().float(), theta.sin().float(), pairing=scheme.pairing)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_rows_of_the_last_positions_are_reused_only_while_valid(pairing, gen):
    """Every layer rotates with the same positions tensor: the second call must reuse the rows, and any
    change — the tensor edited in place, another tensor, another dtype or option — must recompute."""
    rope = build("rope", dim=32, num_heads=2, pairing=pairing)
    x = torch.randn(1, 2, 5, 16, generator=gen)
    pos = torch.randint(0, 200, (5,), generator=gen)
    first = rope.rotate_one(x, pos)
    assert torch.allclose(first, _rotate_reference(rope, x, pos), atol=1e-6)
    gathers = []
    original = rope._cos_sin
    rope._cos_sin = lambda p, d: gathers.append(1) or original(p, d)
    assert torch.equal(rope.rotate_one(x, pos), first) and gathers == []  # same tensor: rows reused
    pos.add_(7)  # edited in place: the version counter moved
    assert torch.allclose(rope.rotate_one(x, pos), _rotate_reference(rope, x, pos), atol=1e-6) and gathers == [1]
    other = pos.clone()  # equal values, another tensor: recomputed (identity, not a value compare)
    rope.rotate_one(x, other)
    assert gathers == [1, 1]
    rope.base = 500.0  # an option changed after construction
    assert torch.allclose(rope.rotate_one(x, other), _rotate_reference(rope, x, other), atol=1e-6)
    assert gathers == [1, 1, 1]
    rope.rotate_one(x.double(), other)  # another dtype
    assert gathers == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="positions for a sequence of length"):
        rope.rotate_one(x[:, :, :3], other)  # the shapes are still checked on a reuse


def test_rope_reuse_never_skips_the_check_of_new_positions():
    rope = build("rope", dim=32, num_heads=2)
    x = torch.zeros(1, 2, 3, 16)
    pos = torch.tensor([0, 1, 2])
    rope.rotate_one(x, pos)
    pos[1] = -4  # in-place: must be checked again
    with pytest.raises(ValueError, match=">= 0"):
        rope.rotate_one(x, pos)


def test_inference_tensors_reuse_rows_only_inside_positions_fixed(gen):
    """Inference-mode tensors have no version counter: outside ``positions_fixed`` their rows are never
    reused (an in-place edit could not be seen); inside it they are, and leaving it drops the rows."""
    from posenc.positions.rotary import positions_fixed

    rope = build("rope", dim=32, num_heads=2)
    x = torch.randn(1, 2, 4, 16, generator=gen)
    gathers = []
    original = rope._cos_sin
    rope._cos_sin = lambda p, d: gathers.append(1) or original(p, d)
    with torch.inference_mode():
        pos = torch.arange(3, 7)
        rope.rotate_one(x, pos)
        rope.rotate_one(x, pos)
        assert gathers == [1, 1]  # not fixed: computed every time
        pos.add_(10)
        assert torch.allclose(rope.rotate_one(x, pos), _rotate_reference(rope, x, pos), atol=1e-6)
        with positions_fixed(rope):
            first = rope.rotate_one(x, pos)
            assert torch.equal(rope.rotate_one(x, pos), first) and len(gathers) == 4  # reused
        assert "_recent_rows" not in rope.__dict__


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_a_decoding_step_rotates_in_few_ops_bit_for_bit(gen, pairing):
    """The reused rows' small-input path (x·c + partner(x)·s) equals the textbook rotation exactly, for one
    shared position and for per-sequence positions, q and k of different head counts, both pairings."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from posenc.positions.rotary import apply_rotary_reference, positions_fixed

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    head_dim = 2 * int(torch.randint(2, 33, (1,), generator=gen))
    rope = build("rope", dim=4 * head_dim, num_heads=4, base=float(torch.randint(100, 10**6, (1,), generator=gen)),
                 pairing=pairing)
    for pos in (torch.tensor([int(torch.randint(0, 10**5, (1,), generator=gen))]),
                torch.randint(0, 10**5, (3, 1), generator=gen)):
        q, k = torch.randn(pos.shape[0], 4, 1, head_dim, generator=gen), torch.randn(pos.shape[0], 2, 1, head_dim,
                                                                                      generator=gen)
        with torch.inference_mode(), positions_fixed(rope):
            cos, sin = rope._cos_sin(pos, torch.float32)
            if pos.dim() == 2:
                cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            expected = [apply_rotary_reference(t, cos, sin, pairing=pairing) for t in (q, k)]
            rope.rotate_one(q, pos)  # the step's first call gathers the rows
            for t, want in zip((k, q), reversed(expected)):
                assert torch.equal(rope.rotate_one(t, pos), want)
            if pos.dim() == 1:
                before = Count.ops
                with Count():
                    rope.rotate_one(k, pos)
                assert Count.ops - before <= 6  # the reference takes 12–14
