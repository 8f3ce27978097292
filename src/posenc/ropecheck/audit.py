"""What a model's RoPE is, per layer, checked against float64 and against HF's own reading of the same file.

``audit(description)`` takes a model's one reading (``posenc.pretrained.description``:
the layer plan the loader builds the model from) — or an HF ``config.json`` dict of
any ``model_type``, described on the spot — and returns plain data, per group of
layers that run the same setting: the posenc scheme and options of the loaded plan, the
inverse frequencies θ_i and wavelengths 2π/θ_i against the trained length L₀
(how many pairs turn fully inside L₀ — the quantity YaRN's ramp is built on),
the attention factor, the angle and cos/sin error at chosen positions when an
engine forms p·θ and cos/sin in float32, bf16 or fp16 (positions held in that
dtype too) instead of float64, and — where ``transformers`` is installed —
whether HF, reading the same file itself (``AutoConfig`` for a config.json, its
GGUF loader for a ``.gguf``), runs the same layer types, windows and rotated
layers and computes the same θ and attention factor for every layer (its model's
own rotary-embedding module, else ``ROPE_INIT_FUNCTIONS``). A plan misread by
posenc is caught there, not confirmed: HF's numbers come from HF's reading.
Anything wrong or surprising is a *finding* with its numbers: a disagreement
with HF, a ``rope_theta`` the config does not give (HF then falls back to its
class's ``default_theta``), a YaRN attention factor below 1 (``mscale`` and
``mscale_all_dim`` swapped), a factor that does not match the lengths,
positions a low-precision dtype cannot hold.

``calculator(method, original_max_len, target_len, ...)`` goes the other way:
the HF config block and the GGUF / llama.cpp settings that extend L₀ to a
target length with a method.

The command ``posenc rope`` prints these (``posenc.commands.rope``). A model type
posenc does not run is audited from its config's RoPE block alone, and says so.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_WIDTH, HFConfig
from posenc.families.rope import ROPE_TYPES, rope_blocks, rope_scheme
from posenc.positions import build, lookup
from posenc.positions.temperature import Llama4QueryScale

#: Positions the precision table uses unless asked otherwise: L₀ − 1, 4·L₀ and 2¹⁷ − 1 are added per model.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Relative difference between posenc's float64 θ and HF's float32 θ that counts as the same (float32 rounding).
SAME_THETA = 1e-5


# -- reading --------------------------------------------------------------------------------------------------------
def read_source(path: str | Path) -> Any:
    """The one reading (``ModelDescription``) of a config.json, a folder holding one, or a GGUF file — the same
    reading the loader builds the model from (the tokenizer is not read)."""
    from posenc.pretrained.description import describe

    path = Path(path)
    if path.is_dir() and not (path / "config.json").exists() and not list(path.glob("*.gguf")):
        raise FileNotFoundError(f"{path / 'config.json'}: no such file (give a config.json, a model folder or a "
                                ".gguf file)")
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ValueError(f"{path}: not a regular file (a FIFO or a device?); give a config.json, a model folder "
                         "or a .gguf file")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (give a config.json, a model folder or a .gguf file)")
    if path.is_file() and path.suffix.lower() not in (".json", ".gguf"):
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                from posenc.pretrained.description import describe_config
                from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json

                return describe_config(read_json(path, limit=MAX_CONFIG_BYTES), source=str(path))
    return describe(path, tokenizer=False)


# -- is it RoPE at all? -------------------------------------------------------------------------------------------
#: config.json keys only a model with rotary positions has (any model_type).
ROTARY_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base",
               "rotary_emb_fraction", "partial_rotary_factor", "rope_local_base_freq", "qk_rope_head_dim")


def not_rotary(config: dict[str, Any]) -> str | None:
    """How a model without rotary positions places its tokens ("learned absolute (512 rows)", "ALiBi …"), or None
    when it has RoPE — or when nothing says it has not (then the audit runs, and a missing θ is a finding).

    Asked in turn: posenc's own reader of the model type (``posenc.families``: GPT-2, OPT, BLOOM, MPT,
    BERT, … say their scheme), the config's RoPE keys, then transformers' config class of the type.
    """
    if str(config.get("model_type", "")).startswith("gguf:"):
        return None
    if config.get("alibi") is True:  # Falcon's switch: ALiBi instead of its RoPE
        return _described("alibi", {})
    clean = {k: v for k, v in config.items() if not k.startswith("_")}
    try:
        from posenc.families import family_for

        family = family_for(clean)
        model = family.config_from_hf(HFConfig(clean, source="config.json"), "half")
    except ValueError:  # a type posenc does not run, or a config its reader refuses: the other clues decide
        pass
    else:
        if hasattr(model, "encoder_position"):  # an encoder–decoder (Seq2SeqConfig): one scheme per stack
            stacks = {"encoder": (model.encoder_position, model.encoder_position_options),
                      "decoder": (model.decoder_position, model.decoder_position_options)}
        else:
            stacks = {"": (model.position, model.position_options)}
        plan = getattr(model, "plan", ())  # a decoder's layer plan (DecoderConfig.plan); an encoder has one scheme
        names = {name for name, _ in stacks.values()} | {spec.position for spec in plan}
        if any(lookup(name).family == "rotary" for name in names):
            return None
        said = {stack: _described(*scheme) for stack, scheme in stacks.items()}
        if len(set(said.values())) == 1:
            return next(iter(said.values()))
        return "; ".join(f"{stack}: {words}" for stack, words in said.items())
    kind = clean.get("position_embedding_type")
    if any(key in clean for key in ROTARY_KEYS) or kind == "rotary":
        return None
    if kind == "absolute" or (kind is None and isinstance(clean.get("n_positions"), int)):
        return _described("learned", {"max_len": clean.get("max_position_embeddings", clean.get("n_positions"))})
    if kind in ("relative_key", "relative_key_query"):
        return f"learned relative ({kind}, Shaw et al. / Huang et al.)"
    if isinstance(clean.get("relative_attention_num_buckets"), int):
        return f"T5's bucketed relative bias ({clean['relative_attention_num_buckets']} buckets)"
    from posenc.ropecheck.hf import config_of_dict

    hf = config_of_dict(config) if config.get("model_type") not in (None, "llama") else None
    if hf is not None and not any(getattr(hf, name, None) is not None for name in
                                  ("rope_parameters", "rope_theta", "rotary_dim", "rotary_value")):
        return f"not rotary (transformers' {type(hf).__name__} has no RoPE parameters)"
    return None


def _described(name: str, options: dict[str, Any]) -> str:
    """A position scheme in words, for the refusal."""
    if name == "learned":
        offset = options.get("offset")
        return (f"learned absolute ({options.get('max_len')} rows"
                + (f", position p read at row p + {offset}" if offset else "") + ")")
    if name == "t5" and "num_buckets" in options:
        return f"T5's bucketed relative bias ({options['num_buckets']} buckets)"
    words = {"alibi": "ALiBi (a linear bias on the attention logits, per head)", "none": "none (NoPE)",
             "sinusoidal": "sinusoidal absolute (added to the tokens)", "t5": "T5's bucketed relative bias"}
    return words.get(name, f"{name} ({lookup(name).family})")


def _typed(config: dict[str, Any], source: str = "config") -> HFConfig:
    return HFConfig({k: v for k, v in config.items() if not k.startswith("_")}, source=source)


def head_width(config: dict[str, Any], layer_type: str | None, source: str = "config") -> int:
    """The width RoPE sees: DeepSeek's qk_rope_head_dim, Gemma 4's global head width, head_dim, or D/H.

    Read as the loader reads sizes (``HFConfig``: integers within bounds); a width below 2 is refused by name.
    """
    c = _typed(config, source)
    for key in ("qk_rope_head_dim", *(("global_head_dim",) if layer_type == "full_attention" else ()), "head_dim"):
        if key in c:
            width = c.int(key, maximum=MAX_WIDTH)
            break
    else:
        heads = c.int("num_attention_heads", 1, maximum=MAX_HEADS)
        width = c.int("hidden_size", maximum=MAX_WIDTH) // heads
        if width < 2:
            raise ValueError(f"{source}: hidden_size / num_attention_heads = {c.raw('hidden_size')} / {heads} gives "
                             f"a head width of {width}; RoPE rotates pairs, so it needs at least 2 — the config is "
                             "corrupt or not a real model's")
    return width


def generic_sizes(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """The sizes the audit of a model type posenc does not run reads, typed and bounded as the loader's readers
    (``posenc.families.decoder_sizes``, ``layer_types``) read them: a value the loader would refuse is refused here.

    Returns ``{"layers": int | None, "max_position_embeddings": int | None, "layer_types": list | None}``.

    Raises:
        ValueError: naming the file, the field and the value (``head_dim 0``, ``max_position_embeddings -1`` or
            ``1e20``, ``layer_types`` of the wrong length or not strings, …).
    """
    from posenc.families import layer_types

    c = _typed(config, source)
    c.int("num_attention_heads", None, maximum=MAX_HEADS)
    for key in ("hidden_size", "head_dim", "qk_rope_head_dim", "global_head_dim"):
        c.int(key, None, maximum=MAX_WIDTH)
    for key in ("max_position_embeddings", "original_max_position_embeddings"):
        c.int(key, None, maximum=MAX_CONTEXT)
    layers = c.int("num_hidden_layers", None, maximum=MAX_LAYERS)
    if layers is not None:
        types = layer_types(c, layers)
    else:
        types = c.list("layer_types", None)
        if types is not None and not all(isinstance(t, str) for t in types):
            raise ValueError(f"{source}: layer_types must be a list of strings, got {types!r}")
    flags = c.list("no_rope_layers", None, length=layers)
    if flags is not None and not all(f in (0, 1) and not isinstance(f, float) for f in flags):
        raise ValueError(f"{source}: no_rope_layers must list 1 (RoPE) or 0 (NoPE) per layer, got {flags!r}")
    blocks = set(layer_blocks(config, [], source))
    if types is not None and "all" not in blocks:  # one RoPE block per layer type: each rotating type needs its own
        missing = sorted({t for i, t in enumerate(types) if t not in blocks and (flags is None or flags[i])})
        if missing:
            raise ValueError(f"{source}: layer_types names {missing}, which no RoPE block covers (the config gives "
                             f"blocks for {', '.join(sorted(blocks))}); the config is corrupt or not a real model's")
    head_width(config, None, source)
    return {"layers": layers, "max_position_embeddings": c.int("max_position_embeddings", None, maximum=MAX_CONTEXT),
            "layer_types": types}


#: Model types whose RoPE base is fixed by the architecture, not a config field (no key to miss): GPT-J's 10,000.
FIXED_BASE = {"gptj": 10000.0}


def layer_blocks(config: dict[str, Any], findings: list[dict[str, Any]], source: str = "config"
                 ) -> dict[str, dict[str, Any]]:
    """{layer type: RoPE block}; a config without types gives one type, "all"."""
    c = _typed(config, source)
    blocks = rope_blocks(c)
    if None in blocks and config.get("rope_local_base_freq") is not None:  # Gemma 3 (transformers 4), GGUF swa
        blocks = {"full_attention": blocks[None],
                  "sliding_attention": {"rope_type": "default", "rope_theta": c.float("rope_local_base_freq", above=0)}}
    raw = config.get("rope_parameters") or config.get("rope_scaling") or {}
    nested = isinstance(raw, dict) and any(isinstance(v, dict) for v in raw.values())
    for layer_type, block in blocks.items():
        given = (raw.get(layer_type) if nested else raw) or {}
        if "rope_theta" not in given and "rope_theta" not in config and "rope_local_base_freq" not in config \
                and config.get("model_type") not in FIXED_BASE:
            findings.append(_missing_theta(config, layer_type))
    return {("all" if k is None else k): v for k, v in blocks.items()}


def _missing_theta(config: dict[str, Any], layer_type: str | None) -> dict[str, Any]:
    default = None
    try:
        from transformers import CONFIG_MAPPING
        default = getattr(CONFIG_MAPPING[config.get("model_type")], "default_theta", None)
    except Exception:  # noqa: BLE001 - transformers absent or the model type unknown to it
        pass
    where = f" for {layer_type}" if layer_type else ""
    return finding("error", layer_type, f"rope_theta is missing{where} (neither the RoPE block nor the top level "
                   f"gives it; a transformers-5 migration that dropped it?): posenc assumes 10000"
                   + (f", transformers falls back to {config.get('model_type')}'s default_theta = {default:g}"
                      if default is not None else ""), {"assumed": 10000.0, "hf_default_theta": default})


def finding(severity: str, layer_type: str | None, message: str, numbers: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    return {"severity": severity, "layer_type": layer_type, "message": message, "numbers": numbers or {}}


# -- the derivation -------------------------------------------------------------------------------------------------
def derive(block: dict[str, Any], config: dict[str, Any], layer_type: str) -> tuple[str, dict[str, Any], int]:
    """(posenc scheme, options, head width) for one RoPE block; HunYuan's NTK-α and M-RoPE sections included."""
    head_dim = head_width(config, None if layer_type == "all" else layer_type)
    max_pos = _typed(config).int("max_position_embeddings", 2048, maximum=MAX_CONTEXT)
    block = dict(block)
    b = HFConfig(block, source="config (rope parameters)")
    if block.get("rope_type") == "dynamic" and block.get("alpha"):  # HunYuan: a fixed NTK-α, labelled dynamic
        options = {"base": b.float("rope_theta", above=1), "pairing": "half", "factor": b.float("alpha", above=0)}
        return "rope-ntk", options, head_dim
    if block.get("mrope_section") is not None:
        interleaved = b.bool("mrope_interleaved", False) or str(config.get("model_type", "")).startswith("qwen3")
        sections = b.list("mrope_section")
        if not sections or not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= MAX_WIDTH
                                   for s in sections):
            raise ValueError(f"config (rope parameters): mrope_section must list positive integers, got {sections!r}")
        options = {"base": b.float("rope_theta", above=1), "pairing": "half", "sections": sections,
                   "layout": "interleaved" if interleaved else "sections"}
        rotary = int(head_dim * b.float("partial_rotary_factor", 1.0, above=0, maximum=1))
        if rotary != head_dim:
            options["rotary_dim"] = rotary
        return "mrope", options, head_dim
    name, options = rope_scheme(block, head_dim=head_dim, max_position_embeddings=max_pos, pairing="half",
                                source="config", types=ROPE_TYPES)
    return name, options, head_dim


