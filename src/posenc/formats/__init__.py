"""Checkpoint formats, one layer below everything that reads models.

``posenc.inspect`` (measuring a checkpoint) and ``posenc.pretrained`` (running
one) both read files through this package and neither imports the other:

=====================  =========================================================
``safetensors``        safe safetensors loading: headers validated before any
                       tensor is mapped, pickle-based files refused; the
                       ``Checkpoint`` view (names, shapes, lazy tensors, config,
                       vocabulary) that ``inspect`` measures
``gguf``               llama.cpp GGUF files: HF-style config from the metadata,
                       tensors dequantised one at a time in HF layout
``gguf_tokenizer``     the ``tokenizers.Tokenizer`` rebuilt from a GGUF file's
                       vocabulary, merges and special tokens
``ctranslate2``        CTranslate2 ``model.bin`` folders (faster-whisper's Whisper):
                       the index read, each variable on demand
=====================  =========================================================

``load_checkpoint(path)`` opens any of them as a ``Checkpoint``.
"""

from __future__ import annotations

from pathlib import Path

from posenc.formats.safetensors import Checkpoint, CheckpointError, TensorEntry, load_safetensors, refuse_pickle
from posenc.validation import regular_file


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Open a checkpoint safely; no tensor is read yet.

    Args:
        path: a ``.safetensors`` file, a ``*.safetensors.index.json`` file, a
            folder holding either (with ``config.json`` and a vocabulary file
            next to it when available), or a llama.cpp ``.gguf`` file (config and
            vocabulary from its metadata, tensors dequantised when read), or a
            CTranslate2 model folder (``model.bin`` of binary version 5 or 6).

    Raises:
        FileNotFoundError: nothing at ``path``.
        CheckpointError: pickle-based or malformed files.
    """
    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        regular_file(path, "GGUF file")
        from posenc.formats.gguf import inspect_checkpoint_of  # needs the gguf package: imported on use

        return inspect_checkpoint_of(path)
    from posenc.formats import ctranslate2

    if ctranslate2.is_ctranslate2(path):  # before the pickle refusal: its model.bin is not a pickle
        return ctranslate2.inspect_checkpoint_of(path)
    return load_safetensors(path)


__all__ = ["Checkpoint", "CheckpointError", "TensorEntry", "load_checkpoint", "load_safetensors", "refuse_pickle"]
