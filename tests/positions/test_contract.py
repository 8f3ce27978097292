"""The scheme contract names what callers use: rotate_query/rotate_key, encode — for every scheme."""

import pytest
import torch

from posenc.positions import build, lookup, names


@pytest.mark.parametrize("name", names())
def test_rotate_is_rotate_query_and_rotate_key(name, gen):
    scheme = build(name, dim=32, num_heads=4).double()
    q = torch.randn(2, 4, 5, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 4, 7, 8, generator=gen, dtype=torch.float64)
    q_pos, k_pos = torch.arange(3, 8), torch.randint(0, 50, (7,), generator=gen)
    rq, rk = scheme.rotate(q, k, q_pos, k_pos)
    torch.testing.assert_close(scheme.rotate_query(q, q_pos), rq, rtol=0, atol=0)
    torch.testing.assert_close(scheme.rotate_key(k, k_pos), rk, rtol=0, atol=0)
    if lookup(name).family != "rotary":
        assert rq is q and rk is k


@pytest.mark.parametrize("name", names())
def test_encode_is_what_add_adds(name, gen):
    scheme = build(name, dim=32, num_heads=4)
    pos = torch.randint(0, 60, (2, 6), generator=gen)
    if lookup(name).family != "additive":
        with pytest.raises(TypeError, match="adds no vectors"):
            scheme.encode(pos)
        return
    if name == "randomized":
        scheme.eval()  # training draws random positions; evaluation adds the table at the given ones
    zeros = torch.zeros(2, 6, scheme.dim, dtype=torch.float64)  # the token width the scheme was built for
    added = scheme.double().add(zeros, pos)  # (2, 6, dim + extra_width)
    vectors = added[..., scheme.dim:] if scheme.extra_width else added  # the naive index is appended, not added
    torch.testing.assert_close(vectors, scheme.encode(pos).double().expand_as(vectors))
