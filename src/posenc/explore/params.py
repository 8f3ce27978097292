"""What a request to ``posenc explore`` may ask for: every parameter parsed, typed and bounded here.

The page sends plain query strings; nothing reaches the library before
``parse_view`` has turned them into a frozen ``ViewRequest`` or raised
``ParamError`` naming the parameter, the value and the fix — in English and in
Korean, so the page can show it in the language the reader chose.

Bounds are of three kinds: the ranges a value can have at all (an even width, a
non-negative position), the largest sizes (``MAX_*``, and ``MAX_TABLE_ENTRIES`` /
``MAX_MLP_WIDTH`` for the options that size a scheme's own tables), and a cost
model per endpoint and scheme (``property_seconds``, ``view_seconds``) whose
estimate must stay under ``REQUEST_SECONDS``. The model's coefficients were
measured on the 2-core development machine and the worst admitted request timed
(benchmarks/explore/at_cap.py; the figures are in benchmarks/explore/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from posenc.positions import canonical, names, options

#: Largest width d, number of positions L, window of positions, and first position a request may ask for.
MAX_DIM = 1024
MAX_LENGTH = 4096
MAX_WINDOW = 256
MAX_START = 1_000_000
#: Largest |integer| and the longest list an option may take.
MAX_INT_OPTION = 10**9
MAX_LIST = 1024
#: Entries (rows × width) of a table a scheme's option may ask for: a learned table's ``max_len`` × d (also
#: randomized's ``max_len``, which sizes its draws), Shaw's (2·max_distance + 1) × Dh, T5's num_buckets × H.
MAX_TABLE_ENTRIES = 2**22
#: Widest FIRE MLP: its similarity runs the MLP on every (i, j) pair, so its cost grows with the width.
MAX_MLP_WIDTH = 256
#: Estimated seconds one request may cost (``property_seconds``, ``view_seconds``). The coefficients below
#: were measured single-threaded on the 2-core development machine at load 3.5–5 (about two jobs per core):
#: at load 1.5–2 the slowest admitted request took 0.50 s (benchmarks/explore/README.md, at-cap.json).
REQUEST_SECONDS = 1.0


class ParamError(ValueError):
    """A bad request parameter. ``field`` names it; ``en`` and ``ko`` say what is wrong and how to fix it."""

    def __init__(self, field: str, en: str, ko: str) -> None:
        super().__init__(f"{field}: {en}")
        self.field, self.en, self.ko = field, en, ko

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "en": self.en, "ko": self.ko}


@dataclass(frozen=True)
class ViewRequest:
    """One validated request: the scheme and its options, the lab's settings, and the window to look at.

    Args:
        scheme: canonical registry name.
        options: the scheme's own options, typed (``positions.options``).
        dim: model width d (the lab's ``--dim``).
        length: number of positions L (the lab's ``--length``).
        base: the lab's ``--base``, used by schemes that take a base unless ``options`` set it.
        seed: the lab's ``--seed`` (learned tables, content vectors).
        start: first position of the window (similarity matrix, attention example).
        window: number of positions in the window.
        head: which head to show for multi-head similarities.
        scale: content scale of the attention example (embedding norm ≈ scale).
    """

    scheme: str
    options: Mapping[str, Any] = field(default_factory=dict)
    dim: int = 64
    length: int = 512
    base: float = 10000.0
    seed: int = 0
    start: int = 0
    window: int = 64
    head: int = 0
    scale: float | None = None

    @property
    def heads(self) -> int:
        """The lab's head count: 4 where the width divides, else 1."""
        return 4 if self.dim % 4 == 0 else 1

    def key(self) -> tuple:
        """A hashable identity for caching."""
        return (self.scheme, tuple(sorted((k, repr(v)) for k, v in self.options.items())), self.dim, self.length,
                self.base, self.seed)


def _int(field_name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw.strip())
    except (ValueError, AttributeError):
        raise ParamError(field_name, f"{raw!r} is not a whole number; give an integer from {lo} to {hi}",
                         f"{raw!r}은(는) 정수가 아닙니다. {lo}부터 {hi} 사이의 정수를 넣으세요") from None
    if not lo <= value <= hi:
        raise ParamError(field_name, f"{value} is out of range; give an integer from {lo} to {hi}",
                         f"{value}은(는) 범위를 벗어났습니다. {lo}부터 {hi} 사이의 정수를 넣으세요")
    return value


def _float(field_name: str, raw: str, *, positive: bool = False, hi: float = 1e12) -> float:
    try:
        value = float(raw.strip())
    except (ValueError, AttributeError):
        raise ParamError(field_name, f"{raw!r} is not a number; give a finite decimal number",
                         f"{raw!r}은(는) 숫자가 아닙니다. 유한한 실수를 넣으세요") from None
    if not math.isfinite(value) or abs(value) > hi:
        raise ParamError(field_name, f"{raw!r} is not finite or too large; give a number of size at most {hi:g}",
                         f"{raw!r}은(는) 유한하지 않거나 너무 큽니다. 크기가 {hi:g} 이하인 수를 넣으세요")
    if positive and value <= 0:
        raise ParamError(field_name, f"{value:g} must be > 0", f"{value:g}은(는) 0보다 커야 합니다")
    return value


def _bool(field_name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ParamError(field_name, f"{raw!r} is not true or false", f"{raw!r}은(는) true/false가 아닙니다")


def parse_option(scheme: str, spec: dict[str, Any], raw: str) -> Any:
    """One scheme option from its query string, typed by ``positions.options``; '' means None where allowed."""
    field_name = f"opt.{spec['name']}"
    if raw.strip() == "":
        if spec["optional"]:
            return None
        raise ParamError(field_name, f"{scheme} needs a value for {spec['name']} (default {spec['default']!r})",
                         f"{scheme}의 {spec['name']} 값이 필요합니다 (기본값 {spec['default']!r})")
    kind = spec["type"]
    if kind == "int":
        return _int(field_name, raw, -MAX_INT_OPTION, MAX_INT_OPTION)
    if kind == "float":
        return _float(field_name, raw)
    if kind == "bool":
        return _bool(field_name, raw)
    if kind == "choice":
        if raw not in spec["choices"]:
            choices = ", ".join(map(str, spec["choices"]))
            raise ParamError(field_name, f"{raw!r} is not one of: {choices}", f"{raw!r}은(는) 다음 중 하나가 아닙니다: {choices}")
        return raw
    if kind == "floats":
        parts = [p for p in raw.split(",") if p.strip()]
        if len(parts) > MAX_LIST:
            raise ParamError(field_name, f"{len(parts)} numbers is more than {MAX_LIST}",
                             f"숫자 {len(parts)}개는 최대 {MAX_LIST}개를 넘습니다")
        return [_float(field_name, p) for p in parts]
    raise ParamError(field_name, f"option type {kind!r} is not supported", f"옵션 형식 {kind!r}은(는) 지원하지 않습니다")


def parse_view(query: Mapping[str, str]) -> ViewRequest:
    """A ``ViewRequest`` from query parameters (``scheme``, ``dim``, ``length``, ``base``, ``seed``, ``start``,
    ``window``, ``head``, ``scale`` and ``opt.<name>`` per scheme option). Missing parameters take the lab's
    defaults; unknown ones are refused, so a typo never silently does nothing.

    Raises:
        ParamError: the first bad parameter.
    """
    known = {"scheme", "dim", "length", "base", "seed", "start", "window", "head", "scale"}
    raw_scheme = query.get("scheme", "sinusoidal")
    try:
        scheme = canonical(raw_scheme)  # aliases (nope, absolute) resolve to the registered name
    except ValueError:
        valid = ", ".join(names())
        raise ParamError("scheme", f"unknown scheme {raw_scheme!r}; valid: {valid}",
                         f"알 수 없는 방식 {raw_scheme!r}입니다. 가능한 값: {valid}") from None
    specs = {o["name"]: o for o in options(scheme)}
    for key in query:
        if key in known:
            continue
        if not key.startswith("opt.") or key[4:] not in specs:
            valid = ", ".join(f"opt.{k}" for k in specs) or "none"
            raise ParamError(key, f"unknown parameter for {scheme}; its options are: {valid}",
                             f"{scheme}에 없는 매개변수입니다. 가능한 옵션: {valid}")
    opts = {name[4:]: parse_option(scheme, specs[name[4:]], value) for name, value in query.items()
            if name.startswith("opt.")}
    dim = _int("dim", query.get("dim", "64"), 4, MAX_DIM)
    if dim % 2:
        raise ParamError("dim", f"{dim} is odd; the width must be even (sin/cos and rotation pairs)",
                         f"{dim}은(는) 홀수입니다. 폭은 짝수여야 합니다 (sin/cos, 회전 쌍)")
    req = ViewRequest(
        scheme=scheme, options=opts, dim=dim,
        length=_int("length", query.get("length", "512"), 8, MAX_LENGTH),
        base=_float("base", query.get("base", "10000"), hi=1e12),
        seed=_int("seed", query.get("seed", "0"), 0, 2**31 - 1),
        start=_int("start", query.get("start", "0"), 0, MAX_START),
        window=_int("window", query.get("window", "64"), 6, MAX_WINDOW),
        head=_int("head", query.get("head", "0"), 0, 3),
        scale=None if query.get("scale", "").strip() == "" else _float("scale", query["scale"], positive=True, hi=1e3),
    )
    if req.base <= 1:
        raise ParamError("base", f"{req.base:g} must be > 1 (the wavelength base)", f"{req.base:g}은(는) 1보다 커야 합니다 (파장 밑)")
    check_options(scheme, opts, dim, req.heads)
    if req.head >= req.heads:
        raise ParamError("head", f"head {req.head} does not exist: d = {dim} gives {req.heads} head(s), 0 … {req.heads - 1}",
                         f"{req.head}번 헤드는 없습니다: d = {dim}이면 헤드는 {req.heads}개 (0 … {req.heads - 1})")
    return req


# -- options that size a scheme's own tables -------------------------------------------------------------


def _table_rows(scheme: str, option: str, value: Any, dim: int, heads: int) -> tuple[int, int] | None:
    """(rows, width) of the table an option sizes, or None when the option sizes no table."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return None  # the scheme's own check refuses it with its own message
    if option == "max_len" and scheme in ("learned", "randomized"):
        return value, dim
    if option == "max_distance" and scheme == "shaw":
        return 2 * value + 1, dim // heads
    if option == "num_buckets" and scheme == "t5":
        return value, heads
    if option == "npos_max" and scheme == "cope":
        return value, dim // heads
    return None


def check_options(scheme: str, opts: Mapping[str, Any], dim: int, heads: int) -> None:
    """Refuse options that would make a table or an MLP too large to build within a request."""
    for option, value in opts.items():
        if option == "mlp_width" and scheme == "fire" and isinstance(value, int) and value > MAX_MLP_WIDTH:
            raise ParamError(
                f"opt.{option}", f"mlp_width = {value} is over this server's limit of {MAX_MLP_WIDTH} (FIRE runs "
                f"its MLP on every pair of positions); give at most {MAX_MLP_WIDTH}",
                f"mlp_width = {value}은(는) 이 서버의 한도 {MAX_MLP_WIDTH}를 넘습니다 (FIRE는 모든 위치 쌍에 MLP를 "
                f"돌립니다). {MAX_MLP_WIDTH} 이하로 주세요")
        if option == "max_distance" and scheme == "shaw" and isinstance(value, int) and value > MAX_LENGTH:
            raise ParamError(
                f"opt.{option}", f"max_distance = {value} is over this server's limit of {MAX_LENGTH:,} (no two "
                f"positions are farther apart than L − 1, and Shaw scores every query against all 2·max_distance + 1 "
                f"rows); give at most {MAX_LENGTH:,}",
                f"max_distance = {value}은(는) 이 서버의 한도 {MAX_LENGTH:,}를 넘습니다 (두 위치의 거리는 L − 1을 넘지 "
                f"않고, Shaw는 모든 질의를 2·max_distance + 1개 행 전부와 곱합니다). {MAX_LENGTH:,} 이하로 주세요")
        shape = _table_rows(scheme, option, value, dim, heads)
        if shape is not None and shape[0] * shape[1] > MAX_TABLE_ENTRIES:
            rows, width = shape
            largest = largest_options(scheme, dim)[option]
            raise ParamError(
                f"opt.{option}", f"{option} = {value} makes a {rows:,} × {width} table ({rows * width:,} entries), "
                f"over this server's limit of {MAX_TABLE_ENTRIES:,} entries; at d = {dim} give at most {largest:,}",
                f"{option} = {value}이면 {rows:,} × {width} 표 ({rows * width:,}칸)가 되어 이 서버의 한도 "
                f"{MAX_TABLE_ENTRIES:,}칸을 넘습니다. d = {dim}에서는 {largest:,} 이하로 주세요")


def largest_options(scheme: str, dim: int) -> dict[str, int]:
    """The largest value ``check_options`` admits for each size option of ``scheme`` at width ``dim``."""
    heads = 4 if dim % 4 == 0 else 1
    width = {"max_len": dim, "max_distance": dim // heads, "num_buckets": heads, "npos_max": dim // heads}
    out = {}
    for spec in options(scheme):
        name = spec["name"]
        if name == "mlp_width" and scheme == "fire":
            out[name] = MAX_MLP_WIDTH
        elif _table_rows(scheme, name, 1, dim, heads) is not None:
            rows = MAX_TABLE_ENTRIES // width[name]
            out[name] = min((rows - 1) // 2, MAX_LENGTH) if name == "max_distance" else rows
    return out


# -- what a request costs ---------------------------------------------------------------------------------

#: Nanoseconds per entry of the (H, n, n) similarity for the whole property row (building the similarity
#: with the scheme's own code, the float64 copy, norms, diagonal means and spreads, symmetry), per scheme:
#: measured at d = 66, L = 2,048 (one head; FIRE at 512 and 1,024), single-threaded, at load 4–5, by
#: ``benchmarks/explore/at_cap.py --calibrate`` on the 2-core development machine: the largest of the runs,
#: rounded up (benchmarks/explore/calibration.json). FIRE's is at mlp_width 32 and grows with the width
#: (``FIRE_NS_PER_WIDTH``).
PROPERTY_NS_PER_ENTRY: dict[str, float] = {
    "alibi": 150, "fire": 1700, "kerple-log": 90, "kerple-power": 135, "learned": 70, "naive": 55, "none": 50,
    "randomized": 60, "rope": 75, "rope-dynamic-ntk": 70, "rope-linear": 80, "rope-llama3": 65,
    "rope-longrope": 65, "rope-ntk": 75, "rope-yarn": 60, "scaled-sinusoidal": 60, "shaw": 75,
    "sinusoidal": 55, "t5": 215, "xpos": 60,
    # schemes of issue 27 that share RoPE's code path (a frequency transform, then RoPE's rotation): RoPE's
    # figure, not measured separately
    "rope-proportional": 75, "rope-ntk-mixed": 75,
    # query temperatures (a per-position factor through the rotary hook): RoPE's figure, not measured
    "llama4-temperature": 75, "ssmax": 75, "mrope": 75,
    # position remapping (issue 26): r(i, j) per entry, its distinct values sorted, Σ_p cos per value: measured
    # 700-750 ns per entry at d = 66, L = 2,048 (one head, load ~6), rounded up
    "self-extend": 800, "rerope": 800, "rerope-leaky": 800, "string": 800, "dca": 800,
    # not measured: FoPE's einsum over kept frequencies and PoPE's doubled width cost more than RoPE; CoPE
    # computes a (H, n, n) gate matrix and cumulative sums, a multiple of Shaw's cost (estimates, to calibrate)
    "fope": 150, "pope": 150, "cope": 300,
}
#: FIRE: nanoseconds per similarity entry per unit of mlp_width above 32.
FIRE_NS_PER_WIDTH = 14
#: Nanoseconds per multiply-add of the shift fit (five offsets, Householder QR: ≈ 30·n·w² multiply-adds):
#: 0.017–0.052 for a 512 × 1,022 table, 0.055 for 2,912 × 256 (rotary at d = 1,024) at load 3.5, doubled
#: like the others for load 4–5 (the first after-cap run, with 0.07, took 1.05 s for xpos at d = 1,024).
SHIFT_NS_PER_FLOP = 0.1
#: Nanoseconds per multiply-add of the Gram S = T·Tᵀ of an (n, w) table (additive, rotary): n²·w. The
#: per-entry costs above include it at w = 66; at d = 1,024 it is most of the row. 0.061–0.077 measured
#: (float64, 2,048 × 256 and 1,024 × 1,024, load 1.3), doubled for load 4–5.
GRAM_NS_PER_FLOP = 0.15
#: Seconds every property row costs whatever its size (building the scheme, ``defined_beyond``).
PROPERTY_FIXED_SECONDS = 0.02
#: /api/view's measured time per scheme at its largest sizes (d = 1,024, L = 4,096, window 256), in seconds:
#: its cost hardly grows with L (the profile is an FFT, the heat maps are thinned), so it is a constant. The
#: larger of two runs (median of 3 and single), FIRE's from the medians (0.42 s and 0.73 s; one single run
#: at load 4.3 took 1.05 s).
VIEW_SECONDS: dict[str, float] = {
    "alibi": 0.33, "fire": 0.74, "kerple-log": 0.32, "kerple-power": 0.36, "learned": 0.55, "naive": 0.25,
    "none": 0.19, "randomized": 0.67, "rope": 0.34, "rope-dynamic-ntk": 0.33, "rope-linear": 0.42,
    "rope-llama3": 0.28, "rope-longrope": 0.32, "rope-ntk": 0.28, "rope-yarn": 0.26, "scaled-sinusoidal": 0.58,
    "shaw": 0.2, "sinusoidal": 0.64, "t5": 0.29, "xpos": 0.37,
    "rope-proportional": 0.34, "rope-ntk-mixed": 0.34,  # RoPE's (same code path), not measured separately
    "llama4-temperature": 0.34, "ssmax": 0.34, "mrope": 0.34,  # RoPE's, not measured
    "self-extend": 0.34, "rerope": 0.34, "rerope-leaky": 0.34, "string": 0.34, "dca": 0.34,  # RoPE's table
    "fope": 0.5, "pope": 0.5, "cope": 0.6,  # estimates, not measured
}
#: FIRE's view runs its MLP on the profile's sampled rows × L: nanoseconds per such pair and unit of
#: mlp_width above 32.
FIRE_VIEW_NS_PER_WIDTH = 30


def _option(scheme: str, opts: Mapping[str, Any], name: str) -> int:
    """The integer option ``name`` as the scheme will be built: the request's value, else the registry default."""
    value = opts.get(name)
    if value is None:
        value = next(o["default"] for o in options(scheme) if o["name"] == name)
    return int(value)


def _fire_extra_width(scheme: str, opts: Mapping[str, Any]) -> int:
    """FIRE's mlp_width above its default, 32 (the width the per-entry costs were measured at); 0 otherwise."""
    return max(0, _option(scheme, opts, "mlp_width") - 32) if scheme == "fire" else 0


def property_seconds(scheme: str, opts: Mapping[str, Any], *, length: int, heads: int,
                     table_width: int | None) -> float:
    """Estimated seconds of one property row: per-entry cost × H·n², plus for an (n, w) table its Gram
    (n²·w) and its shift fit (30·n·w²).

    Shaw's entries are H·n·(n + K), K = 2·max_distance + 1: it scores each query against every table row.

    Args:
        scheme: registry name.
        opts: the scheme's options (FIRE's ``mlp_width`` scales its per-entry cost).
        length: positions measured, n (a learned table's rows when fewer than L).
        heads: heads of the scheme's similarity (a bias scheme's H; 1 for the others).
        table_width: width w of the scheme's position vectors, None without (bias, none).
    """
    per_entry = PROPERTY_NS_PER_ENTRY[scheme] + FIRE_NS_PER_WIDTH * _fire_extra_width(scheme, opts)
    columns = length
    if scheme == "shaw":  # every query is scored against all 2·max_distance + 1 table rows: (H, n, K) first
        columns += 2 * _option(scheme, opts, "max_distance") + 1
    tables = 0.0
    if table_width is not None:  # the Gram of the table, and the shift fit
        tables = GRAM_NS_PER_FLOP * length**2 * table_width + SHIFT_NS_PER_FLOP * 30.0 * length * table_width**2
    return PROPERTY_FIXED_SECONDS + 1e-9 * (per_entry * heads * length * columns + tables)


def view_seconds(scheme: str, opts: Mapping[str, Any], *, length: int) -> float:
    """Estimated seconds of /api/view: the scheme's worst case at the largest sizes, plus FIRE's wider MLP."""
    return VIEW_SECONDS[scheme] + 1e-9 * FIRE_VIEW_NS_PER_WIDTH * _fire_extra_width(scheme, opts) * 128 * length


def largest_length(cost: Callable[[int], float]) -> int:
    """The largest L in 8 … MAX_LENGTH whose estimate ``cost(L)`` is within ``REQUEST_SECONDS`` (7: none)."""
    lo, hi = 7, MAX_LENGTH
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= REQUEST_SECONDS:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_seconds(req: ViewRequest, endpoint: str, seconds: float, *, length: int) -> None:
    """Refuse a request whose estimate is above ``REQUEST_SECONDS``, naming the value, the limit and the fix."""
    if seconds <= REQUEST_SECONDS:
        return
    what = {"properties": "property row", "view": "plots"}[endpoint]
    offline = (f"`posenc lab properties --dim {req.dim} --length {req.length}`" if endpoint == "properties"
               else "`posenc lab`")
    raise ParamError(
        "length", f"the {what} of {req.scheme} at d = {req.dim}, L = {req.length} would take about "
        f"{seconds:.2g} s, over this server's limit of {REQUEST_SECONDS:g} s per request; "
        + (f"lower L to at most {length:,}" if length >= 8 else "lower d or the scheme's options")
        + f", or run {offline} offline",
        f"d = {req.dim}, L = {req.length}에서 {req.scheme}의 {'성질 표' if endpoint == 'properties' else '그림'}는 약 "
        f"{seconds:.2g}초가 걸려 이 서버의 요청당 한도 {REQUEST_SECONDS:g}초를 넘습니다. "
        + (f"L을 {length:,} 이하로 줄이거나" if length >= 8 else "d나 방식의 옵션을 줄이거나")
        + f" {offline}로 따로 계산하세요")
