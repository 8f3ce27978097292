"""Training text for fine-tuning: real documents as one token stream, and batches that depend only on the step.

The measures (``posenc.extend``) read the ``bible`` document (Genesis–Numbers)
and the ``licenses``; fine-tuning must not see them. ``bible-rest`` is every
other book of the same World English Bible module (Deuteronomy to
Revelation, ≈ 4.9 M characters): the same register as the ``bible`` measure,
none of its text. Any UTF-8 file works too.

``window_batches`` draws each update's windows from (seed, step) alone
(``posenc.train.step_generator``), so a resumed run sees the very batches an
uninterrupted one would, and N ranks that each take rows ``rank::N`` of the
same global batch train what one process taking all of it trains.

``ByteTokenizer`` (UTF-8 bytes, vocabulary 256) is what the mini-scale
replication trains with: every position costs a 256-way softmax instead of a
49k-way one, which on a CPU is most of a small model's time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from posenc.extend.texts import BIBLE_BOOKS, Document, bos_prefix, encode_plain, load_document

#: The books of the engWEB2015eb module that the ``bible`` measure does not read (Deuteronomy onwards).
BIBLE_REST = (
    "Deut", "Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Ezra", "Neh", "Esth", "Job",
    "Ps", "Prov", "Eccl", "Song", "Isa", "Jer", "Lam", "Ezek", "Dan", "Hos", "Joel", "Amos", "Obad", "Jonah", "Mic",
    "Nah", "Hab", "Zeph", "Hag", "Zech", "Mal", "Tob", "Jdt", "EsthGr", "Wis", "Sir", "Bar", "1Macc", "2Macc",
    "1Esd", "PrMan", "AddPs", "3Macc", "2Esd", "4Macc", "Matt", "Mark", "Luke", "John", "Acts", "Rom", "1Cor",
    "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim", "Titus", "Phlm", "Heb", "Jas", "1Pet",
    "2Pet", "1John", "2John", "3John", "Jude", "Rev")
assert not set(BIBLE_REST) & set(BIBLE_BOOKS)


class ByteTokenizer:
    """UTF-8 bytes as token ids 0–255; no special tokens (the ``posenc.extend`` tokenizer interface)."""

    vocab_size = 256
    bos_id = None
    add_bos = False
    name = "bytes"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Any) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


def training_document(spec: str) -> Document:
    """``bible-rest`` (the Bible without the books the ``bible`` measure reads), ``bible``, ``licenses`` or a file."""
    if spec == "bible-rest":
        from posenc.extend.texts import BIBLE_MODULE, bible_text

        return Document("bible-rest", bible_text(BIBLE_REST),
                        f"World English Bible ({BIBLE_MODULE}): {BIBLE_REST[0]}–{BIBLE_REST[-1]} "
                        f"({len(BIBLE_REST)} books, none of {', '.join(BIBLE_BOOKS)})")
    return load_document(spec, flag="--train-text", names=("bible-rest", "bible", "licenses"))


def token_stream(doc: Document, tokenizer: Any) -> Tensor:
    """The whole document as one (N,) int64 tensor (BOS first when the model expects one)."""
    return torch.tensor(bos_prefix(tokenizer) + encode_plain(tokenizer, doc.text), dtype=torch.long)


def window_batches(tokens: Tensor, *, length: int, batch_size: int, seed: int) -> Callable[[int, int, int], Tensor]:
    """A ``posenc.train`` batch function: ``batch_size`` random windows of ``length + 1`` tokens per update.

    The global batch of update ``step`` depends on (seed, step) only; rank r of N takes rows r, r + N, …

    Raises:
        ValueError: the text is shorter than one window, or the batch does not split over the ranks.
    """
    from posenc.train import step_generator

    tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(-1)
    if tokens.numel() < length + 1:
        raise ValueError(f"the training text has {tokens.numel()} tokens, fewer than one window of "
                         f"{length + 1}; give a longer --train-text or a shorter --length")
    span = tokens.numel() - length

    def batches(step: int, rank: int, world: int) -> Tensor:
        if batch_size % world:
            raise ValueError(f"--batch-size {batch_size} does not split over {world} processes; "
                             f"give a multiple of {world}")
        starts = torch.randint(0, span, (batch_size,), generator=step_generator(seed, step))
        rows = torch.stack([tokens[s:s + length + 1] for s in starts.tolist()])  # (B, T + 1)
        return rows[rank::world]

    return batches
