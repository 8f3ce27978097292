"""The sinusoidal scheme's cached table gives exactly the float64 formula cast once."""

import torch


def test_sinusoidal_add_cache_is_exact(gen):
    from posenc.positions import build
    from posenc.positions.absolute import sinusoid_table
    scheme = build("sinusoidal", dim=10, num_heads=1, base=777.0)
    x = torch.randn(2, 5, 10, generator=gen)
    pos = torch.randint(0, 4000, (2, 5), generator=gen)
    assert torch.equal(scheme.add(x, pos), x + sinusoid_table(pos, 10, 777.0).float())
    scheme.base = 10000.0  # options changed: the cached table must not be reused
    assert torch.equal(scheme.add(x, pos), x + sinusoid_table(pos, 10, 10000.0).float())
