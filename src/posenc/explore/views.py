"""What the explore page draws, computed by the library's own functions: plain data in, plain data out.

Every number comes from the functions the lab and the models use:

* the scheme is built by ``posenc.lab.experiments.lab_scheme`` — the lab's width, heads, base and seed;
* the position table is the scheme's ``encode`` (additive) or ``angles`` (rotary), the similarity its
  ``similarity``, the attention example goes through its three hooks (``add``, ``rotate``,
  ``attention_bias``) exactly as ``MultiHeadAttention`` calls them;
* profiles, rises and the property row are ``posenc.lab.measures``; the naive-index window is the lab's
  ``naive-position`` experiment and the content vectors are those of ``position-vs-content``.

Heat maps are thinned to at most ``MAX_CELLS`` rows and columns (every k-th position, said on the page);
the numbers the page prints are never thinned.

Shape legend: L positions, d width, H heads, Dh head width, W window, T example tokens, R/C rows/columns
shown.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import torch
from torch import Tensor

from posenc.explore import params
from posenc.explore.params import ViewRequest
from posenc.lab import measures
from posenc.lab.article000 import naive_position, partner_tokens
from posenc.lab.core import LabConfig
from posenc.lab.experiments import GLOBAL_RNG_LOCK, lab_scheme
from posenc.positions import PositionScheme, default_positions

#: Heat maps show at most this many rows and columns.
MAX_CELLS = 256
#: Profiles over at most this many positions use the exact Gram; above, the lab's FFT path.
EXACT_PROFILE_ROWS = 1024
#: Query rows sampled for the distance profile of a scheme without position vectors (bias schemes).
PROFILE_ROWS = 128
#: Tokens of the attention example (article 000's toy sentence).
TOKENS = 6


def _heat(x: Tensor, digits: int = 5) -> dict[str, Any]:
    """A heat map's values as integers times ``unit`` (``digits`` significant digits of the largest |value|):
    a fraction of the JSON of full floats. Non-finite entries (a mask) become None."""
    x = x.detach().double()
    finite = x.isfinite()
    top = float(x[finite].abs().max()) if bool(finite.any()) else 0.0
    unit = 10.0 ** (math.floor(math.log10(top)) - digits + 1) if top > 0 else 1.0
    ints = (x / unit).round().masked_fill(~finite, 0).long()
    z = ints.tolist()
    if not bool(finite.all()):
        for r, c in (~finite).nonzero().tolist():
            z[r][c] = None
    return {"z": z, "unit": unit}


def _thin(n: int, limit: int = MAX_CELLS) -> Tensor:
    """Indices 0, k, 2k, … (at most ``limit``) into n items."""
    step = max(1, math.ceil(n / limit))
    return torch.arange(0, n, step)


def config(req: ViewRequest) -> LabConfig:
    return LabConfig(dim=req.dim, length=req.length, base=req.base, seed=req.seed)


def build_scheme(req: ViewRequest) -> PositionScheme:
    """The scheme as the lab builds it, with the request's own options."""
    return lab_scheme(req.scheme, config(req), **req.options)


def usable_length(scheme: PositionScheme, length: int) -> int:
    """L, or the rows a bounded table has (a learned table of 1,024 rows is measured on those)."""
    top = scheme.max_position()
    return length if top is None else min(length, top + 1)


def request_seconds(req: ViewRequest, endpoint: str, scheme: PositionScheme, length: int | None = None) -> float:
    """The cost model's estimate (``params.property_seconds`` / ``view_seconds``) for ``req`` at L = ``length``."""
    length = req.length if length is None else length
    if endpoint == "view":
        return params.view_seconds(req.scheme, req.options, length=length)
    table = measures.scheme_table(scheme, default_positions(2))
    heads = getattr(scheme, "num_heads", 1) if scheme.family == "bias" else 1
    return params.property_seconds(req.scheme, req.options, length=usable_length(scheme, length), heads=heads,
                                   table_width=None if table is None else int(table.shape[1]))


