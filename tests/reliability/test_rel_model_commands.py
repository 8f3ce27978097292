"""Issue 25, the model commands: every promise of generate, perplexity and extend is kept on hostile flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import assert_refused, posenc
from model_files import SRC, hf_folder

TEXT = "the quick brown fox jumps over the lazy dog " * 30


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return hf_folder(tmp_path_factory.mktemp("hf") / "m")


@pytest.fixture
def text(tmp_path: Path) -> Path:
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    return path


def _ids(model: Path) -> list[int]:
    from posenc.pretrained import load_pretrained

    return load_pretrained(model).tokenizer.encode(TEXT)


# -- 2. perplexity --stride == --window -------------------------------------------------------------------------
def test_perplexity_with_stride_equal_to_window_scores_every_token_once(model: Path, text: Path) -> None:
    import json

    result = posenc("perplexity", model, text, "--window", "16", "--stride", "16", "--json", "-", "--quiet")
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    assert summary["tokens"] == len(_ids(model)) - 1 > 16


# -- 4. unbounded generation ---------------------------------------------------------------------------------------
def test_max_new_tokens_beyond_the_trained_context_is_refused_with_the_bound(model: Path) -> None:
    assert_refused(posenc("generate", model, "--prompt", "the fox", "--max-new-tokens", str(10**12), "--quiet"),
                   "--max-new-tokens", "64 tokens", "or less")
    assert_refused(posenc("generate", model, "--prompt", "the fox", "--max-new-tokens", str(2**64), "--quiet"),
                   "--max-new-tokens")


def test_the_library_generate_is_bounded_by_the_cache_memory(model: Path, monkeypatch) -> None:
    from posenc.pretrained import load_pretrained

    pm = load_pretrained(model)
    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(1 << 20))
    with pytest.raises(ValueError, match="KV cache.*memory budget"):
        pm.model.generate(torch.tensor([[1, 2]]), 10**12)


# -- 5. output paths before the work -------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["generate", "perplexity", "perplexity-per-token", "extend-json", "extend-out"])
def test_output_paths_are_refused_before_the_model_loads(model: Path, text: Path, tmp_path: Path, command: str,
                                                          monkeypatch) -> None:
    import posenc.pretrained as pretrained

    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    bad = str(blocker / "out.json")

    def no_load(*_a, **_k):
        raise AssertionError("the model was loaded before the output path was checked")

    monkeypatch.setattr(pretrained, "load_pretrained", no_load)
    argv, flag = {
        "generate": (["generate", model, "--prompt", "x", "--json", bad], "--json"),
        "perplexity": (["perplexity", model, text, "--json", bad], "--json"),
        "perplexity-per-token": (["perplexity", model, text, "--per-token", bad], "--per-token"),
        "extend-json": (["extend", model, "--quick", "--out", "-", "--json", bad], "--json"),
        "extend-out": (["extend", model, "--quick", "--out", str(blocker / "run")], "--out"),
    }[command]
    assert_refused(posenc(*argv), flag, "file.txt")


# -- 6. sampling and number edges -------------------------------------------------------------------------------
def test_a_top_p_below_float32_range_keeps_the_most_likely_token() -> None:
    from posenc.models.decoder import next_token

    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    picked = next_token(logits, temperature=1.0, top_p=1e-300, generator=torch.Generator().manual_seed(0))
    assert picked.tolist() == [1, 0]


def test_a_tiny_temperature_samples_the_argmax_and_one_below_float32_range_is_refused() -> None:
    from posenc.models.decoder import check_sampling, next_token

    logits = torch.tensor([[0.0, 3.0, 2.999]])
    assert next_token(logits, temperature=1e-30, generator=torch.Generator().manual_seed(0)).tolist() == [1]
    with pytest.raises(ValueError, match="temperature=1e-300 must be 0"):
        check_sampling(1e-300, None, None)


@pytest.mark.parametrize("flags, fragment", [
    (["--temperature", "inf"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--top-p", "0"], "--top-p"),
    (["--top-k", "0"], "--top-k"),
    (["--seed", str(2**64)], "--seed"),
    (["--seed", "-1"], "--seed"),
    (["--system", "be brief"], "--system"),
])
def test_generate_refuses_sampling_edges_by_flag(model: Path, flags: list[str], fragment: str) -> None:
    assert_refused(posenc("generate", model, "--prompt", "the fox", "--temperature", "1", *flags, "--quiet"),
                   fragment)


def test_generate_samples_with_a_tiny_top_p_and_a_big_seed(model: Path) -> None:
    result = posenc("generate", model, "--prompt", "the fox", "--temperature", "1", "--top-p", "1e-300",
                    "--seed", str(2**63 - 1), "--max-new-tokens", "3", "--quiet")
    assert result.code == 0, result.err


@pytest.mark.parametrize("flags, fragment", [
    (["--max-tokens", "-1"], "--max-tokens"),
    (["--max-tokens", "1"], "--max-tokens"),
    (["--window", "1"], "--window"),
    (["--stride", "0"], "--stride"),
    (["--window", "8", "--stride", "9"], "--stride"),
])
def test_perplexity_refuses_number_edges_by_flag(model: Path, text: Path, flags: list[str], fragment: str) -> None:
    assert_refused(posenc("perplexity", model, text, *flags, "--quiet"), fragment)


@pytest.mark.parametrize("flags, fragment", [
    (["--original-max-len", "0"], "--original-max-len"),
    (["--factors", "2,2"], "repeats"),
    (["--factors", "nan"], "--factors"),
    (["--methods", "rope,rope"], "repeats"),
    (["--lengths", "8,8"], "repeats"),
    (["--max-tokens", "0", "--passkey-trials", "0"], "nothing would be measured"),
])
def test_extend_refuses_settings_that_measure_nothing_or_something_else(model: Path, flags, fragment) -> None:
    assert_refused(posenc("extend", model, "--out", "-", "--quiet", *flags), fragment)


# -- 12. python -m posenc ---------------------------------------------------------------------------------------------
def test_python_dash_m_posenc_runs_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "posenc", "schemes", "--json", "-"], capture_output=True, text=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"rope"' in out.stdout
