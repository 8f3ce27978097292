"""The lab in English and Korean: the language rule, the Korean text of every experiment, the terminal table's
width in Korean, and ``posenc lab --lang``."""

from __future__ import annotations

import json
import re

import pytest

from posenc.cli import main
from posenc.lab import texts_ko
from posenc.lab.core import EXPERIMENTS, LabConfig
from posenc.lab.experiments import run_lab
from posenc.lab.i18n import UI, check_lang, default_lang, display_width, resolve_lang, wrap
from posenc.lab.report import (HEADLINES, claim_text, headline, property_text, terminal_table, title_text,
                               write_report)

HANGUL = re.compile(r"[\uac00-\ud7a3]")
#: Small settings for the costly experiments, so every experiment's Korean text can be checked on real values.
SMALL = {"complexity": {"lengths": (8, 16), "path_lengths": (4,), "repeats": 1},
         "exercises-depth": {"tokens": 8, "sequences": 16, "depths": (0, 2)},
         "exercises-learned": {"steps": 2, "length": 6}, "exercises-relative": {"steps": 2, "length": 6}}


@pytest.fixture(scope="module")
def findings():
    cfg = LabConfig(dim=16, length=64, seed=3)
    out = []
    return [entry.run(cfg, **SMALL.get(exp_id, {})) for exp_id, entry in EXPERIMENTS.items()]


@pytest.mark.parametrize(("environ", "lang"), [
    ({}, "en"), ({"LANG": "ko_KR.UTF-8"}, "ko"), ({"LANG": "en_US.UTF-8"}, "en"), ({"LANG": "C"}, "en"),
    ({"LC_ALL": "en_GB.UTF-8", "LANG": "ko_KR.UTF-8"}, "en"),  # LC_ALL first, as the C library reads them
    ({"LC_ALL": "", "LC_MESSAGES": "ko_KR", "LANG": "en_US"}, "ko"), ({"LANG": "KO_kr"}, "ko"),
])
def test_default_language_follows_the_locale(environ, lang):
    assert default_lang(environ) == lang
    assert resolve_lang(None, environ) == lang
    assert resolve_lang("en", {"LANG": "ko_KR.UTF-8"}) == "en"  # an explicit choice wins


@pytest.mark.parametrize("bad", ["fr", "KO", "", "korean"])
def test_an_unknown_language_is_refused_naming_it_and_the_fix(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))) as err:
        check_lang(bad)
    assert "'en'" in str(err.value) and "'ko'" in str(err.value) and "LANG=ko_KR.UTF-8" in str(err.value)


def test_both_languages_have_the_same_words():
    assert UI["en"].keys() == UI["ko"].keys()
    assert [k for k, text in UI["ko"].items() if not HANGUL.search(text)] == ["lang_button"]  # "English"
    assert not [k for k, text in UI["en"].items() if HANGUL.search(text) and k != "lang_button"]


def test_every_experiment_has_its_korean_title_claim_and_headline(findings):
    ids = set(EXPERIMENTS)
    assert set(texts_ko.TITLES) == ids and set(texts_ko.CLAIMS) == ids and set(texts_ko.HEADLINES) == ids
    assert set(HEADLINES) == ids
    for f in findings:
        korean = texts_ko.HEADLINES[f.id](f.values)  # raises if it reads a value the experiment does not give
        assert HANGUL.search(title_text(f.id, "ko")) and HANGUL.search(claim_text(f, "ko")), f.id
        assert headline(f, "ko") == korean and headline(f, "en") == HEADLINES[f.id](f.values)
        assert claim_text(f, "en") == f.claim and title_text(f.id, "en") == EXPERIMENTS[f.id].title
        # the same numbers in both languages: every number of the English headline is in the Korean one
        numbers = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?")
        assert sorted(numbers.findall(headline(f, "en"))) == sorted(numbers.findall(korean)), f.id


def test_korean_terminal_table_fits_100_columns(findings):
    for lang in ("en", "ko"):
        text = terminal_table(findings, lang=lang)
        assert max(display_width(line) for line in text.splitlines()) <= 100, lang
        assert all(f.id in text for f in findings)
    korean = terminal_table(findings, lang="ko")
    assert korean.splitlines()[0].startswith("실험") and f"주장 {len(findings)}개 중" in korean


def test_wrap_counts_terminal_columns():
    text = "가나다 " * 20
    lines = wrap(text, 20)
    assert all(display_width(line) <= 20 for line in lines) and " ".join(lines) == text.strip()
    assert display_width("한a") == 3


def test_property_table_in_korean():
    rows = [{"name": "sinusoidal", "family": "additive", "norm_constant": True, "translation_invariant": True,
             "monotone_decay": False, "symmetric": True, "shift_relative": 4.2e-15, "defined_beyond": True}]
    text = property_text(rows, lang="ko")
    assert text.splitlines()[0].startswith("방식") and "아니오" in text and "예" in text
    starts = [[display_width(line[:m.start()]) for m in re.finditer(r"\S+(?: \S+)*", line)]
              for line in text.splitlines()]  # where each cell starts, in terminal columns
    assert len(starts[0]) == 8 and starts[0] == starts[1]  # aligned despite the double-width headers


def test_cli_lang(capsys, monkeypatch):
    only = "sinusoid-norm,permutation"
    assert main(["lab", "--only", only, "--out", "-", "--quiet", "--lang", "ko"]) == 0
    out = capsys.readouterr().out
    assert "노름 5.6569" in out and "주장 2개 중 2개 성립" in out
    monkeypatch.setenv("LC_ALL", "")
    monkeypatch.setenv("LC_MESSAGES", "")
    monkeypatch.setenv("LANG", "ko_KR.UTF-8")
    assert main(["lab", "--only", only, "--out", "-", "--quiet"]) == 0
    assert "주장 2개 중 2개 성립" in capsys.readouterr().out  # no --lang: the locale decides
    assert main(["lab", "--only", only, "--out", "-", "--quiet", "--lang", "en"]) == 0
    assert "2/2 claims hold" in capsys.readouterr().out
    assert main(["lab", "--only", only, "--out", "-", "--quiet", "--lang", "fr"]) == 2
    assert "--lang must be 'en' (English) or 'ko' (Korean), got 'fr'" in capsys.readouterr().err


def test_json_is_the_same_in_both_languages(capsys):
    docs = []
    for lang in ("en", "ko"):
        assert main(["lab", "--only", "not-monotonic", "--json", "-", "--out", "-", "--quiet", "--lang", lang]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0] == docs[1]


def test_report_carries_both_languages(tmp_path):
    cfg = LabConfig(dim=16, length=64)
    findings = run_lab(cfg, only=["sinusoid-norm", "permutation"])
    page = write_report(findings, tmp_path / "en", cfg=cfg).read_text(encoding="utf-8")
    assert page.startswith("<!doctype html><html lang='en'") and " data-lang-fixed='" not in page
    for f in findings:
        assert claim_text(f, "ko") in page and f.claim in page
    assert page.count("data-l='ko'") == page.count("data-l='en'") + 1  # + the Korean note on figure labels
    fixed = write_report(findings, tmp_path / "ko", cfg=cfg, lang="ko", lang_fixed=True).read_text(encoding="utf-8")
    assert fixed.startswith("<!doctype html><html lang='ko'") and "data-lang-fixed='ko'" in fixed
    with pytest.raises(ValueError, match="'fr'"):
        write_report(findings, tmp_path / "fr", cfg=cfg, lang="fr")
