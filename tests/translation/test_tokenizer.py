"""BPE: special ids, exact round trip, shared vs separate vocabularies, save/load."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.translation.tokenizer import BOS, EOS, PAD, UNK, TextCodec, train_bpe

EN = ["In the beginning, God created the heavens and the earth.", "The earth was formless and empty."] * 20
ES = ["En el principio crió Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía."] * 20


def test_round_trip_and_specials(tmp_path: Path) -> None:
    codec = TextCodec.train(EN, ES, vocab_size=200)
    assert codec.shared and codec.src_vocab_size == codec.tgt_vocab_size <= 200
    for i, s in zip((PAD, BOS, EOS, UNK), ("<pad>", "<s>", "</s>", "<unk>")):
        assert codec.src.token_to_id(s) == i
    ids = codec.encode_tgt(ES[:2])
    assert all(min(seq) > UNK for seq in ids)  # plain text never maps to a special id
    assert codec.decode_tgt(ids) == ES[:2]  # Metaspace: spacing and accents come back exactly
    assert codec.decode_tgt([ids[0] + [EOS, PAD]]) == ES[:1]  # specials are dropped when decoding
    codec.save(tmp_path)
    again = TextCodec.load(tmp_path)
    assert again.shared and again.encode_src(EN[:2]) == codec.encode_src(EN[:2])


def test_separate_vocabularies(tmp_path: Path) -> None:
    codec = TextCodec.train(EN, ES, vocab_size=120, shared=False)
    assert not codec.shared
    assert codec.decode_tgt(codec.encode_tgt(ES[:1])) == ES[:1]
    codec.save(tmp_path)
    assert not TextCodec.load(tmp_path).shared
    with pytest.raises(ValueError, match="too small"):
        train_bpe(EN, vocab_size=10)
