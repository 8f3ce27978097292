"""Position schemes: the three families of DESIGN.md and a registry to build them by name.

>>> from posenc.positions import build, names
>>> rope = build("rope", dim=64, num_heads=4, base=10000.0, pairing="interleaved")
>>> rope.family, rope.head_dim
('rotary', 16)
"""

from __future__ import annotations

import inspect
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
    NoPosition,
    PositionScheme,
    RotaryScheme,
    check_positions,
    default_positions,
)
from posenc.positions.bias import KERPLE, ALiBi, KERPLELog, KERPLEPower, T5RelativeBias, alibi_slopes, t5_bucket
from posenc.positions.fire import FIRE
from posenc.positions.randomized import RandomizedPositions
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
from posenc.positions.xpos import XPos

_REGISTRY: dict[str, type[PositionScheme]] = {}


def register(cls: type[PositionScheme]) -> type[PositionScheme]:
    """Class decorator: make a scheme buildable by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"position scheme name {cls.name!r} is already registered by {_REGISTRY[cls.name].__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """Every registered scheme name, sorted."""
    return sorted(_REGISTRY)


def lookup(name: str) -> type[PositionScheme]:
    """The class registered under ``name``; unknown names raise with the valid list."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown position scheme {name!r}; valid names: {', '.join(names())}") from None


def model_context(cls: type[PositionScheme], *, dim: int, num_heads: int) -> dict[str, Any]:
    """The constructor arguments a model supplies to a scheme of ``cls``'s family."""
    if num_heads <= 0 or dim % num_heads:
        raise ValueError(f"dim={dim} must be a positive multiple of num_heads={num_heads}")
    context: dict[str, Any] = {
        "additive": {"dim": dim - cls.extra_width},
        "rotary": {"head_dim": dim // num_heads},
        "bias": {"num_heads": num_heads, "head_dim": dim // num_heads},  # head_dim: q-dependent biases (Shaw)
        "none": {},
    }[cls.family]
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in context.items() if k in accepted}


#: Constructor arguments a model supplies (``model_context``): never a scheme's own option.
CONTEXT_ARGS = frozenset({"dim", "head_dim", "num_heads", "max_length", "causal"})


def options(name: str) -> list[dict[str, Any]]:
    """The scheme's own options (what ``build(name, ..., **options)`` accepts besides the model context).

    Each option is a dict: ``name``, ``type`` (``"int"``, ``"float"``, ``"bool"``, ``"choice"`` or
    ``"floats"`` — a list of floats), ``default``, ``optional`` (None is allowed: the scheme derives the
    value) and, for ``"choice"``, ``choices``. Read from the constructor's type hints, here and nowhere
    else, so a user interface can offer every option of every scheme without reading signatures.

    >>> [o["name"] for o in options("rope")]
    ['base', 'pairing', 'rotary_dim']
    """
    cls = lookup(name)
    hints = typing.get_type_hints(cls.__init__)
    out = []
    for param in inspect.signature(cls.__init__).parameters.values():
        if param.name == "self" or param.name in CONTEXT_ARGS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(param.name, Any)
        args = typing.get_args(hint)
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        if optional:
            hint = next(a for a in args if a is not type(None))
        spec: dict[str, Any] = {"name": param.name, "default": param.default, "optional": optional}
        if typing.get_origin(hint) is Literal:
            spec.update(type="choice", choices=list(typing.get_args(hint)))
        elif hint is bool or hint is int or hint is float:
            spec["type"] = hint.__name__
        elif typing.get_origin(hint) in (Sequence, list, tuple):
            spec["type"] = "floats"
        else:
            raise TypeError(f"option {param.name!r} of {name!r} has a type options() does not describe: {hint}")
        out.append(spec)
    return out


def build(name: str, *, dim: int, num_heads: int, **options: Any) -> PositionScheme:
    """Build the scheme ``name`` for a model of width ``dim`` with ``num_heads`` heads.

    The model supplies what the family needs (width for additive schemes,
    head width for rotary ones, head count for bias ones); ``options`` are the
    scheme's own keyword arguments and override those.

    Raises:
        ValueError: unknown name, or an option the scheme does not take.
    """
    cls = lookup(name)
    params = inspect.signature(cls.__init__).parameters
    valid = [p for p in params if p != "self"]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"position scheme {name!r} takes no option(s) {unknown}; valid options: {valid}")
    return cls(**{**model_context(cls, dim=dim, num_heads=num_heads), **options})


for _cls in (
    NoPosition,
    # additive
    SinusoidalPositions, LearnedPositions, NaiveIndexPositions, ScaledSinusoidalPositions, RandomizedPositions,
    # rotary
    RoPE, *SCALED_ROPES, XPos,
    # bias
    ALiBi, T5RelativeBias, KERPLELog, KERPLEPower, FIRE, ShawRelative,
):
    register(_cls)

__all__ = [
    "ALiBi",
    "AdditiveScheme",
    "BiasScheme",
    "DynamicNTKRoPE",
    "FIRE",
    "KERPLE",
    "KERPLELog",
    "KERPLEPower",
    "LearnedPositions",
    "LinearRoPE",
    "Llama3RoPE",
    "LongRoPE",
    "NTKRoPE",
    "NaiveIndexPositions",
    "NoPosition",
    "PositionScheme",
    "ROPE_SCALINGS",
    "RandomizedPositions",
    "RoPE",
    "RotaryScheme",
    "ScaledRoPE",
    "ScaledSinusoidalPositions",
    "ShawRelative",
    "SinusoidalPositions",
    "T5RelativeBias",
    "XPos",
    "YaRNRoPE",
    "alibi_slopes",
    "apply_rotary",
    "build",
    "check_positions",
    "convert_qk_weight",
    "default_positions",
    "lookup",
    "model_context",
    "names",
    "options",
    "pairing_permutation",
    "register",
    "sinusoid_table",
    "t5_bucket",
]
