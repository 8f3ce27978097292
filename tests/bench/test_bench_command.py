"""``posenc bench`` runs end to end at tiny sizes and records what it measured (no timing assertions)."""

import importlib.util
import json
import sys

import pytest
import torch

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


@pytest.fixture
def one_thread():
    """One torch thread (the bench worker inherits it): on a shared 2-core machine, 2 threads wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_compile_suite_times_eager_and_compiled_contenders(one_thread):
    """The compile suite at tiny size (dynamo's eager backend: no C++ build): every contender timed, goals recorded.

    Two pairs: posenc RoPE vs torch.nn.Transformer, and posenc Decoder vs HF LlamaForCausalLM on the same weights
    (their logits checked equal by the bench before timing), each eager and compiled, training and decoding.
    """
    result = run(["compile"], size="tiny", allocators=["default"])
    cases = result["cases"]
    train, decode = cases[:2]
    contenders = {f"{m} {mode}" for m in ("posenc rope", "torch.nn.Transformer") for mode in ("eager", "compiled")}
    for case in (train, decode):
        assert set(case["stats"]) == contenders
        assert set(case["facts"]["compile_s"]) == {c for c in contenders if c.endswith("compiled")}
        assert all(v > 0 for v in case["facts"]["tokens_per_s"].values())
        assert "posenc rope compiled >= torch.nn.Transformer compiled" in case["facts"]["goals_met"]
    assert decode["facts"]["decoded_ids_equal_eager"] == {"posenc rope": True, "torch.nn.Transformer": True}

    if importlib.util.find_spec("transformers") is None:
        (skipped,) = cases[2:]
        assert "transformers" in skipped["facts"]["skipped"] and not skipped["stats"]
        pytest.skip("HF transformers is not installed: the Llama pair is skipped (reason recorded, checked above)")
    llama_train, llama_decode = cases[2:]
    assert llama_train["name"].endswith("Llama training step (AdamW)")
    assert llama_decode["name"].startswith("eager vs torch.compile: Llama greedy decoding")
    llamas = ("posenc llama", "HF LlamaForCausalLM")
    contenders = {f"{m} {mode}" for m in llamas for mode in ("eager", "compiled")}
    for case in (llama_train, llama_decode):
        facts = case["facts"]
        assert set(case["stats"]) == contenders and case["posenc"] == "posenc llama compiled"
        assert set(facts["tokens_per_s"]) == contenders and all(v > 0 for v in facts["tokens_per_s"].values())
        assert set(facts["compile_s"]) == {c for c in contenders if c.endswith("compiled")}
        assert set(facts["goals_met"]) == {"posenc llama: compiled >= eager", "HF LlamaForCausalLM: compiled >= eager",
                                           "posenc llama compiled >= HF LlamaForCausalLM compiled"}
        assert facts["parameters"]["posenc llama"] == facts["parameters"]["HF LlamaForCausalLM"] > 0
        assert facts["logits_max_abs_diff"] < 1e-5  # checked by the bench before timing (MismatchError otherwise)
    assert set(llama_decode["facts"]["decoded_ids_equal_eager"]) == set(llamas)
    assert isinstance(llama_decode["facts"]["decoded_ids_posenc_equal_hf"], bool)
    markdown = report.render_markdown(result)
    assert "| HF LlamaForCausalLM compiled |" in markdown and "| posenc llama eager |" in markdown


TINY_LLAMA = {"vocab": 50, "dim": 16, "heads": 2, "layers": 1, "ffn": 32, "length": 8, "new_tokens": 3}


def test_llama_pair_shares_weights_and_refuses_different_logits():
    """posenc's loader fills Decoder from the HF model; a perturbed weight is a MismatchError, not a timing."""
    pytest.importorskip("transformers")
    from posenc.bench.compiled import check_llama_pair, llama_pair
    from posenc.bench.suites import MismatchError

    model, hf = llama_pair(TINY_LLAMA)
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    assert check_llama_pair(model, hf, ids) < 1e-5
    assert model.training and all(p.requires_grad for p in model.parameters())  # trainable, not loaded frozen
    assert not any(p.data_ptr() == q.data_ptr() for p in model.parameters() for q in hf.parameters())
    with torch.no_grad():
        model.layers[0].ffn.down_proj.weight.mul_(1.5)
    with pytest.raises(MismatchError, match="same weights but compute different logits"):
        check_llama_pair(model, hf, ids)


def test_llama_pair_is_skipped_with_a_reason_without_transformers(monkeypatch):
    from posenc.bench.compiled import llama_pair

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers → ImportError
    reason = llama_pair(TINY_LLAMA)
    assert isinstance(reason, str) and "needs the 'transformers' package: pip install 'posenc[hf]'" in reason
    assert "not requested" in llama_pair({**TINY_LLAMA, "llama": False})


def test_compile_cases_state_why_the_llama_pair_is_missing(monkeypatch):
    """A worker result without the Llama pair: the seq2seq cases as before, then one case naming the reason."""
    from posenc.bench import suites

    names = [f"{m} {mode}" for m in ("posenc rope", "torch.nn.Transformer") for mode in ("eager", "compiled")]
    stat = {"median_ms": 1.0, "p25_ms": 1.0, "p75_ms": 1.0, "repeats": 1, "faults_per_call": 0.0}
    part = {"stats": {n: stat for n in names}, "tokens_per_s": {n: 1.0 for n in names},
            "compile_s": {n: 1.0 for n in names if n.endswith("compiled")}}
    fake = {"backend": "eager", "parameters": {"posenc rope": 1, "torch.nn.Transformer": 1},
            "groups": {"seq2seq": ["posenc rope", "torch.nn.Transformer"]},
            "llama": {"skipped": "HF transformers is not installed (no module)"},
            "decode_agrees": {"posenc rope": True, "torch.nn.Transformer": True}, "train": part, "decode": part}
    monkeypatch.setattr(worker, "run_in_subprocess", lambda spec: fake)
    cases = suites.compile_cases("tiny")
    assert [set(c.stats) for c in cases[:2]] == [set(names)] * 2
    assert len(cases) == 3 and not cases[2].stats and "not installed" in cases[2].facts["skipped"]
