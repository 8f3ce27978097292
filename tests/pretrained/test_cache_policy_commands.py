"""``posenc generate / perplexity --cache POLICY`` on the tiny HF model of test_generate_perplexity."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", minversion="5.0", reason="the tiny model folder is written by HF transformers")
from test_generate_perplexity import TEXT, folder  # noqa: E402,F401  (the fixture)

from posenc.cli import main  # noqa: E402


def test_perplexity_streams_through_a_moving_cache(folder, tmp_path, capsys):  # noqa: F811
    text = tmp_path / "text.txt"
    text.write_text(TEXT * 2)
    results = {}
    for policy in ("sink:2,window:30", "window:32", "shift:2,ctx:32"):
        per_token = tmp_path / f"{policy}.jsonl"
        assert main(["perplexity", str(folder), str(text), "--cache", policy, "--stride", "4", "--max-tokens", "120",
                     "--per-token", str(per_token), "--json", "-", "--quiet"]) == 0
        results[policy] = json.loads(capsys.readouterr().out)
        rows = [json.loads(line) for line in per_token.read_text().splitlines()]
        assert [r["index"] for r in rows] == list(range(1, 120))
        assert results[policy]["tokens"] == 119 and results[policy]["cache"] == policy
    # a cache that never fills scores exactly what the full forward does
    assert main(["perplexity", str(folder), str(text), "--cache", "window:200", "--stride", "8", "--max-tokens", "120",
                 "--json", "-", "--quiet"]) == 0
    never = json.loads(capsys.readouterr().out)
    assert main(["perplexity", str(folder), str(text), "--window", "120", "--max-tokens", "120", "--json", "-",
                 "--quiet"]) == 0
    assert never["perplexity"] == pytest.approx(json.loads(capsys.readouterr().out)["perplexity"], rel=1e-5)


def test_generate_past_the_context_with_a_moving_cache(folder, capsys):  # noqa: F811
    # the model was built for 256 positions: 300 new tokens need a moving cache
    assert main(["generate", str(folder), "--prompt", "The capital", "--max-new-tokens", "300", "--quiet",
                 "--json", "-"]) == 2
    capsys.readouterr()
    assert main(["generate", str(folder), "--prompt", "The capital", "--max-new-tokens", "300", "--quiet",
                 "--cache", "sink:4,window:60", "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cache"] == "sink:4,window:60" and result["new_tokens"] in range(1, 301)


@pytest.mark.parametrize("args", [["--cache", "window"], ["--cache", "sink:4"], ["--cache", "shift:4,window:3"]])
def test_bad_policies_exit_2_with_the_grammar(folder, tmp_path, capsys, args):  # noqa: F811
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    assert main(["perplexity", str(folder), str(text), *args]) == 2
    assert "the grammar is full | window:W" in capsys.readouterr().err
    assert main(["generate", str(folder), "--prompt", "x", *args]) == 2
    assert "the grammar is" in capsys.readouterr().err


def test_window_and_cache_are_two_recipes(folder, tmp_path, capsys):  # noqa: F811
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    assert main(["perplexity", str(folder), str(text), "--cache", "window:8", "--window", "16"]) == 2
    assert "--window is the windowed recipe" in capsys.readouterr().err
