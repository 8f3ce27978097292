"""`posenc schemes [NAME]`: whole one-line summaries, and one scheme's family, options and references."""

import json

import pytest

from posenc.cli import main
from posenc.positions import about, lookup, names, options, summary
from posenc.positions.docstrings import first_sentence, paper, plain

MARKUP = ("``", ":func:", ":class:", ":meth:", "`")


@pytest.mark.parametrize("name", names())
def test_every_summary_is_one_whole_plain_sentence(name):
    text = summary(name)
    assert text and text[-1] in ".?!)", f"{name}: {text!r} does not end a sentence"
    assert not any(m in text for m in MARKUP), f"{name}: markup in {text!r}"
    assert text.count("(") == text.count(")") and text.count('"') % 2 == 0, f"{name}: cut inside a bracket: {text!r}"
    first = " ".join((lookup(name).__doc__ or "").split("\n\n")[0].split())
    assert plain(first).startswith(text)


def test_first_sentence_is_never_cut_inside_brackets_quotes_or_et_al():
    assert first_sentence('STRING (An, 2024, "Fall Short?", x): d ≥ S. More.') == 'STRING (An, 2024, "Fall Short?", x): d ≥ S.'
    assert first_sentence("Shaw et al. (2018) keys a^K. Then.") == "Shaw et al. (2018) keys a^K."
    assert paper("Shaw et al. (2018) relative keys.") == "Shaw et al. (2018)"
    assert paper("Rotary position embedding (Su et al., 2021).") == "Su et al., 2021"
    assert paper("A learned table (BERT, GPT-2, OPT).") is None


def test_the_list_shows_whole_summaries_wrapped_between_words(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["schemes"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines())
    words = " ".join(out.split())
    for name in names():
        assert " ".join(summary(name).split()) in words, f"{name}'s summary is not whole in the list"
    assert "ShifTed Rotray position embeddING" in words and "``" not in out


def test_the_json_list_has_every_scheme_with_its_options(capsys):
    assert main(["schemes", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == names()
    rope = next(r for r in rows if r["name"] == "rope")
    assert rope["options"] == {"base": 10000.0, "pairing": "half", "rotary_dim": None}


@pytest.mark.parametrize("name", ["rope-yarn", "alibi", "nope", "absolute"])
def test_one_scheme_shows_family_options_and_references(name, capsys):
    assert main(["schemes", name]) == 0
    out = capsys.readouterr().out
    info = about(name)
    assert out.startswith(info["name"]) and f"family: {info['family']}" in out
    for spec in options(info["name"]):
        assert spec["name"] in out
    assert "paper:" in out and "verified against:" in out


def test_one_scheme_as_json(capsys):
    assert main(["schemes", "rope-yarn", "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["family"] == "rotary" and info["options"]["factor"] == 4.0 and info["options"]["pairing"] == "half"
    assert info["paper"].startswith("Peng et al., 2023")
    assert 'ROPE_INIT_FUNCTIONS["yarn"]' in info["verified_against"]
    assert next(d for d in info["option_details"] if d["name"] == "base")["help"].startswith("the frequency base")


def test_an_alias_names_the_scheme(capsys):
    assert main(["schemes", "nope", "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "none" and info["family"] == "none" and info["options"] == {}


def test_an_unknown_scheme_is_a_usage_error_with_the_closest(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["schemes", "rope-yarm"])
    assert exit_.value.code == 2
    assert "did you mean 'rope-yarn'" in capsys.readouterr().err


def test_every_family_is_one_of_four():
    assert {about(n)["family"] for n in names()} <= {"additive", "rotary", "bias", "none"}
