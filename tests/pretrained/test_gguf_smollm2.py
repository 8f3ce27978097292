"""End to end on the real SmolLM2-135M-Instruct GGUF (Q4_1): posenc vs HF transformers loading the same file.

Both sides dequantise the same Q4_1/Q8_0 bytes (bit-identical tensors, see
test_read_matches_hf_loader), so the logits agree to float32 round-off, not
merely within quantisation error. Measured on the prompt below: max |Δlogit|
2.8e-5 (interleaved pairing) and 3.5e-5 (half) with max |logit| 27.4; over a
256-token text 6.1e-5 with max |logit| 37.5. The tolerance is float32
round-off scaled to the logits (rtol 1e-4, atol 1e-5 · max |logit|).
"""

from __future__ import annotations

import pytest
import torch

from gguf_helpers import smollm2_path

pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it
pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    path = smollm2_path()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def test_read_matches_hf_loader(hf_model) -> None:
    from posenc.formats.gguf import read_gguf

    ck = read_gguf(smollm2_path())
    sd = hf_model.state_dict()
    assert ck.hf_config["num_hidden_layers"] == 30 and ck.hf_config["tie_word_embeddings"] is True
    assert set(ck.tensors) == set(sd) - {"lm_head.weight"}
    for name, t in ck.tensors.items():
        torch.testing.assert_close(t, sd[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_logits_and_greedy_paris(hf_model, pairing: str) -> None:
    from posenc.pretrained import load_pretrained

    pm = load_pretrained(smollm2_path(), pairing=pairing, weights="dequantised")
    ids = torch.tensor([pm.tokenizer.encode(PROMPT)])
    with torch.no_grad():
        ref, got = hf_model(ids).logits, pm.model(ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    out = pm.model.generate(ids, 4)
    assert pm.tokenizer.decode(out[0, ids.shape[1]:].tolist()).startswith(" Paris")
