"""Real translation: a SWORD Bible reader, an aligned English–Spanish corpus, BPE, decoding and BLEU.

See docs/translation.md and ``posenc translate --help``.
"""
