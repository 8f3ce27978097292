"""Each engine's own RoPE for a case, computed by the engine's code (run inside the engine's venv).

``ADAPTERS[name](case)`` → ``{"rotated": (T, D)}`` (the probe rotated at each position, the attention factor
included where the engine applies one) or raises ``Unsupported`` naming what the engine lacks. The engine's
config reading is used where it has one (mlx-lm's ``ModelArgs.from_dict`` and the model's ``Attention.rope``);
torchtune, x-transformers and rotary-embedding-torch have no config reader, so their classes get the config's
numbers the way their own model builders pass them.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import torch

from posenc.ropecheck.engines import ENGINE_PAIRING, Case, Unsupported, probe


def _rows(case: Case) -> torch.Tensor:
    return probe(case.head_dim).float().expand(len(case.positions), -1).contiguous()


def _opt(case: Case, *allowed: str) -> dict[str, Any]:
    extra = {k: v for k, v in case.options.items() if v is not None and k not in ("base", *allowed)}
    if extra:
        raise Unsupported(f"{case.scheme} with {sorted(extra)}: not implemented by this engine")
    return case.options


def torchtune(case: Case) -> dict[str, Any]:
    """torchtune's ``RotaryPositionalEmbeddings`` (plain) and ``Llama3ScaledRoPE`` (Llama 3.1); interleaved."""
    D = case.head_dim
    if case.rotary_dim != D:
        raise Unsupported("torchtune rotates the whole head (no partial rotary_dim)")
    top = max(case.positions) + 1
    if case.scheme == "rope":
        from torchtune.modules import RotaryPositionalEmbeddings

        o = _opt(case)
        rope = RotaryPositionalEmbeddings(D, max_seq_len=top, base=o.get("base", 10000.0))
    elif case.scheme == "rope-llama3":
        from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE

        o = _opt(case, "factor", "low_freq_factor", "high_freq_factor", "original_max_len")
        rope = Llama3ScaledRoPE(D, max_seq_len=top, base=o.get("base", 500000.0), scale_factor=o["factor"],
                                low_freq_factor=o["low_freq_factor"], high_freq_factor=o["high_freq_factor"],
                                old_context_len=o["original_max_len"])
    else:
        raise Unsupported(f"torchtune implements plain RoPE and Llama 3.1's scaling only, not {case.scheme}")
    x = _rows(case)[None, :, None, :]  # (b, s, n_h, h_d)
    pos = torch.tensor([case.positions])
    return {"rotated": rope(x, input_pos=pos)[0, :, 0].double()}


def x_transformers(case: Case) -> dict[str, Any]:
    """x-transformers' ``RotaryEmbedding``: plain, linear (interpolation_factor), NTK (base_rescale_factor)."""
    from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

    R = case.rotary_dim
    if case.scheme == "rope":
        o = _opt(case, "rotary_dim")
        rope = RotaryEmbedding(R, base=o.get("base", 10000.0))
    elif case.scheme == "rope-linear":
        o = _opt(case, "rotary_dim", "factor")
        rope = RotaryEmbedding(R, base=o.get("base", 10000.0), interpolation_factor=o["factor"])
    elif case.scheme == "rope-ntk":
        o = _opt(case, "rotary_dim", "factor")
        rope = RotaryEmbedding(R, base=o.get("base", 10000.0), base_rescale_factor=o["factor"])
    else:
        raise Unsupported(f"x-transformers implements plain, linear (interpolation_factor) and NTK "
                          f"(base_rescale_factor) RoPE, not {case.scheme}")
    freqs, scale = rope(torch.tensor(case.positions))
    return {"rotated": apply_rotary_pos_emb(_rows(case)[None], freqs, scale)[0].double()}


def rotary_embedding_torch(case: Case) -> dict[str, Any]:
    """rotary-embedding-torch's ``RotaryEmbedding``: plain, linear (interpolate_factor), NTK (theta_rescale_factor)."""
    from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb

    R = case.rotary_dim
    kwargs: dict[str, Any] = {"cache_if_possible": False}
    if case.scheme == "rope":
        o = _opt(case, "rotary_dim")
    elif case.scheme == "rope-linear":
        o = _opt(case, "rotary_dim", "factor")
        kwargs["interpolate_factor"] = o["factor"]
    elif case.scheme == "rope-ntk":
        o = _opt(case, "rotary_dim", "factor")
        kwargs["theta_rescale_factor"] = o["factor"]
    else:
        raise Unsupported(f"rotary-embedding-torch implements plain, linear (interpolate_factor) and NTK "
                          f"(theta_rescale_factor) RoPE, not {case.scheme}")
    rope = RotaryEmbedding(R, theta=o.get("base", 10000.0), **kwargs)
    pos = torch.tensor(case.positions, dtype=torch.float32) / kwargs.get("interpolate_factor", 1.0)
    freqs = rope(pos)
    return {"rotated": apply_rotary_emb(freqs, _rows(case)).double()}


def mlx(case: Case) -> dict[str, Any]:
    """mlx-lm's own reading of the config (``ModelArgs.from_dict``) and its model's ``Attention(...).rope``
    (``mx.fast.rope`` underneath), one position per call (``offset``), as its KV cache asks."""
    import mlx.core as mx

    cfg = dict(case.config)
    model_type = str(cfg.get("model_type", ""))
    try:
        module = importlib.import_module(f"mlx_lm.models.{model_type}")
    except ImportError as err:
        raise Unsupported(f"mlx-lm has no model {model_type!r}") from err
    import dataclasses

    for f in dataclasses.fields(module.ModelArgs):  # sizes a tiny config may leave out (real ones give them)
        if f.name not in cfg and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            cfg[f.name] = {"rms_norm_eps": 1e-6, "layer_norm_eps": 1e-6}.get(f.name, 64)
    args = module.ModelArgs.from_dict(cfg)
    attention = getattr(module, "Attention", None)
    rope = None
    for call in (lambda: attention(args, case.layer_index), lambda: attention(args)):
        try:
            rope = call().rope
            break
        except Exception:  # noqa: BLE001 - the other signature
            continue
    if rope is None:
        raise Unsupported(f"mlx-lm's {model_type} Attention could not be built from the config")
    x = mx.array(probe(case.head_dim).float().numpy())[None, None, None, :]
    rows = []
    for p in case.positions:
        rows.append(torch.tensor(rope(x, offset=p).tolist()).reshape(-1).double())
    return {"rotated": torch.stack(rows)}


ADAPTERS = {"torchtune": torchtune, "x-transformers": x_transformers, "rotary-embedding-torch": rotary_embedding_torch,
            "mlx": mlx}


def worker(name: str) -> None:
    """``python -m posenc.ropecheck.engine_adapters NAME``: cases on stdin, results on stdout (in the engine's
    venv)."""
    cases = [Case.from_json(c) for c in json.load(sys.stdin)]
    out = []
    for case in cases:
        try:
            result = {**ADAPTERS[name](case), "pairing": ENGINE_PAIRING[name]}
            out.append({k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in result.items()})
        except Unsupported as err:
            out.append({"unsupported": str(err)})
        except Exception as err:  # noqa: BLE001 - the engine's own code failed on this config: say so
            out.append({"unsupported": f"the engine's code failed: {type(err).__name__}: {str(err)[:300]}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    worker(sys.argv[1])
