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

#: Above this many multiply-adds (L·d²) ``shift_residual`` uses the shared-Gram method instead of QR.
QR_FLOP_LIMIT = 2**31

#: float64 unit roundoff ×2 (machine epsilon, 2.2e-16): the unit of every error bound below.
EPS = torch.finfo(torch.float64).eps
#: float32 unit roundoff u = 2⁻²⁴ (half of float32's machine epsilon): one rounding changes a number by ≤ u·|x|.
U32 = 2.0**-24
#: λ of the probabilistic dot-product bound (Higham & Mary 2019, Thm 3.1): |fl(x·y) − x·y| ≤ λ·√n·u·Σ|x_c·y_c|
#: holds with probability ≥ 1 − 2·n·exp(−λ²/2) (rounding errors independent, mean zero); λ = 10: < 4e-17 at n = 2¹⁶.
PROBABILISTIC_LAMBDA = 10.0


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
    """A magnitude to make tolerances relative: max |x|, or 1 for an all-zero tensor.

    max |x| = max(−min x, max x), read in one pass without the |x| copy (the same number, NaN included).
    """
    if not x.numel():
        return 1.0
    lo, hi = torch.aminmax(x)
    m = float(torch.maximum(-lo, hi))
    return m if m > 0 else 1.0


# -- rounding: how far a computed number can be from the exact one -------------------------------------
#
# Every test of "equal up to rounding" in the lab compares against one of these bounds, so that a claim's
# tolerance follows the error of the method that produced the number, at every size (Higham, "Accuracy and
# Stability of Numerical Algorithms", 2nd ed.: §3.1 for dot products, §24.1 for the FFT).


def dot_error_bound(table: Tensor) -> float:
    """Bound on the rounding error of one float64 dot product of two rows of ``table`` (L, d).

    |fl(x·y) − x·y| ≤ γ_d·Σ|x_c·y_c| ≤ d·ε·max‖row‖² (γ_d ≈ d·ε, Cauchy–Schwarz).
    """
    t = _as_float64(table, name="table", dims=(2,))
    if t.numel() == 0:
        return 0.0
    return t.shape[1] * EPS * float(torch.linalg.vector_norm(t, dim=-1).max()) ** 2


def float32_dot_error_bound(abs_products: Tensor, n: int) -> Tensor:
    """Bound on the rounding error of float32 dot products of length ``n``, given Σ|x_c·y_c| (any shape).

    Each addition of a float32 reduction rounds once; the worst case grows like n·u (γ_n), but the errors
    of a long sum are independent and mostly cancel, so the bound used is the probabilistic one,
    λ·√n·u·Σ|x_c·y_c| (Higham & Mary, "A New Approach to Probabilistic Rounding Error Analysis", SISC 2019):
    it still separates the right dot product from another row's at every n, where γ_n·Σ|x·y| (≈ n·u·n) would not.
    """
    return PROBABILISTIC_LAMBDA * math.sqrt(n) * U32 * abs_products.to(torch.float64)


def autocorrelation_error_bound(table: Tensor) -> float:
    """Bound on the absolute error of every lag of ``_autocorrelation(table)`` (FFT path).

    The FFT's norm-wise error is ≤ c·log₂(n)·ε·‖x‖ (Higham §24.1); forward transform, squaring and inverse
    transform of all columns give, by Parseval, |error| ≤ 4·log₂(n)·ε·‖T‖²_F at every lag — independent of
    the lag, so the *mean* along diagonal δ (÷ (L − δ)) is least accurate at the largest lags.
    """
    t = _as_float64(table, name="table", dims=(2,))
    nfft = 1 << (2 * t.shape[0] - 1).bit_length()
    return 4 * math.log2(nfft) * EPS * float(torch.linalg.vector_norm(t)) ** 2


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


