"""Subword tokenisation with HF ``tokenizers`` BPE, trained on the training split only.

One shared vocabulary for both languages (the default: English and Spanish share
an alphabet and many names, and it allows one shared, tied embedding table), or
a separate vocabulary per side. Pre-tokenisation is SentencePiece-style
(``Metaspace``: a space becomes ``▁`` and belongs to the next word), so decoding
restores the original spacing exactly.

Special ids are the same in every vocabulary: 0 ``<pad>``, 1 ``<s>``, 2 ``</s>``, 3 ``<unk>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def _require_tokenizers():
    from posenc.checks import require

    return require("tokenizers", "posenc translate", "text")


def train_bpe(texts: Iterable[str], *, vocab_size: int, min_frequency: int = 2):
    """Train a BPE tokenizer (``tokenizers.Tokenizer``) on ``texts``.

    Raises:
        ValueError: ``vocab_size`` too small to hold the specials and the alphabet.
    """
    if vocab_size < 64:
        raise ValueError(f"vocab_size={vocab_size} is too small for a BPE vocabulary; use at least 64 (e.g. 8000)")
    tk = _require_tokenizers()
    tok = tk.Tokenizer(tk.models.BPE(unk_token="<unk>"))
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace()
    tok.decoder = tk.decoders.Metaspace()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIALS,
                                     show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"special token {s!r} got id {tok.token_to_id(s)}, expected {i}")
    return tok


class TextCodec:
    """Source and target tokenizers (the same object when the vocabulary is shared)."""

    def __init__(self, src, tgt=None) -> None:
        self.src = src
        self.tgt = tgt if tgt is not None else src

    @property
    def shared(self) -> bool:
        return self.src is self.tgt

    @classmethod
    def train(cls, src_texts: Sequence[str], tgt_texts: Sequence[str], *, vocab_size: int, shared: bool = True) -> "TextCodec":
        if shared:
            return cls(train_bpe([*src_texts, *tgt_texts], vocab_size=vocab_size))
        return cls(train_bpe(src_texts, vocab_size=vocab_size), train_bpe(tgt_texts, vocab_size=vocab_size))

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_vocab_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_vocab_size()

    def encode_src(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.src.encode_batch(list(texts))]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tgt.encode_batch(list(texts))]

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.tgt.decode_batch([[i for i in seq if i > UNK or i == UNK] for seq in ids])

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.src.save(str(directory / "tokenizer-src.json"))
        if not self.shared:
            self.tgt.save(str(directory / "tokenizer-tgt.json"))

    @classmethod
    def load(cls, directory: str | Path) -> "TextCodec":
        tk = _require_tokenizers()
        directory = Path(directory)
        src = tk.Tokenizer.from_file(str(directory / "tokenizer-src.json"))
        tgt_path = directory / "tokenizer-tgt.json"
        return cls(src, tk.Tokenizer.from_file(str(tgt_path)) if tgt_path.exists() else None)
