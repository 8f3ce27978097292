"""The model a fine-tuning run starts from, the method's variant of it, and the memory savers.

* ``load_start(spec)`` — a posenc run directory (``posenc finetune pretrain``
  or any posenc checkpoint of a ``Decoder``; its tokenizer is named in the
  checkpoint's state) or a real checkpoint (HF folder or ``.gguf``) through
  ``posenc.pretrained.load_pretrained``.
* ``method_model(model, method, …)`` — the model ``posenc extend`` measures for
  that method: the config with only the position scheme replaced, the same
  weights (``posenc.extend.methods.build_variant``); ``rope-longrope`` takes the
  options a search wrote (``posenc.finetune.longrope``).
* ``gradient_checkpointing(model)`` — every decoder layer recomputes its
  activations in the backward pass instead of keeping them
  (``torch.utils.checkpoint``, non-reentrant); only while grad is enabled.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class Start:
    """A starting checkpoint: the model (plain RoPE), its tokenizer, L₀ and where it came from."""

    model: nn.Module
    tokenizer: Any
    original_max_len: int
    source: str
    kind: str  #: "posenc-run" or "pretrained"


def tokenizer_from_name(name: str) -> Any:
    """``bytes`` → ``ByteTokenizer``; a model path → that model's tokenizer."""
    from posenc.finetune.data import ByteTokenizer

    if name == "bytes":
        return ByteTokenizer()
    from posenc.pretrained import load_pretrained

    tok = load_pretrained(name).tokenizer
    if tok is None:
        raise ValueError(f"tokenizer {name!r}: that checkpoint has no tokenizer; give 'bytes' or a model with one")
    return tok


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "latest").exists() or (path / "state.json").exists())


def load_start(spec: str | Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Start:
    """The checkpoint ``spec`` as a posenc ``Decoder`` (weights as saved) with its tokenizer.

    Raises:
        FileNotFoundError: nothing at ``spec``.
        ValueError: a posenc checkpoint of another model class, one that names no tokenizer, or a checkpoint
            that is not a causal LM (an encoder: ``posenc.pretrained.require_causal_lm``).
    """
    from posenc.models.decoder import DecoderConfig, build_decoder

    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"model {str(spec)!r} not found: give a posenc run directory, an HF model folder "
                                "or a .gguf file")
    if is_run_dir(path):
        from posenc.checkpoint import load_weights, read_state

        meta = read_state(path)
        if meta.get("model_class") != "Decoder" or not isinstance(meta.get("model_config"), dict):
            raise ValueError(f"{path}: a posenc checkpoint of {meta.get('model_class')!r}; fine-tuning starts from a "
                             "Decoder (posenc finetune pretrain writes one)")
        config = DecoderConfig.from_dict(meta["model_config"])
        model = build_decoder(config)
        tuned = meta.get("state", {}).get("finetune") or {}
        if tuned.get("lora_rank"):  # a LoRA fine-tuning run: load the adapters, then fold them in
            from posenc.models.lora import apply_lora, merge_lora

            apply_lora(model, targets=tuned["lora_targets"], rank=tuned["lora_rank"], alpha=tuned["lora_alpha"])
            load_weights(path, model)
            merge_lora(model)
        else:
            load_weights(path, model)
        tok_name = meta.get("state", {}).get("tokenizer")
        if not isinstance(tok_name, str):
            raise ValueError(f"{meta['path']}: its state names no tokenizer ('tokenizer': 'bytes' or a model path)")
        return Start(model.to(device=device, dtype=dtype).eval(), tokenizer_from_name(tok_name),
                     int(config.max_position_embeddings), str(Path(meta["path"]).resolve()), "posenc-run")
    from posenc.pretrained import load_pretrained, require_causal_lm

    require_causal_lm(path, command="finetune")
    # float weights: training (and LoRA beside each nn.Linear) needs them; a GGUF would otherwise load as stored,
    # its projections quantised QuantLinear modules with no gradient
    pm = load_pretrained(str(path), dtype=dtype, device=device, weights="dequantised")
    # L0 from the one reading of the model (posenc.pretrained.description), as extend and rope take it
    l0 = pm.description.trained_context if pm.description is not None else pm.config.max_position_embeddings
    if pm.tokenizer is None:  # fine-tuning encodes its text with the model's own tokenizer
        raise ValueError(f"{path}: no tokenizer found beside the weights (tokenizer.json, or a GGUF's vocabulary); "
                         "fine-tuning encodes --train-text with the model's own tokenizer — copy the model's "
                         "tokenizer.json into the folder")
    return Start(pm.model.eval(), pm.tokenizer, int(l0), str(path.resolve()), "pretrained")


def method_model(model: nn.Module, method: str, *, factor: float | None, original_max_len: int,
                 searched: Mapping[str, Any] | None = None) -> nn.Module:
    """The variant ``posenc extend`` builds for ``method`` (a new module for every method but plain ``rope``).

    A plain-``rope`` result is a copy as well, so fine-tuning it never changes ``model``.
    """
    import copy

    from posenc.extend.methods import PLAIN, build_variant

    if method == PLAIN:
        return copy.deepcopy(model)
    return build_variant(model, method, factor=factor, original_max_len=original_max_len, searched=searched)


def read_searched(path: str | Path) -> dict[str, Any]:
    """The ``rope-longrope`` options in a search result file (``posenc finetune search --out``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "result.json"
    if not path.exists():
        raise FileNotFoundError(f"--longrope {path}: no search result there (posenc finetune search writes "
                                "OUT/result.json)")
    from posenc.validation import UnreadableFile, read_json

    fix = "give the result.json (or the --out folder) of a posenc finetune search"
    try:
        data = read_json(path, "--longrope search result", fix=fix)
    except UnreadableFile as err:
        raise ValueError(f"--longrope {err}") from None
    options = data.get("options")
    factors = options.get("long_factor") if isinstance(options, dict) else None
    if not isinstance(factors, list) or not factors or not all(
            isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) and f > 0 for f in factors):
        raise ValueError(f"--longrope {path}: not a search result (options.long_factor must be a list of positive "
                         f"numbers, got {str(factors)[:80]}); {fix}")
    return options


@contextlib.contextmanager
def gradient_checkpointing(model: nn.Module, on: bool = True) -> Iterator[None]:
    """Within the block, each of ``model.layers`` recomputes its forward during backward (when grad is on)."""
    layers = list(getattr(model, "layers", [])) if on else []
    originals = []
    for layer in layers:
        forward = layer.forward

        def wrapped(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        originals.append(forward)
        layer.forward = wrapped  # an instance attribute: nn.Module.__call__ (and its hooks) call it
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def autocast(dtype: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` to bfloat16 when ``dtype`` is ``bfloat16``, else nothing."""
    if dtype == "float32":
        return contextlib.nullcontext()
    if dtype != "bfloat16":
        raise ValueError(f"--autocast must be float32 or bfloat16, got {dtype!r}")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
