"""What ``posenc inspect`` measures on a checkpoint's tables: plain data, no plotting.

The position measures (norm by position, distance profile and translation
invariance, monotonicity, shift-is-linear residual) are the lab's own
functions in :mod:`posenc.lab.measures` — one source of truth per formula. This
module only chooses what to apply them to and adds what is specific to a real
table:

* **baselines of the same size**: the sinusoidal table (``sinusoid_table``,
  base 10000) and a seeded Gaussian table with the same L × d, so a number like
  "relative shift residual 0.31" can be read against "0 for a sinusoid, 0.45
  for noise";
* **centring**: learned tables carry a large common component (the mean row);
  it dominates raw dot products and is trivially carried by any shift map, so
  the shift fit and the cosine profile are also given for the centred table;
* **a determined shift fit**: M_k has d² unknowns fitted from (L − k)·d
  equations, so when L − k is not well above d any table — noise included —
  fits (at L − k ≤ d exactly). The fit is therefore also made on the table's
  coordinates in its first r = min(d, L/8) principal components (≥ 8 equations
  per unknown, as in the article's 512 × 64 sinusoid), for the baselines too;
* **distance R²**: the share of the Gram matrix's variance explained by a
  function of i − j alone (1 for a translation-invariant similarity), a graded
  version of the lab's exact spread test, which any learned table fails;
* **principal components** of the centred table, and how sinusoidal each
  component is along the positions (the "helix" reported for GPT-2's ``wpe``);
* **token table**: norm distribution, longest/shortest rows, neighbour lists by
  cosine and by dot product (:func:`posenc.embedding.neighbours`), and how
  often a row is out-scored on itself by a longer row (article 003, claim 17).

Shape legend: L positions, d width, V vocabulary, K principal components.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.embedding import neighbours
from posenc.lab.measures import monotonicity, norm_summary, shift_residual, table_distance_profile
from posenc.positions import sinusoid_table

SHIFT_OFFSETS: tuple[int, ...] = (1, 2, 5, 17, 50)
DEFAULT_WORDS: tuple[str, ...] = ("the", "king", "paris", "dog", "three", "running", "good", ".")


# -- position table -------------------------------------------------------------------------------------
def distance_r2(table: Tensor) -> float:
    """Share of the off-diagonal cosine similarities explained by a function of i − j alone.

    With C the cosine Gram of the rows (directions only: norms are measured
    separately, and one long row would otherwise dominate) and m(δ) the mean
    of diagonal δ (the best function of distance in least squares),
    R² = 1 − Σ (C_ij − m(j − i))² / Σ (C_ij − C̄)², over i ≠ j (the main
    diagonal is all ones). 1 for a translation-invariant similarity; about
    2/L for a random table, whose off-diagonal cosines are noise. NaN (JSON
    ``null``) when the off-diagonal cosines do not vary at all: an all-zero or
    constant table has no similarity structure to explain, and must not score
    like a sinusoid.
    """
    t = F.normalize(table.detach().double(), dim=-1)
    gram = t @ t.T  # (L, L)
    length = gram.shape[0]
    off = ~torch.eye(length, dtype=torch.bool)
    resid = 0.0
    for lag in range(1, length):
        for diag in (gram.diagonal(offset=lag), gram.diagonal(offset=-lag)):
            resid += float(((diag - diag.mean()) ** 2).sum())
    values = gram[off]
    total = float(((values - values.mean()) ** 2).sum())
    return 1.0 - resid / total if total > 1e-12 * values.numel() else math.nan


def sinusoid_likeness(series: Tensor, *, pad: int = 8) -> dict[str, float]:
    """The single sinusoid that best fits a series over positions, and the share of variance it explains.

    The frequency is the peak of the mean-removed series' spectrum, zero-padded
    ``pad``-fold (so a fractional number of cycles is found to 1/pad); amplitude,
    phase and offset are then fitted by least squares.

    Returns:
        ``cycles`` (over the series), ``period`` (in positions) and ``r2``.
    """
    y = series.detach().double()
    y = y - y.mean()
    n = y.numel()
    spectrum = torch.fft.rfft(y, n=pad * n).abs()
    spectrum[0] = 0.0
    cycles = int(spectrum.argmax()) / pad
    p = torch.arange(n, dtype=torch.float64)
    basis = torch.stack((torch.sin(2 * math.pi * cycles * p / n), torch.cos(2 * math.pi * cycles * p / n),
                         torch.ones(n, dtype=torch.float64)), dim=1)  # (n, 3)
    coef = torch.linalg.lstsq(basis, y.unsqueeze(1)).solution
    fit = (basis @ coef).squeeze(1)
    total = float((y**2).sum())
    r2 = 1.0 - float(((y - fit) ** 2).sum()) / total if total > 0 else 0.0
    return {"cycles": cycles, "period": n / cycles if cycles else math.inf, "r2": r2}


def plane_rotation(coords: Tensor) -> dict[str, float]:
    """How position moves in one plane (two coordinates, e.g. PC1–PC2): angle turned per step, and radius.

    A sinusoid pair turns by the same angle at every step on a circle (std 0,
    radius constant); the numbers say how close a learned plane is to that.

    Returns:
        ``step_degrees`` (mean signed angle per position step, in (−180, 180]),
        ``step_degrees_std``, ``radius`` (mean) and ``radius_cv`` (std ÷ mean).
    """
    c = coords.detach().double()
    c = c - c.mean(0)
    angle = torch.atan2(c[:, 1], c[:, 0])
    step = torch.remainder(angle[1:] - angle[:-1] + math.pi, 2 * math.pi) - math.pi  # (L − 1,)
    radius = c.norm(dim=1)
    return {"step_degrees": math.degrees(float(step.mean())), "step_degrees_std": math.degrees(float(step.std())),
            "radius": float(radius.mean()), "radius_cv": float(radius.std() / radius.mean())}


def pc_coordinates(table: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Coordinates (L, k) of the centred rows in their first ``k`` principal directions, and all shares of variance."""
    t = table.detach().double()
    u, s, _ = torch.linalg.svd(t - t.mean(0), full_matrices=False)  # u (L, r), s (r,)
    var = s**2
    share = var / var.sum() if float(var.sum()) > 0 else var
    return u[:, :k] * s[:k], share


