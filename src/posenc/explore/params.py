"""What a request to ``posenc explore`` may ask for: every parameter parsed, typed and bounded here.

The page sends plain query strings; nothing reaches the library before
``parse_view`` has turned them into a frozen ``ViewRequest`` or raised
``ParamError`` naming the parameter, the value and the fix — in English and in
Korean, so the page can show it in the language the reader chose.

Bounds are of two kinds: the ranges a value can have at all (an even width, a
non-negative position) and a size cap (``MAX_*`` and ``WORK_LIMIT``) that
keeps one request under a second on a 2-core machine
(benchmarks/explore/README.md records the timings the caps were set from).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
#: Operations one property row may cost (see ``property_work``): about a second on an idle 2-core machine
#: (benchmarks/explore/README.md).
WORK_LIMIT = 5e9


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
    if req.head >= req.heads:
        raise ParamError("head", f"head {req.head} does not exist: d = {dim} gives {req.heads} head(s), 0 … {req.heads - 1}",
                         f"{req.head}번 헤드는 없습니다: d = {dim}이면 헤드는 {req.heads}개 (0 … {req.heads - 1})")
    return req


def property_work(req: ViewRequest, *, table_width: int | None, heads: int) -> float:
    """Operations of one property row: building the (H, L, L) similarity and reading its diagonals and its
    transpose — 400 per entry, from the slowest scheme in benchmarks/explore (T5's buckets) — plus four
    L·w² multiply-adds per shift offset for a table of width w (five offsets)."""
    shift = 0 if table_width is None else 5 * 4 * req.length * table_width**2
    return 400.0 * heads * req.length**2 + shift


def check_work(req: ViewRequest, *, table_width: int | None, heads: int) -> None:
    """Refuse a property row above ``WORK_LIMIT``, saying what to lower."""
    work = property_work(req, table_width=table_width, heads=heads)
    if work > WORK_LIMIT:
        raise ParamError(
            "length", f"the property row at d = {req.dim}, L = {req.length} costs {work:.2g} operations, over this "
            f"server's cap of {WORK_LIMIT:.2g} (about a second); lower L or d, or run `posenc lab properties "
            f"--dim {req.dim} --length {req.length}` offline",
            f"d = {req.dim}, L = {req.length}의 성질 표는 연산 {work:.2g}번이 들어 서버 한도 {WORK_LIMIT:.2g} (약 1초)를 "
            f"넘습니다. L이나 d를 줄이거나 `posenc lab properties --dim {req.dim} --length {req.length}`로 따로 계산하세요")
