"""Contracts every registered scheme keeps: low-precision positions refused, a meaningful similarity."""

import pytest
import torch

from posenc.positions import build, lookup, names

LOW_PRECISION = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def call_hook(scheme, positions):
    """Call the hook of the scheme's family with these positions (the public path a model takes)."""
    t = positions.shape[-1]
    if scheme.family == "rotary":
        q = torch.randn(1, 2, t, scheme.head_dim)
        return scheme.rotate(q, q, positions, positions)
    if scheme.family == "bias":
        return scheme.attention_bias(positions, positions, torch.randn(1, scheme.num_heads, t, 8))
    if scheme.family == "additive":
        return scheme.add(torch.zeros(1, t, scheme.dim), positions)
    return None


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_float_positions_are_refused(name, dtype):
    """bf16 holds integers exactly only up to 256: no public entry point may build a table from float positions."""
    scheme = build(name, dim=32, num_heads=4)
    positions = torch.arange(300, 305).to(dtype)
    if scheme.family != "none":
        with pytest.raises(TypeError, match="integer dtype"):
            call_hook(scheme, positions)
    with pytest.raises(TypeError, match="integer dtype"):
        scheme.similarity(positions, positions)


@pytest.mark.parametrize("name", names())
def test_similarity_is_float64_finite_and_shaped(name, gen):
    """The object the lab measures: (Ti, Tj), or (H, Ti, Tj) for per-head schemes, float64, finite."""
    scheme = build(name, dim=32, num_heads=4)
    i = torch.randint(0, 1000, (5,), generator=gen)
    j = torch.randint(0, 1000, (7,), generator=gen)
    sim = scheme.similarity(i, j)
    assert sim.dtype == torch.float64 and bool(torch.isfinite(sim).all())
    assert sim.shape == ((4, 5, 7) if scheme.heads else (5, 7))
    assert not sim.requires_grad
    if scheme.family == "bias":
        # bias schemes: the similarity is the bias per head the model adds (Shaw: with an all-ones query)
        q = torch.ones(1, 4, 5, scheme.options().get("head_dim", 8), dtype=torch.float64)
        with torch.no_grad():
            bias = scheme.attention_bias(i, j, q)
        torch.testing.assert_close(sim, bias.reshape(-1, 5, 7).double(), rtol=0, atol=0)


@pytest.mark.parametrize("name", names())
def test_docstring_cites_a_reference(name):
    doc = lookup(name).__doc__ or ""
    assert doc.strip(), f"{name} has no docstring"
    if name not in ("none", "naive", "learned"):
        assert "Reference used to verify" in doc or "reference" in doc.lower(), f"{name}: say what verified it"