def frequency_table(theta: torch.Tensor, original: int) -> dict[str, Any]:
    """θ_i, wavelengths 2π/θ_i and turns L₀/λ per pair; pairs turning fully inside L₀ (λ ≤ L₀)."""
    wavelength = torch.where(theta > 0, 2 * math.pi / theta.clamp(min=1e-300), torch.full_like(theta, math.inf))
    turns = original / wavelength
    return {"inv_freq": theta.tolist(), "wavelength": wavelength.tolist(), "turns_in_L0": turns.tolist(),
            "full_turn_pairs": int((wavelength <= original).sum()), "pairs": int(theta.numel()),
            "unrotated_pairs": int((theta == 0).sum())}


def wrap(angle: torch.Tensor) -> torch.Tensor:
    """Angles into (−π, π]."""
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def precision(theta: torch.Tensor, positions: list[int], attention_factor: float) -> list[dict[str, Any]]:
    """Angle and cos/sin error when an engine forms p·θ and cos/sin in a low-precision dtype, vs float64.

    "Engine" arithmetic: the position and θ held in the dtype, their product in the dtype, cos/sin in the
    dtype (HF: float32). ``posenc`` row: float64 angles, cos/sin cast to float32 at the end.
    """
    rows = []
    for p in positions:
        exact = torch.tensor(float(p), dtype=torch.float64) * theta  # (P,)
        cos64, sin64 = exact.cos() * attention_factor, exact.sin() * attention_factor
        for name, dtype in DTYPES.items():
            held = torch.tensor(float(p), dtype=torch.float64).to(dtype)
            angle = held * theta.to(dtype)  # product in the dtype
            cos, sin = angle.cos() * attention_factor, angle.sin() * attention_factor
            finite = bool(torch.isfinite(angle).all())
            rows.append({
                "position": p, "arithmetic": name, "position_held_as": float(held),
                "angle_error": float(wrap(angle.double() - exact).abs().max()) if finite else math.inf,
                "cos_error": float((cos.double() - cos64).abs().max()) if finite else math.inf,
                "sin_error": float((sin.double() - sin64).abs().max()) if finite else math.inf,
            })
        cos32, sin32 = (exact.cos() * attention_factor).float(), (exact.sin() * attention_factor).float()
        rows.append({"position": p, "arithmetic": "posenc (float64 angles)", "position_held_as": float(p),
                     "angle_error": 0.0, "cos_error": float((cos32.double() - cos64).abs().max()),
                     "sin_error": float((sin32.double() - sin64).abs().max())})
    return rows


