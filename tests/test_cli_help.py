"""Every command's --help is plain text with a description and examples, and states the one --out rule."""

import argparse
import re

import pytest

from posenc.cli import build_parser, main
from posenc.cli_options import OUT_RULE, command_help

MARKUP = ("``", ":func:", ":class:", ":meth:", ":mod:", "`")
#: Commands whose result is a report folder: by default it goes to runs/COMMAND.
REPORT_COMMANDS = {"lab": "runs/lab", "lengthgen": "runs/lengthgen", "extend": "runs/extend",
                   "finetune grid": "runs/finetune-grid", "translate compare": "runs/translate-compare"}


def parsers() -> dict[str, argparse.ArgumentParser]:
    """The top-level parser ("") and every command and nested action ("finetune run"), by its command line."""
    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield prefix + name, sub
                    yield from walk(sub, prefix + name + " ")
    top = build_parser()
    return {"": top, **dict(walk(top, ""))}


ALL = parsers()


@pytest.mark.parametrize("command", sorted(ALL))
def test_help_is_plain_text_with_a_description_and_examples(command):
    parser = ALL[command]
    text = parser.format_help()
    assert parser.description and parser.description.strip(), f"`posenc {command}` has no description"
    found = [m for m in MARKUP if m in text]
    assert not found, f"`posenc {command} --help` shows markup {found}"
    assert "\nexamples:\n" in text, f"`posenc {command} --help` has no examples: section"
    examples = text.split("\nexamples:\n", 1)[1].splitlines()
    assert any(line.strip().startswith("posenc ") for line in examples), f"`posenc {command}`: no example line"
    if command:
        assert any(line.strip().startswith(f"posenc {command}") for line in examples), (
            f"`posenc {command}`: no example of the command itself")


@pytest.mark.parametrize("command", sorted(c for c in ALL if any("--out" in a.option_strings
                                                                 for a in ALL[c]._actions)))
def test_every_out_help_states_the_rule(command):
    action = next(a for a in ALL[command]._actions if "--out" in a.option_strings)
    if command in REPORT_COMMANDS:
        assert action.default == REPORT_COMMANDS[command]
        assert f"default: {REPORT_COMMANDS[command]}" in action.help and OUT_RULE in action.help
    elif action.required:
        assert "required" in action.help and "runs/COMMAND" in action.help
    else:
        assert action.default is None, f"`posenc {command} --out` has a default but is not a report command"
        assert "files only with --out" in action.help
    assert "'-' writes no files" in action.help or action.required


def test_command_help_moves_a_docstring_s_examples_into_the_epilog():
    doc = '''``posenc x``: does a thing.

Examples::

    posenc x --a 1 \\
        --b 2                      # one example on two lines
    posenc x --c

See :func:`posenc.x.run`.
'''
    out = command_help(doc)
    assert out["description"] == "posenc x: does a thing.\n\nSee posenc.x.run."
    assert out["epilog"] == "examples:\n  posenc x --a 1 \\\n      --b 2                      # one example on two lines\n  posenc x --c"
    assert out["formatter_class"] is argparse.RawDescriptionHelpFormatter


def test_help_exits_zero_for_a_nested_action(capsys):
    with pytest.raises(SystemExit) as done:
        main(["finetune", "run", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and re.search(r"^  posenc finetune run ", out, re.M)
