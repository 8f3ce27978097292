"""Which RoPE pairing are a checkpoint's q/k weights in? Read from the weights, not the config.

``posenc rope MODEL --pairing-check`` loads the model (weights dequantised to float32) and scores a short
English text three times: as loaded (the pairing its config or GGUF declares, which posenc's loader converts
from), and with every rotary layer's q/k rows (their biases and per-head q/k norm gains with them) permuted
per head as if the file held the *other* pairing — half → interleaved, and interleaved → half. A checkpoint
whose rows are in the declared pairing scores best as loaded; one whose converter skipped (or doubled) the
permutation scores best under one of the others, by a wide margin: attention then pairs coordinates that were
never rotated together. The finding ``pairing-from-weights`` (an error) says which.

The text is the opening of the GNU GPL version 3 as Debian ships it (``/usr/share/common-licenses/GPL-3``),
or a built-in English paragraph where that file is absent.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Iterator

import torch

#: Fallback text (plain English prose, several hundred tokens' worth with repetition removed).
TEXT = ("The history of writing begins with the need to keep records. Merchants counted goods, priests kept "
        "calendars, and kings announced their laws on stone. Over centuries these marks became alphabets, and "
        "alphabets became books. Printing made books cheap, and cheap books made readers of whole nations. "
        "Today most of what people write is read on screens, yet the habits of the scribe remain: we still "
        "begin at the top of the page, we still separate words with spaces, and we still end our sentences "
        "with a small dot that the Romans would have recognised.")
#: Loss margin (nats per token) by which another pairing must win to be reported.
MARGIN = 0.05


def text() -> str:
    gpl = Path("/usr/share/common-licenses/GPL-3")
    try:
        return gpl.read_text(encoding="utf-8")[:4000]
    except OSError:
        return TEXT


def _rotary_layers(model: Any) -> Iterator[Any]:
    """The attention modules whose scheme is RoPE (or a scaling of it): the layers a pairing concerns."""
    from posenc.positions.rotary import RoPE

    for layer in getattr(model, "layers", []):
        attn = getattr(layer, "attn", None)
        if attn is not None and hasattr(attn, "q_proj") and isinstance(getattr(attn, "position", None), RoPE):
            yield attn


@contextlib.contextmanager
def permuted(model: Any, source: str, target: str) -> Iterator[int]:
    """Every rotary layer's q/k rows (biases, per-head q/k norm gains) permuted per head from ``source`` to
    ``target`` pairing, restored on exit; yields the number of layers permuted."""
    from posenc.positions.rotary import pairing_permutation

    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    count = 0
    try:
        for attn in _rotary_layers(model):
            head_dim = attn.head_dim
            rot = int(getattr(attn.position, "rotary_dim", None) or head_dim)
            perm = pairing_permutation(head_dim, rot)
            if source == "half":
                perm = torch.argsort(perm)
            for proj, heads, norm in ((attn.q_proj, attn.num_heads, getattr(attn, "q_norm", None)),
                                      (attn.k_proj, attn.num_kv_heads, getattr(attn, "k_norm", None))):
                tensors = [proj.weight] + ([proj.bias] if getattr(proj, "bias", None) is not None else [])
                for t in tensors:
                    saved.append((t, t.detach().clone()))
                    rows = t.detach().reshape(heads, head_dim, -1)[:, perm]
                    t.data.copy_(rows.reshape(t.shape))
                gain = getattr(norm, "weight", None)
                if isinstance(gain, torch.Tensor) and gain.shape == (head_dim,):
                    saved.append((gain, gain.detach().clone()))
                    gain.data.copy_(gain.detach()[perm])
            count += 1
        yield count
    finally:
        for t, value in saved:
            t.data.copy_(value)


def mean_loss(model: Any, ids: list[int]) -> float:
    with torch.no_grad():
        x = torch.tensor([ids])
        logits = model(x)[0, :-1].float()
        return float(torch.nn.functional.cross_entropy(logits, x[0, 1:]))


def pairing_check(path: str | Path, *, tokens: int = 256) -> dict[str, Any]:
    """Losses of the model as loaded and with its q/k rows in each other pairing; the finding, if any.

    Returns {"tokens", "loss_as_declared", "loss_if_half_rows", "loss_if_interleaved_rows", "layers", "finding"}
    (``finding`` None, or a lint finding dict). Raises ValueError for a model with no rotary layer.
    """
    from posenc.pretrained import load_pretrained

    pm = load_pretrained(path, weights="dequantised", dtype=torch.float32)
    return check_model(pm.model, pm.tokenizer.encode(text())[:tokens], source=str(path))


def check_model(model: Any, ids: list[int], *, source: str = "the model") -> dict[str, Any]:
    """:func:`pairing_check` on a loaded model and token ids."""
    from posenc.ropecheck.lint import _f

    if len(ids) < 16:
        raise ValueError(f"the pairing check needs at least 16 tokens of text, got {len(ids)}")
    declared = mean_loss(model, ids)
    out: dict[str, Any] = {"tokens": len(ids), "loss_as_declared": declared}
    for name, (source, target) in (("loss_if_half_rows", ("half", "interleaved")),
                                   ("loss_if_interleaved_rows", ("interleaved", "half"))):
        with permuted(model, source, target) as layers:
            if layers == 0:
                raise ValueError(f"{source}: no rotary layer: nothing to check")
            out[name] = mean_loss(model, ids)
            out["layers"] = layers
    best = min(("loss_if_half_rows", "loss_if_interleaved_rows"), key=lambda k: out[k])
    out["finding"] = None
    if not math.isfinite(declared) or out[best] < declared - MARGIN:
        other = "half" if best == "loss_if_half_rows" else "interleaved"
        out["finding"] = _f("pairing-from-weights", "error", "all",
                            f"the q/k weights score better read as {other}-pairing rows ({out[best]:.3f} nats/token "
                            f"on {len(ids)} tokens) than as the file declares ({declared:.3f}): the converter skipped "
                            "or repeated the q/k row permutation; engines following the declared convention pair "
                            "the wrong coordinates", loss_as_declared=declared, loss_other=out[best])
    return out
