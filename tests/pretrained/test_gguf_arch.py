"""GGUF architectures beyond llama: qwen2 (biases), qwen3 (QK-norm), gemma3 (sandwich norms stored as 1 + w,
a sliding/global plan the file does not state), Llama 3.1's ``rope_freqs``, partial rotary — on tiny files
written as llama.cpp's converter writes them (gguf_helpers), checked two ways: posenc's tensors equal the ones
transformers' own GGUF loader reads from the same file, and posenc's logits equal the HF model the file was
written from (full forward and cached decoding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gguf_helpers import (hf_from_gguf, llama3_rope_freqs, tiny_hf, tiny_llama, tokenizer_fields, train_tokenizer,
                          write_gguf)
from posenc.families import model_types
from posenc.formats.gguf import open_gguf, read_gguf, read_metadata
from posenc.pretrained import load_pretrained
from posenc.pretrained.tokenizer import load_tokenizer

pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it
ARCHS = ["qwen2", "qwen3", "gemma3"]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


def runnable(model_type: str) -> None:
    if model_type not in model_types():
        pytest.skip(f"posenc has no family for model_type {model_type!r} in this tree (posenc.families)")


def assert_logits_equal(pm, hf, ids: torch.Tensor) -> None:
    """posenc's model from the GGUF vs the HF model it was written from: full forward and cached decoding."""
    with torch.no_grad():
        ref = hf(ids).logits
        tol = {"rtol": 1e-4, "atol": 1e-5 * max(1.0, float(ref.abs().max()))}
        torch.testing.assert_close(pm.model(ids), ref, **tol)
        cache = pm.model.new_cache()
        first = ids.shape[1] // 3
        parts = [pm.model(ids[:, :first], cache=cache)]
        parts += [pm.model(ids[:, i:i + 1], cache=cache) for i in range(first, ids.shape[1])]
        torch.testing.assert_close(torch.cat(parts, dim=1), ref, **tol)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
@pytest.mark.parametrize("arch", ARCHS)
def test_tensors_equal_transformers_gguf_loader(tmp_path: Path, tok, arch: str, qtype: str, seed: int) -> None:
    hf = tiny_hf(arch, tok.get_vocab_size())
    path = write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch, qtype=qtype)
    ck = read_gguf(path)
    theirs = hf_from_gguf(path).state_dict()
    tied = ck.hf_config["tie_word_embeddings"]
    assert set(ck.tensors) == set(theirs) - ({"lm_head.weight"} if tied else set())
    for name, t in ck.tensors.items():
        torch.testing.assert_close(t, theirs[name], rtol=0, atol=0, msg=name)
    assert ck.pairing == "half" and read_gguf(path, keep_interleaved=True).pairing == "half"  # never permuted
    if arch == "gemma3" and qtype == "F32":  # (1 + w) − 1 in float32: w back within one rounding of 1 + w
        for name, w in hf.state_dict().items():
            if name.endswith("norm.weight"):
                torch.testing.assert_close(ck.tensors[name], w, rtol=0, atol=2**-23 * (1 + float(w.abs().max())))


@pytest.mark.parametrize("arch", ARCHS)
def test_config_matches_transformers(tmp_path: Path, tok, arch: str) -> None:
    import transformers

    hf = tiny_hf(arch, tok.get_vocab_size())
    path = write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch)
    ours = read_gguf(path).hf_config
    theirs = transformers.AutoConfig.from_pretrained(str(tmp_path), gguf_file=path.name)
    assert ours["model_type"] == theirs.model_type == hf.config.model_type
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "max_position_embeddings", "vocab_size", "tie_word_embeddings"):
        assert ours[key] == getattr(theirs, key) == getattr(hf.config, key), key
    head_dim = getattr(hf.config, "head_dim", None) or hf.config.hidden_size // hf.config.num_attention_heads
    assert ours["head_dim"] == head_dim
    if arch == "gemma3":  # the plan and local base the file leaves out, as llama.cpp and HF supply them
        for key in ("layer_types", "sliding_window"):
            assert ours[key] == getattr(theirs, key) == getattr(hf.config, key), key
        assert ours["rope_parameters"] == theirs.rope_parameters == hf.config.rope_parameters
        # the softmax scale: llama.cpp's rule (head_dim here); HF's loader keeps Gemma3TextConfig's default 256,
        # which is head_dim for every real size but 27B
        assert ours["query_pre_attn_scalar"] == hf.config.query_pre_attn_scalar == 16
        assert theirs.query_pre_attn_scalar == 256


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_equal_the_hf_model(tmp_path: Path, tok, arch: str, pairing: str, seed: int) -> None:
    hf = tiny_hf(arch, tok.get_vocab_size())
    runnable(hf.config.model_type)
    path = write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch)
    pm = load_pretrained(path, pairing=pairing)
    assert_logits_equal(pm, hf, torch.randint(0, tok.get_vocab_size(), (2, 23)))  # 23 tokens: past gemma3's window 5
    if arch == "gemma3":
        rows = pm.model.describe()["layers"]
        assert [r["window"] for r in rows] == ["sliding 5"] * 5 + ["full", "sliding 5"]
        assert [r["position_options"]["base"] for r in rows] == [1e4] * 5 + [1e6, 1e4]