def _diagonal_stats(s: Tensor, *, spreads: bool = True, block: int = 64) -> tuple[Tensor, Tensor | None]:
    """Mean (and max − min) of every diagonal j − i = δ of (H, n, m), δ = −(n−1) … m−1: (H, n + m − 1) each.

    Rows are taken ``block`` at a time into a buffer padded so that a strided view puts diagonal δ in
    column δ + n − 1 (view[r, c] = buf[r, r + c]) and every position past a diagonal's end falls in padding;
    reductions down the rows then give all lags at once, reading memory row by row from a buffer that stays
    in cache. (Reading each diagonal in turn strides by m + 1 elements — a cache miss per element — and is
    several times slower.) The padding is −inf, +inf and 0 for the max, the min and the sum.
    """
    h, n, m = s.shape
    lags = torch.arange(-(n - 1), m)
    counts = torch.minimum(torch.minimum(m - lags, n + lags), torch.tensor(min(n, m))).double()  # (n + m − 1,)
    total = torch.zeros(h, n + m - 1, dtype=torch.float64)
    high = torch.full_like(total, -math.inf)
    low = torch.full_like(total, math.inf)
    rows = min(block, n)
    width = rows + n + m - 1  # the view's last row reaches buf[rows − 1, (rows − 1) + (n + m − 2)]
    buf = torch.empty(rows, width, dtype=torch.float64)
    view = buf.as_strided((rows, n + m - 1), (width + 1, 1))  # view[r, c] = buf[r, r + c]
    for start in range(0, n, rows):
        r = min(rows, n - start)
        first = n - 1 - start  # row start + r' of s sits at buf[r', first + j]: diagonal δ in column δ + n − 1
        for head in range(h):
            buf[:r, :first] = 0.0
            buf[:r, first : first + m] = s[head, start : start + r]
            buf[:r, first + m :] = 0.0
            total[head] += view[:r].sum(0)
            if spreads:
                buf[:r, :first] = -math.inf
                buf[:r, first + m :] = -math.inf
                torch.maximum(high[head], view[:r].amax(0), out=high[head])
                buf[:r, :first] = math.inf
                buf[:r, first + m :] = math.inf
                torch.minimum(low[head], view[:r].amin(0), out=low[head])
    return total / counts, (high - low) if spreads else None


