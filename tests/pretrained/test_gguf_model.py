"""A GGUF file loads to the same model as the HF checkpoint it was converted from — under both pairings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gguf_helpers import tiny_llama, tokenizer_fields, train_tokenizer, write_gguf
from posenc.pretrained import load_pretrained

pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it


def tolerance(ref: torch.Tensor) -> dict[str, float]:
    """float32 round-off of two implementations of the same sums, scaled to the logits."""
    return {"rtol": 1e-4, "atol": 1e-5 * max(1.0, float(ref.abs().max()))}


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # multi-head, grouped-query, multi-query
def test_f32_logits_equal_hf_both_pairings(tmp_path: Path, tok, tie: bool, kv_heads: int, seed: int) -> None:
    hf = tiny_llama(tok.get_vocab_size(), tie=tie, kv_heads=kv_heads, rope_theta=5e4)
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok))
    ids = torch.randint(0, tok.get_vocab_size(), (2, 37))
    with torch.no_grad():
        ref = hf(ids).logits
    by_pairing = {}
    for pairing in ("interleaved", "half"):  # llama.cpp's rows as stored / un-permuted to HF's order
        pm = load_pretrained(path, pairing=pairing)
        assert pm.config.max_position_embeddings == hf.config.max_position_embeddings
        with torch.no_grad():
            by_pairing[pairing] = pm.model(ids)
        torch.testing.assert_close(by_pairing[pairing], ref, **tolerance(ref))
    torch.testing.assert_close(by_pairing["interleaved"], by_pairing["half"], **tolerance(ref))


def test_cached_decoding_equals_full_forward(tmp_path: Path, tok, seed: int) -> None:
    hf = tiny_llama(tok.get_vocab_size())
    pm = load_pretrained(write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok)))
    ids = torch.randint(0, tok.get_vocab_size(), (1, 12))
    with torch.no_grad():
        full = pm.model(ids)
        cache = pm.model.new_cache()
        steps = torch.cat([pm.model(ids[:, t : t + 1], cache=cache) for t in range(ids.shape[1])], dim=1)
    torch.testing.assert_close(steps, full, **tolerance(full))


def test_q8_0_logits_equal_hf_reading_the_same_file(tmp_path: Path, tok, seed: int) -> None:
    """Both sides dequantise the same Q8_0 bytes: the logits agree to float32 round-off, not just within
    quantisation error — and they differ from the unquantised model's by more than that."""
    from transformers import AutoModelForCausalLM

    hf = tiny_llama(tok.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok), qtype="Q8_0")
    hf_q = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32).eval()
    ids = torch.randint(0, tok.get_vocab_size(), (2, 29))
    with torch.no_grad():
        ref, unquantised = hf_q(ids).logits, hf(ids).logits
        for pairing in ("interleaved", "half"):
            got = load_pretrained(path, pairing=pairing, weights="dequantised").model(ids)
            torch.testing.assert_close(got, ref, **tolerance(ref))
    assert (unquantised - ref).abs().max() > 10 * tolerance(ref)["atol"]


def test_tokenizer_wrapper_from_gguf(tmp_path: Path, tok) -> None:
    pm = load_pretrained(write_gguf(tmp_path / "m.gguf", tiny_llama(tok.get_vocab_size()), tokenizer_fields(tok)))
    text = "The quick brown fox"
    assert pm.tokenizer.encode(text) == tok.encode(text).ids
    assert pm.tokenizer.decode(pm.tokenizer.encode(text)) == text
    assert (pm.tokenizer.bos_id, pm.tokenizer.eos_id) == (1, 2)
    assert pm.tokenizer.chat_template.startswith("{% for m in messages %}")