def test_gemma3_linear_scaling_applies_to_the_global_layers(tmp_path: Path, tok, seed: int) -> None:
    """Gemma 3 4B–27B: the file's linear ×8 (``rope.scaling.*``) scales the global layers only, as in llama.cpp
    (transformers' GGUF loader drops the keys; the reference is the HF model the file came from)."""
    hf = tiny_hf("gemma3", tok.get_vocab_size())
    hf.config.rope_parameters["full_attention"] = {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}
    hf = tiny_hf("gemma3", tok.get_vocab_size(), rope_parameters=hf.config.rope_parameters)
    path = write_gguf(tmp_path / "g.gguf", hf, tokenizer_fields(tok), arch="gemma3",
                      meta={"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0})
    pm = load_pretrained(path)
    assert read_gguf(path).hf_config["rope_parameters"]["full_attention"]["factor"] == 8.0
    assert_logits_equal(pm, hf, torch.randint(0, tok.get_vocab_size(), (1, 19)))


def test_gemma3_without_window_is_refused(tmp_path: Path, tok) -> None:
    hf = tiny_hf("gemma3", tok.get_vocab_size())
    path = write_gguf(tmp_path / "g.gguf", hf, tokenizer_fields(tok), arch="gemma3",
                      meta={"gemma3.attention.sliding_window": None})
    with pytest.raises(ValueError, match=r"'gemma3\.attention\.sliding_window' is missing"):
        read_gguf(path)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_llama31_rope_freqs_is_rope_llama3(tmp_path: Path, tok, pairing: str, seed: int) -> None:
    """Llama 3.1/3.2 files carry their RoPE scaling only as ``rope_freqs.weight``; posenc reads it back into
    rope-llama3 (low_freq_factor 1) and equals the HF model with the original ``rope_scaling``.
    transformers' GGUF loader ignores the tensor (plain RoPE) — so the reference is the HF model itself."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}  # head_dim 16, base 1e4: two pairs in the smooth band
    hf = tiny_llama(tok.get_vocab_size())
    import transformers

    cfg = hf.config
    cfg.rope_parameters = {"rope_theta": 10000.0, **scaling}
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    freqs = llama3_rope_freqs(16, 10000.0, scaling)
    assert 1 < np.unique(freqs).size  # the factors are not all one
    path = write_gguf(tmp_path / "l31.gguf", hf, tokenizer_fields(tok), extra={"rope_freqs.weight": freqs})
    ck = read_gguf(path)
    assert ck.hf_config["rope_scaling"] == scaling | {"original_max_position_embeddings": 64}
    pm = load_pretrained(path, pairing=pairing)
    assert pm.config.position == "rope-llama3"
    assert_logits_equal(pm, hf, torch.randint(0, tok.get_vocab_size(), (1, 80)))


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_partial_rotary_loads_for_unpermuted_archs(tmp_path: Path, tok, arch: str) -> None:
    """``rope.dimension_count`` below the head width: llama.cpp's NeoX kernel rotates the first channels in
    halves, HF's ``partial_rotary_factor``. (No HF Qwen model runs partial rotary, so this checks the config and
    the scheme built; posenc's partial RoPE itself is tested against HF's Phi-3 / GPT-NeoX rotation.)"""
    hf = tiny_hf(arch, tok.get_vocab_size())
    head_dim = 128 if arch == "qwen3" else 16
    path = write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch,
                      meta={f"{arch}.rope.dimension_count": head_dim // 2})
    ck = read_gguf(path)
    assert ck.hf_config["partial_rotary_factor"] == 0.5
    runnable(ck.hf_config["model_type"])
    pm = load_pretrained(path)
    assert {spec.position_options.get("rotary_dim") for spec in pm.config.plan} == {head_dim // 2}


def test_fast_reader_reads_what_the_package_reader_reads(tmp_path: Path, tok) -> None:
    import gguf

    hf = tiny_hf("gemma3", tok.get_vocab_size())
    path = write_gguf(tmp_path / "g.gguf", hf, tokenizer_fields(tok), arch="gemma3", qtype="Q8_0")
    ours, theirs = open_gguf(path), gguf.GGUFReader(str(path))
    assert read_metadata(ours) == read_metadata(theirs)
    assert [f.types for f in ours.fields.values()] == [f.types for f in theirs.fields.values()]
    assert [(t.name, t.data_offset, t.n_bytes) for t in ours.tensors] == \
        [(t.name, t.data_offset, t.n_bytes) for t in theirs.tensors]


def test_sliding_cache_frees_what_its_window_dropped(tok, seed) -> None:
    """After a prefill far past the window, a sliding layer's cache holds the window's keys in storage of about
    that size, not views into the whole prefill's keys (Gemma 3 270M at 32k: ~1 GiB otherwise)."""
    from posenc.attention import KVCache

    cache = KVCache()
    k = torch.randn(1, 1, 4096, 8)
    cache.append(k, k.clone(), torch.arange(4096))
    cache.keep_from(4096 - 511)
    assert cache.stored == 511 and cache.length == 4096
    assert cache.k.untyped_storage().nbytes() == 511 * 8 * 4  # a copy of the kept keys only
    torch.testing.assert_close(cache.k, k[..., -511:, :], rtol=0, atol=0)
    for step in range(300):  # decoding: one key in, one out — storage stays within twice the window
        cache.append(torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8), torch.tensor([4096 + step]))
        cache.keep_from(4096 + step + 1 - 511)
        assert cache.k.untyped_storage().nbytes() <= 2 * 512 * 8 * 4


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0"])
@pytest.mark.parametrize("arch", ARCHS)
def test_as_stored_runs_every_architecture(tmp_path: Path, tok, arch: str, qtype: str, seed: int) -> None:
    """Qwen2 (q/k/v biases), Qwen3 (QK-norm) and Gemma 3 (sandwich norms, windows, a tied Q8_0 table) run as
    stored by default: their projections on posenc's kernel, the logits — a full forward and a cached decoding
    step by step — within the 8-bit activations' rounding of the dequantised model (itself equal to HF's,
    test_logits_equal_the_hf_model): 10 % of the largest logit (the tiny random Gemma's logits are below 1 and
    its seven layers reach 6 %; a wrong layout, row order or missing bias is of the order of the logits)."""
    from posenc import kernels

    hf = tiny_hf(arch, tok.get_vocab_size())
    path = write_gguf(tmp_path / f"{arch}.gguf", hf, tokenizer_fields(tok), arch=arch, qtype=qtype)
    stored, ref = load_pretrained(path), load_pretrained(path, weights="dequantised")
    assert stored.weights == "as-stored"
    kernel = "posenc kernel" if kernels.load() else "int4 kernel"
    assert stored.stored["layers.0.attn.q_proj.weight"].startswith(f"{qtype} → {kernel}")
    ids = torch.randint(0, tok.get_vocab_size(), (1, 23), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = ref.model(ids)
        scale = float(want.abs().max())
        assert float((stored.model(ids) - want).abs().max()) < 0.1 * scale
        cache = stored.model.new_cache()
        steps = torch.cat([stored.model(ids[:, :3], cache=cache)]
                          + [stored.model(ids[:, i : i + 1], cache=cache) for i in range(3, 23)], dim=1)
    assert float((steps - want).abs().max()) < 0.1 * scale
    # the tokenizer alone (no tensor read) is the loaded model's, as stored or dequantised
    text = "The pass key is 12345. Remember it."
    alone = load_tokenizer(path)
    assert alone.encode(text) == stored.tokenizer.encode(text) == ref.tokenizer.encode(text)
    assert (alone.bos_id, alone.eos_id, alone.add_bos) == (ref.tokenizer.bos_id, ref.tokenizer.eos_id,
                                                           ref.tokenizer.add_bos)


def test_as_stored_refuses_an_unchecked_architecture(tmp_path: Path, tok, monkeypatch) -> None:
    """An architecture outside ``AS_STORED_ARCHS`` loads dequantised by default (read from posenc's own header
    walk), and asking for as-stored on it is refused by name."""
    import posenc.pretrained as pretrained

    monkeypatch.setattr(pretrained, "AS_STORED_ARCHS", ("llama",))
    hf = tiny_hf("gemma3", tok.get_vocab_size())
    path = write_gguf(tmp_path / "g.gguf", hf, tokenizer_fields(tok), arch="gemma3", qtype="Q8_0")
    assert pretrained.load_pretrained(path).weights == "dequantised"
    with pytest.raises(ValueError, match=r"as-stored is checked for GGUF architectures \['llama'\] only, "
                                         r"not 'gemma3'"):
        pretrained.load_pretrained(path, weights="as-stored")