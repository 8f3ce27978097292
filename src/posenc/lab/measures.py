"""Pure measurements of position signals: plain numbers in, plain data out.

Every function takes one of three objects and returns dicts of floats, ints,
bools and lists (JSON-ready):

* a **table** ``(L, d)`` of position vectors — a sinusoidal table, a learned
  table read from a checkpoint, the rotated all-ones vectors of a rotary scheme;
* a **similarity** ``(Ti, Tj)`` — or ``(H, Ti, Tj)`` per head — between
  positions alone (``PositionScheme.similarity``: a Gram matrix, rotary dot
  products, a bias);
* a **scheme** from the registry, measured through the two above
  (``scheme_table``, ``scheme_similarity``), never through a re-typed formula.

What is measured:

=========================  ====================================================
``norm_summary``           norm of each position vector and its spread
``diagonal_profile``       mean and spread of a similarity along each diagonal
                           j − i = const: spread ≈ 0 ⇔ translation invariance
``table_distance_profile`` the same for a table, without an L × L Gram when L
                           is large (FFT autocorrelation + sampled rows)
``monotonicity``           rises, argmin, min and last value of a profile
``symmetry``               max |S − Sᵀ|
``shift_residual``         least-squares fit of one map M_k with
                           T[p + k] = M_k · T[p] for all p; max |residual|
``defined_beyond``         whether a scheme answers at positions past a
                           training length, and what it answers there
``scheme_properties``      one row of the property table for any scheme
=========================  ====================================================

Shape legend: L positions (rows of a table), d width, Ti/Tj query/key
positions, H heads, K offsets, S sampled rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from posenc.positions.base import PositionScheme, check_positions, default_positions

#: Relative tolerance under which a spread counts as floating-point noise.
REL_TOL = 1e-9

#: Tables with at most this many rows get an exact L × L Gram in ``table_distance_profile``.
EXACT_GRAM_ROWS = 4096

#: Above this many multiply-adds (L·d²) ``shift_residual`` uses d × d normal equations instead of QR.
QR_FLOP_LIMIT = 2**31


def _as_float64(x: Tensor, *, name: str, dims: tuple[int, ...]) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dimensions, got shape {tuple(x.shape)}")
    if x.is_complex():
        raise TypeError(f"{name} must be real, got {x.dtype}")
    return x.detach().to(device="cpu", dtype=torch.float64)


def _heads(sim: Tensor) -> Tensor:
    """(Ti, Tj) or (H, Ti, Tj) → float64 (H, Ti, Tj)."""
    s = _as_float64(sim, name="similarity", dims=(2, 3))
    return s.unsqueeze(0) if s.dim() == 2 else s


def _scale(x: Tensor) -> float:
    """A magnitude to make tolerances relative: max |x|, or 1 for an all-zero tensor."""
    m = float(x.abs().max()) if x.numel() else 0.0
    return m if m > 0 else 1.0


# -- norms -------------------------------------------------------------------------------------------------


def norm_summary(table: Tensor) -> dict[str, Any]:
    """Euclidean norm of every row of ``table`` (L, d) and how much it varies.

    Returns:
        ``norms`` (L floats), ``norm`` (mean), ``norm_min``, ``norm_max``,
        ``norm_spread`` (max − min) and ``constant`` (spread ≤ REL_TOL·max).
    """
    t = _as_float64(table, name="table", dims=(2,))
    norms = t.norm(dim=-1)  # (L,)
    lo, hi = float(norms.min()), float(norms.max())
    return {
        "norms": norms.tolist(),
        "norm": float(norms.mean()),
        "norm_min": lo,
        "norm_max": hi,
        "norm_spread": hi - lo,
        "constant": hi - lo <= REL_TOL * max(hi, 1e-300),
    }


def similarity_norms(sim: Tensor) -> Tensor:
    """√|S[h, i, i]| for a square similarity: the norm of each position's vector when S is a Gram.

    Returns:
        (H, L) float64.
    """
    s = _heads(sim)
    if s.shape[-1] != s.shape[-2]:
        raise ValueError(f"similarity must be square to read norms from its diagonal, got {tuple(s.shape)}")
    return s.diagonal(dim1=-2, dim2=-1).abs().sqrt()


# -- distance profile / translation invariance ---------------------------------------------------------


def diagonal_profile(sim: Tensor) -> dict[str, Any]:
    """Mean and spread (max − min) of a similarity along every diagonal j − i = δ.

    A similarity that depends on i − j alone has zero spread on every diagonal
    (up to rounding): that is translation invariance. Computed exactly from the
    given matrix, one ``torch.diagonal`` per lag.

    Args:
        sim: (Ti, Tj) or (H, Ti, Tj).

    Returns:
        ``lags`` (δ = j − i, from −(Ti−1) to Tj−1), ``mean`` and ``spread``
        (lists per lag, or per head then lag for a 3-d input),
        ``max_spread`` (over lags and heads), ``relative_spread`` (÷ max |S|)
        and ``translation_invariant`` (relative spread ≤ REL_TOL).
    """
    s = _heads(sim)
    ti, tj = s.shape[-2:]
    lags = list(range(-(ti - 1), tj))
    means = torch.empty(s.shape[0], len(lags), dtype=torch.float64)
    spreads = torch.empty_like(means)
    for n, lag in enumerate(lags):
        diag = s.diagonal(offset=lag, dim1=-2, dim2=-1)  # (H, n_lag)
        means[:, n] = diag.mean(-1)
        spreads[:, n] = diag.amax(-1) - diag.amin(-1)
    squeeze = sim.dim() == 2
    max_spread = float(spreads.max())
    return {
        "lags": lags,
        "mean": (means[0] if squeeze else means).tolist(),
        "spread": (spreads[0] if squeeze else spreads).tolist(),
        "max_spread": max_spread,
        "relative_spread": max_spread / _scale(s),
        "translation_invariant": max_spread <= REL_TOL * _scale(s),
        "method": "exact",
    }


def forward_profile(sim: Tensor) -> Tensor:
    """The similarity as a function of distance δ = j − i ≥ 0: the mean of each upper diagonal.

    Returns:
        (Tj,) for a 2-d similarity, (H, Tj) for a 3-d one, float64.
    """
    s = _heads(sim)
    out = torch.stack([s.diagonal(offset=lag, dim1=-2, dim2=-1).mean(-1) for lag in range(s.shape[-1])], dim=-1)
    return out[0] if sim.dim() == 2 else out


def _autocorrelation(t: Tensor, *, chunk: int = 64) -> Tensor:
    """r[δ] = Σ_c Σ_{i < L−δ} t[i, c]·t[i+δ, c] for δ = 0 … L−1, by FFT per column (O(d·L log L))."""
    length = t.shape[0]
    nfft = 1 << (2 * length - 1).bit_length()  # ≥ 2L − 1: no circular wrap-around
    total = torch.zeros(nfft // 2 + 1, dtype=torch.float64)
    for start in range(0, t.shape[1], chunk):  # column chunks keep the complex buffer small
        spectrum = torch.fft.rfft(t[:, start : start + chunk], n=nfft, dim=0)  # (nfft/2+1, c)
        total += (spectrum.real**2 + spectrum.imag**2).sum(-1)
    return torch.fft.irfft(total, n=nfft)[:length]


def table_distance_profile(
    table: Tensor,
    *,
    exact_rows: int = EXACT_GRAM_ROWS,
    sample_rows: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    """Distance profile of the Gram matrix T·Tᵀ of a table, for lags δ = 0 … L−1.

    Method (reported under ``method``):

    * ``exact`` when L ≤ ``exact_rows``: the Gram matrix is formed and every
      diagonal read (``diagonal_profile``).
    * ``fft+sampled`` otherwise, never forming the L × L Gram: the mean along
      diagonal δ is the column autocorrelation Σ_c Σ_i T[i,c]·T[i+δ,c] ÷ (L − δ),
      computed exactly (to FFT rounding) in O(d·L log L); the spread along each
      diagonal is max − min over ``sample_rows`` rows (row 0, row L−1 and a
      seeded random choice), i.e. T[i]·T[i+δ] for the sampled i, an S × L × d
      product. A sampled spread can only under-estimate the true one.

    Returns:
        ``lags``, ``mean``, ``spread`` (lists over δ ≥ 0), ``first_row``
        (T[0]·T[δ]), ``max_spread``, ``relative_spread``,
        ``translation_invariant``, ``method``, ``rows_sampled``.
    """
    t = _as_float64(table, name="table", dims=(2,))
    length = t.shape[0]
    if length == 0:
        raise ValueError("table has no rows")
    if length <= exact_rows:
        gram = t @ t.T  # (L, L)
        full = diagonal_profile(gram)
        zero = length - 1  # index of lag 0 in full["lags"]
        mean, spread = full["mean"][zero:], full["spread"][zero:]
        first_row = gram[0].tolist()
        method, sampled = "exact", length
    else:
        mean_t = _autocorrelation(t) / torch.arange(length, 0, -1, dtype=torch.float64)
        gen = torch.Generator().manual_seed(seed)
        extra = torch.randperm(length - 2, generator=gen)[: max(sample_rows - 2, 0)] + 1
        rows = torch.cat((torch.tensor([0, length - 1]), extra)).sort().values  # (S,)
        dots = t[rows] @ t.T  # (S, L): T[i]·T[j] for sampled i
        lag = torch.arange(length)
        cols = rows[:, None] + lag[None, :]  # (S, L): j = i + δ
        valid = cols < length
        vals = dots.gather(1, cols.clamp(max=length - 1))
        hi = vals.masked_fill(~valid, -math.inf).amax(0)
        lo = vals.masked_fill(~valid, math.inf).amin(0)
        spread_t = hi - lo  # every lag has row 0 among its samples, so hi ≥ lo
        mean, spread = mean_t.tolist(), spread_t.tolist()
        first_row = dots[0].tolist()
        method, sampled = "fft+sampled", int(rows.numel())
        full = None
    max_spread = max(spread)
    scale = max(max(abs(v) for v in first_row), max(abs(v) for v in mean), 1e-300)
    return {
        "lags": list(range(length)),
        "mean": mean,
        "spread": spread,
        "first_row": first_row,
        "max_spread": max_spread,
        "relative_spread": max_spread / scale,
        "translation_invariant": max_spread <= REL_TOL * scale,
        "method": method,
        "rows_sampled": sampled,
    }


# -- shape of the profile ------------------------------------------------------------------------------


def monotonicity(profile: Sequence[float] | Tensor, *, rel_tol: float = REL_TOL) -> dict[str, Any]:
    """How a function of distance moves: rises, minimum, last value.

    A step counts as a rise when the next value exceeds the current one by more
    than ``rel_tol`` times the largest |value| (so rounding noise on a flat
    stretch is not a rise).

    Returns:
        ``head`` (first 8 values), ``increases``, ``steps`` (len − 1), ``argmin``,
        ``min``, ``first``, ``last``, ``non_increasing`` (no rise) and
        ``decays`` (no rise and last < first).
    """
    v = torch.as_tensor(profile, dtype=torch.float64).flatten()
    if v.numel() == 0:
        raise ValueError("profile is empty")
    tol = rel_tol * _scale(v)
    diffs = v[1:] - v[:-1]
    increases = int((diffs > tol).sum())
    argmin = int(torch.argmin(v))
    return {
        "head": v[:8].tolist(),
        "increases": increases,
        "steps": int(diffs.numel()),
        "argmin": argmin,
        "min": float(v[argmin]),
        "first": float(v[0]),
        "last": float(v[-1]),
        "non_increasing": increases == 0,
        "decays": increases == 0 and float(v[-1]) < float(v[0]) - tol,
    }


def symmetry(sim: Tensor) -> dict[str, Any]:
    """max |S − Sᵀ| of a square similarity (every head), absolute and relative to max |S|."""
    s = _heads(sim)
    if s.shape[-1] != s.shape[-2]:
        raise ValueError(f"symmetry needs a square similarity, got {tuple(s.shape)}")
    err = float((s - s.transpose(-1, -2)).abs().max()) if s.numel() else 0.0
    return {"asymmetry": err, "relative_asymmetry": err / _scale(s), "symmetric": err <= REL_TOL * _scale(s)}


# -- shift is a linear map -----------------------------------------------------------------------------


def shift_map(table: Tensor, offset: int, *, method: str = "auto") -> tuple[Tensor, Tensor]:
    """Least-squares M with T[p + k] ≈ M · T[p] for every p in [0, L − k).

    Fits the L − k equations (rows) for the d × d unknowns without any L × L
    matrix: ``qr`` solves with ``torch.linalg.lstsq`` on the (L − k, d) table
    (backward stable: residuals at rounding level, ≈ 5e-14 for the sinusoid
    table even though its condition number is ≈ 1e17); ``normal`` forms the
    d × d normal equations XᵀX·Mᵀ = XᵀY, solves them by Cholesky (pseudo-inverse
    when singular) and refines once on the residual — three L·d² matrix
    products, several times faster than QR, but its rounding grows with the
    condition number (≈ 2e-7 instead of 5e-14 on the 512 × 64 sinusoid; a
    random or learned table is well conditioned and loses nothing). ``auto``
    picks ``qr`` when L·d² ≤ QR_FLOP_LIMIT (2³¹, e.g. 2048 × 1024).

    Returns:
        (M (d, d) in the column-vector convention, residual (L − k, d) = Y − X·Mᵀ), float64.
    """
    t = _as_float64(table, name="table", dims=(2,))
    length, _ = t.shape
    if not isinstance(offset, int) or offset < 1 or offset >= length:
        raise ValueError(f"offset must be an int in [1, {length - 1}] for a table of {length} rows, got {offset!r}")
    if method == "auto":
        method = "qr" if length * t.shape[1] ** 2 <= QR_FLOP_LIMIT else "normal"
    x, y = t[: length - offset], t[offset:]  # (L−k, d): T[p] and T[p+k]
    if method == "qr":
        mt = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (d, d): Y ≈ X·Mᵀ
    elif method == "normal":
        gram = x.T @ x  # (d, d)
        chol, info = torch.linalg.cholesky_ex(gram)
        if int(info) == 0:
            def solve(rhs: Tensor) -> Tensor:
                return torch.cholesky_solve(rhs, chol)
        else:  # numerically rank-deficient table: minimum-norm solution
            pinv = torch.linalg.pinv(gram, hermitian=True)

            def solve(rhs: Tensor) -> Tensor:
                return pinv @ rhs
        mt = solve(x.T @ y)  # (d, d)
        mt = mt + solve(x.T @ (y - x @ mt))  # one step of iterative refinement
    else:
        raise ValueError(f"method must be 'auto', 'qr' or 'normal', got {method!r}")
    residual = y - x @ mt
    return mt.T.contiguous(), residual


def shift_residual(table: Tensor, offsets: Sequence[int] = (1, 2, 5, 17, 50), *, method: str = "auto") -> dict[str, Any]:
    """For each offset k: how well one linear map carries T[p] to T[p + k] for all p.

    Args:
        table: (L, d) position vectors.
        offsets: the k to fit; those ≥ L are skipped (listed in ``skipped``).
        method: see ``shift_map``.

    Returns:
        ``offsets``, ``max_residual`` (max |residual| per offset),
        ``relative_residual`` (‖residual‖_F ÷ ‖T[k:]‖_F per offset),
        ``equations_per_unknown`` ((L − k)/d per offset), ``method``, ``skipped``.
    """
    t = _as_float64(table, name="table", dims=(2,))
    length, width = t.shape
    used = [int(k) for k in offsets if 1 <= int(k) < length]
    if method == "auto":
        method = "qr" if length * width**2 <= QR_FLOP_LIMIT else "normal"
    max_res, rel_res = [], []
    for k in used:
        _, res = shift_map(t, k, method=method)
        target = t[k:].norm()
        max_res.append(float(res.abs().max()))
        rel_res.append(float(res.norm() / target) if target > 0 else 0.0)
    return {
        "offsets": used,
        "max_residual": max_res,
        "relative_residual": rel_res,
        "equations_per_unknown": [(length - k) / width for k in used],
        "method": method,
        "skipped": [int(k) for k in offsets if int(k) not in used],
    }


# -- schemes -------------------------------------------------------------------------------------------


def scheme_table(scheme: PositionScheme, positions: Tensor) -> Tensor | None:
    """The position vectors a scheme attaches to ``positions`` (T,), float64 (T, width), or None.

    Additive schemes: ``encode(positions)``. Rotary schemes: the rotated
    all-ones head vector at each position, through the scheme's own ``rotate``
    hook (its Gram is the scheme's similarity). Bias and none schemes have no
    position vectors: None.
    """
    positions = check_positions(positions)
    with torch.no_grad():
        if scheme.family == "additive":
            return scheme.encode(positions).detach().double().cpu()  # type: ignore[attr-defined]
        if scheme.family == "rotary":
            head_dim = getattr(scheme, "head_dim", None)
            if head_dim is None:
                return None
            ones = torch.ones(1, 1, positions.shape[-1], head_dim, dtype=torch.float64)  # (1, 1, T, Dh)
            q, _ = scheme.rotate(ones, ones, positions, positions)
            return q[0, 0].double().cpu()
    return None


def scheme_similarity(scheme: PositionScheme, length: int, *, offset: int = 0) -> Tensor:
    """``scheme.similarity`` over positions offset … offset + length − 1: (L, L) or (H, L, L) float64."""
    pos = default_positions(length, offset=offset)
    with torch.no_grad():
        return scheme.similarity(pos, pos).detach().double().cpu()


def defined_beyond(scheme: PositionScheme, *, length: int, probe: int | None = None) -> dict[str, Any]:
    """Does the scheme answer at positions past a training length, and with what?

    Evaluates the similarity at positions (probe, probe + 1) and (0, 1), probe
    defaulting to 8·length. "Defined" is not "works well": this only says a
    value exists and whether it matches the value at the origin.

    Returns:
        ``probe``, ``max_position`` (None: unbounded), ``defined``,
        ``self_at_probe`` (S(p, p)), ``next_at_probe`` (S(p, p+1)),
        ``next_at_origin`` (S(0, 1)), ``matches_origin`` and ``error`` (why not defined).
    """
    probe = 8 * length if probe is None else probe
    out: dict[str, Any] = {"probe": probe, "max_position": scheme.max_position(), "defined": False,
                           "self_at_probe": None, "next_at_probe": None, "next_at_origin": None,
                           "matches_origin": None, "error": None}
    pair = torch.tensor([0, 1])
    try:
        at_probe = _heads(scheme_similarity_at(scheme, pair + probe))
    except (ValueError, IndexError, RuntimeError) as err:
        out["error"] = str(err).splitlines()[0]
        return out
    at_origin = _heads(scheme_similarity_at(scheme, pair))
    out.update(
        defined=True,
        self_at_probe=float(at_probe[0, 0, 0]),
        next_at_probe=float(at_probe[0, 0, 1]),
        next_at_origin=float(at_origin[0, 0, 1]),
        matches_origin=bool(float((at_probe - at_origin).abs().max()) <= REL_TOL * _scale(at_origin)),
    )
    return out


def scheme_similarity_at(scheme: PositionScheme, positions: Tensor) -> Tensor:
    """``scheme.similarity(positions, positions)`` in float64, without gradients."""
    with torch.no_grad():
        return scheme.similarity(positions, positions).detach().double().cpu()


def scheme_properties(
    scheme: PositionScheme,
    *,
    length: int = 512,
    offsets: Sequence[int] = (1, 2, 5, 17, 50),
) -> dict[str, Any]:
    """One row of the property table for any registered scheme, from its induced similarity.

    Columns: ``norm_spread`` (of √S(i,i), the vector norms for a Gram),
    ``norm_constant``, ``translation_invariant`` (+ ``diagonal_spread``),
    ``monotone_decay`` (+ ``increases``; None when the similarity is not a
    function of distance), ``symmetric``, ``shift_residual``
    (max over offsets of the max |residual|, None without position vectors),
    ``defined_beyond`` and ``max_position``. A bias scheme is measured per head
    and a property holds when it holds for every head. A table with fewer rows
    than ``length`` (a learned table) is measured on the rows it has.
    """
    max_pos = scheme.max_position()
    n = length if max_pos is None else min(length, max_pos + 1)
    sim = _heads(scheme_similarity(scheme, n))  # (H, n, n)
    norms = similarity_norms(sim)  # (H, n)
    norm_spread = float((norms.amax(-1) - norms.amin(-1)).max())
    diag = diagonal_profile(sim)
    profiles = forward_profile(sim)  # (H, n)
    mono = [monotonicity(p) for p in profiles]
    table = scheme_table(scheme, default_positions(n))
    shift = shift_residual(table, offsets) if table is not None and table.shape[0] > 1 else None
    beyond = defined_beyond(scheme, length=n)
    return {
        "name": scheme.name,
        "family": scheme.family,
        "length": n,
        "heads": int(sim.shape[0]),
        "norm": float(norms.mean()),
        "norm_spread": norm_spread,
        "norm_constant": norm_spread <= REL_TOL * max(float(norms.max()), 1.0),
        "diagonal_spread": diag["max_spread"],
        "translation_invariant": diag["translation_invariant"],
        "increases": max(m["increases"] for m in mono),
        # decay "with distance" means something only when the similarity is a function of distance
        "monotone_decay": all(m["decays"] for m in mono) if diag["translation_invariant"] else None,
        "symmetric": symmetry(sim)["symmetric"],
        "shift_residual": None if shift is None else max(shift["max_residual"], default=None),
        "shift_relative": None if shift is None else max(shift["relative_residual"], default=None),
        "defined_beyond": beyond["defined"],
        "max_position": max_pos,
    }