def shift_in_components(table: Tensor, offsets: Sequence[int], *, per_unknown: int = 8) -> dict[str, Any]:
    """The lab's ``shift_residual`` on the table's first r principal coordinates, r = min(d, L // per_unknown).

    Returns:
        the lab's result plus ``components`` (r) and ``variance_kept`` (their share of the variance).
    """
    length, width = table.shape
    r = max(2, min(width, length // per_unknown))
    coords, share = pc_coordinates(table, r)
    return {"components": r, "variance_kept": float(share[:r].sum()), **shift_residual(coords, offsets)}


def principal_components(table: Tensor, *, k: int = 6) -> dict[str, Any]:
    """PCA of the centred table: explained variance and each position's first coordinates.

    Returns:
        ``components_for`` (how many components hold 50 / 90 / 99 % of the variance),
        ``explained`` (share of variance of the first ``k`` components),
        ``cumulative``, ``coords`` (L × min(k, 3) projections, for plots) and
        ``components`` (per component: ``sinusoid_likeness`` of its trajectory)
        and ``pc12_rotation`` (``plane_rotation`` in the PC1–PC2 plane).
    """
    k = min(k, *table.shape)
    coords, share = pc_coordinates(table, k)  # (L, K): projections on the components
    cumulative = share.cumsum(0)
    return {
        "components_for": {f"{q:g}": int((cumulative < q - 1e-12).sum()) + 1 for q in (0.5, 0.9, 0.99)},
        "explained": share[:k].tolist(),
        "cumulative": share[:k].cumsum(0).tolist(),
        "coords": coords.tolist(),
        "components": [sinusoid_likeness(coords[:, c]) for c in range(k)],
        "pc12_rotation": plane_rotation(coords[:, :2]) if k >= 2 else None,
    }


def cosine_profile(table: Tensor) -> list[float]:
    """Mean cosine between positions i and i + δ, for δ = 0 … L − 1."""
    return table_distance_profile(F.normalize(table.detach().double(), dim=-1))["mean"]


def cosine_gram(table: Tensor, *, max_side: int = 256) -> dict[str, Any]:
    """cos(P[i], P[j]) on every ``step``-th position (step chosen so the side is ≤ ``max_side``), for plots."""
    step = max(1, math.ceil(table.shape[0] / max_side))
    t = F.normalize(table.detach().double()[::step], dim=-1)
    return {"step": step, "values": (t @ t.T).tolist()}


def baselines(length: int, width: int, *, seed: int = 0) -> dict[str, Tensor]:
    """A sinusoidal table (base 10000; odd widths drop the last column) and a seeded Gaussian table, L × d."""
    even = width - width % 2
    sin = sinusoid_table(torch.arange(length), even)
    if even != width:
        sin = torch.cat((sin, torch.zeros(length, 1, dtype=torch.float64)), dim=1)
    gen = torch.Generator().manual_seed(seed)
    return {"sinusoid": sin, "random": torch.randn(length, width, generator=gen, dtype=torch.float64)}


def analyse_positions(table: Tensor, *, offsets: Sequence[int] = SHIFT_OFFSETS, seed: int = 0,
                      compare: bool = True) -> dict[str, Any]:
    """Every position measure of ``table`` (L, d), with the same measures on the baselines.

    Returns:
        ``shape``, ``norms`` (lab ``norm_summary``), ``profile`` (lab
        ``table_distance_profile`` of the Gram), ``cosine_profile``,
        ``distance_r2``, ``monotonic`` (lab ``monotonicity`` of the Gram and of
        the cosine profile), ``shift`` and ``shift_centred`` (lab
        ``shift_residual``), ``shift_pcs`` (``shift_in_components``), ``pca`` and, when ``compare``, the same summary
        for the sinusoid and random baselines under ``baselines``.
    """
    t = table.detach().double()
    if t.dim() != 2 or t.shape[0] < 2:
        raise ValueError(f"a position table must be (L ≥ 2, d), got shape {tuple(t.shape)}")
    length, width = t.shape
    profile = table_distance_profile(t)
    cos = cosine_profile(t)
    used = [k for k in offsets if k < length]
    out: dict[str, Any] = {
        "shape": [length, width],
        "norms": norm_summary(t),
        "mean_row_share": float(t.mean(0).norm() ** 2 / (t.norm(dim=1) ** 2).mean()),
        "profile": profile,
        "cosine_profile": cos,
        "distance_r2": distance_r2(t),
        "monotonic": {"gram": monotonicity(profile["mean"]), "cosine": monotonicity(cos)},
        "shift": shift_residual(t, used),
        "shift_centred": shift_residual(t - t.mean(0), used),
        "shift_pcs": shift_in_components(t, used),
        "pca": principal_components(t),
        "cosine_gram": cosine_gram(t),
    }
    if compare:
        out["baselines"] = {}
        for name, base in baselines(length, width, seed=seed).items():
            base_profile = table_distance_profile(base)
            out["baselines"][name] = {
                "profile_mean": base_profile["mean"],
                "relative_spread": base_profile["relative_spread"],
                "cosine_profile": cosine_profile(base),
                "distance_r2": distance_r2(base),
                "monotonic_cosine": monotonicity(cosine_profile(base)),
                "shift": shift_residual(base, used),
                "shift_pcs": shift_in_components(base, used),
                "pca": {k: v for k, v in principal_components(base).items() if k != "coords"},
            }
    return out


# -- token table ----------------------------------------------------------------------------------------
def token_string(vocab: list[str] | None, index: int) -> str:
    return vocab[index] if vocab is not None and 0 <= index < len(vocab) else f"#{index}"


def pick_tokens(table: Tensor, vocab: list[str] | None, requested: Sequence[str] | None = None) -> list[int]:
    """Row ids to list neighbours for: the requested words/ids, else common words found in the vocabulary.

    Words are looked up as written and with the usual word-start markers
    (``Ġ`` byte-level BPE, ``▁`` SentencePiece). Without a vocabulary, rows at
    evenly spaced ids are taken.
    """
    lookup = {s: i for i, s in enumerate(vocab)} if vocab else {}
    ids: list[int] = []
    for word in requested or DEFAULT_WORDS:
        hit = next((lookup[w] for w in (word, "Ġ" + word, "▁" + word) if w in lookup), None)
        if hit is None and word.lstrip("#").isdigit() and (word.startswith("#") or not lookup):
            hit = int(word.lstrip("#"))
        if hit is None:
            if requested:
                raise ValueError(f"token {word!r} is not in the vocabulary; give a string from it or an id as #123")
            continue
        if not 0 <= hit < table.shape[0]:
            raise ValueError(f"token id {hit} is outside the token table's {table.shape[0]} rows")
        ids.append(hit)
    if not ids:
        ids = [int(i) for i in torch.linspace(0, table.shape[0] - 1, 6).round().long()]
    return ids


def self_score(table: Tensor, *, sample: int = 1000, seed: int = 0, chunk: int = 256) -> dict[str, Any]:
    """How often a row, used as the hidden vector, is out-scored on itself by a longer row (dot product).

    Over a seeded sample of rows r: is argmax_j (T_j · T_r) = r? A row always
    wins by cosine; by dot product a row whose norm outweighs the angle can win
    instead (article 003, claim 17).

    Returns:
        ``sampled``, ``self_top`` (share where the row wins), ``beaten_by``
        (the ids that most often beat others, with counts).
    """
    t = table.detach().float()
    vocab = t.shape[0]
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randperm(vocab, generator=gen)[: min(sample, vocab)]
    winners = []
    for start in range(0, rows.numel(), chunk):
        r = rows[start : start + chunk]
        winners.append((t[r] @ t.T).argmax(dim=1))  # (chunk,)
    win = torch.cat(winners)
    beaten = win[win != rows]
    ids, counts = beaten.unique(return_counts=True)
    order = counts.argsort(descending=True)[:10]
    return {"sampled": int(rows.numel()), "self_top": float((win == rows).double().mean()),
            "beaten_by": [[int(ids[i]), int(counts[i])] for i in order]}


def analyse_tokens(table: Tensor, vocab: list[str] | None, *, tokens: Sequence[str] | None = None,
                   k: int = 8, sample: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Norm distribution, extreme rows, neighbour lists by cosine and by dot product, self-score."""
    # float32 (or float64) as given: a float64 copy of a large vocabulary would double the memory;
    # norms are accumulated in float64 either way.
    t = table.detach() if table.dtype in (torch.float32, torch.float64) else table.detach().float()
    norms = torch.linalg.vector_norm(t, dim=1, dtype=torch.float64)  # (V,)
    qs = [0.0, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0]
    order = norms.argsort()
    lists = []
    for index in pick_tokens(t, vocab, tokens):
        entry: dict[str, Any] = {"id": index, "token": token_string(vocab, index), "norm": float(norms[index])}
        for metric in ("cosine", "dot"):
            idx, score = neighbours(t, index, k=k, metric=metric)
            entry[metric] = [{"id": int(i), "token": token_string(vocab, int(i)), "score": float(s),
                              "norm": float(norms[int(i)])} for i, s in zip(idx, score)]
        cos_ids = {n["id"] for n in entry["cosine"]}
        entry["dot_only"] = [n["token"] for n in entry["dot"] if n["id"] not in cos_ids]
        lists.append(entry)
    return {
        "shape": list(t.shape),
        "norm_quantiles": dict(zip(["min", "p01", "p25", "median", "p75", "p99", "max"],
                                   torch.quantile(norms, torch.tensor(qs, dtype=torch.float64)).tolist())),
        "norm_mean": float(norms.mean()),
        "norms": norms.tolist(),
        "longest": [{"id": int(i), "token": token_string(vocab, int(i)), "norm": float(norms[i])}
                    for i in order.flip(0)[:10]],
        "shortest": [{"id": int(i), "token": token_string(vocab, int(i)), "norm": float(norms[i])}
                     for i in order[:10]],
        "neighbours": lists,
        "self_score": self_score(t, sample=sample, seed=seed),
    }