# -- the audit ----------------------------------------------------------------------------------------------------
def original_length(options: dict[str, Any], config: dict[str, Any]) -> int:
    c = _typed(config)
    return int(options.get("original_max_len") or c.int("original_max_position_embeddings", None, maximum=MAX_CONTEXT)
               or c.int("max_position_embeddings", 2048, maximum=MAX_CONTEXT))


def audit(model: Any, *, positions: list[int] | None = None, hf_check: bool = True,
          source: str | None = None, progress: Any = None) -> dict[str, Any]:
    """Everything ``posenc rope`` prints, as plain data (see the module docstring).

    Args:
        model: a ``ModelDescription`` (``posenc.pretrained.description``), or an HF config dict (described here).
        positions: positions for the precision table (default L₀ − 1, 4·L₀, 2¹⁷ − 1).
        hf_check: compare with HF's own reading (needs transformers).
        source: what to call the model (default the description's source).
        progress: called with a line before a slow step (HF's GGUF loader), or None.

    Raises:
        ValueError: the model has no rotary positions (naming the scheme it has), rather than an audit of a RoPE
            it does not use; or a config the loader refuses, with the loader's message.
    """
    from posenc.pretrained.description import ModelDescription, describe_config

    if not isinstance(model, ModelDescription):
        model = describe_config(model, source=source or "config.json")
    source = source or model.source
    config = model.hf_config
    if model.family is None:  # no family reader checked it: the sizes the audit reads, as the loader would
        generic_sizes(config, source)
    scheme = not_rotary(config) if model.family is None else _plan_not_rotary(model)
    if scheme is not None:
        raise ValueError(f"{source}: this model ({config.get('model_type')}) has no rotary positions — its positions "
                         f"are {scheme}; posenc rope audits RoPE only (`posenc inspect` measures other position "
                         "tables)")
    findings: list[dict[str, Any]] = []
    blocks = layer_blocks(config, findings, source)
    hf_cfg, hf_why = None, None
    if hf_check:
        hf_cfg, hf_why = _hf_reading(model, progress)
    out: dict[str, Any] = {"source": source, "model_type": config.get("model_type"), "family": model.family,
                           "format": model.format, "max_position_embeddings": config.get("max_position_embeddings"),
                           "trained_context": model.trained_context, "supplied": list(model.supplied),
                           "layer_types": [], "findings": findings, "hf_checked": hf_cfg is not None,
                           "hf_reading": _hf_reading_name(model) if hf_cfg is not None else hf_why}
    if model.family is None:
        findings.append(finding("info", None, f"posenc does not run model_type {config.get('model_type')!r}: its RoPE "
                                "is derived from the config's RoPE block alone, not from a loaded layer plan"))
        groups = _groups_from_blocks(config, blocks)
    else:
        groups = _groups_from_plan(model, config, blocks)
    hf_layers = None
    if hf_cfg is not None:
        num_layers = len(model.plan) or _typed(config).int("num_hidden_layers", 1, maximum=MAX_LAYERS)
        from posenc.ropecheck.hf import layers as hf_layers_of

        try:
            # the width RoPE sees per HF layer type: the loaded groups' own (GPT-J states no hidden_size), else the config's
            widths = {g["layer_type"]: g["head_dim"] for g in groups if g.get("head_dim")}
            fallback = next(iter(widths.values()), None)
            hf_layers = hf_layers_of(hf_cfg, num_layers,
                                     lambda t: widths.get(t or "all") or fallback or head_width(config, t))
        except Exception as err:  # noqa: BLE001 - HF's own code refused its own config: that is itself a finding
            findings.append(finding("warning", None, f"HF's RoPE code failed on its reading of this model: "
                                    f"{type(err).__name__}: {err}"))
            out["hf_checked"] = False
    for group in groups:
        if group["scheme"] == "none":
            out["layer_types"].append(_nope_entry(group, config))
            continue
        layer_type, name, options, head_dim = group["layer_type"], group["scheme"], group["options"], group["head_dim"]
        scheme = build(name, dim=head_dim, num_heads=1, **{k: v for k, v in options.items() if v is not None})
        theta = scheme.inv_freq().double()
        factor = float(scheme.attention_factor)
        original = original_length(options, config)
        asked = positions if positions is not None else sorted({original - 1, 4 * original, 2**17 - 1})
        block = group.get("block") or {}
        entry: dict[str, Any] = {"layer_type": layer_type, "layers": len(group["indices"]) or None,
                                 "layer_indices": group["indices"], "window": group.get("window"),
                                 "rope_type": block.get("rope_type"), "scheme": name, "options": options,
                                 "head_dim": head_dim, "original_max_len": original, "attention_factor": factor,
                                 **frequency_table(theta, original), "precision": precision(theta, asked, factor)}
        if block:
            _yarn_findings(block, options, config, layer_type, findings)
        _precision_findings(entry, layer_type, findings)
        if hf_layers is not None and name != "mrope":
            entry["hf"] = _hf_compare(hf_layers, group, theta, factor, findings)
        out["layer_types"].append(entry)
    if hf_layers is not None and model.plan:
        _hf_plan_findings(hf_layers, model, findings)
    return out