def diagonal_profile(sim: Tensor) -> dict[str, Any]:
    """Mean and spread (max − min) of a similarity along every diagonal j − i = δ.

    A similarity that depends on i − j alone has zero spread on every diagonal
    (up to rounding): that is translation invariance. Computed exactly from the
    given matrix, all lags at once (``_diagonal_stats``).

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
    means, spreads = _diagonal_stats(s)
    squeeze = sim.dim() == 2
    max_spread = float(spreads.max())
    scale = _scale(s)  # one pass over S, shared by both uses
    return {
        "lags": lags,
        "mean": (means[0] if squeeze else means).tolist(),
        "spread": (spreads[0] if squeeze else spreads).tolist(),
        "max_spread": max_spread,
        "relative_spread": max_spread / scale,
        "translation_invariant": max_spread <= REL_TOL * scale,
        "method": "exact",
    }


def forward_profile(sim: Tensor) -> Tensor:
    """The similarity as a function of distance δ = j − i ≥ 0: the mean of each upper diagonal.

    Returns:
        (Tj,) for a 2-d similarity, (H, Tj) for a 3-d one, float64.
    """
    s = _heads(sim)
    means, _ = _diagonal_stats(s, spreads=False)
    out = means[:, s.shape[-2] - 1 :]  # lags 0 … Tj − 1
    return out[0] if sim.dim() == 2 else out


def _autocorrelation(t: Tensor, *, chunk: int = 64) -> Tensor:
    """r[δ] = Σ_c Σ_{i < L−δ} t[i, c]·t[i+δ, c] for δ = 0 … L−1, by FFT per column (O(d·L log L))."""
    length = t.shape[0]
    nfft = 1 << (2 * length - 1).bit_length()  # ≥ 2L − 1: no circular wrap-around
    total = torch.zeros(nfft // 2 + 1, dtype=torch.float64)
    for start in range(0, t.shape[1], chunk):  # column chunks keep the complex buffer small
        columns = t[:, start : start + chunk].T.contiguous()  # (c, L): each transform reads contiguous memory
        spectrum = torch.fft.rfft(columns, n=nfft, dim=-1)  # (c, nfft/2+1)
        total += (spectrum.real**2 + spectrum.imag**2).sum(0)
    return torch.fft.irfft(total, n=nfft)[:length]


def sampled_diagonals(values: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """Re-index S(i, j) of sampled rows by distance: out[s, δ] = values[s, rows[s] + δ].

    Args:
        values: (S, L) — S(i, j) for the sampled rows i = ``rows`` (S,) and every j.

    Returns:
        (S, L) values by distance δ = 0 … L−1 and the (S, L) mask of those that exist (rows[s] + δ < L).
    """
    length = values.shape[-1]
    cols = rows[:, None] + torch.arange(length)[None, :]  # (S, L): j = i + δ
    valid = cols < length
    return values.gather(1, cols.clamp(max=length - 1)), valid


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
        ``translation_invariant``, ``method``, ``rows_sampled``, and the
        rounding bounds of the method used: ``dot_error_bound`` (each entry of
        ``first_row`` and each sampled dot) and ``mean_error_bound`` (per lag:
        the FFT's bound ÷ (L − δ), or a dot's bound plus the mean's summation).
    """
    t = _as_float64(table, name="table", dims=(2,))
    length = t.shape[0]
    if length == 0:
        raise ValueError("table has no rows")
    dot_error = dot_error_bound(t)
    if length <= exact_rows:
        gram = t @ t.T  # (L, L)
        full = diagonal_profile(gram)
        zero = length - 1  # index of lag 0 in full["lags"]
        mean, spread = full["mean"][zero:], full["spread"][zero:]
        first_row = gram[0].tolist()
        method, sampled = "exact", length
        # a mean of n dot products: each dot's error, plus the summation's (≤ n·ε·max|S|)
        top = _scale(gram)
        mean_error = [dot_error + (length - lag) * EPS * top for lag in range(length)]
    else:
        mean_t = _autocorrelation(t) / torch.arange(length, 0, -1, dtype=torch.float64)
        gen = torch.Generator().manual_seed(seed)
        extra = torch.randperm(length - 2, generator=gen)[: max(sample_rows - 2, 0)] + 1
        rows = torch.cat((torch.tensor([0, length - 1]), extra)).sort().values  # (S,)
        dots = t[rows] @ t.T  # (S, L): T[i]·T[j] for sampled i
        vals, valid = sampled_diagonals(dots, rows)
        hi = vals.masked_fill(~valid, -math.inf).amax(0)
        lo = vals.masked_fill(~valid, math.inf).amin(0)
        spread_t = hi - lo  # every lag has row 0 among its samples, so hi ≥ lo
        mean, spread = mean_t.tolist(), spread_t.tolist()
        first_row = dots[0].tolist()
        method, sampled = "fft+sampled", int(rows.numel())
        bound = autocorrelation_error_bound(t)
        mean_error = (bound / torch.arange(length, 0, -1, dtype=torch.float64)).tolist()
    max_spread = max(spread)
    scale = max(max(abs(v) for v in first_row), max(abs(v) for v in mean), 1e-300)
    return {
        "lags": list(range(length)),
        "mean": mean,
        "spread": spread,
        "first_row": first_row,
        "max_spread": max_spread,
        "relative_spread": max_spread / scale,
        "translation_invariant": max_spread <= max(REL_TOL * scale, 2 * dot_error),
        "method": method,
        "rows_sampled": sampled,
        # what rounding alone can do to each number above (see dot_error_bound / autocorrelation_error_bound)
        "dot_error_bound": dot_error,
        "mean_error_bound": mean_error,
    }


# -- shape of the profile ------------------------------------------------------------------------------


def monotonicity(profile: Sequence[float] | Tensor, *, rel_tol: float = REL_TOL) -> dict[str, Any]:
    """How a function of distance moves: rises, minimum, last value.

    A step counts as a rise when the next value exceeds the current one by more
    than ``rel_tol`` times the largest |value| (so rounding noise on a flat
    stretch is not a rise).

    Returns:
        ``head`` (first 8 values), ``increases``, ``steps`` (len − 1), ``argmin``,
        ``min``, ``first``, ``last``, ``non_increasing`` (no rise),
        ``decays`` (no rise and last < first) and ``rises`` (every δ whose
        next value is a rise).
    """
    v = torch.as_tensor(profile, dtype=torch.float64).flatten()
    if v.numel() == 0:
        raise ValueError("profile is empty")
    tol = rel_tol * _scale(v)
    diffs = v[1:] - v[:-1]
    rising = diffs > tol
    increases = int(rising.sum())
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
        "rises": rising.nonzero().flatten().tolist(),
    }


