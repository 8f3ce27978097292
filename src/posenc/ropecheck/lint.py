"""A linter for a model's RoPE config: the readings engines keep getting wrong, flagged in the file itself.

``lint(config, gguf=None, hf_source=None)`` → findings ``{"rule", "severity", "layer_type", "message",
"numbers"}``. Rules (``RULES``):

- ``factor-vs-context``: ``factor × original_max_position_embeddings`` is not ``max_position_embeddings``
  (for dynamic NTK the reverse: HF measures lengths against ``max_position_embeddings``, which must stay L₀);
- ``scaling-on-sliding-layers``: a scaling block attached to sliding-window layers (Gemma 3's linear factor
  belongs to the global layers only);
- ``mscale-attention-factor``: ``mscale``/``mscale_all_dim`` or an explicit ``attention_factor`` that make
  YaRN's attention factor differ from 0.1·ln(factor) + 1 — what an engine that ignores them computes instead;
- ``longrope-switch-in-prompts``: LongRoPE's short/long switch (L₀) lies inside the context users will send;
- ``rope-blocks-disagree``: ``rope_scaling`` and ``rope_parameters`` both present and disagreeing;
- ``gguf-rope-keys``: a GGUF's ``{arch}.rope.*`` keys do not say what its HF source said (YaRN keys missing).

The pairing of q/k weights against the declared convention needs the weights and a tokenizer; it is not
checked here (see docs/rope.md, "Not done").
"""

from __future__ import annotations

import math
from typing import Any

RULES = ("factor-vs-context", "scaling-on-sliding-layers", "mscale-attention-factor", "longrope-switch-in-prompts",
         "rope-blocks-disagree", "gguf-rope-keys")
SCALED = ("linear", "yarn", "llama3", "dynamic", "longrope")


def _f(rule: str, severity: str, layer_type: str | None, message: str, **numbers: Any) -> dict[str, Any]:
    return {"rule": rule, "severity": severity, "layer_type": layer_type, "message": message, "numbers": numbers}


def blocks(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{layer type or "all": the RoPE block} as written (rope_parameters first, else rope_scaling)."""
    raw = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(raw, dict):
        return {}
    if any(isinstance(v, dict) for v in raw.values()):
        return {k: v for k, v in raw.items() if isinstance(v, dict)}
    return {"all": raw}


def _type(block: dict[str, Any]) -> str:
    return str(block.get("rope_type") or block.get("type") or "default")


def _mscale(factor: float, m: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def lint(config: dict[str, Any], *, gguf: dict[str, Any] | None = None,
         hf_source: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The findings for one config (and, given both, a GGUF's metadata against its HF source config)."""
    out: list[dict[str, Any]] = []
    max_pos = config.get("max_position_embeddings")
    for layer_type, block in blocks(config).items():
        kind = _type(block)
        factor = block.get("factor")
        original = block.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
        if kind in ("linear", "yarn", "llama3") and isinstance(factor, (int, float)) and original and max_pos:
            if abs(factor * original - max_pos) > 0.5:
                out.append(_f("factor-vs-context", "warning", layer_type,
                              f"{kind} factor × original_max_position_embeddings = {factor:g} × {original} = "
                              f"{factor * original:g}, but max_position_embeddings = {max_pos}: engines that size "
                              "their context (or YaRN's ramp) from one of the two disagree with those that use the "
                              "other", factor=factor, original=original, max_position_embeddings=max_pos))
        if kind == "dynamic" and isinstance(factor, (int, float)) and original and max_pos \
                and abs(factor * original - max_pos) <= 0.5 and factor > 1:
            out.append(_f("factor-vs-context", "warning", layer_type,
                          f"dynamic NTK with max_position_embeddings = factor × L₀ = {max_pos}: HF measures lengths "
                          f"against max_position_embeddings, so the scaling starts only past {max_pos}, not past "
                          f"L₀ = {original}", factor=factor, original=original, max_position_embeddings=max_pos))
        if layer_type == "sliding_attention" and kind != "default":
            out.append(_f("scaling-on-sliding-layers", "warning", layer_type,
                          f"{kind} scaling (factor {factor}) on the sliding-window layers: Gemma 3's scaling belongs "
                          "to the global (full_attention) layers only — a sliding layer never sees positions past its "
                          "window", rope_type=kind, factor=factor))
        if kind == "yarn" and isinstance(factor, (int, float)) and factor > 1:
            default = _mscale(factor)
            m, mad, explicit = block.get("mscale"), block.get("mscale_all_dim"), block.get("attention_factor")
            if explicit is not None:
                actual = float(explicit)
                how = f"the explicit attention_factor {actual:g}"
            elif m and mad:
                actual = _mscale(factor, m) / _mscale(factor, mad)
                how = f"mscale = {m:g}, mscale_all_dim = {mad:g}: {actual:.6g}"
            else:
                actual = default
                how = ""
            if how and not math.isclose(actual, default, rel_tol=1e-9):
                out.append(_f("mscale-attention-factor", "info", layer_type,
                              f"YaRN attention factor from {how}; an engine that ignores mscale/mscale_all_dim or "
                              f"drops attention_factor (vLLM's generic YaRN, mlx-lm) computes 0.1·ln({factor:g}) + 1 = "
                              f"{default:.6g} — {abs(default / actual - 1):.1%} off on every cos/sin, "
                              f"{abs((default / actual) ** 2 - 1):.1%} on the logits", attention_factor=actual,
                              default=default))
            if m is not None and m == mad and explicit is None and m != 1:
                out.append(_f("mscale-attention-factor", "info", layer_type,
                              f"mscale = mscale_all_dim = {m:g}: the attention factor is exactly 1 (DeepSeek puts "
                              "its scale in the softmax instead)", mscale=m))
        if kind == "longrope":
            L = original
            if L and max_pos and L < max_pos:
                out.append(_f("longrope-switch-in-prompts", "warning", layer_type,
                              f"LongRoPE switches from short to long factors at L₀ = {L}, inside the "
                              f"{max_pos}-token context: a prompt of more than {L} tokens rotates every key with the "
                              f"long factors, a shorter one decoded past {L} keeps short-factor keys in its cache — "
                              "engines disagree on which (per position, per sequence, or at the wrong boundary)",
                              original=L, max_position_embeddings=max_pos))
    out += _both_blocks(config)
    if gguf is not None and hf_source is not None:
        out += gguf_rules(gguf, hf_source)
    return out


_SAME_KEYS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
              "attention_factor", "low_freq_factor", "high_freq_factor", "rope_theta")


