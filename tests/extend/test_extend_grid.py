"""The grid saves every cell as it finishes; a rerun skips finished cells and resumes a passkey cell mid-way."""

from __future__ import annotations

import dataclasses
import json

import pytest

import posenc.extend.grid as grid_module
from posenc.extend.cells import CellStore
from posenc.extend.grid import Grid, GridConfig
from posenc.extend.retrieval import shared_prefix_tokens


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
        return [{k: v for k, v in t.items() if k not in ("seconds", "reused_tokens")} for t in trials]

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


def test_shards_split_the_cells_and_together_make_the_grid(tiny_model, tokenizer, tmp_path, l0):
    """Every task × length × variant: two shards run disjoint cells into one store; their union is the whole grid."""
    cfg = _config(l0, methods=("rope", "rope-dynamic-ntk-fixed", "self-extend", "dca"), documents=(),
                  passkey_lengths=(900,), passkey_trials=2, tasks=("passkey", "multikey", "multivalue"))
    whole = Grid(tiny_model, tokenizer, cfg, CellStore(None), model_id="tiny", progress=False, log=lambda _: None).run()
    # rope and dca have no factor: 4 variants (rope, dca, fixed NTK ×2, self-extend ×2) × 3 tasks
    assert len(whole) == 12 and {c["task"] for c in whole} == {"passkey", "multikey", "multivalue"}
    assert all(len(c["trials"]) == 2 for c in whole)
    names = set()
    for i in range(2):
        shard = dataclasses.replace(cfg, shard=(i, 2))
        part = Grid(tiny_model, tokenizer, shard, CellStore(tmp_path), model_id="tiny", progress=False,
                    log=lambda _: None).run()
        assert len(part) == 6 and not names & {c["name"] for c in part}
        names |= {c["name"] for c in part}
    assert names == {c["name"] for c in whole}
    same = {c["name"]: [t["answer"] for t in c["trials"]] for c in whole}
    assert {c["name"]: [t["answer"] for t in c["trials"]] for c in CellStore(tmp_path).all()} == same
    with pytest.raises(ValueError, match="shard"):
        _config(l0, shard=(2, 2))


def test_every_method_answers_the_same_prompts(tiny_model, tokenizer, l0):
    cfg = _config(l0, methods=("rope", "rerope", "string"), documents=(), passkey_lengths=(900,), passkey_trials=5,
                  tasks=("multikey",))
    cells = Grid(tiny_model, tokenizer, cfg, CellStore(None), model_id="tiny", progress=False, log=lambda _: None).run()
    keys = {c["method"]: [(t["key"], t["depth"], t["prompt_tokens"]) for t in c["trials"]] for c in cells}
    assert keys["rope"] == keys["rerope"] == keys["string"]
    assert all(i / 5 <= d < (i + 1) / 5 for i, (_, d, _) in enumerate(keys["rope"]))  # one per fifth of the filler


def test_trials_continue_shared_prefixes_with_the_same_answers(tiny_model, tokenizer, l0):
    cfg = _config(l0, methods=("rope", "rope-dynamic-ntk-fixed"), documents=(), passkey_lengths=(900,),
                  passkey_trials=6, depths="grid")  # the grid's fixed depths: which prefix each trial reuses is known

    def run(share):
        grid = Grid(tiny_model, tokenizer, dataclasses.replace(cfg, share_prefixes=share), CellStore(None),
                    model_id="tiny", progress=False, log=lambda _: None)
        return {c["method"]: c["trials"] for c in grid.run()}

    shared, whole = run(True), run(False)
    for method in shared:
        assert [t["answer"] for t in shared[method]] == [t["answer"] for t in whole[method]]
        assert all(t["reused_tokens"] == 0 for t in whole[method])
    # plain RoPE: trial 1 reuses trial 0's prefix (the intro), trial 5 (depth 0 again) the whole of it;
    # fixed-mode dynamic NTK sets its base per prompt length, so it shares nothing
    rope = shared["rope"]
    assert rope[0]["reused_tokens"] == 0 and rope[1]["reused_tokens"] == rope[0]["needle_at"]
    assert rope[5]["reused_tokens"] == rope[5]["needle_at"] == rope[0]["needle_at"]
    assert all(t["reused_tokens"] == 0 for t in shared["rope-dynamic-ntk-fixed"])
    # the count without a model (benchmarks/extend/prefix_tokens.py) is what the grid read
    whole_tokens, read = shared_prefix_tokens(tokenizer, "passkey", 900, 6, depths="grid")
    assert whole_tokens == sum(t["prompt_tokens"] for t in rope)
    assert read == sum(t["prompt_tokens"] - t["reused_tokens"] for t in rope) < whole_tokens
