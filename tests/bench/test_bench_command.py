"""``posenc bench`` runs end to end at tiny sizes and records what it measured (no timing assertions)."""

import json

import pytest

from posenc.bench import SUITES, report, run, timing, worker
from posenc.cli import main


def test_bench_command_end_to_end_tiny(tmp_path, capsys):
    out = tmp_path / "perf"
    code = main(["bench", "--size", "tiny", "--suites", "rope,angles,additive,bias,lab", "--alloc", "default",
                 "--no-compile", "--threads", "1", "--quiet", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "posenc speed-up" in printed and "load average" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["command"].startswith("posenc bench --size tiny")
    assert result["machine"]["torch_threads"] == 1 and len(result["machine"]["load_average"]) == 3
    rope = [c for c in result["cases"] if c["suite"] == "rope"]
    assert {c["name"].split()[0] for c in rope} == {"half", "interleaved"}
    for case in rope:  # every case times posenc, a floor and at least one checked peer
        assert {"posenc", case["floor"]} <= set(case["stats"]) and len(case["stats"]) >= 3
        assert set(case["facts"]["max_abs_diff"]) >= {"posenc"}
    angles = next(c for c in result["cases"] if c["suite"] == "angles")
    errs = angles["facts"]["max_abs_error_vs_float64"][str(10**6)]
    assert errs["posenc (float64 angles, float32 tables)"] < 1e-7 < errs["float32 angles (HF, torchtune, Meta)"]
    markdown = (out / "results.md").read_text()
    assert "| contender |" in markdown and "load average" in markdown


def test_bad_suite_and_allocator_raise():
    assert main(["bench", "--suites", "rope,nope", "--quiet"]) == 2
    with pytest.raises(ValueError, match="allocators"):
        run(["rope"], size="tiny", allocators=["jemalloc"])
    with pytest.raises(ValueError, match="allocator mode"):
        timing.allocator("fast")
    assert set(SUITES) >= {"rope", "angles", "additive", "bias", "attention", "train", "lab"}


def test_measure_interleaves_and_counts_every_repeat():
    calls = []
    stats = timing.measure({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert stats["a"].repeats == stats["b"].repeats == 3
    assert calls[2:] == ["a", "b", "b", "a", "a", "b"]  # after warm-up, the order rotates per repeat


@pytest.mark.parametrize("kind", ["posenc", "torch"])
def test_training_worker_runs_both_models_at_tiny_size(kind):
    spec = {"task": "train", "kind": kind, "dropout": 0.1, "batch": 2, "length": 6, "vocab": 30, "dim": 16,
            "heads": 2, "layers": 1, "ffn": 32, "steps": 2, "warmup": 1, "optimizer": "sgd"}
    res = worker.train(spec)
    assert res["steps"] == 2 and res["tokens_per_s"] > 0 and res["parameters"] > 0


def test_attention_memory_worker_and_report_rendering():
    res = worker.attention_memory({"shape": [1, 4, 512, 8], "kind": "naive"})
    assert res["peak_extra_mb"] >= 0  # ≈ 8 MiB of scores where /proc/self/clear_refs works; 0 if not measurable
    case = {"suite": "x", "name": "y", "floor": "f", "posenc": "p", "facts": {"peak_extra_mb": {"p": 1.0, "f": 2.0}},
            "stats": {n: {"median_ms": m, "p25_ms": m, "p75_ms": m, "repeats": 1, "faults_per_call": 0}
                      for n, m in (("f", 1.0), ("p", 2.0))}}
    header, rows = report.case_rows(case)
    assert header[-1] == "peak_extra_mb" and rows[1][3] == "2.00" and rows[0][5] == "0.50×"


@pytest.mark.slow
def test_compile_suite_times_eager_and_compiled_contenders():
    """The compile suite at tiny size (dynamo's eager backend: no C++ build): every contender timed, goals recorded."""
    result = run(["compile"], size="tiny", allocators=["default"])
    train, decode = result["cases"]
    contenders = {f"{m} {mode}" for m in ("posenc rope", "torch.nn.Transformer") for mode in ("eager", "compiled")}
    for case in (train, decode):
        assert set(case["stats"]) == contenders
        assert set(case["facts"]["compile_s"]) == {c for c in contenders if c.endswith("compiled")}
        assert all(v > 0 for v in case["facts"]["tokens_per_s"].values())
        assert "posenc rope compiled >= torch.nn.Transformer compiled" in case["facts"]["goals_met"]
    assert decode["facts"]["decoded_ids_equal_eager"] == {"posenc rope": True, "torch.nn.Transformer": True}
