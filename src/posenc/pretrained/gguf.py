"""Moved: GGUF reading is ``posenc.formats.gguf`` (one layer below ``pretrained`` and ``inspect``).

Kept so that ``from posenc.pretrained.gguf import read_gguf`` written against
earlier versions still works.
"""

from posenc.formats.gguf import GGUFCheckpoint, GGUFError, open_gguf, read_gguf, read_metadata  # noqa: F401
