"""Which sinusoid is a stored position table? Recognised by fit, not by name.

Real models store the "same" sinusoid in different ways: Vaswani et al.'s
interleaved columns, Marian's [sin | cos] halves, tensor2tensor's / fairseq's /
Whisper's frequencies ω_i = b^(−i/(D/2 − 1)) instead of b^(−2i/D), fairseq's
rows offset by 2. ``recognise_sinusoid`` reads the layout, the frequencies, the
base and the offset off the numbers alone, rebuilds the table with posenc's own
``sinusoid_table`` from what it found, and reports the residual — so a table
that only resembles a sinusoid (a learned one) is told apart from one that *is*
one, to the rounding of its storage dtype.

The fit, for each layout (interleaved, [sin | cos], [cos | sin]):

1. pair the columns the layout implies: (s_i, c_i); a sinusoid has s² + c² = 1
   in every row (a wrong pairing mixes frequencies and fails at once);
2. the angle θ_i(r) = atan2(s_i, c_i), unwrapped along the rows, is a line
   ω_i·r + φ_i: least squares gives each pair's frequency ω_i;
3. log ω_i is a line in i with slope log r: the ratio of the geometric
   frequencies. Written b^(−i/(D/2)) it gives one base, written b^(−i/(D/2 − 1))
   another — the convention whose base is a round number (10⁴ for every model
   known) is the one stated, with both bases in the result;
4. the offset is the phase at row 0 over the frequency, read from the slow
   pairs (where it cannot wrap), rounded to an integer;
5. posenc's table with that layout, denominator, base and offset is compared
   with the stored one: the max absolute residual is the verdict.

Shape legend: L rows (positions), D width, P = D/2 pairs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.positions.absolute import sinusoid_table

#: Column pairings tried: name → (sin columns, cos columns) for a width D.
def _pairings(width: int) -> dict[str, tuple[slice, slice]]:
    half = width // 2
    return {"interleaved": (slice(0, width, 2), slice(1, width, 2)),
            "concatenated": (slice(0, half), slice(half, width)),
            "concatenated-cos-first": (slice(half, width), slice(0, half))}


#: The largest residual (max |stored − rebuilt|, entries in [−1, 1]) that still says "this is that sinusoid"
#: for a float32 or wider table; a 16-bit table is allowed its own rounding (``_allowance``).
FIT_TOLERANCE = 1e-4


def _allowance(dtype: torch.dtype | None) -> float:
    """What storage alone may cost: half a unit in the last place at 1 (entries are at most 1 in size)."""
    if dtype in (torch.float16, torch.bfloat16):
        return float(torch.finfo(dtype).eps)  # ≥ half an ulp at any |x| ≤ 1, with a factor 2 to spare
    return FIT_TOLERANCE


def _significant(x: float, digits: int) -> float:
    """``x`` rounded to ``digits`` significant digits."""
    return float(f"{x:.{digits}g}")


def _fit_pairs(sin: np.ndarray, cos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, least-squares (ω, φ) of the unwrapped angle θ(r) = ω·r + φ; (P,) each."""
    theta = np.unwrap(np.arctan2(sin, cos), axis=0)  # (L, P)
    rows = np.arange(theta.shape[0], dtype=np.float64)
    design = np.stack((rows, np.ones_like(rows)), axis=1)  # (L, 2)
    coef, *_ = np.linalg.lstsq(design, theta, rcond=None)  # (2, P)
    return coef[0], coef[1]


def _rebuild(length: int, width: int, base: float, layout: str, denominator: str, offset: int) -> Tensor:
    """posenc's own table for a fitted description (float64, (L, D))."""
    table = sinusoid_table(torch.arange(length), width, base, denominator=denominator, offset=offset,
                           layout="interleaved" if layout == "interleaved" else "concatenated")
    if layout == "concatenated-cos-first":
        half = width // 2
        table = torch.cat((table[:, half:], table[:, :half]), dim=1)
    return table


def _fit_layout(t: Tensor, layout: str, tolerance: float) -> dict[str, Any]:
    """Frequencies, base (under each denominator, in the fewest digits that rebuild the table), offset, residual."""
    length, width = t.shape
    pairs = width // 2
    s_cols, c_cols = _pairings(width)[layout]
    omega, phase = _fit_pairs(t[:, s_cols].numpy(), t[:, c_cols].numpy())
    if np.any(omega <= 0):
        return {"layout": layout, "why": "a pair's angle does not advance with the row"}
    # geometric frequencies ω_i = ω_0 · ratio^i: a line in log ω
    slope, intercept = np.polyfit(np.arange(pairs, dtype=np.float64), np.log(omega), 1)
    # the offset: phase at row 0 over ω, on the slow pairs (ω·offset < π there for any offset below π/ω)
    slow = omega < 0.05
    offset = max(0, int(round(float(np.median(phase[slow] / omega[slow])) if slow.any() else phase[-1] / omega[-1])))
    bases = {"half": math.exp(-slope * pairs), "half-minus-one": math.exp(-slope * (pairs - 1))}
    best: dict[str, Any] | None = None
    for denominator, fitted in bases.items():
        if not (math.isfinite(fitted) and fitted > 1):
            continue
        # the same table reads as b^(−2i/D) with one base and b^(−i/(D/2 − 1)) with another; the reading whose
        # base needs the fewest significant digits to rebuild the table is stated (10⁴, not 10494.0)
        for digits in range(1, 8):
            base = _significant(fitted, digits)
            residual = float((t - _rebuild(length, width, base, layout, denominator, offset)).abs().max())
            if residual <= tolerance or digits == 7:
                break
        key = (residual > tolerance, digits, residual)
        if best is None or key < best["key"]:
            best = {"key": key, "denominator": denominator, "base": base, "max_residual": residual,
                    "base_fitted": fitted}
    if best is None:
        return {"layout": layout, "why": f"the fitted frequencies give no base > 1 ({bases})"}
    best.pop("key")
    return {"layout": layout, "offset": offset, "bases": {k: _significant(v, 6) for k, v in bases.items()},
            "frequency_scale": float(math.exp(intercept)), **best}