def symmetry(sim: Tensor, *, tile: int = 128) -> dict[str, Any]:
    """max |S − Sᵀ| of a square similarity (every head), absolute and relative to max |S|.

    Compared tile by tile (``tile`` × ``tile`` blocks above the diagonal against their mirror images), so
    the transposed block is read from cache instead of striding down whole columns.
    """
    s = _heads(sim)
    if s.shape[-1] != s.shape[-2]:
        raise ValueError(f"symmetry needs a square similarity, got {tuple(s.shape)}")
    n, err = s.shape[-1], 0.0
    for i in range(0, n, tile):
        for j in range(i, n, tile):
            block = s[:, i : i + tile, j : j + tile] - s[:, j : j + tile, i : i + tile].transpose(-1, -2)
            err = max(err, float(block.abs().max()))
    scale = _scale(s)
    return {"asymmetry": err, "relative_asymmetry": err / scale, "symmetric": err <= REL_TOL * scale}


# -- shift is a linear map -----------------------------------------------------------------------------


def shift_map(table: Tensor, offset: int, *, method: str = "qr") -> tuple[Tensor, Tensor]:
    """Least-squares M with T[p + k] ≈ M · T[p] for every p in [0, L − k), with its residual.

    Fits the L − k equations (rows) for the d × d unknowns with
    ``torch.linalg.lstsq`` (``gelsd``: SVD based, backward stable, rank-revealing:
    residuals at rounding level, ≈ 5e-14 for the sinusoid table even though its
    condition number is ≈ 1e17). ``shift_residual`` has a faster method for
    many offsets at scale; this one returns the map itself.

    Returns:
        (M (d, d) in the column-vector convention, residual (L − k, d) = Y − X·Mᵀ), float64.
    """
    t = _as_float64(table, name="table", dims=(2,))
    length = _check_offset(t, offset)
    if method != "qr":
        raise ValueError(f"shift_map fits with method 'qr' only, got {method!r}; shift_residual has 'gram'")
    x, y = t[: length - offset], t[offset:]  # (L−k, d): T[p] and T[p+k]
    mt = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (d, d): Y ≈ X·Mᵀ
    return mt.T.contiguous(), y - x @ mt


def _check_offset(t: Tensor, offset: Any) -> int:
    length = t.shape[0]
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1 or offset >= length:
        raise ValueError(f"offset must be an int in [1, {length - 1}] for a table of {length} rows, got {offset!r}")
    return length


def _qr_fits(t: Tensor, offsets: Sequence[int]) -> list[tuple[float, float, float]]:
    """(max |residual|, ‖residual‖_F, its rounding bound) per offset, by Householder QR.

    The least-squares residual is Y minus its projection on the columns of X: Y − Q·(QᵀY) with X = QR.
    Householder QR is backward stable, so the residual is exact to d·ε·‖Y row‖ per entry (factor 10 for
    the constants) whatever X's condition number — ≈ 2e-13 on the ill-conditioned sinusoid — and it needs
    no solve: about four L·d² products per offset (``gelsd``'s SVD costs several times more).
    """
    out = []
    for k in offsets:
        x, y = t[: t.shape[0] - k], t[k:]  # (L−k, d)
        q, _ = torch.linalg.qr(x)  # (L−k, d) orthonormal columns spanning X's
        res = y - q @ (q.T @ y)  # (L−k, d)
        bound = 10 * t.shape[1] * EPS * float(y.norm(dim=-1).max())
        out.append((float(res.abs().max()), float(res.norm()), bound))
    return out


