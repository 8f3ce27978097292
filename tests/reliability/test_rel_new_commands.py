"""Hostile input to the commands added since December (extend, finetune, rope): the standard of the old ones.

Each refusal is one ``posenc: error:`` line naming the value and the fix (exit 2), never a hang, a bare
Python message or an allocation past the memory budget.
"""

from __future__ import annotations

import pytest

from conftest import assert_refused, posenc
from model_files import hf_folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return hf_folder(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("method", ["self-extend", "string", "dca", "rerope"])
def test_extend_at_the_smallest_trained_context_reports_instead_of_a_format_error(tiny, tmp_path, method):
    """L0 = 2: the first bucket (positions 0–1) holds only the first token, which nothing predicts: no perplexity
    — said as n/a, not ``unsupported format string passed to NoneType.__format__``."""
    result = posenc("extend", tiny, "--methods", method, "--original-max-len", "2", "--passkey-trials", "0",
                    "--text", "licenses", "--max-tokens", "8", "--out", tmp_path / "out")
    assert result.code == 0, result.err
    assert "ppl first bucket n/a" in result.out
