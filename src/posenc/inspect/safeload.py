"""Moved: safe checkpoint loading is ``posenc.formats`` (one layer below ``inspect`` and ``pretrained``).

Kept so that imports written against earlier versions still work.
"""

from posenc.formats import Checkpoint, CheckpointError, TensorEntry, load_checkpoint, refuse_pickle  # noqa: F401
from posenc.formats.safetensors import read_header, to_float64  # noqa: F401
