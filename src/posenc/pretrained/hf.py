"""HF-layout Llama-family checkpoints → posenc's LlamaLM.

Three steps, each usable alone:

1. ``llama_config_from_hf(config.json dict)`` — the architecture and the RoPE
   block (``rope_scaling`` of transformers 4 or ``rope_parameters`` of
   transformers 5, ``rope_theta``, ``partial_rotary_factor``) → a
   ``LlamaConfig`` naming the matching posenc scheme and its options.
   Unsupported model types, activations, sliding-window layouts and RoPE
   types are refused by name.
2. ``load_llama_weights(model, names, read)`` — fill a model built on the
   ``meta`` device tensor by tensor: each checkpoint tensor is read, its q/k
   rows converted to the model's RoPE pairing, cast and placed, and only then
   is the next one read — never two full copies of the weights in memory.
3. ``load_hf_folder(path)`` — both of the above for a folder with
   ``config.json``, ``*.safetensors`` (single or sharded, headers validated,
   pickle refused; see ``posenc.formats.safetensors``) and ``tokenizer.json``.

HF stores q/k projection rows for the *half* pairing (``rotate_half``); posenc's
fast rotary kernel is the *interleaved* one, so by default the rows are
permuted once here (``convert_qk_weight``) — the attention scores, and so the
logits, are unchanged (``tests/pretrained`` checks both pairings against HF).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc.formats import CheckpointError, load_checkpoint
from posenc.families.hf_config import HFConfig
from posenc.formats.finite import check_finite
from posenc.models.llama import LlamaConfig, LlamaLM, build_llama
from posenc.positions import convert_qk_weight
from posenc.validation import regular_file

#: config.json ``model_type`` values posenc runs (SmolLM, TinyLlama, Llama 2/3 all say "llama").
MODEL_TYPES = ("llama", "mistral", "qwen2")
#: HF rope_type → posenc scheme.
ROPE_TYPES = {"default": "rope", "linear": "rope-linear", "dynamic": "rope-dynamic-ntk", "yarn": "rope-yarn",
              "llama3": "rope-llama3", "longrope": "rope-longrope"}
PAIRINGS = ("interleaved", "half")


def _rope_block(hf: dict[str, Any]) -> dict[str, Any]:
    """The RoPE parameters of a config.json in one dict (transformers 4 and 5 layouts)."""
    block = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if not isinstance(block, dict):
        raise ValueError(f"config.json: rope_scaling/rope_parameters must be an object, got {block!r}")
    if any(isinstance(v, dict) for v in block.values()):
        raise ValueError("config.json: RoPE parameters per layer type (nested rope_parameters) are not supported; "
                         "posenc runs one RoPE for every layer")
    block = dict(block)
    block.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    if "partial_rotary_factor" in hf:
        block.setdefault("partial_rotary_factor", hf["partial_rotary_factor"])
    block["rope_type"] = block.get("rope_type") or block.get("type") or "default"
    return block


def rope_from_hf(hf: dict[str, Any], *, head_dim: int, pairing: str = "interleaved") -> tuple[str, dict[str, Any]]:
    """(posenc scheme name, options) for a config.json's RoPE block.

    Raises:
        ValueError: a RoPE type posenc lacks (named, with the supported list).
    """
    block = _rope_block(hf)
    rope_type = block["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"config.json: RoPE type {rope_type!r} is not supported by posenc; "
                         f"supported: {', '.join(ROPE_TYPES)}")
    rotary_dim = int(head_dim * float(block.get("partial_rotary_factor", 1.0)))
    options: dict[str, Any] = {"base": float(block["rope_theta"]), "pairing": pairing}
    if rotary_dim != head_dim:
        options["rotary_dim"] = rotary_dim
    max_pos = int(hf.get("max_position_embeddings", 2048))
    original = int(block.get("original_max_position_embeddings") or max_pos)
    if rope_type == "linear":
        options["factor"] = float(block["factor"])
    elif rope_type == "dynamic":  # HF's dynamic type measures lengths against max_position_embeddings
        options |= {"factor": float(block["factor"]), "original_max_len": max_pos}
    elif rope_type == "yarn":
        factor = block.get("factor") or max_pos / original
        options |= {"factor": float(factor), "original_max_len": original,
                    "beta_fast": float(block.get("beta_fast") or 32), "beta_slow": float(block.get("beta_slow") or 1),
                    "attention_factor": block.get("attention_factor"), "mscale": block.get("mscale"),
                    "mscale_all_dim": block.get("mscale_all_dim"), "truncate": bool(block.get("truncate", True))}
    elif rope_type == "llama3":
        options |= {"factor": float(block["factor"]), "low_freq_factor": float(block["low_freq_factor"]),
                     "high_freq_factor": float(block["high_freq_factor"]), "original_max_len": original}
    elif rope_type == "longrope":
        factor = block.get("factor") or max_pos / original
        options |= {"short_factor": list(block["short_factor"]), "long_factor": list(block["long_factor"]),
                    "factor": float(factor), "original_max_len": original,
                    "attention_factor": block.get("attention_factor")}
    return ROPE_TYPES[rope_type], options


def _sliding_window(hf: dict[str, Any]) -> int | None:
    model_type, window = hf["model_type"], hf.get("sliding_window")
    if model_type == "qwen2":
        if hf.get("use_sliding_window"):
            raise ValueError("config.json: Qwen2 with use_sliding_window=true (sliding attention in some layers "
                             "only) is not supported; posenc runs full attention in every layer")
        return None
    if window is None or window >= hf.get("max_position_embeddings", 0):
        return None  # the window never binds
    return int(window)


def llama_config_from_hf(hf: dict[str, Any], *, pairing: str = "interleaved") -> LlamaConfig:
    """A LlamaConfig from an HF ``config.json`` dict of model type llama, mistral or qwen2.

    Args:
        pairing: the RoPE pairing the posenc model will use ("interleaved" = the
            fast kernel; the loader converts q/k rows to it).

    Raises:
        ValueError: an unsupported model type, activation, sliding-window layout or RoPE type.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; posenc runs the Llama family: "
                         f"{', '.join(MODEL_TYPES)} (SmolLM and TinyLlama are 'llama')")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json: hidden_act {act!r} is not supported; Llama-family SwiGLU uses 'silu'")
    try:
        dim, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        head_dim = int(hf.get("head_dim") or dim // heads)
        name, options = rope_from_hf(hf, head_dim=head_dim, pairing=pairing)
        return LlamaConfig(
            vocab_size=int(hf["vocab_size"]), dim=dim, num_layers=int(hf["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=head_dim if head_dim * heads != dim else None,
            ffn_dim=int(hf["intermediate_size"]), norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            position=name, position_options=options,
            max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
            qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
            out_bias=model_type != "qwen2" and bool(hf.get("attention_bias", False)),
            ffn_bias=bool(hf.get("mlp_bias", False)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            sliding_window=_sliding_window(hf),
        )
    except KeyError as err:
        raise ValueError(f"config.json: missing key {err.args[0]!r}, which a {model_type} config must have") from None


# -- weights -------------------------------------------------------------------------

#: HF parameter names (after "model.layers.N.") → posenc's, inside one block.
_BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.o_proj.weight": "attn.out_proj.weight",
    "self_attn.o_proj.bias": "attn.out_proj.bias",
    **{f"self_attn.{p}_proj.{w}": f"attn.{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")},
    **{f"mlp.{p}_proj.{w}": f"ffn.{p}_proj.{w}" for p in ("gate", "up", "down") for w in ("weight", "bias")},
}
_TOP_NAMES = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight",
              "lm_head.weight": "head.weight"}
#: Tensors some checkpoints carry that are recomputed, not learned.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def posenc_name(hf_name: str) -> str | None:
    """posenc's parameter name for an HF Llama parameter name, or None if it is not one."""
    if hf_name in _TOP_NAMES:
        return _TOP_NAMES[hf_name]
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and parts[3] in _BLOCK_NAMES:
        return f"layers.{parts[2]}.{_BLOCK_NAMES[parts[3]]}"
    return None


def _to_pairing(name: str, t: Tensor, cfg: LlamaConfig, source_pairing: str) -> Tensor:
    """q/k projection rows (weight or bias) from the checkpoint's pairing to the model's."""
    pairing = cfg.position_options.get("pairing", "half")
    if pairing == source_pairing or not name.endswith(("attn.q_proj.weight", "attn.q_proj.bias",
                                                       "attn.k_proj.weight", "attn.k_proj.bias")):
        return t
    heads = cfg.num_heads if ".q_proj." in name else cfg.kv_heads
    rows = t if t.dim() == 2 else t[:, None]  # a bias is one column of rows
    out = convert_qk_weight(rows, num_heads=heads, head_dim=cfg.attention_head_dim, source=source_pairing,
                            target=pairing, rotary_dim=cfg.position_options.get("rotary_dim"))
    return out if t.dim() == 2 else out[:, 0]


def load_llama_weights(model: LlamaLM, tensors: Iterable[tuple[str, Tensor]], *, source: str,
                       dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                       source_pairing: str = "half") -> LlamaLM:
    """Fill a model built with ``build_llama(config, device="meta")`` from HF-named tensors, one at a time.

    Args:
        tensors: (HF name, tensor) pairs, best produced lazily (a generator reading one
            tensor per step), so that only one checkpoint tensor is in memory at a time.
        source: the file or folder, for error messages.
        source_pairing: the RoPE pairing of the q/k rows as given — "half" for HF
            checkpoints, "interleaved" for GGUF rows kept in llama.cpp's order.

    Raises:
        CheckpointError: an unknown, missing or wrongly shaped tensor — naming it, ``source`` and the fix.
    """
    cfg = model.config
    expected = {n: p for n, p in model.named_parameters(remove_duplicate=True)}
    filled: set[str] = set()
    for hf_name, tensor in tensors:
        name = posenc_name(hf_name)
        if hf_name.endswith(_IGNORED_SUFFIXES) or (name == "head.weight" and cfg.tie_embeddings):
            continue  # recomputed buffers; a tied head saved anyway is the token table again
        if name is None or name not in expected:
            raise CheckpointError(f"{source}: tensor {hf_name!r} has no place in this model (config says "
                                  f"{cfg.num_layers} layers, qkv_bias={cfg.qkv_bias}, ffn_bias={cfg.ffn_bias}, "
                                  f"tie_embeddings={cfg.tie_embeddings}); are the config and the weights from the "
                                  "same model?")
        want = tuple(expected[name].shape)
        if tuple(tensor.shape) != want:
            raise CheckpointError(f"{source}: tensor {hf_name!r} has shape {tuple(tensor.shape)}, the config implies "
                                  f"{want}; config.json and the weights disagree — use the files of one model")
        check_finite(hf_name, tensor, source=source, dtype=dtype)  # NaN/inf weights named here, not as nan output
        tensor = _to_pairing(name, tensor.to(dtype), cfg, source_pairing).to(device)
        module_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(module_name), attr, nn.Parameter(tensor, requires_grad=False))
        filled.add(name)
        del tensor
    missing = sorted(set(expected) - filled)
    if missing:
        raise CheckpointError(f"{source}: missing tensor(s) {missing[:5]}{' …' if len(missing) > 5 else ''} "
                              f"({len(missing)} in all); the checkpoint is incomplete — download every file")
    if model.head.tied:
        model.head.weight = model.embed.weight  # the head shares the table just loaded
    return model.to(device)  # the position scheme's own buffers, if any


def load_hf_folder(path: str | Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                   pairing: str = "interleaved") -> tuple[LlamaLM, dict[str, Any]]:
    """(model, config.json dict) from an HF model folder; see the module docstring.

    Raises:
        FileNotFoundError: no folder, or no config.json in it.
        CheckpointError / ValueError: what ``load_checkpoint``, ``llama_config_from_hf``
            and ``load_llama_weights`` refuse.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a model folder (expected config.json + *.safetensors)")
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder}: no config.json; a model folder needs config.json next to its "
                                ".safetensors weights (download it from the model's repository)")
    config_path = regular_file(folder / "config.json", "config.json")
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_path}: not valid JSON ({err})") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{config_path}: not UTF-8 text ({err.reason} at byte {err.start}); "
                         "use the config.json that came with the weights") from None
    HFConfig(hf, source=str(config_path))  # a JSON object, not a list or a number
    config = llama_config_from_hf(hf, pairing=pairing)
    ckpt = load_checkpoint(folder)
    model = build_llama(config, device="meta")
    tensors = ((name, ckpt.tensor(name)) for name in ckpt.names())  # read one at a time, as loaded
    load_llama_weights(model, tensors, source=str(folder), dtype=dtype, device=device)
    return model.eval(), hf
