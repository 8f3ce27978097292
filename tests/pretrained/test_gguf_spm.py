"""SentencePiece GGUF tokenizers (``tokenizer.ggml.model == "llama"``: Gemma, Llama 2, TinyLlama, Mistral v0.1–v0.3)
against two references: a direct transcription of llama.cpp's encoder (gguf_helpers.spm_reference) and
transformers' GGUF loader, on tiny files in both spaces conventions (Llama 2: a space put before the text;
Gemma: none)."""

from __future__ import annotations

import pytest

from gguf_helpers import hf_gguf_tokenizer_of, spm_fields, spm_reference, tiny_hf, tiny_llama, write_gguf
from test_gguf_tokenizer import FIXED, random_texts
from posenc.formats.gguf import GGUFError, read_tokenizer

pytest.importorskip("accelerate")

SPM_TEXTS = FIXED + ["<s>Hello</s>", "a<|user|>b  c", "<|user|> x", "   three spaces", "unseen ☃ ẞ 𝔘"]


def spm_random_texts(seed: int, n: int = 100) -> list[str]:
    return [t.replace("<|im_start|>", "<|user|>").replace("<|endoftext|>", "</s>") for t in random_texts(seed, n)]


@pytest.fixture(scope="module")
def fields():
    return spm_fields()


def write(tmp_path, fields, *, prefix: bool | None):
    meta = {"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.padding_token_id": None, "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_space_prefix": prefix, "tokenizer.ggml.pre": None}
    if prefix is None:  # Llama 2 / TinyLlama: the llama architecture, no add_space_prefix key (llama.cpp: on)
        return write_gguf(tmp_path / "spm.gguf", tiny_llama(len(fields["tokens"])), fields, tokenizer_model="llama",
                          meta=meta)
    # Gemma: its own architecture (transformers picks its Gemma builder by it), add_space_prefix false
    return write_gguf(tmp_path / "spm.gguf", tiny_hf("gemma3", len(fields["tokens"])), fields, arch="gemma3",
                      tokenizer_model="llama", meta={k.replace("llama.", "gemma3."): v for k, v in meta.items()})


@pytest.mark.parametrize("prefix", [None, False], ids=["llama2-style", "gemma-style"])
def test_equals_llamacpp_reference(tmp_path, fields, prefix, seed) -> None:
    ours = read_tokenizer(write(tmp_path, fields, prefix=prefix))
    for text in SPM_TEXTS + spm_random_texts(seed):
        want = spm_reference(fields, text, add_space_prefix=prefix is None, bos_id=1)
        got = ours.encode(text).ids
        assert got == want, f"{text!r}: ours {got} vs llama.cpp's encoder {want}"


@pytest.mark.parametrize("prefix", [None, False], ids=["llama2-style", "gemma-style"])
def test_against_transformers_gguf_loader(tmp_path, fields, prefix, seed) -> None:
    """Equal ids, except — with a space prefix (Llama 2 style) — where llama.cpp (and SentencePiece's
    ``add_dummy_prefix``) put a space that HF's ``Metaspace`` (prepend scheme "first") does not: before every
    fragment that follows a special or user-defined piece, and before text that starts with a space
    (``Metaspace`` adds none where one is already). Those strings are checked against the llama.cpp reference."""
    path = write(tmp_path, fields, prefix=prefix)
    ours, theirs = read_tokenizer(path), hf_gguf_tokenizer_of(path)
    for text in SPM_TEXTS + spm_random_texts(seed):
        got, want = ours.encode(text).ids, theirs(text)["input_ids"]
        if got != want:
            assert prefix is None, f"{text!r}: ours {got} vs HF {want}"
            assert got == spm_reference(fields, text, add_space_prefix=True, bos_id=1), text
        else:
            assert ours.decode(got, skip_special_tokens=False) == theirs.decode(want, skip_special_tokens=False)
    if prefix is None:  # the two departures are real: "a<|user|>the" → llama.cpp "▁the", HF "the"; " " → "▁ ▁" / "▁"
        assert ours.encode("a<|user|>the").ids[-1] == ours.token_to_id("\u2581the")
        assert ours.token_to_id("\u2581the") not in theirs("a<|user|>the")["input_ids"]
        assert len(ours.encode(" ").ids) == 3 and len(theirs(" ")["input_ids"]) == 2


def test_decode_round_trip(tmp_path, fields) -> None:
    """Text without special pieces decodes back to itself. (With a space prefix, a fragment after a user-defined
    piece gains llama.cpp's space — "  two" decodes as "   two" — which llama.cpp's own decoder keeps too.)"""
    for prefix in (None, False):
        ours = read_tokenizer(write(tmp_path, fields, prefix=prefix))
        for text in ["The quick brown fox", "café 東京 🙂 ☃", "x y", "x"] + ([] if prefix is None else ["  two  spaces"]):
            assert ours.decode(ours.encode(text).ids) == text


def test_byte_fallback_and_bos(tmp_path, fields) -> None:
    ours = read_tokenizer(write(tmp_path, fields, prefix=False))
    ids = ours.encode("☃").ids  # not in the tiny vocabulary: its three UTF-8 bytes
    assert ids[0] == 1 and [ours.id_to_token(i) for i in ids[1:]] == ["<0xE2>", "<0x98>", "<0x83>"]


def test_missing_scores_refused(tmp_path, fields) -> None:
    bad = {"tokens": fields["tokens"], "types": fields["types"]}
    path = write_gguf(tmp_path / "bad.gguf", tiny_llama(len(bad["tokens"])), bad, tokenizer_model="llama")
    with pytest.raises(GGUFError, match=r"needs one tokenizer\.ggml\.scores .* got \d+ pieces, None scores"):
        read_tokenizer(path)