def _plan_not_rotary(model: Any) -> str | None:
    """How a model posenc runs places its tokens when no layer of its plan (nor its input) is rotary."""
    if any(lookup(spec["position"]).family == "rotary" for spec in model.plan):
        return None
    return not_rotary(model.hf_config)


def _layer_label(config: dict[str, Any], indices: list[int], fallback: str) -> str:
    types = config.get("layer_types")
    if isinstance(types, list) and indices and all(i < len(types) for i in indices):
        named = {types[i] for i in indices}
        if len(named) == 1:
            return str(next(iter(named)))
    return fallback


def _groups_from_plan(model: Any, config: dict[str, Any], blocks: dict[str, Any]) -> list[dict[str, Any]]:
    """One group per distinct layer spec of the loaded plan, labelled by HF's layer type where one names it."""
    groups = model.layer_groups()
    loaded = model.model_config(pairing="half")
    widths = getattr(loaded, "head_dims", None)  # per-layer widths (Gemma 4)
    widths = widths() if callable(widths) else None
    width = getattr(loaded, "attention_head_dim", None)  # the loaded model's own head width (GPT-J: n_embd / n_head)
    out = []
    for k, (spec, indices) in enumerate(groups):
        if spec["position"] == "none":
            fallback = "nope"
        else:
            fallback = "all" if len(groups) == 1 else f"group {k + 1}"
        label = _layer_label(config, indices, fallback)
        block = blocks.get(label) or (blocks.get("all") if len(blocks) == 1 else None)
        window = spec.get("window") or {"kind": "full"}
        out.append({"layer_type": label, "indices": indices, "scheme": spec["position"],
                    "options": dict(spec.get("position_options") or {}), "window": window,
                    "query_scale": spec.get("query_scale"),
                    "head_dim": (widths[indices[0]] if widths else width if width and not config.get("qk_rope_head_dim")
                                 else head_width(config, None if label in ("all", "nope") else label)),
                    "block": block})
    return out


