"""What a model's config says its RoPE is, checked against float64 and against HF's own functions.

``audit(config)`` takes an HF ``config.json`` dict of any ``model_type`` (or the
dict ``gguf_config`` makes from a GGUF file's metadata) and returns plain data,
per layer type: the posenc scheme and options the RoPE block derives, the
inverse frequencies θ_i and wavelengths 2π/θ_i against the trained length L₀
(how many pairs turn fully inside L₀ — the quantity YaRN's ramp is built on),
the attention factor, the angle and cos/sin error at chosen positions when an
engine forms p·θ and cos/sin in float32, bf16 or fp16 (positions held in that
dtype too) instead of float64, and — where ``transformers`` is installed —
whether HF's own ``ROPE_INIT_FUNCTIONS`` give the same θ and attention factor.
Anything wrong or surprising is a *finding* with its numbers: a disagreement
with HF, a ``rope_theta`` the config does not give (HF then falls back to its
class's ``default_theta``), a YaRN attention factor below 1 (``mscale`` and
``mscale_all_dim`` swapped), a factor that does not match the lengths,
positions a low-precision dtype cannot hold.

``calculator(method, original_max_len, target_len, ...)`` goes the other way:
the HF config block and the GGUF / llama.cpp settings that extend L₀ to a
target length with a method.

The command ``posenc rope`` prints these (``posenc.commands.rope``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from posenc.families.hf_config import HFConfig
from posenc.families.rope import ROPE_TYPES, rope_blocks, rope_scheme
from posenc.positions import build, lookup
from posenc.positions.temperature import Llama4QueryScale

#: Positions the precision table uses unless asked otherwise: L₀ − 1, 4·L₀ and 2¹⁷ − 1 are added per model.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Relative difference between posenc's float64 θ and HF's float32 θ that counts as the same (float32 rounding).
SAME_THETA = 1e-5


# -- reading --------------------------------------------------------------------------------------------------------
def read_source(path: str | Path) -> tuple[dict[str, Any], str]:
    """(HF-style config dict, kind) of a config.json, a folder holding one, or a GGUF file."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (give a config.json, a model folder or a .gguf file)")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return gguf_config(path), "gguf"
    from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json

    config = read_json(path, limit=MAX_CONFIG_BYTES)  # not JSON (nor a GGUF): refused naming the file
    if not isinstance(config, dict):
        raise ValueError(f"{path}: config.json must be a JSON object, got {type(config).__name__}")
    return config, "hf"


