"""HF's own reading of a model's RoPE, per layer: the reference ``posenc rope`` checks the loaded plan against.

What HF reads must come from HF, not from posenc's reading of the file — or a
misread plan would be confirmed, not caught. So:

- a config.json (or an HF folder): ``transformers.AutoConfig.for_model(model_type, **config)``;
- a ``.gguf`` file: transformers' own GGUF loader (``AutoConfig.from_pretrained(folder,
  gguf_file=name)``), which fills in its architecture's defaults itself (Gemma 3's
  layer types and local base) — slow on large vocabularies (it walks every metadata
  element), so ``posenc rope`` says it is reading.

Then, per layer: HF's layer type (``config.layer_types``, or one type for all), its
window (``sliding_window`` on ``sliding_attention`` layers), whether it rotates at
all (``no_rope_layers``; Cohere 2's global layers), and θ with the attention factor
from the model's own rotary-embedding module (``<Model>RotaryEmbedding(config)``,
which holds ``inv_freq`` — or ``<layer type>_inv_freq`` per type — and the
attention scaling; GPT-J's holds a sin/cos table, whose row for position 1 gives θ), else from
``ROPE_INIT_FUNCTIONS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class HFLayer:
    """One layer as HF reads it: its type, window, whether it rotates, and its θ and attention factor."""

    layer_type: str
    window: int | None
    rotates: bool
    theta: torch.Tensor | None
    attention_factor: float | None
    computed_by: str


def config_of_dict(config: dict[str, Any]) -> Any:
    """transformers' config object for this config dict (None: transformers absent or the type unknown to it)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return None
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type.startswith("gguf:"):
        model_type = "llama"  # a GGUF posenc does not load: its RoPE keys read as a Llama config
    clean = {k: v for k, v in config.items() if not k.startswith("_") and k != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **clean)
    except Exception:  # noqa: BLE001 - any model type transformers does not know, or a config it refuses
        return None


def config_of_gguf(path: Path) -> tuple[Any, str | None]:
    """(transformers' config read by its own GGUF loader, None) or (None, why it could not)."""
    from posenc.checks import require

    try:
        require("transformers", "reading a .gguf file the way HF does")
    except ImportError as err:
        return None, str(err)
    from transformers import AutoConfig

    try:
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name), None
    except Exception as err:  # noqa: BLE001 - an architecture its GGUF loader does not know, or gguf absent
        return None, f"transformers' GGUF loader refused the file ({type(err).__name__}: {str(err)[:200]})"


def _rotary_class(cfg: Any) -> type | None:
    """The model's ``*RotaryEmbedding`` class that takes the text config (None: no such module or class)."""
    name = type(cfg).__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a modeling module that needs an optional package
        return None
    for attr, value in vars(module).items():  # the text model's (a vision tower's takes other arguments)
        if (attr.endswith("RotaryEmbedding") and isinstance(value, type) and "Vision" not in attr
                and value.__module__ == module.__name__):
            return value
    return None


def _init_function(cfg: Any, layer_type: str | None, head_dim: int) -> tuple[torch.Tensor, float, str]:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = cfg.rope_parameters
    nested = isinstance(params, dict) and layer_type in params and isinstance(params[layer_type], dict)
    own = params[layer_type] if nested else params
    rope_type = own.get("rope_type", "default")
    if rope_type in ROPE_INIT_FUNCTIONS:
        kwargs = {"layer_type": layer_type} if nested else {}
        theta, factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, None, **kwargs)
        return theta.double(), float(factor), f"ROPE_INIT_FUNCTIONS[{rope_type!r}]"
    base = float(own["rope_theta"])
    dim = int(head_dim * float(own.get("partial_rotary_factor", 1.0)))
    theta = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return theta.double(), 1.0, "HF's default formula (float32)"


def frequencies(cfg: Any, layer_type: str | None, head_dim: int) -> tuple[torch.Tensor, float, str]:
    """(θ, attention factor, what computed it) for one HF layer type: the model's rotary module where it has one."""
    cls = _rotary_class(cfg)
    if cls is not None:
        try:
            module = cls(cfg)
            if not hasattr(module, "inv_freq") and hasattr(module, "embed_positions"):
                # GPT-J: a [sin | cos] table of positions (HF's create_sinusoidal_positions); row 1 holds θ itself
                row = module.embed_positions[1].double()
                half = row.numel() // 2
                return torch.atan2(row[:half], row[half:]), 1.0, f"{cls.__name__} (its sin/cos table)"
            if layer_type is not None and hasattr(module, f"{layer_type}_inv_freq"):
                theta = getattr(module, f"{layer_type}_inv_freq")
                factor = getattr(module, f"{layer_type}_attention_scaling", 1.0)
            else:
                theta, factor = module.inv_freq, getattr(module, "attention_scaling", 1.0)
            return theta.double(), float(factor), f"{cls.__name__}"
        except Exception:  # noqa: BLE001 - a module that wants more than the config (then the init functions)
            pass
    return _init_function(cfg, layer_type, head_dim)


def layers(cfg: Any, num_layers: int, head_dim_of: Any) -> list[HFLayer]:
    """Every layer as HF reads it (``head_dim_of(layer_type)``: the width RoPE sees, for the init functions)."""
    types = getattr(cfg, "layer_types", None)
    if not isinstance(types, list) or len(types) != num_layers:
        types = [None] * num_layers
    no_rope = getattr(cfg, "no_rope_layers", None)  # SmolLM3 / Llama 4: 1 = RoPE, 0 = NoPE
    window = getattr(cfg, "sliding_window", None)
    memo: dict[str | None, tuple[torch.Tensor, float, str]] = {}
    out = []
    for i, layer_type in enumerate(types):
        rotates = True
        if isinstance(no_rope, list) and len(no_rope) == num_layers:
            rotates = bool(no_rope[i])
        if getattr(cfg, "model_type", None) == "cohere2" and layer_type == "full_attention":
            rotates = False  # Cohere 2: sliding RoPE layers, global NoPE layers
        if layer_type not in memo:
            memo[layer_type] = frequencies(cfg, layer_type, head_dim_of(layer_type))
        theta, factor, how = memo[layer_type]
        out.append(HFLayer(layer_type=layer_type or "all",
                           window=window if layer_type == "sliding_attention" else None, rotates=rotates,
                           theta=theta if rotates else None, attention_factor=factor if rotates else None,
                           computed_by=how))
    return out
