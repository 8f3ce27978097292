"""SentencePiece tokenizers of GGUF files (``tokenizer.ggml.model == "llama"``), run the way llama.cpp runs them.

Gemma (262,144 pieces), Llama 2, TinyLlama and Mistral v0.1–v0.3 files store a
SentencePiece vocabulary: pieces spelled with ``▁`` for a space, one score per
piece, token types (``gguf_tokenizer``), and no merges. llama.cpp's
``llm_tokenizer_spm`` (``llama-vocab.cpp``) encodes text in four steps:

1. control and user-defined pieces are cut out of the text whole;
2. in each remaining fragment a space is put first when
   ``tokenizer.ggml.add_space_prefix`` is on (llama.cpp's default when the key
   is absent; Gemma's files say false) and the fragment is the first or follows
   a cut-out piece; then every space becomes ``▁``;
3. the fragment starts as its UTF-8 characters, and the adjacent pair whose
   concatenation is the highest-scoring piece merges, again and again (ties:
   the leftmost pair);
4. a symbol that is not a piece falls back to its UTF-8 bytes, ``<0xXX>``.

Built here as a ``tokenizers.Tokenizer``: step 3 is a BPE model whose merges
are every way of cutting a piece into two pieces, ranked by the whole piece's
score (the file's order breaks ties) — at every step the pair BPE merges is the
one llama.cpp merges, because a pair's rank is the score of what it makes;
step 4 is BPE's ``byte_fallback``; step 2 is a ``Prepend("▁")`` + ``Replace``
normalizer, which ``tokenizers`` applies to each fragment between added
tokens, as llama.cpp prefixes each fragment; step 1 is the added tokens.
Control, user-defined and byte pieces are never the result of a merge (they
enter whole, or by fallback).

Where Hugging Face's GGUF loader (transformers 5.24) differs, and why:

- **The space prefix** (files with ``add_space_prefix``, e.g. Llama 2):
  llama.cpp prefixes every fragment that follows a control or user-defined
  piece, and always adds its space, as SentencePiece's ``add_dummy_prefix``
  does; HF's ``LlamaTokenizer`` (``Metaspace``, prepend scheme "first")
  prefixes only the start of the text, and not where the text already starts
  with a space. ``"a<|user|>b"``: llama.cpp ``▁b`` at the end, HF ``b``;
  ``" "``: llama.cpp ``▁ ▁``, HF ``▁``. posenc follows llama.cpp.
- **``add_space_prefix = false`` under the llama architecture**: HF's loader
  builds ``LlamaTokenizer`` without it (always a prefix); llama.cpp, and posenc,
  read the flag.
- **Gemma**: none found on real text (tests/pretrained/test_gguf_gemma3.py
  compares the GPL-3 text and random strings id for id). HF rebuilds Gemma's
  merges from the file's order where posenc uses the scores; in Gemma 3's file
  the two agree (each normal piece scores minus its rank).

Reference used to verify: a direct transcription of the four steps above
(tests/pretrained/gguf_helpers.py, ``spm_reference``) and HF's GGUF loader,
on tiny files and on the real Gemma 3 270M file.

The other way, for ``posenc export`` from an HF folder: :func:`spm_gguf_vocabulary`
spells such a ``tokenizer.json`` (BPE with byte fallback, spaces as ▁) as
``tokenizer.ggml.*`` metadata, as llama.cpp's converter writes it from the
model's ``tokenizer.model``; the scores come from the vocabulary's order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.formats.gguf_error import GGUFError

#: ``tokenizer.ggml.token_type`` values (llama.cpp's ``LLAMA_TOKEN_TYPE_*``).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # ▁, SentencePiece's spelling of a space


def spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-ordered pair merging over these pieces.

    One merge per (left, right) cut of each mergeable piece with both halves in the
    vocabulary, best piece first (higher score, then lower id); a piece's cuts in
    order of the left half's length.
    """
    vocab = set(tokens)
    ranked = sorted((i for i, k in enumerate(types) if k in (NORMAL, UNKNOWN, UNUSED) and len(tokens[i]) > 1),
                    key=lambda i: (-scores[i], i))
    merges: list[tuple[str, str]] = []
    for i in ranked:
        piece = tokens[i]
        merges.extend((piece[:k], piece[k:]) for k in range(1, len(piece))
                      if piece[:k] in vocab and piece[k:] in vocab)
    return merges


