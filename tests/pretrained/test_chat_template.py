"""Chat templates render with bounded work and output: hostile templates are refused in seconds, by bound."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("jinja2")

from posenc.pretrained.chat_template import MAX_CHARS, render  # noqa: E402

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
           "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_a_real_template_renders_as_jinja_renders_it() -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    want = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(SMOLLM2).render(
        messages=MESSAGES, add_generation_prompt=True)
    assert render(SMOLLM2, messages=MESSAGES, add_generation_prompt=True) == want


HOSTILE = {
    "nested loops, 10^10 iterations": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                                      "{% endfor %}",
    "one list, three loops deep": "{% set l = range(3000)|list %}{% for a in l %}{% for b in l %}{% for c in l %}"
                                  "{% endfor %}{% endfor %}{% endfor %}",
    "a macro calling itself twice": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                                    "{{ f(40) }}",
    "string repetition": "{{ 'x' * 10000000000 }}",
    "list repetition": "{% for i in [1] * 10000000000 %}{% endfor %}",
    "a huge power": "{{ 9 ** 100000000 }}",
    "doubling a namespace string": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                                   "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "doubling with +": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                       "{% endfor %}",
    "a wide filter": "{{ 'x'|center(10000000000) }}",
    "a wide format": "{{ '%10000000000d' % 1 }}",
    "a wide str.format": "{{ '{:10000000000}'.format(1) }}",
    "a width passed to str.format": "{{ '{:{}}'.format(1, 10000000000) }}",
    "a width passed to %": "{{ '%*d' % (10000000000, 1) }}",
    "endless output": "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    "deep recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "a recursive loop": "{% for x in range(99999) recursive %}{{ loop(range(99999)) }}{% endfor %}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_templates_are_refused_quickly_by_their_bound(name: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ValueError, match="chat template") as err:
        render(HOSTILE[name], messages=MESSAGES)
    assert time.perf_counter() - start < 30, "the bound must act long before the work is done"
    assert "\n" not in str(err.value)


def test_output_at_the_bound_is_fine_and_one_past_is_refused() -> None:
    assert len(render("{{ 'x' * n }}", n=MAX_CHARS)) == MAX_CHARS
    with pytest.raises(ValueError, match="more than"):
        render("{{ 'x' * n }}{{ 'y' }}", n=MAX_CHARS)


def test_raise_exception_from_the_template_is_one_line_naming_it() -> None:
    with pytest.raises(ValueError, match="chat template: only user and assistant roles"):
        render("{{ raise_exception('only user and assistant roles') }}", messages=MESSAGES)
