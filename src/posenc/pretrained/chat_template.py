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
  widths past :data:`MAX_CHARS` are refused, and ``tojson`` stops writing
  there;
- **recursion**: a template recursing past Python's limit is refused.

Each refusal is a ``ValueError`` naming the template and the bound. Real
chat templates (SmolLM2, Llama 3, Qwen2, Mistral) need a few hundred steps.

Inside those bounds the template runs as Hugging Face ``transformers`` runs it
(``utils/chat_template_utils.py``: ``_compile_jinja_template`` and
``render_jinja_template``), so the same template renders the same text:
``trim_blocks`` and ``lstrip_blocks``, Jinja's ``loopcontrols`` extension
(``{% break %}``), the ``{% generation %}`` … ``{% endgeneration %}`` block
(rendered as its body), Jinja's default (lenient) ``Undefined`` — a template's
``{% if tools %}`` or ``{{ bos_token }}`` reads an absent variable as empty —,
the globals ``raise_exception`` and ``strftime_now``, a ``namespace`` that
refuses underscore-prefixed attributes, and HF's ``tojson`` filter (no HTML
escaping; ``indent``, ``separators``, ``ensure_ascii`` and ``sort_keys`` as
``json.dumps`` takes them). :func:`render_chat` adds HF's variables and
message handling on top.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

#: Loop iterations + calls one rendering may make.
MAX_STEPS = 300_000
#: Characters (or list items) one value, and the rendered text, may hold.
MAX_CHARS = 1 << 20
_WIDTH = re.compile(r"\d{7,}")  # a field width of a million or more in a %-format or str.format spec
_MAX_PAD = 1000  # characters of a tojson indent or separator (real templates indent by 4)


class TemplateLimit(ValueError):
    """The chat template needed more work or memory than a chat template can."""


def _joined(pieces: Any, too_long: str) -> str:
    """The pieces joined, refused (``TemplateLimit``, ``too_long`` + the fix) once they pass :data:`MAX_CHARS`."""
    out, total = [], 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_CHARS:
            raise TemplateLimit(f"{too_long}; the template is broken or hostile, use another model file")
        out.append(piece)
    return "".join(out)


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _big_int(values: tuple[Any, ...]) -> bool:
    return any(isinstance(v, int) and not isinstance(v, bool) and v > MAX_CHARS for v in values)


def _tojson_filter(what: str) -> Any:
    """HF's ``tojson`` filter — ``json.dumps(value, ensure_ascii=False, indent=None, separators=None,
    sort_keys=False)`` with those options passed through, and none of Jinja's HTML escaping — written piece by
    piece (``JSONEncoder.iterencode``, the same text) so that a list holding one long string a million times, or
    a huge indent or separator, is refused at :data:`MAX_CHARS` instead of filling memory."""
    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        pad = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
        if pad > _MAX_PAD or (isinstance(separators, (list, tuple)) and sum(
                len(x) for x in separators if isinstance(x, str)) > _MAX_PAD):
            raise TemplateLimit(f"{what} asks tojson for an indent or separator over {_MAX_PAD} characters")
        encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                   sort_keys=sort_keys)
        # not one-shot: the pure-Python encoder, one piece at a time
        return _joined(encoder.iterencode(value), f"{what} builds a JSON text of more than {MAX_CHARS:,} characters")
    return tojson


def _strftime_now(format: str) -> str:  # noqa: A002 - the name templates call it with
    """Today's local date and time in ``format`` (Llama 3.2's, SmolLM3's and gpt-oss's templates print the date)."""
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict`` as HF's templates see it: ``dict(...)`` and ``dict.fromkeys(...)``, nothing else of the class."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


_CACHE: dict[str, Any] = {}


def _namespace_class() -> Any:
    """Jinja's ``namespace``, refusing underscore-prefixed attributes as HF's ``TemplateNamespace`` does."""
    if "namespace" not in _CACHE:
        import jinja2
        from jinja2.utils import Namespace

        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a chat template cannot store the underscore-prefixed attribute {name!r} on a namespace")

        class TemplateNamespace(Namespace):
            def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Namespace's own signature trick
                self, args = args[0], args[1:]
                attrs = dict(*args, **kwargs)
                for name in attrs:
                    check(name)
                Namespace.__init__(self, attrs)

            def __setitem__(self, name: str, value: Any) -> None:
                check(name)
                Namespace.__setitem__(self, name, value)

        _CACHE["namespace"] = TemplateNamespace
    return _CACHE["namespace"]


def _generation_tag() -> Any:
    """The ``{% generation %}`` … ``{% endgeneration %}`` block of HF's templates (it marks the assistant's
    tokens for training masks); rendered here as its body, which is what HF renders."""
    if "generation" not in _CACHE:
        from jinja2 import nodes
        from jinja2.ext import Extension

        class GenerationTag(Extension):
            tags = {"generation"}

            def parse(self, parser: Any) -> nodes.Node:
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

            def _body(self, caller: Any) -> str:
                return caller()

        _CACHE["generation"] = GenerationTag
    return _CACHE["generation"]


def render(source: str, *, what: str = "the model's chat template", **context: Any) -> str:
    """Render ``source`` with ``context`` in a bounded sandbox (see the module docstring).

    Raises:
        ValueError: a template error, ``raise_exception`` from the template, or a bound exceeded.
    """
    return _render(source, what, context)


