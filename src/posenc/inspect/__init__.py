"""``posenc inspect``: point the lab's instruments at a real checkpoint.

* :mod:`~posenc.formats.safetensors` — safetensors only, headers validated, pickle refused;
* :mod:`~posenc.inspect.locate` — position/token/head tensors by their usual names, tying, RoPE from config;
* :mod:`~posenc.inspect.analysis` — what is measured (the lab's measures plus baselines, PCA, neighbours);
* :mod:`~posenc.inspect.report` — terminal summary, PNG figures, static HTML.
"""

from posenc.inspect.locate import Located, detect_tying, locate, rope_from_config
from posenc.inspect.run import inspect_checkpoint
from posenc.formats import Checkpoint, CheckpointError, load_checkpoint

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Located",
    "detect_tying",
    "inspect_checkpoint",
    "load_checkpoint",
    "locate",
    "rope_from_config",
]