def _groups_from_blocks(config: dict[str, Any], blocks: dict[str, Any]) -> list[dict[str, Any]]:
    """Groups for a model type posenc does not run: one per RoPE block of the config (no loaded plan)."""
    types = config.get("layer_types")
    layers = _typed(config).int("num_hidden_layers", 0, minimum=0, maximum=MAX_LAYERS)
    nope = _nope_indices(config)
    out = []
    for layer_type, block in blocks.items():
        name, options, head_dim = derive(block, config, layer_type)
        if isinstance(types, list) and layer_type in types:
            indices = [i for i, t in enumerate(types) if t == layer_type]
        elif layer_type == "all":
            indices = [i for i in range(layers) if i not in nope]
        else:
            indices = []
        out.append({"layer_type": layer_type, "indices": indices, "scheme": name, "options": options,
                    "head_dim": head_dim, "block": block})
    if nope:
        out.append({"layer_type": "nope", "indices": nope, "scheme": "none", "options": {}, "query_scale": None})
    return out


def _nope_indices(config: dict[str, Any]) -> list[int]:
    flags = config.get("no_rope_layers")  # Llama 4 / SmolLM3: 1 = RoPE, 0 = NoPE
    return [i for i, f in enumerate(flags) if not f] if isinstance(flags, list) else []


