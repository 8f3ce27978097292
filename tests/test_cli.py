import json

from posenc.cli import build_parser, main
from posenc.positions import names


def test_schemes_lists_every_registered_name(capsys):
    assert main(["schemes", "--json"]) == 0
    listed = [row["name"] for row in json.loads(capsys.readouterr().out)]
    assert listed == names()


def test_unknown_scheme_is_a_clear_error(capsys):
    assert main(["demo", "--position", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown position scheme 'nope'" in err and "rope" in err


def test_demo_describes_the_model(capsys):
    assert main(["demo", "--position", "rope", "--kind", "decoder-only"]) == 0
    out = capsys.readouterr().out
    described = json.loads(out[: out.index("greedy")])
    assert described["position"]["name"] == "rope"


def test_subcommands_are_discovered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"schemes", "demo"} <= set(sub.choices)