def check_request(req: ViewRequest, endpoint: str, scheme: PositionScheme | None = None) -> None:
    """Refuse ``req`` before computing anything when its estimated cost is over ``params.REQUEST_SECONDS``.

    Raises:
        ParamError: on ``length``, naming the estimate, the limit and the largest L admitted at this d.
    """
    scheme = build_scheme(req) if scheme is None else scheme
    seconds = request_seconds(req, endpoint, scheme)
    if seconds > params.REQUEST_SECONDS:
        largest = params.largest_length(lambda n: request_seconds(req, endpoint, scheme, n))
        params.check_seconds(req, endpoint, seconds, length=largest)


# -- the plots -------------------------------------------------------------------------------------------


def table_view(scheme: PositionScheme, req: ViewRequest) -> dict[str, Any] | None:
    """The position table (additive), rotation angles p·θ wrapped to (−π, π] (rotary), or one head's bias."""
    n = usable_length(scheme, req.length)
    rows = _thin(n)
    with torch.no_grad():
        if scheme.family == "additive":
            z = scheme.encode(rows).double()  # (R, d)
            kind = "table"
        elif scheme.family == "rotary" and hasattr(scheme, "angles"):
            theta = scheme.angles(rows)  # (R, P)
            z = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
            kind = "angles"
        elif scheme.family == "bias":
            z = scheme.similarity(rows, rows).reshape(-1, rows.numel(), rows.numel())[req.head].double()  # (R, R)
            kind = "bias"
        else:
            return None
    cols = _thin(z.shape[1])
    return {"kind": kind, "rows": rows.tolist(), "cols": cols.tolist(), **_heat(z[:, cols]),
            "width": int(z.shape[1]), "row_step": int(rows[1] - rows[0]) if rows.numel() > 1 else 1}


def profile_view(scheme: PositionScheme, req: ViewRequest) -> dict[str, Any]:
    """Mean similarity at each distance δ = 0 … L−1 with its rises (``measures.monotonicity``)."""
    n = usable_length(scheme, req.length)
    table = measures.scheme_table(scheme, default_positions(n))
    if table is not None:
        # the page draws the diagonal means only: the spread's sampled rows (an S × L × d product) are not needed
        prof = measures.table_distance_profile(table, exact_rows=EXACT_PROFILE_ROWS, sample_rows=2, seed=req.seed)
        mean, method = torch.tensor(prof["mean"], dtype=torch.float64), prof["method"]
    else:  # bias / none: the mean over sampled query rows i of S(i, i + δ)
        rows = _thin(n, PROFILE_ROWS)
        with torch.no_grad():
            sim = scheme.similarity(rows, default_positions(n)).reshape(-1, rows.numel(), n)  # (H or 1, S, L)
            sim = sim[req.head if sim.shape[0] > 1 else 0].double()  # (S, L)
        vals, valid = measures.sampled_diagonals(sim, rows)  # (S, L) by distance
        mean = vals.masked_fill(~valid, 0.0).sum(0) / valid.sum(0).clamp(min=1)
        method = f"mean over {rows.numel()} sampled rows"
    mono = measures.monotonicity(mean)
    return {"distance": list(range(n)), "mean": mean.tolist(), "rises": mono["rises"], "increases": mono["increases"],
            "argmin": mono["argmin"], "min": mono["min"], "last": mono["last"], "method": method}


def similarity_view(scheme: PositionScheme, req: ViewRequest) -> dict[str, Any]:
    """``scheme.similarity`` over the window start … start + W − 1 (one head), thinned for the heat map."""
    pos = default_positions(req.window, offset=req.start)
    try:
        sim = measures.scheme_similarity_at(scheme, pos).reshape(-1, req.window, req.window)  # (H or 1, W, W)
        sim = sim[req.head if sim.shape[0] > 1 else 0]  # (W, W)
    except (ValueError, IndexError) as err:  # e.g. a learned table has no row there: show why
        return {"error": str(err).splitlines()[0]}
    idx = _thin(req.window)
    return {"positions": pos[idx].tolist(), **_heat(sim[idx][:, idx]),
            "translation_invariant": measures.diagonal_profile(sim)["translation_invariant"]}


