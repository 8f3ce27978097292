"""``recognise_sinusoid``: every published sinusoid layout is told by fit (not by name), with its residual;
tables that are not sinusoids are refused with the reason; ``inspect_checkpoint`` reports the verdict."""

from __future__ import annotations

import pytest
import torch

from posenc.formats import Checkpoint
from posenc.inspect import inspect_checkpoint
from posenc.inspect.sinusoid import describe, recognise_sinusoid
from posenc.positions.absolute import sinusoid_table


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("denominator", ["half", "half-minus-one"])
@pytest.mark.parametrize("offset", [0, 2, 7])
@pytest.mark.parametrize("base,width", [(10000.0, 64), (500.0, 32)])
def test_every_layout_is_recognised(layout, denominator, offset, base, width):
    table = sinusoid_table(torch.arange(200), width, base, layout=layout, denominator=denominator,
                           offset=offset).float()
    fit = recognise_sinusoid(table)
    assert fit["is_sinusoid"], fit
    assert (fit["layout"], fit["denominator"], fit["offset"]) == (layout, denominator, offset)
    assert fit["base"] == pytest.approx(base, rel=1e-6) and fit["max_residual"] < 1e-6
    assert fit["scheme_options"] == {"base": fit["base"], "layout": layout, "denominator": denominator,
                                     "offset": offset}


def test_cos_first_halves_are_recognised():
    t = sinusoid_table(torch.arange(100), 32, layout="concatenated").float()
    fit = recognise_sinusoid(torch.cat((t[:, 16:], t[:, :16]), dim=1))
    assert fit["is_sinusoid"] and fit["layout"] == "concatenated-cos-first"


def test_the_two_denominators_are_told_apart_by_the_base_they_imply():
    """Both are geometric frequencies; only one reading gives a round base — and the other is reported too."""
    fit = recognise_sinusoid(sinusoid_table(torch.arange(300), 384, layout="concatenated",
                                            denominator="half-minus-one").float())
    assert fit["denominator"] == "half-minus-one" and fit["base"] == 10000.0
    assert fit["bases"]["half"] == pytest.approx(10000.0 ** (192 / 191), rel=1e-5)


def test_sixteen_bit_tables_get_their_rounding_allowance():
    table = sinusoid_table(torch.arange(500), 64, layout="concatenated", denominator="half-minus-one").half()
    fit = recognise_sinusoid(table)
    assert fit["is_sinusoid"] and fit["tolerance"] == pytest.approx(2**-10) and fit["base"] == 10000.0
    assert 1e-5 < fit["max_residual"] <= 2**-10  # float16 rounding, not float32's


@pytest.mark.parametrize("make,why", [
    (lambda: torch.randn(100, 32) * 0.02, "unit amplitude"),  # a learned table (GPT-2-like)
    (lambda: sinusoid_table(torch.arange(100), 32).float() + 0.01 * torch.randn(100, 32), "unit amplitude"),
    (lambda: torch.ones(3, 8), "≥ 4 rows"),
])
def test_non_sinusoids_are_refused_with_the_reason(make, why, seed):
    fit = recognise_sinusoid(make())
    assert not fit["is_sinusoid"] and why in fit["why"]


def test_a_near_sinusoid_with_wrong_frequencies_leaves_a_residual(seed):
    """Unit-amplitude pairs whose frequencies are not geometric: the layout fits, the rebuild does not."""
    omega = torch.rand(16).double().sort(descending=True).values
    angles = torch.arange(100).double()[:, None] * omega
    fit = recognise_sinusoid(torch.cat((angles.sin(), angles.cos()), dim=1))
    assert fit["amplitude_error"] < 1e-12 and not fit["is_sinusoid"] and "residual" in fit["why"]


def test_inspect_reports_a_stored_sinusoid():
    table = sinusoid_table(torch.arange(64), 32, layout="concatenated").float()
    ckpt = Checkpoint.from_tensors({"model.encoder.embed_positions.weight": table,
                                    "model.shared.weight": torch.randn(50, 32)}, config={"model_type": "marian"})
    pos = inspect_checkpoint(ckpt)["position"]
    assert pos["kind"] == "sinusoidal" and pos["sinusoid"]["layout"] == "concatenated"
    assert "Marian" in describe(pos["sinusoid"])