def _both_blocks(config: dict[str, Any]) -> list[dict[str, Any]]:
    old, new = config.get("rope_scaling"), config.get("rope_parameters")
    if not (isinstance(old, dict) and isinstance(new, dict)) or any(isinstance(v, dict) for v in new.values()):
        return []
    differ = {}
    if _type(old) != _type(new):
        differ["rope_type"] = (_type(old), _type(new))
    for k in _SAME_KEYS:
        if k in old and k in new and old[k] != new[k]:
            differ[k] = (old[k], new[k])
    if "rope_theta" in new and "rope_theta" in config and new["rope_theta"] != config["rope_theta"]:
        differ["rope_theta (top level)"] = (config["rope_theta"], new["rope_theta"])
    if not differ:
        return []
    said = "; ".join(f"{k}: rope_scaling {a!r}, rope_parameters {b!r}" for k, (a, b) in differ.items())
    return [_f("rope-blocks-disagree", "error", None, f"rope_scaling and rope_parameters disagree ({said}): "
               "transformers 5 reads rope_parameters, code written for transformers 4 (and mlx-lm) rope_scaling",
               differ={k: list(v) for k, v in differ.items()})]


def _meta(gguf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    plain = {k: getattr(v, "value", v) for k, v in gguf.items()}
    return str(plain.get("general.architecture", "llama")), plain


def gguf_rules(gguf: dict[str, Any], hf_source: dict[str, Any]) -> list[dict[str, Any]]:
    """A GGUF's rope keys against the HF config it was converted from."""
    arch, meta = _meta(gguf)
    hf_blocks = blocks(hf_source)
    block = hf_blocks.get("all") or hf_blocks.get("full_attention") or {}
    theta = block.get("rope_theta", hf_source.get("rope_theta"))
    expect: dict[str, Any] = {f"{arch}.rope.freq_base": theta,
                              f"{arch}.context_length": hf_source.get("max_position_embeddings")}
    kind = _type(block)
    if kind in ("linear", "yarn"):
        expect[f"{arch}.rope.scaling.type"] = kind
        expect[f"{arch}.rope.scaling.factor"] = block.get("factor")
    if kind == "yarn":
        expect[f"{arch}.rope.scaling.original_context_length"] = block.get("original_max_position_embeddings")
    out = []
    missing, wrong = [], []
    for key, want in expect.items():
        if want is None:
            continue
        if key not in meta:
            missing.append(key)
        elif isinstance(want, (int, float)) and not isinstance(want, bool):
            if not math.isclose(float(meta[key]), float(want), rel_tol=1e-6):
                wrong.append((key, meta[key], want))
        elif str(meta[key]) != str(want):
            wrong.append((key, meta[key], want))
    if missing:
        yarn = any(".scaling." in k for k in missing)
        out.append(_f("gguf-rope-keys", "error", None, f"the GGUF lacks {', '.join(missing)}, which its HF source "
                      f"states ({kind}{' scaling' if kind != 'default' else ''})" + (
                          ": llama.cpp will run it unscaled (YaRN keys dropped by the converter)" if yarn else ""),
                      missing=missing))
    for key, got, want in wrong:
        out.append(_f("gguf-rope-keys", "error", None, f"{key} = {got} in the GGUF, {want} in its HF source",
                      key=key, gguf=got, hf=want))
    return out