def spm_tokenizer(meta: dict[str, Any], tokens: list[str], types: list[int], path: Path):
    """The SentencePiece ``tokenizers.Tokenizer`` of a GGUF file (added tokens and BOS are the caller's).

    Raises:
        GGUFError: no ``tokenizer.ggml.scores``, or scores and pieces of different lengths.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = meta.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens) or len(types) != len(tokens):
        raise GGUFError(f"{path}: a SentencePiece vocabulary (tokenizer.ggml.model = 'llama') needs one "
                        f"tokenizer.ggml.scores and token_type entry per piece; got {len(tokens)} pieces, "
                        f"{None if scores is None else len(scores)} scores and {len(types)} types. "
                        "Re-convert the file with llama.cpp's convert_hf_to_gguf.py")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError(f"{path}: the SentencePiece vocabulary spells {len(tokens) - len(vocab)} piece(s) twice; "
                        "the file is inconsistent. Re-convert it")
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[int(unk_id)] if unk_id is not None and 0 <= int(unk_id) < len(tokens) else None
    merges = spm_merges(tokens, [float(s) for s in scores], [int(k) for k in types])
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))  # llama.cpp's default for SPM
    replace = normalizers.Replace(" ", SPACE)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace]) if prefix else replace
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(steps)
    return tok


# -- the other way: an HF SentencePiece tokenizer.json spelled as GGUF metadata -----------------------------------


def _space_prefix(data: dict[str, Any]) -> bool | None:
    """Whether a tokenizer.json writes spaces as ▁ the way llama.cpp's SentencePiece encoder does — True with a ▁
    put before every fragment, False without — or None when it does something else.

    Recognised: the normalizer ``Replace(" ", "▁")`` (Gemma), after ``Prepend("▁")`` (older Llama 2 files), with no
    pre-tokenizer or Gemma's ``Split(" ")`` (a no-op once spaces are ▁); or no normalizer and ``Metaspace`` with
    ``prepend_scheme`` "always"/"never" and no split. ``Metaspace`` "first" (a ▁ before the text's start only) is
    not llama.cpp's rule (a ▁ before every fragment between special pieces), so it has no spelling.
    """
    def is_replace(n: dict[str, Any] | None) -> bool:
        return bool(n) and n.get("type") == "Replace" and n.get("pattern") == {"String": " "} and n.get("content") == SPACE

    norm, pre = data.get("normalizer"), data.get("pre_tokenizer")
    if norm is None and pre and pre.get("type") == "Metaspace" and pre.get("replacement") == SPACE:
        scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
        return {"always": True, "never": False}.get(scheme) if not pre.get("split", False) else None
    noop_split = pre and pre.get("type") == "Split" and pre.get("pattern") == {"String": " "}
    if pre is not None and not noop_split:
        return None
    if is_replace(norm):
        return False
    steps = norm.get("normalizers", []) if norm and norm.get("type") == "Sequence" else []
    if len(steps) == 2 and steps[0] == {"type": "Prepend", "prepend": SPACE} and is_replace(steps[1]):
        return True
    return None


def dense_size(ids: list[int], *, source: str) -> int:
    """The size of a vocabulary whose ids (repeats allowed) are exactly 0 … n−1 — checked before a list of that
    size is made, so a hostile id (10¹²) costs nothing.

    Raises:
        ValueError: an id that is not an integer, a negative one, or ids with holes (a GGUF vocabulary needs one
            piece per id).
    """
    seen = set(ids)
    bad = [i for i in seen if not isinstance(i, int) or isinstance(i, bool) or i < 0]
    if bad or not seen:
        raise ValueError(f"{source}: token ids must be integers from 0; got {bad[:3] or 'none'}. Use the model's own "
                         "tokenizer.json")
    if max(seen) >= len(seen):
        raise ValueError(f"{source}: the largest token id is {max(seen):,} but there are {len(seen):,} distinct ids; a "
                         "GGUF vocabulary needs one piece per id from 0, with no holes. Use the model's own "
                         "tokenizer.json")
    return len(seen)


def spm_gguf_vocabulary(data: dict[str, Any], *, source: str) -> dict[str, Any] | None:
    """The ``tokenizer.ggml.*`` vocabulary of an HF SentencePiece tokenizer.json (Gemma, Llama 2), as llama.cpp's
    ``convert_hf_to_gguf.py`` writes one from the model's ``tokenizer.model`` — or None for another kind of file.

    The inverse of :func:`spm_tokenizer`: a BPE model with byte fallback whose merges follow the vocabulary's
    order (SentencePiece numbers its BPE pieces best first, and HF's converter ranks merges by the piece they make).
    Pieces become: an added token ``CONTROL`` when special, else ``USER_DEFINED`` with ▁ spelled as a space, both
    scored -1000 (llama.cpp's converter, from ``added_tokens_decoder``); ``<0xXX>`` ``BYTE``, 0; every other piece
    ``NORMAL``, scored minus its rank among them. tokenizer.json holds no scores, so these are the order, not the
    ``.model`` file's values: in Gemma 3's file every piece of two or more characters gets its own score back and
    the 19,225 single characters sit 31 lower — a score llama.cpp never reads, since a merge makes two characters
    or more. The encoder therefore merges exactly as from the original file.

    Raises:
        ValueError: a SentencePiece-style file whose merges disagree with its vocabulary's order (scores from the
            order would merge differently), or whose ids are not 0 … n−1 (:func:`dense_size`).
    """
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return None
    prefix = _space_prefix(data)
    if prefix is None:
        return None
    vocab: dict[str, int] = dict(model["vocab"])
    added = {a["id"]: a for a in data.get("added_tokens", [])}
    tokens: list[str | None] = [None] * dense_size([*vocab.values(), *added], source=source)
    for token, i in vocab.items():
        if tokens[i] is None:  # HF's Gemma converter may alias "\t" to <0x09>'s id; the id's own piece is first
            tokens[i] = token
    for i, a in added.items():
        tokens[i] = a["content"]
    rank = {t: i for i, t in enumerate(tokens)}
    last = -1
    for m in model.get("merges", []):
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        made = rank.get(left + right, -1)
        if made < last:
            raise ValueError(f"{source}: the merge {left!r} + {right!r} (making id {made}) comes after one making id "
                             f"{last}; the scores a GGUF needs are read from the vocabulary's order, which these "
                             "merges do not follow. Convert the model's tokenizer.model with llama.cpp instead")
        last = max(last, made)
    types, scores, normal = [], [], 0
    for i, token in enumerate(tokens):
        if i in added:
            types.append(CONTROL if added[i].get("special") else USER_DEFINED)
            scores.append(-1000.0)
            if types[-1] == USER_DEFINED:
                tokens[i] = token.replace(SPACE, " ")
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            types.append(BYTE)
            scores.append(0.0)
        else:
            types.append(NORMAL)
            scores.append(-float(normal))
            normal += 1
    meta: dict[str, Any] = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
                            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
                            "tokenizer.ggml.token_type": types, "tokenizer.ggml.add_space_prefix": prefix}
    if model.get("unk_token") in rank:
        meta["tokenizer.ggml.unknown_token_id"] = rank[model["unk_token"]]
    return meta
