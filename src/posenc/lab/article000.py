"""Article 000 — how a positional encoding puts order into attention (the first eight lab claims; docs/lab.md).

Every number comes from the library: the tables from ``posenc.positions``
(``build("naive" | "sinusoidal" | "learned")``), attention from
``MultiHeadAttention``, measurements from ``posenc.lab.measures``.

Shape legend: L positions, d width, T tokens in a toy sentence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc.attention import MultiHeadAttention
from posenc.embedding import TokenEmbedding
from posenc.lab import measures
from posenc.lab.core import Finding, LabConfig, experiment
from posenc.positions import build, default_positions
from posenc.positions.absolute import sinusoid_frequencies

SHIFT_OFFSETS = (1, 2, 5, 17, 50)


def sinusoid(cfg: LabConfig):
    return build("sinusoidal", dim=cfg.dim, num_heads=1, base=cfg.base)


def _softmax_logits(x: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product logits of a set of vectors with itself: X·Xᵀ/√width."""
    return x @ x.T / math.sqrt(x.shape[-1])


@experiment("naive-position", article="000", title="The raw index as a coordinate swamps content")
def naive_position(cfg: LabConfig, *, width: int = 4, tokens: int = 6, starts: tuple[int, ...] = (0, 100)) -> Finding:
    """Append the raw index to 4-wide content vectors; compare the logits' position and content parts."""
    content = 0.5 * torch.randn(tokens, width, generator=cfg.generator(1), dtype=torch.float64)  # (T, 4)
    scheme = build("naive", dim=width, num_heads=1)
    root = math.sqrt(width + scheme.extra_width)

    def window(start: int) -> dict[str, float]:
        pos = default_positions(tokens, offset=start)
        x = scheme.add(content[None], pos)[0]  # (T, 5): content | index
        logits = x @ x.T / root
        position_part = scheme.similarity(pos, pos) / root  # i·j / √5
        content_part = content @ content.T / root
        return {
            "start": start,
            "position_spread": float(position_part.max() - position_part.min()),
            "content_spread": float(content_part.max() - content_part.min()),
            "max_prob": float(logits.softmax(-1).max()),
        }

    windows = [window(s) for s in starts]
    curve_starts = list(range(0, max(cfg.length - tokens, 1) + 1, max(cfg.length // 64, 1)))
    curve = [window(s) for s in curve_starts]
    last = windows[-1]
    holds = last["position_spread"] > 10 * last["content_spread"] and last["max_prob"] > 0.99 and (
        windows[0]["position_spread"] < last["position_spread"])
    return Finding(
        id="", claim="A raw position index appended as a coordinate adds i·j/√5 to the logits: its spread grows "
        "with the position until it swamps content and the softmax saturates (max probability → 1).",
        params={"content_width": width, "tokens": tokens, "starts": list(starts), "seed": cfg.seed},
        values={"windows": windows}, holds=holds,
        series={"starts": curve_starts, "position_spread": [w["position_spread"] for w in curve],
                "content_spread": [w["content_spread"] for w in curve], "max_prob": [w["max_prob"] for w in curve]},
    )


def entry_error(max_angle: float) -> float:
    """Bound on the float64 rounding of one sin/cos table entry at angles up to ``max_angle``.

    The angle p·ω is rounded (relative ε, so absolute ε·|p·ω|) and sin/cos add ε: ε·(|p·ω| + 1).
    Every tolerance below is built from it and from the measures' own bounds, so it grows with L and d
    exactly as the rounding does (issue: a fixed 1e-9·d/2 failed a true claim above 4,096 positions).
    """
    return measures.EPS * (abs(max_angle) + 1)


@experiment("sinusoid-norm", article="000", title="Every sinusoid row has norm √(d/2)")
def sinusoid_norm(cfg: LabConfig) -> Finding:
    """Row norms of the sinusoidal table over L positions."""
    table = sinusoid(cfg).encode(default_positions(cfg.length))
    summary = measures.norm_summary(table)
    expected = math.sqrt(cfg.dim / 2)
    # sin² + cos² of one rounded angle is 1 to 2ε per pair; summing d/2 pairs and the square root add d·ε
    tolerance = (cfg.dim + 4) * measures.EPS * expected
    holds = abs(summary["norm"] - expected) <= tolerance and summary["norm_spread"] <= tolerance
    return Finding(
        id="", claim="The sinusoidal table has the same norm √(d/2) at every position.",
        params={"dim": cfg.dim, "length": cfg.length, "base": cfg.base},
        values={"norm": summary["norm"], "norm_spread": summary["norm_spread"], "expected": expected,
                "tolerance": tolerance}, holds=holds,
    )


@experiment("distance-only", article="000", title="PE(i)·PE(j) depends on i − j alone")
def distance_only(cfg: LabConfig) -> Finding:
    """Spread of the Gram matrix along each diagonal, and its distance from Σ cos((i−j)·ω)."""
    table = sinusoid(cfg).encode(default_positions(cfg.length))
    profile = measures.table_distance_profile(table)
    omega = sinusoid_frequencies(cfg.dim, cfg.base)
    lags = torch.arange(cfg.length, dtype=torch.float64)
    formula = torch.cos(lags[:, None] * omega[None, :]).sum(-1)  # Σ_i cos(δ·ω_i), (L,)
    # a dot of two rows is off by at most 2·d·(entry error) through the table's own rounding
    table_error = 2 * cfg.dim * entry_error((cfg.length - 1) * float(omega.max()))
    spread_tolerance = 2 * (profile["dot_error_bound"] + table_error)
    mean = torch.tensor(profile["mean"], dtype=torch.float64)  # float64: a default-dtype tensor rounds to 6e-8
    first = torch.tensor(profile["first_row"], dtype=torch.float64)
    mean_tolerance = torch.tensor(profile["mean_error_bound"], dtype=torch.float64) + table_error  # per lag
    first_tolerance = profile["dot_error_bound"] + table_error
    mean_gap, first_gap = (mean - formula).abs(), (first - formula).abs()
    formula_error = max(float(mean_gap.max()), float(first_gap.max()))
    worst = float(torch.cat((mean_gap / mean_tolerance, first_gap / first_tolerance)).max())
    holds = profile["max_spread"] <= spread_tolerance and worst <= 1
    return Finding(
        id="", claim="The inner product of two sinusoid rows depends only on their distance: "
        "along each diagonal of the Gram matrix the spread is rounding noise, and it equals Σ_i cos((i−j)·ω_i).",
        params={"dim": cfg.dim, "length": cfg.length, "base": cfg.base, "method": profile["method"]},
        values={"diagonal_spread": profile["max_spread"], "formula_error": formula_error,
                "tolerance": {"diagonal_spread": spread_tolerance,
                              "formula_error": float(torch.cat((mean_tolerance, first_tolerance * torch.ones(1))).max()),
                              "formula_error_over_tolerance": worst,
                              "from": f"rounding bounds of the {profile['method']} method and of the float64 table"}},
        holds=holds,
    )


@experiment("not-monotonic", article="000", title="…but that function of distance is not decreasing")
def not_monotonic(cfg: LabConfig) -> Finding:
    """Rises, minimum and last value of PE(0)·PE(δ) over δ = 0 … L−1."""
    table = sinusoid(cfg).encode(default_positions(cfg.length))
    profile = measures.table_distance_profile(table)
    mono = measures.monotonicity(profile["mean"])
    return Finding(
        id="", claim="The sinusoid inner product does not decay monotonically with distance: it rises at many "
        "steps and its minimum lies well before the largest distance.",
        params={"dim": cfg.dim, "length": cfg.length, "base": cfg.base},
        values={"profile_head": mono["head"], "increases": mono["increases"], "steps": mono["steps"],
                "argmin": mono["argmin"], "min": mono["min"], "last": mono["last"]},
        holds=mono["increases"] > 0,
        series={"profile": profile["mean"]},
    )


def rotation_error(table: torch.Tensor, omega: torch.Tensor, k: int) -> float:
    """max_p |R_k·PE(p) − PE(p + k)| for the explicit block rotation R_k = ⊕_i [[cos kω_i, sin kω_i], [−sin kω_i, cos kω_i]]."""
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (d/2,)
    sin_p, cos_p = table[:-k, 0::2], table[:-k, 1::2]  # (L−k, d/2): layout sin, cos interleaved
    moved = torch.stack((c * sin_p + s * cos_p, -s * sin_p + c * cos_p), dim=-1).flatten(-2)
    return float((moved - table[k:]).abs().max())


@experiment("shift-is-linear", article="000", title="A shift by k is one linear map (a rotation per pair)")
def shift_is_linear(cfg: LabConfig) -> Finding:
    """Least-squares fit of M_k with PE(p + k) = M_k·PE(p), sinusoid vs a random table of the same size."""
    table = sinusoid(cfg).encode(default_positions(cfg.length))
    # a random embedding table of the same shape, initialised as token tables usually are: N(0, 1/d)
    # entries (rows of norm ≈ 1). The relative residual does not depend on this scale; the absolute
    # one does, and this is the scale at which the article's ≈ 0.5 was measured.
    random = torch.randn(cfg.length, cfg.dim, generator=cfg.generator(5), dtype=torch.float64) / math.sqrt(cfg.dim)
    offsets = [k for k in SHIFT_OFFSETS if k < cfg.length]
    sin_fit = measures.shift_residual(table, offsets)
    rnd_fit = measures.shift_residual(random, offsets)
    omega = sinusoid_frequencies(cfg.dim, cfg.base)
    rot = [rotation_error(table, omega, k) for k in offsets]
    # R_k·PE(p) sums two products of rounded entries at angles up to (L + k)·ω: 4 entry errors per coordinate
    rotation_tolerance = 4 * entry_error((cfg.length + max(offsets)) * float(omega.max()))
    exact = all(r <= b for r, b in zip(sin_fit["max_residual"], sin_fit["residual_error_bound"]))
    holds = exact and min(rnd_fit["relative_residual"]) > 0.5 and max(rot) <= rotation_tolerance
    return Finding(
        id="", claim="For each offset k one fixed matrix M_k maps PE(p) to PE(p + k) for every p (a 2×2 rotation "
        "per frequency pair); a random table of the same size has no such map.",
        params={"dim": cfg.dim, "length": cfg.length, "base": cfg.base, "seed": cfg.seed,
                "method": sin_fit["method"], "random_table": "N(0, 1/d) entries"},
        values={"offsets": offsets, "sinusoid_residual": sin_fit["max_residual"],
                "random_residual": rnd_fit["max_residual"], "random_relative": rnd_fit["relative_residual"],
                "rotation_block_error": rot, "equations_per_unknown": sin_fit["equations_per_unknown"],
                "tolerance": {"sinusoid_residual": sin_fit["residual_error_bound"],
                              "rotation_block_error": rotation_tolerance, "random_relative_above": 0.5,
                              "from": f"rounding bounds of the {sin_fit['method']} fit and of the float64 table"}},
        holds=holds,
    )


@experiment("beyond-training-length", article="000", title="The formula is defined at any position")
def beyond_training_length(cfg: LabConfig) -> Finding:
    """Norm and neighbour inner product far past the training length; a learned table has no row there."""
    position = 4000 if cfg.length < 4000 else 8 * cfg.length
    scheme = sinusoid(cfg)
    rows = scheme.encode(torch.tensor([0, 1, position, position + 1]))  # (4, d)
    norm = float(rows[2].norm())
    dot_next, dot_origin = float(rows[2] @ rows[3]), float(rows[0] @ rows[1])
    learned = build("learned", dim=cfg.dim, num_heads=1, max_len=cfg.length)
    try:
        learned.encode(torch.tensor([position]))
        learned_error = None
    except ValueError as err:
        learned_error = str(err)
    omega_max = float(sinusoid_frequencies(cfg.dim, cfg.base).max())
    norm_tolerance = (cfg.dim + 4) * measures.EPS * math.sqrt(cfg.dim / 2)  # as in sinusoid-norm
    dot_tolerance = 2 * cfg.dim * entry_error((position + 1) * omega_max) + measures.dot_error_bound(rows)
    holds = abs(norm - math.sqrt(cfg.dim / 2)) <= norm_tolerance and abs(dot_next - dot_origin) <= dot_tolerance and (
        learned_error is not None)
    return Finding(
        id="", claim="The sinusoid is defined at positions never trained on: the norm and the inner product of "
        "neighbours there equal their values at the origin. A learned table has no row there.",
        params={"dim": cfg.dim, "training_length": cfg.length, "base": cfg.base},
        values={"position": position, "norm": norm, "dot_next": dot_next, "dot_origin": dot_origin,
                "learned_defined": learned_error is None, "learned_error": learned_error,
                "tolerance": {"norm": norm_tolerance, "dot_next": dot_tolerance}},
        holds=holds,
    )


def partner_tokens(cfg: LabConfig, *, draws: int, tokens: int = 6, partner: int = 3, cosine: float = 0.8) -> torch.Tensor:
    """``draws`` toy sentences of unit-scale content rows (a seeded TokenEmbedding, norm ≈ 1) in which
    token ``partner`` is topical to token 0 (cosine ≈ ``cosine``) and the others are unrelated.

    Returns:
        (draws, T, d) float64.
    """
    emb = TokenEmbedding(vocab_size=draws * (tokens + 1), dim=cfg.dim, scale=False)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(draws * (tokens + 1), cfg.dim, generator=cfg.generator(7)) / math.sqrt(cfg.dim))
        rows = emb(torch.arange(draws * (tokens + 1)).view(draws, tokens + 1)).double()  # (S, T + 1, d)
    x, noise = rows[:, :tokens].clone(), rows[:, tokens]
    x[:, partner] = cosine * x[:, 0] + math.sqrt(1 - cosine**2) * noise
    return x


@experiment("position-vs-content", article="000", title="Adding positions moves attention from topic to neighbour")
def position_vs_content(cfg: LabConfig, *, tokens: int = 6, partner: int = 3, draws: int = 256,
                        headline_scale: float | None = None) -> Finding:
    """Token 0's attention row with and without the encoding, as a function of the embedding scale.

    Content rows have norm ≈ 1 times the scale; the encoding's norm is √(d/2).
    The headline scale √d/4 (2 at d = 64) makes content about a third of the
    encoding; the sweep runs up to 2√d, past the usual ×√d. Shares are averaged
    over ``draws`` seeded sentences with the same structure (token 3 topical to
    token 0, token 1 its neighbour); ``example_*`` is the first sentence alone.
    """
    headline_scale = math.sqrt(cfg.dim) / 4 if headline_scale is None else headline_scale
    content = partner_tokens(cfg, draws=draws, tokens=tokens, partner=partner)  # (S, T, d)
    pe = sinusoid(cfg).encode(default_positions(tokens))  # (T, d)
    root = math.sqrt(cfg.dim)
    scales = sorted({1.0, headline_scale, root / 2, root, 2 * root})

    def first_rows(z: torch.Tensor) -> torch.Tensor:
        return (z @ z.transpose(-1, -2) / math.sqrt(cfg.dim)).softmax(-1)[:, 0]  # (S, T): token 0's row

    sweep = {}
    for scale in scales:
        x = content * scale
        sweep[scale] = (first_rows(x), first_rows(x + pe))
    plain, moved = sweep[headline_scale]
    without, with_pe = plain.mean(0).tolist(), moved.mean(0).tolist()
    change = [float(0.5 * (sweep[s][0] - sweep[s][1]).abs().sum(-1).mean()) for s in scales]  # total variation
    holds = with_pe[partner] < without[partner] and with_pe[1] > without[1] and change[-1] < change[0]
    return Finding(
        id="", claim="Adding the encoding to content vectors moves attention: token 0's share for its topical "
        "partner falls while its neighbour's rises; scaling the embeddings up (×√d) gives content the lead back.",
        params={"dim": cfg.dim, "tokens": tokens, "partner": partner, "partner_cosine": 0.8, "draws": draws,
                "headline_scale": headline_scale, "seed": cfg.seed},
        values={"without": without, "with": with_pe, "partner_without": without[partner],
                "partner_with": with_pe[partner], "neighbour_without": without[1], "neighbour_with": with_pe[1],
                "example_without": plain[0].tolist(), "example_with": moved[0].tolist(), "scales": scales,
                "partner_with_by_scale": [float(sweep[s][1][:, partner].mean()) for s in scales],
                "partner_without_by_scale": [float(sweep[s][0][:, partner].mean()) for s in scales],
                "neighbour_with_by_scale": [float(sweep[s][1][:, 1].mean()) for s in scales],
                "row_change_by_scale": change},
        holds=holds,
    )


@experiment("permutation", article="000", title="Attention alone is permutation-equivariant")
def permutation(cfg: LabConfig, *, tokens: int = 6, num_heads: int = 4) -> Finding:
    """att(X[perm]) vs att(X)[perm] without positions, with positions fixed, and with positions travelling."""
    torch.manual_seed(cfg.seed)
    heads = num_heads if cfg.dim % num_heads == 0 else 1
    att = MultiHeadAttention(dim=cfg.dim, num_heads=heads).double().eval()
    x = torch.randn(1, tokens, cfg.dim, generator=cfg.generator(11), dtype=torch.float64)
    perm = torch.randperm(tokens, generator=cfg.generator(12))
    if torch.equal(perm, torch.arange(tokens)):  # a shuffle that moves nothing shows nothing
        perm = torch.roll(perm, 1)
    pe = sinusoid(cfg).encode(default_positions(tokens))[None]  # (1, T, d)

    def f(z: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return att(z)[0]

    def gap(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max())

    z = x + pe
    gaps = {
        "no_position": gap(f(x[:, perm]), f(x)[:, perm]),
        "position_fixed": gap(f(x[:, perm] + pe), f(z)[:, perm]),  # tokens shuffled, positions stay
        "position_travels": gap(f(z[:, perm]), f(z)[:, perm]),  # each token keeps its position
    }
    # float64 attention of O(1) inputs: the rounding of a d-wide product chain, with room (100·d·ε, ≥ 1e-12)
    tolerance = max(100 * cfg.dim * measures.EPS, 1e-12)
    equivariant = {k: v <= tolerance for k, v in gaps.items()}
    holds = equivariant["no_position"] and not equivariant["position_fixed"] and equivariant["position_travels"]
    return Finding(
        id="", claim="Attention without positions is permutation-equivariant; with positions added in place it "
        "is not; when positions travel with their tokens, equivariance returns.",
        params={"dim": cfg.dim, "tokens": tokens, "heads": heads, "permutation": perm.tolist(), "seed": cfg.seed},
        values={**equivariant, "max_difference": gaps, "tolerance": tolerance}, holds=holds,
    )