def gguf_config(path: Path) -> dict[str, Any]:
    """An HF-style dict of a GGUF file's RoPE metadata, for any architecture (``{arch}.rope.*`` keys)."""
    from posenc.formats.gguf import open_gguf, read_metadata

    meta = read_metadata(open_gguf(path))
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: GGUF metadata has no general.architecture")
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
    heads = int(get("attention.head_count", 1))
    hidden = int(get("embedding_length", 0))
    head_dim = int(get("attention.key_length", hidden // heads if heads else 0))
    rope_dim = int(get("rope.dimension_count", head_dim))
    config: dict[str, Any] = {"model_type": f"gguf:{arch}", "num_attention_heads": heads, "hidden_size": hidden,
                              "head_dim": head_dim, "max_position_embeddings": int(get("context_length", 2048)),
                              "num_hidden_layers": int(get("block_count", 0)), "_gguf_keys": {}}
    if rope_dim != head_dim and head_dim:
        config["partial_rotary_factor"] = rope_dim / head_dim
    if get("rope.freq_base") is not None:
        config["rope_theta"] = float(get("rope.freq_base"))
    block: dict[str, Any] = {}
    kind = get("rope.scaling.type")
    factor = get("rope.scaling.factor", get("rope.scale_linear"))
    if kind not in (None, "none"):
        block = {"rope_type": str(kind), "factor": None if factor is None else float(factor)}
        original = get("rope.scaling.original_context_length")
        if original is not None:
            block["original_max_position_embeddings"] = int(original)
        for key, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if get(f"rope.scaling.{key}") is not None:
                block[hf] = float(get(f"rope.scaling.{key}"))
        extra = get("rope.scaling.attn_factor")
        if extra is not None:
            from posenc.formats.gguf import llama_cpp_attention_factor

            block["attention_factor"] = llama_cpp_attention_factor(kind, factor, extra)
    if block:
        config["rope_scaling"] = block
    if get("rope.freq_base_swa") is not None:  # Gemma 3-style files: sliding layers have their own base
        config["rope_local_base_freq"] = float(get("rope.freq_base_swa"))
    config["_gguf_keys"] = {k: v for k, v in meta.items() if k.startswith(f"{arch}.rope") or k.endswith("context_length")}
    return config


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
        plan = getattr(model, "plan", ())  # a decoder's layer plan (LlamaConfig.plan); an encoder has one scheme
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
    hf = hf_config(config) if config.get("model_type") not in (None, "llama") else None
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


def head_width(config: dict[str, Any], layer_type: str | None) -> int:
    """The width RoPE sees: DeepSeek's qk_rope_head_dim, Gemma 4's global head width, head_dim, or D/H."""
    if config.get("qk_rope_head_dim"):
        return int(config["qk_rope_head_dim"])
    if layer_type == "full_attention" and config.get("global_head_dim"):
        return int(config["global_head_dim"])
    if config.get("head_dim"):
        return int(config["head_dim"])
    heads = int(config.get("num_attention_heads") or 1)
    return int(config.get("hidden_size", 0)) // heads


def layer_blocks(config: dict[str, Any], findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{layer type: RoPE block}; a config without types gives one type, "all"."""
    c = HFConfig({k: v for k, v in config.items() if not k.startswith("_")}, source="config")
    blocks = rope_blocks(c)
    if None in blocks and config.get("rope_local_base_freq") is not None:  # Gemma 3 (transformers 4), GGUF swa
        blocks = {"full_attention": blocks[None],
                  "sliding_attention": {"rope_type": "default", "rope_theta": float(config["rope_local_base_freq"])}}
    raw = config.get("rope_parameters") or config.get("rope_scaling") or {}
    nested = isinstance(raw, dict) and any(isinstance(v, dict) for v in raw.values())
    for layer_type, block in blocks.items():
        given = (raw.get(layer_type) if nested else raw) or {}
        if "rope_theta" not in given and "rope_theta" not in config and "rope_local_base_freq" not in config:
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
    max_pos = int(config.get("max_position_embeddings") or 2048)
    block = dict(block)
    if block.get("rope_type") == "dynamic" and block.get("alpha"):  # HunYuan: a fixed NTK-α, labelled dynamic
        options = {"base": float(block["rope_theta"]), "pairing": "half", "factor": float(block["alpha"])}
        return "rope-ntk", options, head_dim
    if block.get("mrope_section") is not None:
        interleaved = bool(block.get("mrope_interleaved")) or str(config.get("model_type", "")).startswith("qwen3")
        options = {"base": float(block["rope_theta"]), "pairing": "half",
                   "sections": [int(s) for s in block["mrope_section"]],
                   "layout": "interleaved" if interleaved else "sections"}
        rotary = int(head_dim * float(block.get("partial_rotary_factor", 1.0)))
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


# -- HF's own functions -------------------------------------------------------------------------------------------
def hf_config(config: dict[str, Any]) -> Any:
    """transformers' config object for this model type (None: transformers absent or the type unknown)."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return None
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type.startswith("gguf:"):
        model_type = "llama"  # a GGUF's RoPE keys read as a Llama config: HF's functions see the same numbers
    clean = {k: v for k, v in config.items() if not k.startswith("_") and k != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **clean)
    except Exception:  # noqa: BLE001 - any model type transformers does not know, or a config it refuses
        return None


def hf_frequencies(cfg: Any, block: dict[str, Any], layer_type: str, head_dim: int) -> tuple[torch.Tensor, float, str]:
    """(θ, attention factor, what computed it) from HF: ``ROPE_INIT_FUNCTIONS[rope_type]``, or HF's default
    formula 1/base^(2i/R) for the default type (each model's ``compute_default_rope_parameters``)."""
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


# -- the audit ----------------------------------------------------------------------------------------------------
def original_length(options: dict[str, Any], config: dict[str, Any]) -> int:
    return int(options.get("original_max_len") or config.get("original_max_position_embeddings")
               or config.get("max_position_embeddings") or 2048)


def audit(config: dict[str, Any], *, positions: list[int] | None = None, hf_check: bool = True,
          source: str = "config.json") -> dict[str, Any]:
    """Everything ``posenc rope`` prints, as plain data (see the module docstring).

    Raises:
        ValueError: the model has no rotary positions (naming the scheme it has), rather than an audit of a RoPE
            it does not use.
    """
    scheme = not_rotary(config)
    if scheme is not None:
        raise ValueError(f"{source}: this model ({config.get('model_type')}) has no rotary positions — its positions "
                         f"are {scheme}; posenc rope audits RoPE only (`posenc inspect` measures other position "
                         "tables)")
    findings: list[dict[str, Any]] = []
    blocks = layer_blocks(config, findings)
    counts = _layer_counts(config, blocks)
    cfg = hf_config(config) if hf_check else None
    out: dict[str, Any] = {"source": source, "model_type": config.get("model_type"),
                           "max_position_embeddings": config.get("max_position_embeddings"), "layer_types": [],
                           "findings": findings, "hf_checked": cfg is not None}
    for layer_type, block in blocks.items():
        name, options, head_dim = derive(block, config, layer_type)
        scheme = build(name, dim=head_dim, num_heads=1, **{k: v for k, v in options.items() if v is not None})
        theta = scheme.inv_freq().double()
        factor = float(scheme.attention_factor)
        original = original_length(options, config)
        asked = positions if positions is not None else sorted({original - 1, 4 * original, 2**17 - 1})
        entry: dict[str, Any] = {"layer_type": layer_type, "layers": counts.get(layer_type), "rope_type":
                                 block.get("rope_type"), "scheme": name, "options": options, "head_dim": head_dim,
                                 "original_max_len": original, "attention_factor": factor,
                                 **frequency_table(theta, original), "precision": precision(theta, asked, factor)}
        _yarn_findings(block, options, config, layer_type, findings)
        _precision_findings(entry, layer_type, findings)
        if cfg is not None and name != "mrope":
            entry["hf"] = _hf_compare(cfg, block, layer_type, head_dim, theta, factor, findings)
        out["layer_types"].append(entry)
    nope = _nope_layers(config)
    if nope:
        out["layer_types"].append(nope)
    return out


def _layer_counts(config: dict[str, Any], blocks: dict[str, Any]) -> dict[str, int]:
    types = config.get("layer_types")
    layers = int(config.get("num_hidden_layers") or 0)
    if isinstance(types, list) and set(blocks) <= set(types):
        return {t: types.count(t) for t in blocks}
    if list(blocks) == ["all"]:
        return {"all": layers - len(_nope_indices(config))}
    if set(blocks) == {"full_attention", "sliding_attention"} and layers:  # Gemma 3 without layer_types
        pattern = int(config.get("sliding_window_pattern") or 6)
        full = sum((i + 1) % pattern == 0 for i in range(layers))
        return {"full_attention": full, "sliding_attention": layers - full}
    return {}


def _nope_indices(config: dict[str, Any]) -> list[int]:
    flags = config.get("no_rope_layers")  # Llama 4 / SmolLM3: 1 = RoPE, 0 = NoPE
    return [i for i, f in enumerate(flags) if not f] if isinstance(flags, list) else []


def _nope_layers(config: dict[str, Any]) -> dict[str, Any] | None:
    indices = _nope_indices(config)
    if not indices:
        return None
    entry: dict[str, Any] = {"layer_type": "nope", "layers": len(indices), "scheme": "none", "options": {},
                             "layer_indices": indices}
    if config.get("attn_temperature_tuning"):
        scale = Llama4QueryScale(floor_scale=int(config.get("floor_scale", 8192)),
                                 attn_scale=float(config.get("attn_scale", 0.1)))
        probe = [0, scale.floor_scale - 1, 4 * scale.floor_scale, 2**17 - 1]
        entry["temperature"] = {"kind": "llama4", "floor_scale": scale.floor_scale, "attn_scale": scale.attn_scale,
                                "factor_at": dict(zip(probe, scale.factor(torch.tensor(probe)).tolist()))}
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


def _hf_compare(cfg: Any, block: dict[str, Any], layer_type: str, head_dim: int, theta: torch.Tensor, factor: float,
                findings: list[dict[str, Any]]) -> dict[str, Any]:
    try:
        ref, ref_factor, how = hf_frequencies(cfg, block, layer_type, head_dim)
    except Exception as err:  # noqa: BLE001 - HF's function refused the config: that is itself a finding
        findings.append(finding("warning", layer_type, f"HF's RoPE function failed on this config: "
                                f"{type(err).__name__}: {err}"))
        return {"computed_by": None, "error": f"{type(err).__name__}: {err}"}
    out: dict[str, Any] = {"computed_by": how, "attention_factor": ref_factor}
    if ref.shape != theta.shape:
        out["same"] = False
        findings.append(finding("error", layer_type, f"HF ({how}) gives {ref.numel()} frequencies, posenc "
                                f"{theta.numel()}", {"hf": ref.numel(), "posenc": theta.numel()}))
        return out
    scale = theta.abs().clamp(min=1e-300)
    rel = float(((ref - theta).abs() / scale).max()) if theta.numel() else 0.0
    same_factor = math.isclose(ref_factor, factor, rel_tol=1e-9, abs_tol=1e-12)
    out |= {"max_rel_diff": rel, "same": rel <= SAME_THETA and same_factor}
    if rel > SAME_THETA:
        worst = int(((ref - theta).abs() / scale).argmax())
        findings.append(finding("error", layer_type, f"inv_freq differs from HF ({how}): max relative difference "
                        f"{rel:.3g} at pair {worst} (posenc {float(theta[worst]):.9g}, HF {float(ref[worst]):.9g})",
                        {"pair": worst, "posenc": float(theta[worst]), "hf": float(ref[worst]), "max_rel_diff": rel}))
    if not same_factor:
        findings.append(finding("error", layer_type, f"attention factor differs from HF ({how}): posenc {factor:.9g}, "
                        f"HF {ref_factor:.9g}", {"posenc": factor, "hf": ref_factor}))
    return out


# -- the calculator -------------------------------------------------------------------------------------------------
CALC_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")


def calculator(method: str, *, original_max_len: int, target_len: int, base: float = 10000.0,
               head_dim: int = 128) -> dict[str, Any]:
    """The HF config block, GGUF metadata and llama.cpp flags that extend L₀ to ``target_len`` with ``method``.

    Raises:
        ValueError: an unknown method, or lengths that do not extend (target ≤ L₀).
    """
    if method not in CALC_METHODS:
        raise ValueError(f"--calc {method!r}: choose one of {', '.join(CALC_METHODS)} (LongRoPE needs searched "
                         "per-pair factors, which no calculator can give)")
    if not 0 < original_max_len < target_len:
        raise ValueError(f"the target length {target_len} must exceed the original length {original_max_len} (> 0)")
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