def attention_view(scheme: PositionScheme, req: ViewRequest) -> dict[str, Any]:
    """Logits of a toy sentence, content alone and content + positions, through the scheme's hooks.

    Content rows are the lab's position-vs-content sentence (token 3 topical to token 0, cosine 0.8) times
    ``scale`` (default √d/4, the lab's headline); the tokens stand at positions start … start + 5. Additive
    schemes act before the heads, so their logits use the full width (one head, ÷√d, as the lab); rotary and
    bias schemes act per head: head ``req.head`` of H, ÷√Dh.
    """
    cfg = config(req)
    scale = math.sqrt(req.dim) / 4 if req.scale is None else req.scale
    with GLOBAL_RNG_LOCK:  # its TokenEmbedding's init draws from torch's global generator (then overwritten)
        content = partner_tokens(cfg, draws=256, tokens=TOKENS)[0] * scale  # (T, d): the lab's first sentence
    pos = default_positions(TOKENS, offset=req.start)
    x = content[:, : req.dim - scheme.extra_width]  # the width a model gives its tokens
    heads = 1 if scheme.family in ("additive", "none") else req.heads
    head = 0 if heads == 1 else req.head
    try:
        with torch.no_grad():
            z = scheme.add(x[None], pos)  # (1, T, d)
            plain = torch.nn.functional.pad(x, (0, z.shape[-1] - x.shape[-1]))[None]  # (1, T, d): no positions
            logits = []
            for inputs, positioned in ((plain, False), (z, True)):
                q = inputs.view(1, TOKENS, heads, -1).transpose(1, 2)  # (1, H, T, Dh)
                k = q
                if positioned:
                    q, k = scheme.rotate(q, k, pos, pos)
                s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (1, H, T, T)
                bias = scheme.attention_bias(pos, pos, q) if positioned else None
                if bias is not None:
                    s = s + bias.to(s.dtype)
                logits.append(s[0, head].double())
    except (ValueError, IndexError) as err:
        return {"error": str(err).splitlines()[0]}
    without, with_pos = logits
    return {"positions": pos.tolist(), "scale": scale, "head": head, "heads": heads,
            "logits_without": without.tolist(), "logits_with": with_pos.tolist(),
            "row0_without": without[0].softmax(-1).tolist(), "row0_with": with_pos[0].softmax(-1).tolist()}


def naive_view(req: ViewRequest) -> dict[str, Any]:
    """Article 000's raw-index coordinate at the window's start, and how it grows with the start."""
    finding = naive_position(config(req), starts=(0, req.start))
    return {"windows": finding.values["windows"], "curve": finding.series}


def view(req: ViewRequest) -> dict[str, Any]:
    """Everything the plots need for one request (the property row comes from ``properties``)."""
    start = time.perf_counter()
    scheme = build_scheme(req)
    check_request(req, "view", scheme)
    out = {
        "scheme": req.scheme, "family": scheme.family, "heads": req.heads, "dim": req.dim, "length": req.length,
        "usable_length": usable_length(scheme, req.length),
        "table": table_view(scheme, req),
        "profile": profile_view(scheme, req),
        "similarity": similarity_view(scheme, req),
        "attention": attention_view(scheme, req),
        "naive": naive_view(req),
    }
    out["seconds"] = time.perf_counter() - start
    return out


# -- the property row: the lab's own, cached ----------------------------------------------------------------

#: Property rows already computed, by request key (most recent last); at most ``CACHE_SIZE``.
CACHE_SIZE = 64
_cache: dict[tuple, dict[str, Any]] = {}
_cache_lock = threading.Lock()


def _property_row(req: ViewRequest) -> dict[str, Any]:
    scheme = build_scheme(req)
    check_request(req, "properties", scheme)
    return measures.scheme_properties(scheme, length=req.length)


def properties(req: ViewRequest) -> dict[str, Any]:
    """The scheme's row of ``posenc lab properties`` (``measures.scheme_properties``), cached per settings."""
    start = time.perf_counter()
    key = req.key()
    with _cache_lock:
        row = _cache.pop(key, None)
    if row is None:
        row = _property_row(req)  # outside the lock: other requests go on meanwhile
    with _cache_lock:
        _cache[key] = row
        while len(_cache) > CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
    return {"row": row, "seconds": time.perf_counter() - start}
