"""HF-layout checkpoints of every family posenc runs → posenc's decoder (``Decoder``).

Three steps, each usable alone:

1. ``llama_config_from_hf(config.json dict)`` — the family's reader
   (``posenc.families``, by ``model_type``) turns the architecture, the RoPE
   settings and the layer plan into a ``DecoderConfig``. Unsupported model
   types, activations, layouts and RoPE types are refused by name.
2. ``load_llama_weights(model, names, read)`` — fill a model built on the
   ``meta`` device tensor by tensor: each checkpoint tensor is read, renamed by
   its family (fused ones split), its q/k rows converted to the layer's RoPE
   pairing, cast and placed, and only then
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

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc.families import config_from_hf, family_named
from posenc.formats import CheckpointError, load_checkpoint
from posenc.families.hf_config import HFConfig
from posenc.formats.finite import check_finite
from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json
from posenc.models.decoder import DecoderConfig, Decoder, build_decoder
from posenc.positions import convert_qk_weight

PAIRINGS = ("interleaved", "half")


def llama_config_from_hf(hf: dict[str, Any], *, pairing: str = "interleaved",
                         source: str = "config.json") -> DecoderConfig:
    """A ``DecoderConfig`` from an HF ``config.json`` dict of any family posenc runs (``posenc.families``).

    Args:
        pairing: the RoPE pairing the posenc model will use ("interleaved" = the
            fast kernel; the loader converts q/k rows to it).

    Raises:
        ValueError: an unsupported model type, activation, layout or RoPE type; a field of
            the wrong type or out of bounds (naming it).
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return config_from_hf(hf, pairing=pairing, source=source)


#: Tensors some checkpoints carry that are recomputed, not learned.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _to_pairing(name: str, t: Tensor, model: Decoder, source_pairing: str) -> Tensor:
    """q/k projection rows (weight or bias) from the checkpoint's pairing to the layer's.

    A layer without rotation (NoPE, a bias scheme) keeps the rows as stored; so does
    a QK-norm gain, which is per coordinate and so must move with the rows: it is
    permuted too (``attn.q_norm.weight``). Head counts and widths are the layer's own
    attention's (Gemma 4's global layers are wider than its sliding ones).
    """
    if not name.endswith(("attn.q_proj.weight", "attn.q_proj.bias", "attn.k_proj.weight", "attn.k_proj.bias",
                          "attn.q_norm.weight", "attn.k_norm.weight")):
        return t
    index = int(name.split(".")[1])
    spec = model.config.plan[index]
    pairing = spec.position_options.get("pairing")
    if pairing is None or pairing == source_pairing:
        return t
    attn = model.layers[index].attn
    norm = name.endswith("_norm.weight")
    heads = 1 if norm else attn.num_heads if ".q_proj." in name else attn.num_kv_heads
    rows = t if t.dim() == 2 else t[:, None]  # a bias (or a QK-norm gain) is one column of rows
    out = convert_qk_weight(rows, num_heads=heads, head_dim=attn.head_dim, source=source_pairing,
                            target=pairing, rotary_dim=spec.position_options.get("rotary_dim"))
    return out if t.dim() == 2 else out[:, 0]


def load_llama_weights(model: Decoder, tensors: Iterable[tuple[str, Tensor]], *, source: str,
                       dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                       source_pairing: str | None = None) -> Decoder:
    """Fill a model built with ``build_decoder(config, device="meta")`` from HF-named tensors, one at a time.

    Args:
        tensors: (HF name, tensor) pairs, best produced lazily (a generator reading one
            tensor per step), so that only one checkpoint tensor is in memory at a time.
        source: the file or folder, for error messages.
        source_pairing: the RoPE pairing of the q/k rows as given — default the
            family's HF layout ("half" for most), "interleaved" for GGUF rows kept in llama.cpp's order.

    Raises:
        CheckpointError: an unknown, missing or wrongly shaped tensor — naming it, ``source`` and the fix.
    """
    cfg = model.config
    family = family_named(cfg.family)
    source_pairing = family.hf_pairing if source_pairing is None else source_pairing
    expected = {n: p for n, p in model.named_parameters(remove_duplicate=True)}
    filled: set[str] = set()
    for hf_name, stored in tensors:
        fused = family.posenc_name(hf_name)
        if hf_name.endswith(_IGNORED_SUFFIXES) or (fused == "head.weight" and cfg.tie_embeddings):
            continue  # recomputed buffers; a tied head saved anyway is the token table again
        if fused is None:
            raise CheckpointError(f"{source}: tensor {hf_name!r} has no place in this {family.name}-family model "
                                  f"(config says {cfg.num_layers} layers, qkv_bias={cfg.qkv_bias}, "
                                  f"ffn_bias={cfg.ffn_bias}, tie_embeddings={cfg.tie_embeddings}); are the config "
                                  "and the weights from the same model?")
        for name, tensor in family.tensors(fused, stored, cfg):
            if name not in expected:
                raise CheckpointError(f"{source}: tensor {hf_name!r} (posenc {name!r}) has no place in this model "
                                      f"(config says {cfg.num_layers} layers, qkv_bias={cfg.qkv_bias}, "
                                      f"ffn_bias={cfg.ffn_bias}, tie_embeddings={cfg.tie_embeddings}); are the "
                                      "config and the weights from the same model?")
            want = tuple(expected[name].shape)
            if tuple(tensor.shape) != want:
                raise CheckpointError(f"{source}: tensor {hf_name!r} has shape {tuple(tensor.shape)}, the config "
                                      f"implies {want}; config.json and the weights disagree — use the files of one "
                                      "model")
            check_finite(hf_name, tensor, source=source, dtype=dtype)  # NaN/inf weights named here, not as nan output
            tensor = _to_pairing(name, tensor.to(dtype), model, source_pairing).to(device)
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
                   pairing: str = "interleaved", hf: dict[str, Any] | None = None) -> tuple[Decoder, dict[str, Any]]:
    """(model, config.json dict) from an HF model folder; see the module docstring.

    ``hf``: config.json as already read (``posenc.pretrained.description``); None reads it here.

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
    config_path = folder / "config.json"
    if hf is None:
        hf = read_json(config_path, limit=MAX_CONFIG_BYTES)  # bounded: a 200 MB config.json is refused unread
    HFConfig(hf, source=str(config_path))  # a JSON object, not a list or a number
    from posenc.pretrained.stacks import is_stack_family, load_stack_folder

    if is_stack_family(hf):  # an encoder or encoder–decoder family: its own builder (posenc.pretrained.stacks)
        return load_stack_folder(folder, hf, dtype=dtype, device=device)
    config = llama_config_from_hf(hf, pairing=pairing, source=str(config_path))
    ckpt = load_checkpoint(folder)
    model = build_decoder(config, device="meta")
    from posenc.progress import counted

    names = ckpt.names()
    tensors = counted(((name, ckpt.tensor(name)) for name in names), len(names), "loading weights")  # one at a time
    load_llama_weights(model, tensors, source=str(folder), dtype=dtype, device=device)
    return model.eval(), hf
