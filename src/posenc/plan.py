"""The layer plan: each decoder layer's own position scheme, attention window and query scaling.

Models released since 2024 treat positions per layer. Gemma 3 alternates five
sliding-window layers (RoPE base 10,000) with one global layer (base 10⁶);
SmolLM3 and Llama 4 leave every fourth layer without positions; Cohere 2
pairs sliding RoPE layers with global NoPE layers; Llama 4 chunks the
attention of its RoPE layers and scales the queries of its NoPE layers by a
temperature that grows with position. A plan states all of that as data, one
``LayerSpec`` per layer::

    plan = [LayerSpec(position="rope", position_options={"base": 1e4}, window=Window("sliding", 512))] * 5 \\
         + [LayerSpec(position="rope", position_options={"base": 1e6})]

Layers with equal ``(position, position_options)`` share one built scheme
(one cos/sin table, not eighteen): see ``build_schemes``.

Windows (``posenc.window``, re-exported here) count tokens in sequence order (what
a KV cache holds), not position values, exactly as HF's masks do:

* ``full`` — query i sees keys 0 … i;
* ``sliding(W)`` — query i sees keys i − W + 1 … i (W keys, itself included);
* ``chunked(C)`` — query i sees the keys of its own chunk up to itself:
  ⌊j / C⌋ = ⌊i / C⌋ and j ≤ i (Llama 4's chunked attention).

Attention runs windows blockwise, without a T×T mask (``posenc.attention``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posenc.window import FULL, WINDOW_KINDS, Window, WindowKind  # noqa: F401  (the plan's windows)

QUERY_SCALES: tuple[str, ...] = ("llama4",)


@dataclass(frozen=True)
class QueryScale:
    """A per-position factor on the queries of a layer (an attention temperature).

    ``llama4``: Llama 4's temperature tuning of its NoPE layers (HF
    ``Llama4TextAttention``): q · (ln(⌊(i + 1) / floor_scale⌋ + 1) · attn_scale + 1)
    for the query at sequence index i (the tokens the cache has seen before it, as
    HF counts them — not its position value) — 1 for i + 1 < floor_scale, then
    growing with log i, so that attention over very long contexts does not flatten.

    Reference used to verify: HF ``transformers`` ``Llama4TextAttention``
    (``tests/families/test_llama4.py``).
    """

    kind: str
    options: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in QUERY_SCALES:
            raise ValueError(f"query scale must be one of {QUERY_SCALES}, got {self.kind!r}")
        want = {"floor_scale", "attn_scale"}
        if set(self.options) != want:
            raise ValueError(f"query scale {self.kind!r} takes options {sorted(want)}, got {sorted(self.options)}")
        self.module  # the scale's own checks (bounds, integer floor_scale)

    @functools.cached_property
    def module(self) -> Any:
        """The one implementation of the formula: ``posenc.positions.temperature.Llama4QueryScale``."""
        from posenc.positions.temperature import Llama4QueryScale

        floor_scale = self.options["floor_scale"]
        if isinstance(floor_scale, float) and floor_scale.is_integer():
            floor_scale = int(floor_scale)  # JSON may hand back 8192.0
        return Llama4QueryScale(floor_scale=floor_scale, attn_scale=float(self.options["attn_scale"]))

    def factors(self, positions: Any) -> Any:
        """The factor per sequence index (an integer tensor (T,) or (B, T)), float64."""
        return self.module.factor(positions)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: float(v) for k, v in self.options.items()}}

    def __str__(self) -> str:
        opts = ", ".join(f"{k}={v:g}" for k, v in self.options.items())
        return f"{self.kind}({opts})"


@dataclass(frozen=True)
class LayerSpec:
    """One layer's position setting: scheme (or "none"), options, window, query scale, QK-norm override.

    Args:
        position: a registered rotary, bias or none scheme (additive schemes act
            once at the input: they are the model's ``position``, not a layer's).
        position_options: that scheme's options.
        window: which keys a query sees (default full).
        query_scale: a per-position factor on the queries (Llama 4's NoPE layers).
        qk_norm: this layer normalises q and k per head (None: the model's setting);
            Llama 4 does so only in its RoPE layers.
    """

    position: str = "rope"
    position_options: Mapping[str, Any] = field(default_factory=dict)
    window: Window = FULL
    query_scale: QueryScale | None = None
    qk_norm: bool | None = None

    def scheme_key(self) -> str:
        """Equal keys ⇒ one shared built scheme."""
        return json.dumps([self.position, dict(self.position_options)], sort_keys=True, default=repr)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"position": self.position, "position_options": dict(self.position_options),
                               "window": self.window.to_dict()}
        if self.query_scale is not None:
            out["query_scale"] = self.query_scale.to_dict()
        if self.qk_norm is not None:
            out["qk_norm"] = self.qk_norm
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LayerSpec":
        """The spec ``to_dict`` wrote (JSON: windows and scales as objects)."""
        if isinstance(data, LayerSpec):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"a layer spec must be an object, got {data!r}")
        unknown = sorted(set(data) - {"position", "position_options", "window", "query_scale", "qk_norm"})
        if unknown:
            raise ValueError(f"unknown layer spec field(s) {unknown}; valid: position, position_options, window, "
                             "query_scale, qk_norm")
        window = data.get("window") or {"kind": "full"}
        if isinstance(window, Window):
            win = window
        elif isinstance(window, Mapping):
            win = Window(window.get("kind", "full"), window.get("size"))
        else:
            raise ValueError(f"a layer's window must be an object like {{'kind': 'sliding', 'size': 512}}, "
                             f"got {window!r}")
        scale = data.get("query_scale")
        if scale is not None and not isinstance(scale, QueryScale):
            if not isinstance(scale, Mapping) or "kind" not in scale:
                raise ValueError(f"a layer's query_scale must be an object with a 'kind', got {scale!r}")
            scale = QueryScale(scale["kind"], {k: v for k, v in scale.items() if k != "kind"})
        options = data.get("position_options") or {}
        if not isinstance(options, Mapping):
            raise ValueError(f"a layer's position_options must be an object, got {options!r}")
        qk_norm = data.get("qk_norm")
        if qk_norm is not None and not isinstance(qk_norm, bool):
            raise ValueError(f"a layer's qk_norm must be true, false or absent, got {qk_norm!r}")
        return cls(position=str(data.get("position", "rope")), position_options=dict(options), window=win,
                   query_scale=scale, qk_norm=qk_norm)


def parse_plan(plan: Sequence[Any], num_layers: int) -> tuple[LayerSpec, ...]:
    """A plan (LayerSpecs or their dicts) checked against the layer count.

    Raises:
        ValueError: a plan of the wrong length, or a malformed spec (naming its layer).
    """
    if isinstance(plan, (str, bytes)) or not isinstance(plan, Sequence):
        raise ValueError(f"layer_plan must be a list with one spec per layer, got {type(plan).__name__}")
    if len(plan) != num_layers:
        raise ValueError(f"layer_plan has {len(plan)} specs for {num_layers} layers; give one per layer")
    specs = []
    for i, spec in enumerate(plan):
        try:
            specs.append(LayerSpec.from_dict(spec))
        except ValueError as err:
            raise ValueError(f"layer_plan[{i}]: {err}") from None
    return tuple(specs)


def every(n: int, *, layers: int, hit: LayerSpec, other: LayerSpec, offset: int = 0) -> tuple[LayerSpec, ...]:
    """``hit`` at layers i with (i + 1 + offset) % n == 0, ``other`` elsewhere (HF's interval patterns).

    >>> [s.position for s in every(4, layers=8, hit=LayerSpec(position="none"), other=LayerSpec())]
    ['rope', 'rope', 'rope', 'none', 'rope', 'rope', 'rope', 'none']
    """
    if n < 1:
        raise ValueError(f"an interval must be >= 1, got {n}")
    return tuple(hit if (i + 1 + offset) % n == 0 else other for i in range(layers))


def plan_rows(plan: Sequence[LayerSpec], built: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """One plain row per layer: layer, scheme, options, window, temperature, QK-norm (for describe / inspect)."""
    rows = []
    for i, spec in enumerate(plan):
        rows.append({"layer": i, "position": spec.position, "position_options": dict(spec.position_options),
                     "window": str(spec.window), "query_scale": None if spec.query_scale is None
                     else str(spec.query_scale), "qk_norm": spec.qk_norm,
                     **({"scheme_id": built[i]} if built is not None else {})})
    return rows


def format_plan(rows: Sequence[Mapping[str, Any]]) -> str:
    """The plan as a text table; runs of identical layers are folded into one line ("0–4")."""
    def options(r: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in r["position_options"].items()
                         if k != "pairing" and not isinstance(v, (list, tuple))) or "—"

    lines = [f"{'layers':<9} {'scheme':<18} {'options':<44} {'window':<14} {'query scale'}"]
    groups: list[tuple[int, int, tuple[str, ...]]] = []
    for r in rows:
        cells = (r["position"], options(r), r["window"], r["query_scale"] or "—")
        if groups and groups[-1][2] == cells and groups[-1][1] == r["layer"] - 1:
            groups[-1] = (groups[-1][0], r["layer"], cells)
        else:
            groups.append((r["layer"], r["layer"], cells))
    for first, last, (scheme, opts, window, scale) in groups:
        span = str(first) if first == last else f"{first}–{last}"
        lines.append(f"{span:<9} {scheme:<18} {opts[:44]:<44} {window:<14} {scale}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    """A number as a one-line summary writes it: 1e4, 1e6, 512, 0.5 (other values as they are)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 1e4:
        mantissa, _, exponent = f"{value:.3g}".partition("e")
        return f"{mantissa}e{int(exponent)}" if exponent else mantissa
    return f"{value:g}"


def plan_summary(rows: Sequence[Mapping[str, Any]]) -> str:
    """The plan in one line: each distinct layer setting and how many layers have it, in order of first use.

    >>> plan_summary(plan_rows(every(6, layers=12, hit=LayerSpec(position_options={"base": 1e6}),
    ...                               other=LayerSpec(position_options={"base": 1e4}, window=Window("sliding", 512)))))
    'per layer: rope base 1e4 sliding 512 ×10, rope base 1e6 ×2'
    """
    counts: dict[str, int] = {}
    for r in rows:
        parts = [r["position"], *(f"{k} {_short(v)}" for k, v in r["position_options"].items()
                                  if k != "pairing" and not isinstance(v, (list, tuple)))]
        if r["window"] != "full":
            parts.append(r["window"])
        if r["query_scale"]:
            parts.append(f"query scale {r['query_scale']}")
        key = " ".join(parts)
        counts[key] = counts.get(key, 0) + 1
    return "per layer: " + ", ".join(f"{key} ×{n}" for key, n in counts.items())
