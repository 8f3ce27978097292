"""Rendering a model's chat template with bounded work and bounded output.

A chat template is a Jinja program that came with the model file. Jinja's
``ImmutableSandboxedEnvironment`` already stops it from reaching Python
internals or mutating its inputs, and caps ``range`` at 100,000 — but three
nested loops over one such range, a macro that calls itself twice per level,
``"x" * 10**10`` or a namespace string doubled 60 times still run for hours
or fill memory. :func:`render` bounds each:

- **work**: every loop iteration (the ``for`` iterables are wrapped when the
  template is parsed) and every call counts against :data:`MAX_STEPS`;
- **values**: ``*``, ``**``, ``+``, ``%`` and ``~`` results, and every filter
  and method result, are refused past :data:`MAX_CHARS` characters (list
  repetition likewise), checked *before* a repetition is computed; format
  widths past :data:`MAX_CHARS` are refused;
- **recursion**: a template recursing past Python's limit is refused.

Each refusal is a ``ValueError`` naming the template and the bound. Real
chat templates (SmolLM2, Llama 3, Qwen2, Mistral) need a few hundred steps.
"""

from __future__ import annotations

import re
from typing import Any

#: Loop iterations + calls one rendering may make.
MAX_STEPS = 300_000
#: Characters (or list items) one value, and the rendered text, may hold.
MAX_CHARS = 1 << 20
_WIDTH = re.compile(r"\d{7,}")  # a field width of a million or more in a %-format or str.format spec


class TemplateLimit(ValueError):
    """The chat template needed more work or memory than a chat template can."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _big_int(values: tuple[Any, ...]) -> bool:
    return any(isinstance(v, int) and not isinstance(v, bool) and v > MAX_CHARS for v in values)


def render(source: str, *, what: str = "the model's chat template", **context: Any) -> str:
    """Render ``source`` with ``context`` in a bounded sandbox (see the module docstring).

    Raises:
        ValueError: a template error, ``raise_exception`` from the template, or a bound exceeded.
    """
    import jinja2
    from jinja2 import nodes
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    steps = [0]

    def step() -> None:
        steps[0] += 1
        if steps[0] > MAX_STEPS:
            raise TemplateLimit(f"{what} did more than {MAX_STEPS:,} loop iterations and calls; a chat template "
                                "needs a few hundred — the template is broken or hostile, use another model file")

    def checked(value: Any, how: str) -> Any:
        if _size(value) > MAX_CHARS:
            raise TemplateLimit(f"{what} built a value of {_size(value):,} characters or items ({how}), more than "
                                f"{MAX_CHARS:,}; the template is broken or hostile, use another model file")
        return value

    def bounded_iter(iterable: Any) -> Any:
        for item in iterable:
            step()
            yield item

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            step()
            if operator == "*":
                n, seq = (right, left) if isinstance(right, int) else (left, right)
                if isinstance(n, int) and _size(seq) * max(n, 0) > MAX_CHARS:
                    raise TemplateLimit(f"{what} repeats a value of {_size(seq):,} characters {n:,} times, more "
                                        f"than {MAX_CHARS:,}; the template is broken or hostile")
            if operator == "**" and isinstance(right, int) and isinstance(left, int) and abs(left) > 1 and (
                    right * max(abs(left), 2).bit_length() > 4 * MAX_CHARS):
                raise TemplateLimit(f"{what} computes {left}**{right}, a number too large to be a chat template's")
            if operator == "%" and isinstance(left, str) and (_WIDTH.search(left) or _big_int(
                    right if isinstance(right, tuple) else (right,))):
                raise TemplateLimit(f"{what} formats with a field width of a million or more")
            return checked(super().call_binop(context, operator, left, right), operator)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            step()
            if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
                args = (bounded_iter(args[0]), *args[1:])
            return checked(super().call(__context, __obj, *args, **kwargs), "a call")

        def wrap_str_format(self, value: Any) -> Any:  # "...".format(...) and format_map, however reached
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None

            def guarded(*args: Any, **kwargs: Any) -> str:
                if _WIDTH.search(value.__self__) or _big_int((*args, *kwargs.values())):
                    raise TemplateLimit(f"{what} formats with a field width of a million or more")
                return checked(wrapped(*args, **kwargs), "str.format")
            return guarded

        def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
            tree = super()._parse(source, name, filename)
            for loop in tree.find_all(nodes.For):  # every loop's iterable counts its iterations
                loop.iter = nodes.Call(nodes.Name("__posenc_bounded_iter", "load"), [loop.iter], [], None, None)
            for concat in tree.find_all(nodes.Concat):  # a ~ b ~ c
                concat.nodes = [nodes.Call(nodes.Name("__posenc_checked", "load"), [n], [], None, None)
                                for n in concat.nodes]
            return tree

    def raise_exception(message: str) -> None:
        raise ValueError(f"{what}: {message}")

    env = Bounded(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.globals.update({"raise_exception": raise_exception, "__posenc_bounded_iter": bounded_iter,
                        "__posenc_checked": lambda v: checked(v, "~")})

    def bounded_filter(f: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            step()
            if any(isinstance(a, int) and not isinstance(a, bool) and a > MAX_CHARS
                   for a in (*args[1:], *kwargs.values())):
                raise TemplateLimit(f"{what} passes a filter a size above {MAX_CHARS:,}")
            return checked(f(*args, **kwargs), "a filter")
        for flag in ("jinja_pass_arg",):  # keep @pass_context / @pass_environment markers
            if hasattr(f, flag):
                setattr(run, flag, getattr(f, flag))
        return run

    env.filters = {name: bounded_filter(f) for name, f in env.filters.items()}
    try:
        pieces, total = [], 0
        for piece in env.from_string(source).generate(**context):
            total += len(piece)
            if total > MAX_CHARS:
                raise TemplateLimit(f"{what} rendered more than {MAX_CHARS:,} characters; the template is broken "
                                    "or hostile, use another model file")
            pieces.append(piece)
        return "".join(pieces)
    except jinja2.TemplateError as err:
        raise ValueError(f"{what} failed to render: {str(err).splitlines()[0] if str(err) else type(err).__name__}") \
            from None
    except RecursionError:
        raise TemplateLimit(f"{what} recursed past Python's limit; the template is broken or hostile") from None
    except (OverflowError, MemoryError) as err:
        raise TemplateLimit(f"{what} computed a value too large ({type(err).__name__})") from None
