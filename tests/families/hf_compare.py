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
    assert_rope_reads_the_loaded_plan(folder, pm)
    with torch.no_grad():
        ref = hf(ids).logits
        torch.testing.assert_close(pm.model(ids), ref, **tol(ref))
        cache = pm.model.new_cache()
        first = ids.shape[1] // 3 if prompt is None else prompt
        parts = [pm.model(ids[:, :first], cache=cache)]
        parts += [pm.model(ids[:, i:i + 1], cache=cache) for i in range(first, ids.shape[1])]
        torch.testing.assert_close(torch.cat(parts, dim=1), ref, **tol(ref))
    return pm


def assert_rope_reads_the_loaded_plan(folder, pm) -> None:
    """``posenc rope`` on the saved folder shows, layer by layer, the plan the loaded model runs, and HF's own
    reading of the folder (its layer types, windows, rotated layers, θ and attention factor) finds no error."""
    from posenc.ropecheck.audit import audit, read_source

    try:
        report = audit(read_source(folder))
    except ValueError as err:
        assert "has no rotary positions" in str(err), err  # GPT-2, OPT, BLOOM, MPT: nothing to audit
        return
    plan = pm.config.plan
    shown = {}
    for entry in report["layer_types"]:
        for i in entry["layer_indices"]:
            shown[i] = (entry["scheme"], {k: v for k, v in entry["options"].items() if k != "pairing"})
    loaded = {i: (s.position, {k: v for k, v in s.position_options.items() if k != "pairing"})
              for i, s in enumerate(plan)}
    assert shown == loaded, (shown, loaded)
    errors = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert report["hf_checked"] and not errors, errors


def compare_seq2seq(hf, folder, src: torch.Tensor, tgt: torch.Tensor, *, prompt: int | None = None,
                    tol=tolerance, save: bool = True, src_mask: torch.Tensor | None = None):
    """An encoder–decoder's ``compare``: save ``hf``, load it with posenc, assert equal logits; return the Pretrained.

    ``src`` is the encoder's input (ids, or Whisper's log-mel features) and ``tgt`` the decoder's ids.
    Logits of a full forward, then of cached decoding: the encoder once (its keys and values cached
    by each cross-attention), the first ``prompt`` target tokens together, then one at a time.
    ``src_mask`` (B, S), 1 for a real source token: HF's ``attention_mask``, posenc's padding masks.
    ``save=False`` loads ``folder`` as it is (a test that edited the saved files).
    """
    if save:
        hf.save_pretrained(folder, safe_serialization=True)
    pm = load_pretrained(folder)
    padding = None if src_mask is None else ~src_mask.bool()  # (B, S), True = a padding key
    with torch.no_grad():
        ref = hf(src, attention_mask=src_mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(pm.model(src, tgt, src_padding_mask=padding), ref, **tol(ref))
        memory = pm.model.encode(src, src_padding_mask=padding)
        cache = pm.model.new_cache()
        first = tgt.shape[1] // 3 if prompt is None else prompt
        parts = [pm.model.decode(tgt[:, :first], memory, memory_padding_mask=padding, cache=cache)]
        parts += [pm.model.decode(tgt[:, i:i + 1], memory, memory_padding_mask=padding, cache=cache)
                  for i in range(first, tgt.shape[1])]
        torch.testing.assert_close(torch.cat(parts, dim=1), ref, **tol(ref))
        assert all(c.cross_attn.k is not None and c.self_attn.length == tgt.shape[1] for c in cache)
    return pm


def assert_mask_hides_only_padded_rows(pm, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor) -> None:
    """The padding mask matters: without it a padded row's logits change, a row with no padding stays equal."""
    padded = (src_mask == 0).any(dim=1)
    assert padded.any() and not padded.all(), "the case needs padded and unpadded rows"
    with torch.no_grad():
        masked = pm.model(src, tgt, src_padding_mask=~src_mask.bool())
        unmasked = pm.model(src, tgt)
    torch.testing.assert_close(unmasked[~padded], masked[~padded], rtol=1e-5, atol=1e-5)  # kernels may differ
    gap = (unmasked[padded] - masked[padded]).abs().amax(dim=(1, 2))
    assert (gap > 1e-5).all(), f"the mask left padded rows unchanged: largest change {gap.tolist()}"  # > noise


def assert_refused(folder, changes: list[tuple[str, object, str]]) -> None:
    """Each (key, value, message): folder's config.json with ``key`` set to ``value`` is refused naming ``message``."""
    import json

    import pytest

    data = json.loads((folder / "config.json").read_text())
    for key, value, message in changes:
        (folder / "config.json").write_text(json.dumps(data | {key: value}))
        with pytest.raises(ValueError, match=message):
            load_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(data))
