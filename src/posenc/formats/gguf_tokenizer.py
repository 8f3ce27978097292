"""A ``tokenizers.Tokenizer`` rebuilt from a GGUF file's tokenizer metadata.

A GGUF file has no ``tokenizer.json``; llama.cpp stores the tokenizer as metadata:

==============================  ==============================================================
key                             meaning
==============================  ==============================================================
``tokenizer.ggml.model``        the algorithm: "gpt2" = byte-level BPE; "llama" = SentencePiece
                                (``posenc.formats.gguf_spm``)
``tokenizer.ggml.pre``          which pre-tokenizer split the merges were learned with
``tokenizer.ggml.tokens``       the vocabulary, by id, in the byte-level alphabet
``tokenizer.ggml.merges``       BPE merges "a b", best first (gpt2)
``tokenizer.ggml.scores``       each piece's score; SentencePiece merges by it (llama)
``tokenizer.ggml.token_type``   1 normal, 2 unknown, 3 control (special), 4 user-defined,
                                5 unused, 6 byte
``*_token_id``, ``add_bos_token``, ``tokenizer.chat_template``
==============================  ==============================================================

Control tokens become special added tokens and user-defined ones plain added
tokens, so each stays whole in text, as llama.cpp matches them. The
pre-tokenizer is the split llama.cpp uses for the file's ``pre`` type
(``llama-vocab.cpp``); :data:`PRE_TOKENIZERS` lists the ones built here and an
unknown type is refused by name rather than silently split another way.
Checked against Hugging Face's GGUF loader
(``AutoTokenizer.from_pretrained(folder, gguf_file=name)``) on the real
SmolLM2 file: same ids (tests/pretrained/test_gguf_tokenizer.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.formats.gguf_error import GGUFError

#: GPT-2's split (``tokenizers``' ByteLevel regex): contractions, letters, numbers, other symbols, spaces.
_GPT2 = None  # the ByteLevel pre-tokenizer's own regex
#: Llama 3's split (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3): numbers in runs of at most three digits.
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: Qwen2's split (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2): every digit alone.
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: ``tokenizer.ggml.pre`` → (split regex or None for GPT-2's, digits split one by one first).
PRE_TOKENIZERS: dict[str, tuple[str | None, bool]] = {
    "default": (_GPT2, False),
    "gpt-2": (_GPT2, False),
    "gpt2": (_GPT2, False),
    # llama.cpp: "\p{N}" first, then GPT-2's split (LLAMA_VOCAB_PRE_TYPE_SMOLLM / STARCODER / REFACT)
    "smollm": (_GPT2, True),
    "starcoder": (_GPT2, True),
    "refact": (_GPT2, True),
    "llama3": (_LLAMA3, False),
    "llama-v3": (_LLAMA3, False),
    "llama-bpe": (_LLAMA3, False),
    "smaug-bpe": (_LLAMA3, False),
    "qwen2": (_QWEN2, False),
}
#: ``tokenizer.ggml.token_type`` values.
CONTROL, USER_DEFINED = 3, 4


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte → printable character map (the alphabet byte-level vocabularies are spelled in)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars)))


def _pre_tokenizer(pre: str, path: Path):
    from tokenizers import Regex, pre_tokenizers

    if pre not in PRE_TOKENIZERS:
        raise GGUFError(f"{path}: tokenizer.ggml.pre = {pre!r} is a pre-tokenizer posenc does not build; supported: "
                        f"{sorted(PRE_TOKENIZERS)}. Load the model's HF folder (with tokenizer.json) instead")
    split, digits = PRE_TOKENIZERS[pre]
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    if split is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [pre_tokenizers.Split(Regex(split), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    return steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)


def tokenizer_from_metadata(meta: dict[str, Any], path: Path):
    """The ``tokenizers.Tokenizer`` a GGUF file's metadata describes: byte-level BPE or SentencePiece.

    Raises:
        GGUFError: no tokenizer in the file, a tokenizer model other than "gpt2" and "llama",
            an unknown pre-tokenizer type, or a SentencePiece vocabulary without scores.
        MissingPart: the ``tokenizers`` package is not installed (``pip install 'posenc[models]'``).
    """
    from posenc.checks import require

    require("tokenizers", "a .gguf file's tokenizer")
    from tokenizers import AddedToken

    kind = meta.get("tokenizer.ggml.model")
    if kind is None:
        raise GGUFError(f"{path}: the file holds no tokenizer (no tokenizer.ggml.model key); "
                        "use a GGUF file converted with its tokenizer")
    if kind not in ("gpt2", "llama"):
        raise GGUFError(f"{path}: tokenizer.ggml.model = {kind!r} is not supported; posenc builds 'gpt2' "
                        "(byte-level BPE) and 'llama' (SentencePiece) tokenizers of GGUF files. Load the model's HF "
                        "folder (with tokenizer.json) instead")
    if "tokenizer.ggml.tokens" not in meta:
        raise GGUFError(f"{path}: the file holds no vocabulary (no tokenizer.ggml.tokens key); "
                        "use a GGUF file converted with its tokenizer")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    if kind == "gpt2":
        tok, vocab, whole = _byte_level(meta, tokens, path)
    else:
        from posenc.formats.gguf_spm import spm_tokenizer

        tok = spm_tokenizer(meta, tokens, types, path)
        vocab, whole = set(tokens), lambda t: True
    # a control token spelled outside the byte alphabet would be a llama.cpp mislabel: adding it would
    # grow the vocabulary past the model's table, so it is skipped (HF's loader does the same)
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, k in zip(tokens, types) if k == CONTROL and whole(t)])
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, k in zip(tokens, types) if k == USER_DEFINED and t in vocab])
    _add_bos_eos(tok, meta, tokens, path)
    return tok


def _byte_level(meta: dict[str, Any], tokens: list[str], path: Path):
    """A byte-level BPE over the file's vocabulary and merges; (tokenizer, vocabulary, "spelled in the alphabet")."""
    from tokenizers import Tokenizer, decoders, models

    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    alphabet = _byte_alphabet()
    letters = set(alphabet.values())
    # a token spelled outside the byte alphabet (rare) is respelled byte by byte, as HF's loader does
    spelled = [t if set(t) <= letters else "".join(alphabet[b] for b in t.encode("utf-8")) for t in tokens]
    vocab = {t: i for i, t in enumerate(spelled)}
    try:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - tokenizers raises a bare Exception, or a Rust panic (a
        # BaseException), on merges of tokens outside the vocabulary
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise GGUFError(f"{path}: the tokenizer metadata is inconsistent ({reason}) — the file is corrupt; "
                        "download or convert it again") from None
    tok.pre_tokenizer = _pre_tokenizer(str(meta.get("tokenizer.ggml.pre", "default")), path)
    tok.decoder = decoders.ByteLevel()
    return tok, vocab, lambda t: set(t) <= letters


def _add_bos_eos(tok, meta: dict[str, Any], tokens: list[str], path: Path) -> None:
    """A post-processor adding BOS / EOS where ``tokenizer.ggml.add_{bos,eos}_token`` ask for them."""
    from tokenizers import processors

    add_bos, add_eos = (bool(meta.get(f"tokenizer.ggml.add_{x}_token", False)) for x in ("bos", "eos"))
    if not (add_bos or add_eos):
        return
    ids = {x: meta.get(f"tokenizer.ggml.{x}_token_id") for x in ("bos", "eos")}
    parts, special = ["$A"], []
    for x, on in (("bos", add_bos), ("eos", add_eos)):
        if not on:
            continue
        if ids[x] is None:
            raise GGUFError(f"{path}: tokenizer.ggml.add_{x}_token is set but tokenizer.ggml.{x}_token_id "
                            "is missing; the file is inconsistent")
        text = tokens[int(ids[x])]
        parts = [text, *parts] if x == "bos" else [*parts, text]
        special.append((text, int(ids[x])))
    tok.post_processor = processors.TemplateProcessing(single=" ".join(parts), special_tokens=special)