def recognise_sinusoid(table: Tensor, *, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Fit a stored position table (L, D) to every sinusoid layout; say which it is, and how well.

    Args:
        table: the stored rows (any float dtype; measured in float64).
        dtype: the dtype it was stored in, for the rounding allowance (default: the table's own).

    Returns:
        Plain data: ``is_sinusoid``, ``layout``, ``denominator`` ("half": ω_i = b^(−2i/D);
        "half-minus-one": ω_i = b^(−i/(D/2 − 1))), ``base`` (in the fewest digits that rebuild
        the table), ``base_fitted``, ``bases`` (the base under each denominator: the same
        table), ``offset``, ``max_residual`` (max |stored − rebuilt|), ``tolerance``,
        ``amplitude_error`` (max |s² + c² − 1| of the chosen pairing), ``scheme_options``
        (the options of posenc's ``sinusoidal`` that rebuild it), ``tried`` (every layout's
        amplitude error) and, when it is not one, ``why``.
    """
    dtype = table.dtype if dtype is None else dtype
    t = table.detach().double().cpu()
    if t.dim() != 2 or t.shape[0] < 4 or t.shape[1] < 4 or t.shape[1] % 2:
        return {"is_sinusoid": False, "why": f"a sinusoid table needs ≥ 4 rows and an even width ≥ 4, got shape "
                                             f"{list(t.shape)}", "tried": {}}
    tolerance = _allowance(dtype)
    tried = {}
    for name, (s_cols, c_cols) in _pairings(t.shape[1]).items():
        s, c = t[:, s_cols], t[:, c_cols]
        tried[name] = float((s * s + c * c - 1).abs().max())
    out: dict[str, Any] = {"tried": tried, "tolerance": tolerance}
    candidates = [name for name, err in tried.items() if err <= 50 * tolerance]
    if not candidates:
        layout = min(tried, key=tried.get)
        return out | {"is_sinusoid": False, "layout": layout, "amplitude_error": tried[layout],
                      "why": f"no pairing of its columns has unit amplitude (best: {layout}, max |s² + c² − 1| = "
                             f"{tried[layout]:.3g}); not a sinusoid table"}
    fits = [_fit_layout(t, name, tolerance) for name in candidates]  # [sin | cos] and [cos | sin] pair alike
    complete = [f for f in fits if "max_residual" in f]
    if not complete:
        return out | {"is_sinusoid": False, **fits[0], "amplitude_error": tried[fits[0]["layout"]],
                      "why": f"{fits[0]['why']}; not a sinusoid"}
    fit = min(complete, key=lambda f: f["max_residual"])
    out |= fit | {"amplitude_error": tried[fit["layout"]], "is_sinusoid": fit["max_residual"] <= tolerance}
    # posenc's scheme writes sines first: a [cos | sin] table is rebuilt by it only with its halves swapped
    out["scheme_options"] = None if fit["layout"] == "concatenated-cos-first" else {
        "base": fit["base"], "layout": fit["layout"], "denominator": fit["denominator"], "offset": fit["offset"]}
    if not out["is_sinusoid"]:
        out["why"] = (f"the best fit ({describe(out, short=True)}) leaves a residual {fit['max_residual']:.3g} > "
                      f"{tolerance:.3g}; the table resembles a sinusoid but is not one")
    return out


#: How each variant is known, for the report (what the fit found, named afterwards).
KNOWN = {("interleaved", "half", 0): "Vaswani et al. (2017)",
         ("concatenated", "half", 0): "Marian / XLM halves",
         ("concatenated", "half-minus-one", 0): "tensor2tensor / Whisper",
         ("concatenated", "half-minus-one", 2): "fairseq / M2M100 (offset 2)"}


def describe(fit: dict[str, Any], *, short: bool = False) -> str:
    """One line: layout, frequencies, base, offset (and the residual unless ``short``)."""
    if "denominator" not in fit:
        return fit.get("why", "not a sinusoid")
    layout = {"interleaved": "interleaved sin/cos columns", "concatenated": "[sin | cos] halves",
              "concatenated-cos-first": "[cos | sin] halves"}[fit["layout"]]
    freq = "b^(−2i/D)" if fit["denominator"] == "half" else "b^(−i/(D/2 − 1))"
    text = f"{layout}, ω_i = {freq} with b = {fit['base']:g}, offset {fit['offset']}"
    known = KNOWN.get((fit["layout"], fit["denominator"], fit["offset"]))
    if known and fit.get("is_sinusoid"):
        text += f" (as {known})"
    if not short and "max_residual" in fit:
        text += f"; max residual {fit['max_residual']:.2g} (tolerance {fit['tolerance']:.2g})"
    return text