def _nope_entry(group: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    indices = group["indices"]
    entry: dict[str, Any] = {"layer_type": group["layer_type"], "layers": len(indices), "scheme": "none",
                             "options": {}, "layer_indices": indices, "window": group.get("window")}
    scale = group.get("query_scale")
    if scale is None and config.get("attn_temperature_tuning") and not group.get("window"):
        scale = {"kind": "llama4", "floor_scale": config.get("floor_scale", 8192),
                 "attn_scale": config.get("attn_scale", 0.1)}
    if scale and scale.get("kind") == "llama4":
        q = Llama4QueryScale(floor_scale=int(scale["floor_scale"]), attn_scale=float(scale["attn_scale"]))
        probe = [0, q.floor_scale - 1, 4 * q.floor_scale, 2**17 - 1]
        entry["temperature"] = {"kind": "llama4", "floor_scale": q.floor_scale, "attn_scale": q.attn_scale,
                                "factor_at": dict(zip(probe, q.factor(torch.tensor(probe)).tolist()))}
    return entry


def _yarn_findings(block: dict[str, Any], options: dict[str, Any], config: dict[str, Any], layer_type: str,
                   findings: list[dict[str, Any]]) -> None:
    if block.get("rope_type") != "yarn":
        return
    mscale, mscale_all_dim = block.get("mscale"), block.get("mscale_all_dim")
    factor = float(options["factor"])
    if mscale and mscale_all_dim and factor > 1:
        m = lambda s: 0.1 * s * math.log(factor) + 1  # noqa: E731
        att = m(mscale) / m(mscale_all_dim)
        if att < 1:
            findings.append(finding("warning", layer_type, f"YaRN attention factor {att:.6g} < 1: mscale = {mscale} is "
                            f"below mscale_all_dim = {mscale_all_dim}; swapped, the factor would be {1 / att:.6g} "
                            "(DeepSeek-V3 ships mscale = mscale_all_dim = 1, factor exactly 1)",
                            {"attention_factor": att, "swapped": 1 / att}))
        if str(config.get("model_type", "")).startswith("deepseek"):
            findings.append(finding("info", layer_type, f"DeepSeek also multiplies its softmax scale by "
                            f"(0.1·mscale_all_dim·ln factor + 1)² = {m(mscale_all_dim) ** 2:.6g} (HF "
                            "yarn_apply_mscale), outside the rotary attention factor", {"softmax_scale_factor":
                                                                                      m(mscale_all_dim) ** 2}))
    max_pos, original = config.get("max_position_embeddings"), options["original_max_len"]
    if max_pos and abs(factor * original - max_pos) > 0.5:
        findings.append(finding("info", layer_type, f"YaRN factor × L₀ = {factor:g} × {original} = {factor * original:g}"
                        f" is not max_position_embeddings = {max_pos}", {"factor": factor, "original": original,
                                                                         "max_position_embeddings": max_pos}))


def _precision_findings(entry: dict[str, Any], layer_type: str, findings: list[dict[str, Any]]) -> None:
    """One finding per low-precision dtype whose positions are not the asked ones (rounded, or inf)."""
    for dtype in ("bfloat16", "float16"):
        rows = [r for r in entry["precision"] if r["arithmetic"] == dtype and r["position_held_as"] != r["position"]]
        if not rows:
            continue
        exact = {"bfloat16": 256, "float16": 2048}[dtype]
        held = ", ".join(f"{r['position']} → {r['position_held_as']:g}" for r in rows)
        worst = max(r["cos_error"] for r in rows)
        findings.append(finding("warning", layer_type, f"positions held in {dtype} (exact only up to {exact}): "
                        f"{held}; cos/sin off by up to {worst:.3g} — form angles from integer positions",
                        {"dtype": dtype, "positions": {r["position"]: r["position_held_as"] for r in rows},
                         "max_cos_error": worst}))


# -- HF's own reading ---------------------------------------------------------------------------------------------
def _hf_reading_name(model: Any) -> str:
    return ("transformers' GGUF loader" if model.format == "gguf" and model.family is not None
            else "transformers' AutoConfig")


def _hf_reading(model: Any, progress: Any) -> tuple[Any, str | None]:
    """(transformers' own config of this model, None) or (None, why not)."""
    from posenc.checks import require
    from posenc.ropecheck import hf

    try:
        require("transformers", "comparing with HF's own reading")
    except ImportError as err:
        return None, str(err)
    if model.format == "gguf" and model.family is not None:
        if progress is not None:
            progress(f"reading {Path(model.source).name} with transformers' own GGUF loader (HF's reading, to compare "
                     "with; large vocabularies take tens of seconds; --no-hf skips it)")
        return hf.config_of_gguf(Path(model.source))
    cfg = hf.config_of_dict(model.hf_config)
    return cfg, None if cfg is not None else f"transformers does not know model_type {model.model_type!r}"


def _hf_compare(hf_layers: list[Any], group: dict[str, Any], theta: torch.Tensor, factor: float,
                findings: list[dict[str, Any]]) -> dict[str, Any]:
    """posenc's θ and factor for a group against HF's, layer by layer (HF's reading of each of its layers)."""
    layer_type = group["layer_type"]
    indices = [i for i in group["indices"] if i < len(hf_layers)] or ([0] if hf_layers else [])
    theirs = [hf_layers[i] for i in indices]
    rotating = [h for h in theirs if h.rotates]
    if not rotating:
        return {"computed_by": None, "same": False}
    worst_rel, same_factor, how, bad_layers = 0.0, True, rotating[0].computed_by, []
    scale = theta.abs().clamp(min=1e-300)
    for i, h in zip(indices, theirs):
        if not h.rotates:
            continue
        if h.theta.shape != theta.shape:
            findings.append(finding("error", layer_type, f"layer {i}: HF ({h.computed_by}) gives {h.theta.numel()} "
                                    f"frequencies, posenc {theta.numel()}", {"hf": h.theta.numel(),
                                                                             "posenc": theta.numel(), "layer": i}))
            return {"computed_by": h.computed_by, "same": False, "attention_factor": h.attention_factor}
        rel = float(((h.theta - theta).abs() / scale).max()) if theta.numel() else 0.0
        if rel > SAME_THETA or not math.isclose(h.attention_factor, factor, rel_tol=1e-9, abs_tol=1e-12):
            bad_layers.append(i)
        if rel > worst_rel:
            worst_rel = rel
        same_factor &= math.isclose(h.attention_factor, factor, rel_tol=1e-9, abs_tol=1e-12)
    ref = rotating[0]
    out: dict[str, Any] = {"computed_by": how, "attention_factor": ref.attention_factor, "max_rel_diff": worst_rel,
                           "same": not bad_layers, "hf_layer_types": sorted({h.layer_type for h in rotating})}
    if worst_rel > SAME_THETA:
        worst_layer = max((i for i, h in zip(indices, theirs) if h.rotates),
                          key=lambda i: float(((hf_layers[i].theta - theta).abs() / scale).max()))
        h = hf_layers[worst_layer]
        pair = int(((h.theta - theta).abs() / scale).argmax())
        findings.append(finding("error", layer_type, f"inv_freq differs from HF's own reading ({h.computed_by}) on "
                        f"layer(s) {bad_layers}: max relative difference {worst_rel:.3g} at pair {pair} of layer "
                        f"{worst_layer} (posenc {float(theta[pair]):.9g}, HF {float(h.theta[pair]):.9g})",
                        {"pair": pair, "layer": worst_layer, "layers": bad_layers, "posenc": float(theta[pair]),
                         "hf": float(h.theta[pair]), "max_rel_diff": worst_rel}))
    if not same_factor:
        findings.append(finding("error", layer_type, f"attention factor differs from HF's own reading ({how}): posenc "
                        f"{factor:.9g}, HF {ref.attention_factor:.9g}", {"posenc": factor, "hf": ref.attention_factor}))
    return out


def _hf_plan_findings(hf_layers: list[Any], model: Any, findings: list[dict[str, Any]]) -> None:
    """Where the loaded plan and HF's reading disagree on which layers rotate or on a sliding window."""
    plan = model.plan
    if len(hf_layers) != len(plan):
        findings.append(finding("error", None, f"posenc's plan has {len(plan)} layers, HF's reading "
                                f"{len(hf_layers)}", {"posenc": len(plan), "hf": len(hf_layers)}))
        return
    rotates = [lookup(spec["position"]).family == "rotary" for spec in plan]
    differ = [i for i, (mine, h) in enumerate(zip(rotates, hf_layers)) if mine != h.rotates]
    if differ:
        findings.append(finding("error", None, f"layers {differ}: posenc {'rotates' if rotates[differ[0]] else 'does not rotate'} "
                                f"q/k where HF's reading {'does' if hf_layers[differ[0]].rotates else 'does not'}",
                                {"layers": differ}))
    windows = []
    for i, (spec, h) in enumerate(zip(plan, hf_layers)):
        if h.layer_type not in ("sliding_attention", "full_attention"):
            continue  # HF names no window for this layer: nothing to compare
        window = spec.get("window") or {"kind": "full"}
        mine = window.get("size") if window.get("kind") == "sliding" else None
        if mine != h.window:
            windows.append((i, mine, h.window))
    if windows:
        i, mine, theirs = windows[0]
        findings.append(finding("error", None, f"sliding window differs from HF's reading on layers "
                                f"{[w[0] for w in windows]}: e.g. layer {i} posenc {mine or 'full'}, HF "
                                f"{theirs or 'full'}", {"layers": [w[0] for w in windows]}))


# -- the calculator -------------------------------------------------------------------------------------------------
CALC_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")


def calculator_inputs(*, original_max_len: Any, target_len: Any, base: Any, head_dim: Any, method: str = "") -> None:
    """Refuse, by flag, calculator inputs that give no real setting: lengths that are not integers in
    [1, 2⁴⁰] with the target above L₀, a head width that is not an even integer ≥ 2 (≥ 4 for NTK, whose
    exponent is d / (d − 2)), a base that is not a finite number > 1 (θ_i = base^(−2i/d) must fall with i).

    Raises:
        ValueError: naming the flag, the value and the range.
    """
    for flag, value in (("--original-max-len", original_max_len), ("--target-len", target_len)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONTEXT:
            raise ValueError(f"{flag} must be an integer from 1 to {MAX_CONTEXT:,} (a context length), got {value!r}")
    if not original_max_len < target_len:
        raise ValueError(f"--target-len {target_len} must exceed --original-max-len {original_max_len}: the "
                         "calculator extends a context")
    smallest = 4 if method == "ntk" else 2
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not smallest <= head_dim <= MAX_WIDTH \
            or head_dim % 2:
        raise ValueError(f"--head-dim must be an even integer from {smallest} to {MAX_WIDTH:,} (RoPE rotates pairs"
                         + ("; NTK's exponent d / (d − 2) needs d ≥ 4" if method == "ntk" else "")
                         + f"), got {head_dim!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or not base > 1:
        raise ValueError(f"--base must be a finite number > 1 (the RoPE base θ; 10000 for Llama 2, 500000 for "
                         f"Llama 3), got {base!r}")


def calculator(method: str, *, original_max_len: int, target_len: int, base: float = 10000.0,
               head_dim: int = 128) -> dict[str, Any]:
    """The HF config block, GGUF metadata and llama.cpp flags that extend L₀ to ``target_len`` with ``method``.

    Raises:
        ValueError: an unknown method, or inputs ``calculator_inputs`` refuses (lengths that do not extend, a head
            width or base that gives no RoPE).
    """
    if method not in CALC_METHODS:
        raise ValueError(f"--calc {method!r}: choose one of {', '.join(CALC_METHODS)} (LongRoPE needs searched "
                         "per-pair factors, which no calculator can give)")
    calculator_inputs(original_max_len=original_max_len, target_len=target_len, base=base, head_dim=head_dim,
                      method=method)
    factor = target_len / original_max_len
    hf: dict[str, Any] = {"max_position_embeddings": target_len}
    gguf: dict[str, Any] = {"{arch}.context_length": target_len, "{arch}.rope.freq_base": base}
    flags: list[str] = ["--ctx-size", str(target_len)]
    if method == "linear":
        hf["rope_parameters"] = {"rope_type": "linear", "rope_theta": base, "factor": factor}
        gguf |= {"{arch}.rope.scaling.type": "linear", "{arch}.rope.scaling.factor": factor}
        flags += ["--rope-scaling", "linear", "--rope-scale", f"{factor:g}"]
    elif method == "ntk":  # HF has no static NTK type: the same frequencies are the default type with a new base
        new_base = base * factor ** (head_dim / (head_dim - 2))
        hf["rope_parameters"] = {"rope_type": "default", "rope_theta": new_base}
        gguf["{arch}.rope.freq_base"] = new_base
        flags += ["--rope-freq-base", f"{new_base:.10g}"]
    elif method == "dynamic":  # HF measures lengths against max_position_embeddings: it stays L₀
        hf = {"max_position_embeddings": original_max_len,
              "rope_parameters": {"rope_type": "dynamic", "rope_theta": base, "factor": factor}}
        gguf = {"note": "llama.cpp has no dynamic NTK: it is a per-length base, not a file setting"}
        flags = []
    elif method == "yarn":
        hf["rope_parameters"] = {"rope_type": "yarn", "rope_theta": base, "factor": factor,
                                 "original_max_position_embeddings": original_max_len}
        gguf |= {"{arch}.rope.scaling.type": "yarn", "{arch}.rope.scaling.factor": factor,
                 "{arch}.rope.scaling.original_context_length": original_max_len}
        flags += ["--rope-scaling", "yarn", "--rope-scale", f"{factor:g}", "--yarn-orig-ctx", str(original_max_len)]
    elif method == "llama3":
        hf["rope_parameters"] = {"rope_type": "llama3", "rope_theta": base, "factor": factor, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": original_max_len}
        gguf = {"{arch}.context_length": target_len, "{arch}.rope.freq_base": base,
                "note": "llama.cpp stores Llama 3 scaling as per-pair factors in the tensor rope_freqs.weight "
                        "(written by convert_hf_to_gguf.py from the HF block), not as metadata keys"}
        flags = ["--ctx-size", str(target_len)]
    block = dict(hf["rope_parameters"])
    config = {"model_type": "llama", "head_dim": head_dim, "hidden_size": head_dim, "num_attention_heads": 1,
              "max_position_embeddings": hf["max_position_embeddings"], "rope_parameters": block}
    name, options, _ = derive(block, config, "all")
    return {"method": method, "factor": factor, "original_max_len": original_max_len, "target_len": target_len,
            "hf_config": hf, "gguf_metadata": gguf, "llama_cpp_flags": flags,
            "posenc": {"scheme": name, "options": options}}
