"""The grid saves every cell as it finishes; a rerun skips finished cells and resumes a passkey cell mid-way."""

from __future__ import annotations

import json

import pytest

import posenc.extend.grid as grid_module
from posenc.extend.cells import CellStore
from posenc.extend.grid import Grid, GridConfig


def _config(l0: int, **changes) -> GridConfig:
    base = dict(methods=("rope", "rope-linear", "rope-yarn"), factors=(2.0,), documents=("licenses",),
                loss_length=2 * l0, passkey_lengths=(300,), passkey_trials=3, original_max_len=l0, answer_tokens=2)
    return GridConfig(**{**base, **changes})


def _counting(monkeypatch, name):
    calls = []
    real = getattr(grid_module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_module, name, counted)
    return calls


def test_rerun_skips_finished_cells(tiny_model, tokenizer, tmp_path, monkeypatch, l0):
    cfg = _config(l0)
    passes = _counting(monkeypatch, "token_nll")
    decodes = _counting(monkeypatch, "greedy_continuation")
    cells = Grid(tiny_model, tokenizer, cfg, CellStore(tmp_path), model_id="tiny", progress=False, log=lambda _: None).run()
    # 3 variants × 1 document + the in-range control pass; 3 variants × 3 trials
    assert len(passes) == 4 and len(decodes) == 3 * 3
    files = sorted(p.name for p in (tmp_path / "cells").glob("*.json"))
    assert len(files) == 7 and "loss-licenses-rope-yarn-x2-T128.json" in files
    control = json.loads((tmp_path / "cells" / "control-licenses-rope-T128.json").read_text())
    assert control["offset"] == l0 and [b["start"] for b in control["buckets"]] == [0, 32, 64, 96]
    assert control["buckets"][0]["tokens"] == 0 and control["buckets"][2]["tokens"] == l0 // 2 - 1
    # the control reads tokens l0 … 2·l0 − 1 alone: targets l0 + 1 … 2·l0 − 1
    again = Grid(tiny_model, tokenizer, cfg, CellStore(tmp_path), model_id="tiny", progress=False,
                 log=lambda _: None).run()
    assert len(passes) == 4 and len(decodes) == 9  # nothing recomputed
    assert [c["name"] for c in again] == [c["name"] for c in cells]
    # a changed setting (the model) recomputes
    Grid(tiny_model, tokenizer, cfg, CellStore(tmp_path), model_id="other", progress=False, log=lambda _: None).run()
    assert len(passes) == 8


def test_passkey_cell_resumes_at_its_next_trial(tiny_model, tokenizer, tmp_path, monkeypatch, l0):
    cfg = _config(l0, methods=("rope",), documents=())
    grid = Grid(tiny_model, tokenizer, cfg, CellStore(tmp_path), model_id="tiny", progress=False, log=lambda _: None)
    full = grid.passkey_cell(300, "rope", None)
    assert len(full["trials"]) == 3
    # cut the saved cell back to one trial, as if interrupted after it
    path = tmp_path / "cells" / "passkey-rope-L300.json"
    cut = {**full, "trials": full["trials"][:1]}
    path.write_text(json.dumps(cut))
    decodes = _counting(monkeypatch, "greedy_continuation")
    resumed = grid.passkey_cell(300, "rope", None)
    def same(trials):
        return [{k: v for k, v in t.items() if k != "seconds"} for t in trials]

    assert len(decodes) == 2 and same(resumed["trials"]) == same(full["trials"])  # same seeded prompts, answers
    # more trials asked later: only the new ones run
    more = Grid(tiny_model, tokenizer, _config(l0, methods=("rope",), documents=(), passkey_trials=4),
                CellStore(tmp_path), model_id="tiny", progress=False, log=lambda _: None)
    assert len(more.passkey_cell(300, "rope", None)["trials"]) == 4 and len(decodes) == 3


def test_loss_cell_contents(tiny_model, tokenizer, l0):
    cfg = _config(l0, methods=("rope-yarn",), passkey_lengths=())
    (cell,) = Grid(tiny_model, tokenizer, cfg, CellStore(None), model_id="tiny", progress=False,
                   log=lambda _: None).run()
    assert cell["method"] == "rope-yarn" and cell["options"] == {"factor": 2.0, "original_max_len": l0}
    assert len(cell["nll"]) == 2 * l0 - 1 and [b["start"] for b in cell["buckets"]] == [0, 32, 64, 96]
    assert cell["sdpa"]["causal_path_only"]
    assert cell["source"].startswith("/usr/share/common-licenses")


def test_document_too_short_is_a_clear_error(tiny_model, tokenizer, tmp_path, l0):
    short = tmp_path / "short.txt"
    short.write_text("only a few words")
    cfg = _config(l0, documents=(str(short),), passkey_lengths=())
    with pytest.raises(ValueError, match="fewer than the 128"):
        Grid(tiny_model, tokenizer, cfg, CellStore(None), model_id="tiny", progress=False, log=lambda _: None).run()
