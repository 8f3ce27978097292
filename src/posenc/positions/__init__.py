"""Position schemes — additive, rotary and bias families — and the registry that builds them by name.

The registry is the one place that knows how a model and a scheme meet: a
model says what it is (width, heads, longest sequence, causal or not) and each
scheme takes from that what it needs (``PositionScheme.context_args``); the
scheme's own options come on top. Aliases (``nope`` → ``none``, ``absolute`` →
``sinusoidal``) are resolved here, so every command accepts the same names.

>>> from posenc.positions import build, canonical, names
>>> rope = build("rope", dim=64, num_heads=4, base=10000.0, pairing="interleaved")
>>> rope.family, rope.head_dim
('rotary', 16)
>>> canonical("nope"), build("t5", dim=64, num_heads=4, causal=True).bidirectional
('none', False)
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal

from posenc.positions.absolute import (
    LearnedPositions,
    NaiveIndexPositions,
    ScaledSinusoidalPositions,
    SinusoidalPositions,
    sinusoid_table,
)
from posenc.positions.base import (
    AdditiveScheme,
    BiasScheme,
    ModelContext,
    NoPosition,
    PositionScheme,
    RotaryScheme,
    check_positions,
    default_positions,
)
from posenc.positions.bias import KERPLE, ALiBi, KERPLELog, KERPLEPower, T5RelativeBias, alibi_slopes, t5_bucket
from posenc.positions.cope import CoPE
from posenc.positions.fire import FIRE
from posenc.positions.fope import FoPE
from posenc.positions.mrope import MRoPE, pack_positions, unpack_positions
from posenc.positions.pope import PoPE
from posenc.positions.randomized import RandomizedPositions
from posenc.positions.remap import (
    REMAP_SCHEMES,
    STRING,
    DualChunkAttention,
    LeakyReRoPE,
    Piece,
    RemapScheme,
    ReRoPE,
    SelfExtend,
    remap_attention,
)
from posenc.positions.relative import ShawRelative
from posenc.positions.rotary import RoPE, apply_rotary, convert_qk_weight, pairing_permutation
from posenc.positions.rotary_scaling import (
    ROPE_SCALINGS,
    SCALED_ROPES,
    DynamicNTKRoPE,
    LinearRoPE,
    Llama3RoPE,
    LongRoPE,
    NTKRoPE,
    ScaledRoPE,
    YaRNRoPE,
)
from posenc.positions.rotary_variants import RECENT_ROPES, MixedNTKRoPE, ProportionalRoPE
from posenc.positions.temperature import TEMPERATURES, Llama4QueryScale, Llama4Temperature, ScalableSoftmax, SSMax
from posenc.positions import docstrings
from posenc.positions.xpos import XPos
from posenc.validation import did_you_mean

_REGISTRY: dict[str, type[PositionScheme]] = {}
#: Other spellings accepted wherever a scheme is named: alias → registered name.
_ALIASES: dict[str, str] = {"nope": "none", "absolute": "sinusoidal"}


def register(cls: type[PositionScheme]) -> type[PositionScheme]:
    """Class decorator: make a scheme buildable by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"position scheme name {cls.name!r} is already registered by {_REGISTRY[cls.name].__name__}")
    if cls.name in _ALIASES:
        raise ValueError(f"position scheme name {cls.name!r} is already an alias of {_ALIASES[cls.name]!r}")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Every registered (canonical) scheme name, sorted; aliases are in ``aliases()``."""
    return sorted(_REGISTRY)


def aliases() -> dict[str, str]:
    """Every accepted alias and the registered name it stands for."""
    return dict(sorted(_ALIASES.items()))


def canonical(name: str) -> str:
    """The registered name for ``name`` (itself, or what an alias stands for).

    Raises:
        ValueError: ``name`` is neither registered nor an alias; the message lists both.
    """
    if not isinstance(name, str):
        raise TypeError(f"a position scheme name must be a string, got {type(name).__name__}")
    real = _ALIASES.get(name, name)
    if real not in _REGISTRY:
        known = ", ".join(f"{a} (= {b})" for a, b in aliases().items())
        hint = did_you_mean(name, [*names(), *_ALIASES])
        raise ValueError(f"unknown position scheme {name!r}{hint}; valid names: {', '.join(names())}; "
                         f"aliases: {known}")
    return real


def lookup(name: str) -> type[PositionScheme]:
    """The class registered under ``name`` (or the alias ``name``); unknown names raise with the valid list."""
    return _REGISTRY[canonical(name)]


def option_names(name: str) -> list[str]:
    """Every keyword argument the scheme ``name`` takes, including those the model supplies.

    The one place that reads a scheme's constructor signature: callers ask this
    (e.g. to pass only the settings of a checkpoint's config a scheme knows).
    """
    params = inspect.signature(lookup(name).__init__).parameters
    return [p for p, param in params.items() if p != "self" and param.kind == param.KEYWORD_ONLY]


def options(name: str) -> list[dict[str, Any]]:
    """The scheme's own options: what ``build(name, ...)`` takes besides what a model must supply.

    A model must supply the constructor arguments without a default that ``context_args`` fills (width,
    head width, head count); everything else is an option, including those a model may also set
    (a learned table's ``max_len``, T5's ``bidirectional``). Each option is a dict: ``name``, ``type``
    (``"int"``, ``"float"``, ``"bool"``, ``"choice"`` or ``"floats"`` — a list of floats), ``default``,
    ``optional`` (None is allowed: the scheme derives the value) and, for ``"choice"``, ``choices``. Read
    from the constructor's type hints, here and nowhere else, so a user interface can offer every option
    of every scheme without reading signatures.

    >>> [o["name"] for o in options("rope")]
    ['base', 'pairing', 'rotary_dim']
    """
    cls = lookup(name)
    params = inspect.signature(cls.__init__).parameters
    required = {k for k in model_context(name, dim=64, num_heads=4) if params[k].default is inspect.Parameter.empty}
    hints = typing.get_type_hints(cls.__init__)
    out = []
    for key in option_names(name):
        if key in required:
            continue
        hint = hints.get(key, Any)
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if optional:
            hint = next(a for a in args if a is not type(None))
        spec: dict[str, Any] = {"name": key, "default": params[key].default, "optional": optional}
        if typing.get_origin(hint) is Literal:
            spec.update(type="choice", choices=list(typing.get_args(hint)))
        elif hint in (bool, int, float):
            spec["type"] = hint.__name__
        elif typing.get_origin(hint) in (Sequence, list, tuple):
            spec["type"] = "floats"
        else:
            raise TypeError(f"option {key!r} of {name!r} has a type options() does not describe: {hint}")
        out.append(spec)
    return out


def summary(name: str) -> str:
    """The scheme's one-line summary, plain text: its class's ``summary`` attribute, else the first sentence of
    its docstring (``posenc.positions.docstrings``), never cut inside a word."""
    cls = lookup(name)
    own = getattr(cls, "summary", None)
    return own if isinstance(own, str) and own else docstrings.summary(cls.__doc__)


def about(name: str) -> dict[str, Any]:
    """Everything ``posenc schemes NAME`` shows of a scheme, as plain data.

    ``name`` (registered), ``family`` (additive, rotary, bias or none), ``summary``, ``aliases``, ``options``
    ({option: default}, from ``options``), ``option_details`` (``options``' entries, each with the sentence
    the docstring's ``Args:`` section gives it as ``help``), ``paper`` (the work the summary cites, or None) and
    ``verified_against`` (the reference implementation or formula the tests compare with, or None).

    >>> about("rope-yarn")["options"]["factor"], about("nope")["name"]
    (4.0, 'none')
    """
    real = canonical(name)
    cls = _REGISTRY[real]
    helps = docstrings.option_help(cls.__doc__)
    for option, text in helps.items():  # "as for RoPE." → RoPE's own sentence for that option
        named = re.fullmatch(r"as for (\w+)\.?", text)
        source = globals().get(named[1]) if named else None
        if isinstance(source, type) and issubclass(source, PositionScheme):
            helps[option] = docstrings.option_help(source.__doc__).get(option, text)
    details = [{**spec, "help": helps.get(spec["name"])} for spec in options(real)]
    first = summary(real)
    return {"name": real, "family": cls.family, "summary": first,
            "aliases": [a for a, b in aliases().items() if b == real],
            "options": {spec["name"]: spec["default"] for spec in details}, "option_details": details,
            "paper": docstrings.paper(first), "verified_against": docstrings.verified_against(cls.__doc__)}


def model_context(
    name: str, *, dim: int, num_heads: int, max_length: int | None = None, causal: bool = False,
) -> dict[str, Any]:
    """The constructor arguments a model of this shape supplies to the scheme ``name``."""
    ctx = ModelContext(dim=dim, num_heads=num_heads, max_length=max_length, causal=causal)
    return lookup(name).context_args(ctx)


def build(
    name: str, *, dim: int, num_heads: int, max_length: int | None = None, causal: bool = False, **options: Any,
) -> PositionScheme:
    """Build the scheme ``name`` (or an alias) for a model of width ``dim`` with ``num_heads`` heads.

    The model supplies what the scheme needs (``PositionScheme.context_args``):
    width for additive schemes, head width for rotary ones, head count for bias
    ones; ``max_length`` as a learned table's row count; ``causal`` as T5's
    one-directional buckets. ``options`` are the scheme's own keyword arguments
    and override those.

    Raises:
        ValueError: unknown name, an option the scheme does not take, or a model
            shape that does not fit (width not a multiple of the head count).
    """
    cls = lookup(name)
    valid = option_names(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"position scheme {name!r} takes no option(s) {unknown}; valid options: {valid}")
    context = model_context(name, dim=dim, num_heads=num_heads, max_length=max_length, causal=causal)
    return cls(**{**context, **options})


for _cls in (
    NoPosition,
    # additive
    SinusoidalPositions, LearnedPositions, NaiveIndexPositions, ScaledSinusoidalPositions, RandomizedPositions,
    # rotary
    RoPE, *SCALED_ROPES, *RECENT_ROPES, MRoPE, FoPE, PoPE, XPos, *TEMPERATURES,
    # rotary, positions remapped per (query, key) pair
    *REMAP_SCHEMES,
    # bias
    ALiBi, T5RelativeBias, KERPLELog, KERPLEPower, FIRE, ShawRelative, CoPE,
):
    register(_cls)

__all__ = [
    "DualChunkAttention",
    "LeakyReRoPE",
    "Piece",
    "REMAP_SCHEMES",
    "ReRoPE",
    "RemapScheme",
    "STRING",
    "SelfExtend",
    "remap_attention",
    "ALiBi",
    "AdditiveScheme",
    "BiasScheme",
    "CoPE",
    "DynamicNTKRoPE",
    "FIRE",
    "FoPE",
    "KERPLE",
    "KERPLELog",
    "KERPLEPower",
    "LearnedPositions",
    "LinearRoPE",
    "Llama3RoPE",
    "Llama4QueryScale",
    "Llama4Temperature",
    "LongRoPE",
    "MixedNTKRoPE",
    "MRoPE",
    "ModelContext",
    "NTKRoPE",
    "NaiveIndexPositions",
    "NoPosition",
    "PoPE",
    "PositionScheme",
    "ProportionalRoPE",
    "ROPE_SCALINGS",
    "RandomizedPositions",
    "RoPE",
    "RotaryScheme",
    "ScaledRoPE",
    "SSMax",
    "ScalableSoftmax",
    "ScaledSinusoidalPositions",
    "ShawRelative",
    "SinusoidalPositions",
    "T5RelativeBias",
    "XPos",
    "YaRNRoPE",
    "about",
    "alibi_slopes",
    "aliases",
    "apply_rotary",
    "build",
    "canonical",
    "check_positions",
    "convert_qk_weight",
    "default_positions",
    "lookup",
    "model_context",
    "names",
    "option_names",
    "options",
    "pack_positions",
    "pairing_permutation",
    "register",
    "sinusoid_table",
    "summary",
    "t5_bucket",
    "unpack_positions",
]