def _render(source: str, what: str, context: dict[str, Any]) -> str:
    from posenc.checks import require

    jinja2 = require("jinja2", "chat templates")
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

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[_generation_tag(), "jinja2.ext.loopcontrols"])
    env.globals.update({"raise_exception": raise_exception, "strftime_now": _strftime_now, "dict": _TemplateDict(),
                        "namespace": _namespace_class(), "__posenc_bounded_iter": bounded_iter,
                        "__posenc_checked": lambda v: checked(v, "~")})
    env.filters["tojson"] = _tojson_filter(what)

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
        return _joined(env.from_string(source).generate(**context),
                       f"{what} rendered more than {MAX_CHARS:,} characters")
    except jinja2.TemplateError as err:
        raise ValueError(f"{what} failed to render: {str(err).splitlines()[0] if str(err) else type(err).__name__}") \
            from None
    except (TypeError, ZeroDivisionError) as err:  # e.g. None + "text": the template does not fit these messages
        first = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(f"{what} failed to render: {type(err).__name__}: {first}") from None
    except RecursionError:
        raise TemplateLimit(f"{what} recursed past Python's limit; the template is broken or hostile") from None
    except (OverflowError, MemoryError) as err:
        raise TemplateLimit(f"{what} computed a value too large ({type(err).__name__})") from None


#: The named special tokens HF passes a chat template (``SPECIAL_TOKENS_ATTRIBUTES``), each as a string.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
#: Names a message's reasoning goes under; HF copies it to ``reasoning_content`` (and ``thinking``, gpt-oss's).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types (HF's ``_plain_template_data``): what a template sees is a fresh
    copy, and an object of another type becomes an inert ``"<TypeName>"``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def render_chat(source: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                documents: list[dict[str, Any]] | None = None, add_generation_prompt: bool = False,
                continue_final_message: bool | str = False, special_tokens: Mapping[str, str] | None = None,
                what: str = "the model's chat template", **kwargs: Any) -> str:
    """Render a conversation with a chat template as HF's ``tokenizer.apply_chat_template(..., tokenize=False)``.

    The template sees ``messages`` (each message a fresh copy, keys whose value is None dropped, reasoning
    under ``reasoning_content`` and ``thinking`` whichever name it came under), ``tools`` (None or the list
    of JSON schemas), ``documents``, ``add_generation_prompt``, every entry of ``special_tokens``
    (``bos_token``, ``eos_token``, ``pad_token``, …) and every keyword argument (``enable_thinking=False``,
    ``date_string=...``, ``reasoning_effort=...``), which overrides a special token of the same name.

    Args:
        continue_final_message: end the text inside the last message (its ``content``, or the field named)
            instead of closing it, so the model continues that message; not with ``add_generation_prompt``.

    Raises:
        ValueError: malformed messages, tools or documents, a template error, ``raise_exception`` from the
            template, or a bound of :func:`render` exceeded.
    """
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("a chat needs at least one message: a list of {\"role\": ..., \"content\": ...} dicts")
    chat = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ValueError(f"chat messages must be dicts with 'role' and 'content', got {type(message).__name__}")
        message = {k: v for k, v in _plain(message).items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        chat.append(message)
    if tools is not None and (not isinstance(tools, (list, tuple)) or not all(isinstance(t, Mapping) for t in tools)):
        raise ValueError("tools must be a list of JSON schemas (dicts), e.g. {\"type\": \"function\", "
                         "\"function\": {\"name\": ..., \"description\": ..., \"parameters\": ...}}")
    if documents is not None and (not isinstance(documents, (list, tuple))
                                  or not all(isinstance(d, Mapping) for d in documents)):
        raise ValueError("documents must be a list of dicts with 'title' and 'text' keys")
    if continue_final_message and add_generation_prompt:
        raise ValueError("continue_final_message and add_generation_prompt exclude each other: the first continues "
                         "the last message, the second opens a new assistant message")
    final = None
    if continue_final_message:
        field = continue_final_message if isinstance(continue_final_message, str) else "content"
        final = chat[-1].get(field)
        if final is None:
            raise ValueError(f"continue_final_message: the last message has no {field!r} to continue")
        fields = [field]
        if field in _REASONING_FIELDS:  # reasoning is under several names: tag each copy of it
            fields = [f for f in _REASONING_FIELDS if chat[-1].get(f) == final]
        if not any(f in source for f in fields):
            raise ValueError(f"continue_final_message: {what} does not use the field {field!r}")
        if isinstance(final, (list, tuple)):  # content blocks: continue the last text block
            block = next((b for b in reversed(final) if isinstance(b, dict) and isinstance(b.get("text"), str)),
                         None)
            if block is None:
                raise ValueError("continue_final_message: the last message has no text to continue")
            final = block["text"]
            block["text"] = final + _CONTINUE_TAG
        elif isinstance(final, str):
            for f in fields:
                chat[-1][f] = chat[-1][f] + _CONTINUE_TAG
        else:
            raise ValueError(f"continue_final_message: the last message's {field!r} is not text")
    taken = {"messages", "tools", "documents", "add_generation_prompt"} & set(kwargs)
    if taken:
        raise ValueError(f"{', '.join(sorted(taken))}: already a chat template variable of its own")
    context = {**dict(special_tokens or {}), **_plain(kwargs), "messages": chat, "tools": _plain(tools),
               "documents": _plain(documents), "add_generation_prompt": add_generation_prompt}
    text = _render(source, what, context)
    if final is not None:
        if final.strip() not in text or _CONTINUE_TAG.strip() not in text:
            raise ValueError(f"continue_final_message: {what} drops part of the last message, so the text cannot "
                             "end inside it")
        at = text.rindex(_CONTINUE_TAG.strip())
        text = text[:at] if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG else text[:at].rstrip()
    return text
