"""Shared by the family tests: a tiny HF model with random weights, saved, loaded by posenc, compared.

``compare(hf, tmp_path, ids)`` checks posenc's logits against HF's own modeling
code on the same weights — a full forward, and cached decoding (a prompt, then
one token at a time, so windows, caches and position offsets are all exercised)
— and returns the loaded ``Pretrained``.
"""

from __future__ import annotations

import torch

from posenc.pretrained import load_pretrained


def randomise(model, scale: float = 0.3):
    """HF initialises norms to ones/zeros and biases to zeros: perturb them so they are tested."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias") or "sinks" in name:
                p.add_(torch.randn_like(p) * scale)
    return model.eval()


def tolerance(ref: torch.Tensor) -> dict[str, float]:
    """float32 round-off of two implementations of the same sums, scaled to the logits."""
    return {"rtol": 1e-4, "atol": 1e-5 * max(1.0, float(ref.abs().max()))}


def compare(hf, folder, ids: torch.Tensor, *, pairing: str = "interleaved", prompt: int | None = None,
            tol=tolerance):
    """Save ``hf`` to ``folder``, load it with posenc, assert equal logits full and cached; return the Pretrained.

    ``tol``: reference logits → ``assert_close`` tolerances (default ``tolerance``).
    """
    hf.save_pretrained(folder, safe_serialization=True)
    pm = load_pretrained(folder, pairing=pairing)
    with torch.no_grad():
        ref = hf(ids).logits
        torch.testing.assert_close(pm.model(ids), ref, **tol(ref))
        cache = pm.model.new_cache()
        first = ids.shape[1] // 3 if prompt is None else prompt
        parts = [pm.model(ids[:, :first], cache=cache)]
        parts += [pm.model(ids[:, i:i + 1], cache=cache) for i in range(first, ids.shape[1])]
        torch.testing.assert_close(torch.cat(parts, dim=1), ref, **tol(ref))
    return pm
