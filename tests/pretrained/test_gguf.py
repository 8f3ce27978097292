"""read_gguf on files written like llama.cpp's converter writes them, from tiny random HF Llamas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gguf_helpers import (gguf_tensors, llamacpp_permute, q8_0_bound, tiny_llama, tokenizer_fields,
                          train_tokenizer, write_gguf)
from posenc.formats.gguf import GGUFError, hf_name, read_gguf


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


@pytest.fixture
def model(tok, seed):
    return tiny_llama(tok.get_vocab_size(), rope_theta=float(np.random.default_rng(seed).uniform(1e3, 1e6)))


def test_config_matches_hf(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok))
    ck = read_gguf(path)
    hf = model.config
    assert ck.hf_config["model_type"] == "llama"
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "max_position_embeddings", "vocab_size", "tie_word_embeddings", "head_dim"):
        assert ck.hf_config[key] == getattr(hf, key), key
    # float32 in the file: the decimal written is recovered exactly when it has ≤ 7 significant digits
    assert ck.hf_config["rms_norm_eps"] == hf.rms_norm_eps
    assert ck.hf_config["rope_theta"] == pytest.approx(hf.rope_parameters["rope_theta"], rel=2**-23)
    assert "rope_scaling" not in ck.hf_config
    assert (ck.bos_id, ck.eos_id, ck.pad_id, ck.add_bos_token) == (1, 2, 2, False)
    assert ck.chat_template.startswith("{% for m in messages %}")


@pytest.mark.parametrize("tie", [False, True])
def test_f32_tensors_equal_hf_exactly(tmp_path: Path, tok, tie: bool, seed: int) -> None:
    model = tiny_llama(tok.get_vocab_size(), tie=tie)
    ck = read_gguf(write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok)))
    sd = model.state_dict()
    expected = set(sd) - ({"lm_head.weight"} if tie else set())
    assert set(ck.tensors) == expected
    assert ck.hf_config["tie_word_embeddings"] is tie
    for name, t in ck.tensors.items():
        assert t.dtype == torch.float32
        torch.testing.assert_close(t, sd[name], rtol=0, atol=0, msg=name)  # q/k rows un-permuted to HF's order
    assert ck.pairing == "half" and set(ck.tensor_types.values()) == {"F32"}


def test_keep_interleaved_keeps_llamacpp_rows(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok))
    ck = read_gguf(path, keep_interleaved=True)
    stored = gguf_tensors(model)  # the rows as llama.cpp's permute wrote them
    assert ck.pairing == "interleaved"
    for i in range(model.config.num_hidden_layers):
        for short, proj in (("attn_q", "q_proj"), ("attn_k", "k_proj")):
            got = ck.tensors[f"model.layers.{i}.self_attn.{proj}.weight"]
            np.testing.assert_array_equal(got.numpy(), stored[f"blk.{i}.{short}.weight"])
    # sanity of the reference itself: the permutation is not the identity
    q = model.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    assert not np.array_equal(llamacpp_permute(q, model.config.num_attention_heads), q)


def test_q8_0_within_block_scale_error(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), qtype="Q8_0")
    ck = read_gguf(path)
    stored = gguf_tensors(model)
    sd = model.state_dict()
    checked = 0
    for gname, ref in stored.items():
        if ref.ndim != 2:
            continue
        name = hf_name(gname)
        assert ck.tensor_types[name] == "Q8_0"
        got = ck.tensors[name].numpy().astype(np.float64)
        bound = q8_0_bound(path, gname)
        if "attn_q" in gname or "attn_k" in gname:  # compare in the stored (interleaved) order, where blocks lie
            heads = model.config.num_attention_heads if "attn_q" in gname else model.config.num_key_value_heads
            got = llamacpp_permute(got, heads)
        err = np.abs(got - ref.astype(np.float64))
        assert (err <= bound).all(), f"{gname}: error {err.max()} exceeds the block-scale bound"
        assert err.max() > 0, f"{gname}: Q8_0 should not be lossless on random weights"
        checked += 1
        torch.testing.assert_close(ck.tensors[name], sd[name], rtol=0, atol=float(bound.max()))
    assert checked == 7 * model.config.num_hidden_layers + 2  # + token_embd, output


def test_dtype_keyword_casts_each_tensor(tmp_path: Path, tok, model) -> None:
    ck = read_gguf(write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok)), dtype=torch.bfloat16)
    sd = model.state_dict()
    for name, t in ck.tensors.items():
        assert t.dtype == torch.bfloat16
        torch.testing.assert_close(t, sd[name].to(torch.bfloat16), rtol=0, atol=0)


def test_tokenizer_equals_the_trained_one(tmp_path: Path, tok, model) -> None:
    ck = read_gguf(write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok)))
    for text in ["The quick brown fox", "  two  spaces\tand\ttabs\n\n", "café 東京 🙂 12345",
                 "<|im_start|>user\nhello<|im_end|>", "unseen wörds ☃ 0.5"]:
        assert ck.tokenizer.encode(text).ids == tok.encode(text).ids, text
        assert ck.tokenizer.decode(ck.tokenizer.encode(text).ids, skip_special_tokens=False) == text


# -- bad files -------------------------------------------------------------------------------------------------
def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(GGUFError, match=r"x\.gguf: not a GGUF file"):
        read_gguf(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_gguf(tmp_path / "missing.gguf")


def test_truncated_file(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok))
    data = path.read_bytes()
    for keep in (len(data) - 100, len(data) // 2, 40):
        cut = tmp_path / f"cut{keep}.gguf"
        cut.write_bytes(data[:keep])
        with pytest.raises(GGUFError, match=rf"cut{keep}\.gguf: .*truncated.*Download it again"):
            read_gguf(cut)


def test_unsupported_arch(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), arch="falcon")
    with pytest.raises(GGUFError, match=r"m\.gguf: architecture 'falcon' is not supported.*"
                                        r"\['gemma3', 'llama', 'qwen2', 'qwen3'\]"):
        read_gguf(path)


def test_unsupported_quant_names_tensor(tmp_path: Path, tok, model) -> None:
    ref = gguf_tensors(model)["blk.1.ffn_up.weight"]  # (96, 64): IQ4_NL blocks of 32 values in 18 bytes
    raw = np.random.default_rng(0).integers(0, 255, size=(ref.shape[0], ref.shape[1] // 32 * 18), dtype=np.uint8)
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok),
                      replace={"blk.1.ffn_up.weight": (raw, "IQ4_NL")})
    with pytest.raises(GGUFError, match=r"m\.gguf: tensor 'blk\.1\.ffn_up\.weight' is stored as IQ4_NL.*Q8_0"):
        read_gguf(path)


def test_missing_tensor(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), drop=("blk.1.attn_v.weight",))
    with pytest.raises(GGUFError, match=r"m\.gguf: 1 tensor\(s\) missing.*blk\.1\.attn_v\.weight"):
        read_gguf(path)


def test_wrong_shape(tmp_path: Path, tok, model) -> None:
    bad = np.zeros((8, 64), dtype=np.float32)
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), replace={"blk.0.attn_k.weight": bad})
    with pytest.raises(GGUFError, match=r"m\.gguf: tensor 'blk\.0\.attn_k\.weight' has shape \[8, 64\].*\[32, 64\]"):
        read_gguf(path)


def test_missing_metadata_key(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), meta={"llama.block_count": None})
    with pytest.raises(GGUFError, match=r"m\.gguf: metadata key 'llama\.block_count' is missing"):
        read_gguf(path)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tokenizer_model": "t5"}, r"tokenizer\.ggml\.model = 't5' is not supported.*'gpt2'.*'llama'"),
    # a SentencePiece vocabulary must carry scores (this file has merges only)
    ({"tokenizer_model": "llama"}, r"SentencePiece vocabulary .* needs one tokenizer\.ggml\.scores"),
    ({"pre": "deepseek-coder"}, r"tokenizer\.ggml\.pre = 'deepseek-coder' is a pre-tokenizer posenc does not build"),
])
def test_unsupported_tokenizer(tmp_path: Path, tok, model, kwargs, message) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), **kwargs)
    with pytest.raises(GGUFError, match=message):
        read_gguf(path)


@pytest.mark.parametrize("case", ["qwen2-without-biases", "rope_freqs-not-llama3", "partial-rotary"])
def test_refusals_named(tmp_path: Path, tok, model, case: str) -> None:
    """What GGUF still refuses, each by name: a qwen2 file without its q/k/v biases, ``rope_freqs`` factors
    outside Llama 3's bands, partial rotary under the llama architecture (the permutation spans the head)."""
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    wild = np.random.default_rng(0).uniform(1.0, 3.0, head_dim // 2).astype(np.float32)
    kwargs, message = {
        "qwen2-without-biases": ({"arch": "qwen2", "layout": "llama"},
                                 r"tensor\(s\) missing.*self_attn\.q_proj\.bias.*blk\.0\.attn_q\.bias"),
        "rope_freqs-not-llama3": ({"extra": {"rope_freqs.weight": wild}},
                                  r"tensor 'rope_freqs\.weight' \(llama 3 style RoPE frequency factors\).*"
                                  r"(do not follow Llama 3's wavelength bands|band edges cannot be recovered)"),
        "partial-rotary": ({"meta": {"llama.rope.dimension_count": head_dim // 2}},
                           r"rope\.dimension_count = \d+ but the head width is \d+; partial rotary llama files.*"
                           r"permutes the rows of the whole head"),
    }[case]
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), **kwargs)
    with pytest.raises(GGUFError, match=message):
        read_gguf(path)


def test_rope_freqs_of_ones_is_plain_rope(tmp_path: Path, tok, model) -> None:
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok),
                      extra={"rope_freqs.weight": np.ones(head_dim // 2, dtype=np.float32)})
    ck = read_gguf(path)
    assert "rope_scaling" not in ck.hf_config and "rope_freqs.weight" not in ck.tensors


@pytest.mark.parametrize(("meta", "expected"), [
    ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}, {"rope_type": "linear", "factor": 4.0}),
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 2.0,
      "llama.rope.scaling.original_context_length": 128},
     {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128}),
])
def test_rope_scaling_metadata(tmp_path: Path, tok, model, meta, expected) -> None:
    ck = read_gguf(write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok), meta=meta))
    assert ck.hf_config["rope_scaling"] == expected


def test_unknown_rope_scaling_refused(tmp_path: Path, tok, model) -> None:
    path = write_gguf(tmp_path / "m.gguf", model, tokenizer_fields(tok),
                      meta={"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 2.0})
    with pytest.raises(GGUFError, match=r"RoPE scaling type 'longrope'.*supported: none, linear, yarn"):
        read_gguf(path)
