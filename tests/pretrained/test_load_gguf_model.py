"""load_pretrained on GGUF files written like llama.cpp's converter from tiny random HF Llamas: same logits as HF.

The interleaved pairing runs llama.cpp's q/k rows exactly as stored; the half
pairing runs them un-permuted (HF's layout). Both must give HF's logits.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gguf", reason="GGUF tests need the gguf package (a test dependency)")
pytest.importorskip("transformers", minversion="5.0", reason="reference tests need HF transformers >= 5")
from gguf_helpers import tiny_llama, tokenizer_fields, train_tokenizer, write_gguf  # noqa: E402

from posenc.pretrained import load_pretrained  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_f32_gguf_gives_hf_logits_full_and_cached(tmp_path, tok, seed, pairing, tie):
    hf = tiny_llama(tok.get_vocab_size(), tie=tie, kv_heads=1 if tie else 2)
    pm = load_pretrained(write_gguf(tmp_path / "m.gguf", hf, tokenizer_fields(tok)), pairing=pairing)
    assert pm.config.position_options["pairing"] == pairing and pm.config.tie_embeddings == tie
    ids = torch.tensor([pm.tokenizer.encode("Attention is all you need; rotary position embeddings.")])
    with torch.no_grad():
        ref = hf(ids).logits
        tol = {"rtol": 1e-4, "atol": 1e-5 * max(1.0, float(ref.abs().max()))}
        torch.testing.assert_close(pm.model(ids), ref, **tol)
        cache = pm.model.new_cache()
        steps = torch.cat([pm.model(ids[:, i:i + 1], cache=cache) for i in range(ids.shape[1])], dim=1)
        torch.testing.assert_close(steps, ref, **tol)


def test_quantized_gguf_stays_close_and_pairings_agree(tmp_path, tok, seed):
    """Q8_0: logits near HF's (quantisation error), and the two pairings agree to float32 round-off."""
    hf = tiny_llama(tok.get_vocab_size())
    path = write_gguf(tmp_path / "q8.gguf", hf, tokenizer_fields(tok), qtype="Q8_0")
    inter, half = load_pretrained(path), load_pretrained(path, pairing="half")
    ids = torch.tensor([inter.tokenizer.encode("The quick brown fox jumps over the lazy dog.")])
    with torch.no_grad():
        ref, a, b = hf(ids).logits, inter.model(ids), half.model(ids)
    scale = float(ref.abs().max())
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * max(1.0, scale))
    error = float((a - ref).abs().max())
    assert 0 < error < 0.05 * scale  # Q8_0 moves the logits, a little: 8-bit blocks of 32 weights