def _gram_fits(t: Tensor, offsets: Sequence[int]) -> list[tuple[float, float, float]]:
    """(‖residual‖_F as a bound on max |residual|, ‖residual‖_F, its rounding bound) per offset.

    One shared d × d Gram G = TᵀT; per offset, XᵀX and YᵀY are G minus k outer products, XᵀY one lagged
    product (the only L·d² work per offset), and the least-squares residual comes from d × d matrices alone:
    ‖Y − X·B‖² = tr(YᵀY) − tr(Bᵀ·XᵀY) with B = (XᵀX)⁺·XᵀY. Eigenvalues of XᵀX below d·ε·λ_max are
    dropped (the rank rule of ``gelsd``). The subtraction loses about d·ε·‖Y‖²_F, which sets the floor
    reported as the rounding bound: above it the residual is measured, below it it is rounding.
    """
    length, width = t.shape
    gram = t.T @ t  # (d, d), shared by every offset
    out = []
    for k in offsets:
        head, tail = t[:k], t[length - k :]  # (k, d): rows Y lacks, rows X lacks
        xtx = gram - tail.T @ tail  # (d, d)
        yty_trace = float((gram - head.T @ head).diagonal().sum())
        xty = t[: length - k].T @ t[k:]  # (d, d): the lagged product
        evals, evecs = torch.linalg.eigh(xtx)
        keep = evals > width * EPS * float(evals.max().clamp(min=0))
        proj = evecs[:, keep].T @ xty  # (r, d): XᵀY in the eigenbasis
        explained = float((proj**2 / evals[keep, None]).sum())
        squared = max(yty_trace - explained, 0.0)
        floor = math.sqrt(width * EPS * yty_trace * 4)
        out.append((math.sqrt(squared), math.sqrt(squared), floor))
    return out


def shift_residual(table: Tensor, offsets: Sequence[int] = (1, 2, 5, 17, 50), *, method: str = "auto") -> dict[str, Any]:
    """For each offset k: how well one linear map carries T[p] to T[p + k] for all p.

    Methods (reported under ``method``):

    * ``qr``: Householder QR per offset (``_qr_fits``) — the residual itself,
      max |entry| exact to rounding; about four L·d² products per offset.
    * ``gram``: one shared d × d Gram and one lagged product per offset; the
      residual's Frobenius norm from d × d matrices (``_gram_fits``), which is
      also reported as ``max_residual`` (an upper bound on max |entry|);
      below ``residual_error_bound`` it is rounding, not a measurement.
    * ``auto``: ``qr`` when L·d² ≤ QR_FLOP_LIMIT (2³¹, e.g. 2048 × 1024), else ``gram``.

    Args:
        table: (L, d) position vectors.
        offsets: the k to fit; those ≥ L are skipped (listed in ``skipped``).
        method: ``auto``, ``qr`` or ``gram``.

    Returns:
        ``offsets``, ``max_residual`` (per offset), ``relative_residual``
        (‖residual‖_F ÷ ‖T[k:]‖_F per offset), ``residual_error_bound`` (per
        offset: what rounding alone can leave in ``max_residual`` with this
        method), ``equations_per_unknown`` ((L − k)/d per offset), ``method``,
        ``skipped``.
    """
    t = _as_float64(table, name="table", dims=(2,))
    finite = torch.isfinite(t).all(dim=1)
    if not bool(finite.all()):  # a NaN residual would otherwise read as 0.0, a perfect fit
        row = int((~finite).nonzero()[0])
        raise ValueError(f"table row {row} holds NaN or ±inf; shift_residual measures finite tables only")
    length, width = t.shape
    used = [int(k) for k in offsets if 1 <= int(k) < length]
    if method == "auto":
        method = "qr" if length * width**2 <= QR_FLOP_LIMIT else "gram"
    if method not in ("qr", "gram"):
        raise ValueError(f"method must be 'auto', 'qr' or 'gram', got {method!r}")
    fits = (_qr_fits if method == "qr" else _gram_fits)(t, used)
    targets = [float(t[k:].norm()) for k in used]
    return {
        "offsets": used,
        "max_residual": [f[0] for f in fits],
        # an all-zero T[k:] is fitted by any map: 0/0, undefined (NaN → null in JSON), not a perfect 0.0
        "relative_residual": [f[1] / y if y > 0 else math.nan for f, y in zip(fits, targets)],
        "residual_error_bound": [f[2] for f in fits],
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
    profiles = torch.tensor(diag["mean"], dtype=torch.float64).view(sim.shape[0], -1)[:, n - 1 :]  # (H, n): δ ≥ 0
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
