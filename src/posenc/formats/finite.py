"""Refusing checkpoint tensors that hold NaN or ±inf, by name, when they are loaded.

A NaN anywhere in a weight spreads through every later activation: ``generate``
then writes an empty continuation and ``perplexity`` prints ``nan`` with exit
0. A real checkpoint never holds one, so a tensor that does is refused at load
with its name and count — one pass of ``torch.isfinite`` per tensor, at load
time only, never in a forward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.formats.safetensors import CheckpointError


#: elements checked at a time: a check's temporaries stay a few MiB, not the size of a 262k-row embedding
CHUNK = 1 << 22


def check_finite(name: str, tensor: Tensor, *, source: str, dtype: torch.dtype | None = None) -> None:
    """Raise ``CheckpointError`` if ``tensor`` (or ``tensor`` cast to ``dtype``) holds a non-finite value.

    The tensor is read in chunks of :data:`CHUNK` elements, so the check allocates no copy of it
    (``isfinite`` and ``abs`` of a whole 640 MiB table would).

    Args:
        name: the tensor's name in the checkpoint, for the message.
        source: the file or folder, for the message.
        dtype: the dtype the model will hold it in; float16 overflows to inf above 65,504.
    """
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return
    flat = tensor.reshape(-1)
    if not all(bool(torch.isfinite(flat[i:i + CHUNK]).all()) for i in range(0, flat.numel(), CHUNK)):
        bad, first = 0, None
        for i in range(0, flat.numel(), CHUNK):
            wrong = ~torch.isfinite(flat[i:i + CHUNK])
            bad += int(wrong.sum())
            if first is None and bool(wrong.any()):
                first = i + int(wrong.nonzero()[0])
        raise CheckpointError(f"{source}: tensor {name!r} holds {bad:,} non-finite value(s) (NaN or ±inf) among "
                              f"{tensor.numel():,}, the first at flat index {first:,}; the checkpoint is corrupt — "
                              "download it again")
    if dtype is not None and dtype != tensor.dtype and dtype.is_floating_point:
        largest = 0.0
        for i in range(0, flat.numel(), CHUNK):
            low, high = torch.aminmax(flat[i:i + CHUNK])
            largest = max(largest, -float(low), float(high))
        if largest > torch.finfo(dtype).max:
            raise CheckpointError(f"{source}: tensor {name!r} holds a value of magnitude {largest:.4g}, beyond "
                                  f"{dtype}'s largest ({torch.finfo(dtype).max:.4g}): it would load as inf; "
                                  "use --dtype bfloat16 or float32")
