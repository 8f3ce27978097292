"""How a checkpoint's weights are held in memory: ``--weights as-stored | dequantised | int8 | int4``.

- ``as-stored`` (default for GGUF files): the file is memory-mapped and its
  quantised blocks stay as they are. Projections and the output head stored in
  a group type (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q8_0; and Q6_K, 16 values per
  scale, where posenc's kernel is built) become
  ``posenc.models.quant.QuantLinear`` (integers repacked once for posenc's own
  decoding kernel, ``posenc.kernels``: 4-bit values two to a byte,
  5–8-bit values one to a byte, the scales as stored; where that kernel is not
  built, for PyTorch's int4 CPU kernel, 5–8-bit values as two 4-bit planes;
  ``posenc inspect`` and ``Pretrained.stored`` say which); a token table in one of
  those types is looked up row by row from the map (``QuantEmbedding``,
  exact). Every other tensor — norms (F32), and projections in the types with
  16-value sub-blocks and a minimum or 2–3-bit values (Q2_K, Q3_K; Q6_K without
  posenc's kernel) or in F16 / BF16 — is dequantised to
  the activation dtype (``--dtype``), as ``dequantised`` does. For an HF
  folder, ``as-stored`` is ``dequantised``: its float tensors cast to ``--dtype``.
- ``dequantised``: every tensor dequantised (or cast) to ``--dtype``: the
  float32 reference the other choices are measured against.
- ``int8`` / ``int4``: the float weights (of any checkpoint) quantised at load
  time, weight-only: every projection and the output head — int8 per output
  row (``_weight_int8pack_mm``) or int4 per 32 inputs, min/max asymmetric
  (posenc's kernel, else ``_weight_int4pack_mm_for_cpu``). The token table stays float.

The as-stored and int8/int4 kernels are CPU-only (``--device cpu``).
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

#: The choices of ``--weights`` (and ``load_pretrained(weights=...)``).
WEIGHTS = ("as-stored", "dequantised", "int8", "int4")


def check_weights(weights: str | None, *, gguf: bool, device: str | torch.device) -> str:
    """The weights mode for a checkpoint: None → as-stored for GGUF, dequantised otherwise; CPU-only checked."""
    if weights is None:
        weights = "as-stored" if gguf else "dequantised"
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {list(WEIGHTS)}, got {weights!r}")
    if not gguf and weights == "as-stored":
        weights = "dequantised"
    if weights != "dequantised" and torch.device(device).type != "cpu":
        raise ValueError(f"--weights {weights} runs on PyTorch's CPU weight-only kernels; on {device} use "
                         "--weights dequantised")
    return weights


def _stored_nibbles(raw: Tensor, kind: str) -> tuple[Tensor, Tensor, Tensor]:
    """Q4_0 / Q4_1 blocks → (nibbles (N, K/2) uint8, scale, minimum (N, K/32)) in posenc's kernel layout, read
    off the blocks: their 16 bytes per group already hold values j and j + 16 in one byte, the kernel's order
    (no decode to one byte per value and back; equal to ``kernels.pack`` of :func:`_groups`' values)."""
    from posenc.formats.gguf import BLOCK_BYTES, fp16_field

    n = raw.shape[0]
    b = raw.reshape(n, -1, BLOCK_BYTES[kind][0])  # (N, G, bytes)
    d = fp16_field(b, 0)
    minimum = fp16_field(b, 2) if kind == "Q4_1" else d * -8.0
    at = 2 if kind == "Q4_0" else 4
    return b[..., at : at + 16].reshape(n, -1), d, minimum


#: Stored bytes decoded at a time while a tensor is put into the kernel's layout: the decode's temporaries
#: (a uint8 value per weight, float32 scales, int16 for Q8_0) stay a few times this, whatever the tensor's size.
PACK_CHUNK_BYTES = 8 << 20


def _kernel_layout(raw: Tensor, kind: str, order: Tensor | None = None, tensor: Any = None
                   ) -> tuple[Tensor, Tensor, int]:
    """Stored blocks (rows in ``order``) → (weight, scales, bits) in posenc's kernel layout
    (``GroupQuant.kernel_layout``), decoded :data:`PACK_CHUNK_BYTES` of
    blocks at a time into the final buffer: loading Gemma 3's 262,144 × 640 Q8_0 token table as its tied head
    peaked at ≈ 840 MB of temporaries when decoded whole. ``tensor``: the file's tensor whose map ``raw`` views;
    each chunk's pages are unmapped once copied (``formats.gguf.release_pages``), so that the map and the copy
    are never both resident (rows in an ``order``: all pages at the end)."""
    from posenc import kernels
    from posenc.formats.gguf import release_pages

    n = raw.shape[0]
    step = max(1, PACK_CHUNK_BYTES // max(1, raw.shape[1]))
    weight, scales, bits = None, [], 0
    for start in range(0, n, step):
        rows = raw[start : start + step] if order is None else raw[order[start : start + step]]
        if kind in ("Q4_0", "Q4_1"):  # the blocks' bytes are already the kernel's nibble order
            w, scale, minimum = _stored_nibbles(rows, kind)
            bits, s = 4, kernels.pack_scales(scale, minimum)
        else:
            gq = _groups(rows, kind)
            bits, (w, s) = gq.bits, gq.kernel_layout()
        if weight is None:
            weight = torch.empty(n, w.shape[1], dtype=w.dtype)
        weight[start : start + len(w)] = w
        scales.append(s)
        if tensor is not None and order is None:
            release_pages(tensor, start * raw.shape[1], (start + step) * raw.shape[1])
    if tensor is not None:
        release_pages(tensor)
    if len({s.dtype for s in scales}) > 1:  # a chunk needed float32 bits (not every pair is a float16): all do
        scales = [s.view(torch.float16).float().view(torch.int32) if s.dtype == torch.int16 else s for s in scales]
    assert weight is not None
    return weight, torch.cat(scales), bits


def _groups(raw: Tensor, kind: str):
    from posenc.formats.gguf import decode_groups
    from posenc.models.quant import GroupQuant

    q, scale, minimum, bits = decode_groups(raw, kind)
    return GroupQuant(q, scale, minimum, bits, q.shape[1] // scale.shape[1])  # groups of 32 (16: Q6_K)


def _row_order(name: str, model, source_pairing: str) -> Tensor | None:
    """The row permutation ``hf._to_pairing`` applies to this q/k weight (None: rows stay as stored)."""
    from posenc.pretrained.hf import _to_pairing

    if not name.endswith(("attn.q_proj.weight", "attn.k_proj.weight")):
        return None
    rows = model.get_submodule(name.removesuffix(".weight")).out_features  # the layer's own heads × width
    index = torch.arange(rows, dtype=torch.float64)[:, None]
    order = _to_pairing(name, index, model, source_pairing)[:, 0].long()
    return None if torch.equal(order, torch.arange(len(order))) else order


@contextlib.contextmanager
def _meta_init():
    """Skip ``nn.init.normal_`` on meta tensors while a model is built on the meta device.

    Nothing is initialised on meta anyway, but ``normal_`` has no C++ meta kernel: its Python
    decomposition imports ``torch._dynamo``, which alone took 1–6 s of a load here.
    """
    original = nn.init.normal_

    def normal_(tensor: Tensor, *args, **kwargs) -> Tensor:
        return tensor if tensor.is_meta else original(tensor, *args, **kwargs)

    nn.init.normal_ = normal_
    try:
        yield
    finally:
        nn.init.normal_ = original


def _install(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, attr = name.removesuffix(".weight").rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


def load_gguf_as_stored(path: Path, *, dtype: torch.dtype, pairing: str, mapped: Any = None,
                        hf_config: dict[str, Any] | None = None, tokenizer: Any = None) -> dict[str, Any]:
    """A GGUF file with its group-quantised blocks kept (see the module docstring).

    ``mapped``: the file's ``posenc.formats.gguf.open_mapped`` result when the caller already has it (its
    header walk is half of a load's file reading); None opens the file here. ``hf_config`` and ``tokenizer``:
    the file's config and tokenizer as already read (``posenc.pretrained.description``); None reads them here.

    Returns:
        {"model", "config", "hf_config", "tokenizer" (posenc Tokenizer), "stored" (posenc name → how held)}.
    """
    from posenc.formats.gguf import (BLOCK_BYTES, GROUP16_TYPES, GROUP_TYPES, config_of, index_tensors, load_tensor,
                                     open_mapped, raw_blocks, release_map, release_pages, stored_pairing,
                                     type_name)
    from posenc.families import family_named
    from posenc.models.decoder import build_decoder
    from posenc import kernels
    from posenc.models.quant import QuantEmbedding, QuantHead, QuantLinear
    from posenc.pretrained.hf import llama_config_from_hf, load_llama_weights
    from posenc.pretrained.tokenizer import gguf_tokenizer

    if mapped is None or Path(mapped.path) != Path(path):
        mapped = open_mapped(path)  # memory-mapped: tensor data is read where it lies, when it is used
    meta = mapped.metadata
    # with Llama 3.1's rope_freqs tensor read into rope_scaling
    hf = config_of(mapped, meta, path) if hf_config is None else dict(hf_config)
    found = index_tensors(mapped, path, hf)
    hf["tie_word_embeddings"] = "lm_head.weight" not in found
    cfg = llama_config_from_hf(hf, pairing=pairing, source=str(path))
    with _meta_init():
        model = build_decoder(cfg, device="meta")
    family = family_named(cfg.family)
    source_pairing = stored_pairing(hf, keep_interleaved=True)  # llama.cpp's q/k row order (llama: interleaved)
    stored: dict[str, str] = {}
    rest: list[tuple[str, Any]] = []
    for hf_name, t in found.items():
        kind, name = type_name(t), family.posenc_name(hf_name)
        if kind not in GROUP_TYPES and (kind not in GROUP16_TYPES or kernels.load() is None):
            rest.append((hf_name, t))
            continue
        raw = raw_blocks(t)
        if name == "embed.weight":
            model.embed = QuantEmbedding(stored=raw, decode=partial(_groups, kind=kind), dim=cfg.dim, kind=kind,
                                         dtype=dtype)
            if cfg.tie_embeddings:
                exact = partial(_groups, raw, kind)
                if kernels.load() is not None:
                    ql = QuantLinear(in_features=cfg.dim, out_features=raw.shape[0], exact=exact, stored=kind,
                                     packed=_kernel_layout(raw, kind, tensor=t))
                else:
                    ql = QuantLinear.from_groups(model.embed.groups(), exact=exact, stored=kind)
                model.head = QuantHead.of(ql, tied=True)
            release_pages(t)  # lookups map back just the rows they read
            stored[name] = f"{kind} blocks (memory map)"
            continue
        module = model.head if name == "head.weight" else model.get_submodule(name.removesuffix(".weight"))
        if not isinstance(module, nn.Linear) and name != "head.weight":
            rest.append((hf_name, t))
            continue
        order = _row_order(name, model, source_pairing)
        # a bias (Qwen2's q/k/v) stays a float tensor: a placeholder here, filled (rows ordered) with the rest below
        bias = None if getattr(module, "bias", None) is None else torch.empty(module.out_features, device="meta")
        if order is None:
            exact = partial(_groups, raw, kind)
        else:
            exact = lambda raw=raw, kind=kind, order=order: _groups(raw, kind).take_rows(order)  # noqa: E731
        if kernels.load() is not None:
            size, per = BLOCK_BYTES[kind]
            ql = QuantLinear(in_features=raw.shape[1] // size * per, out_features=raw.shape[0],
                             packed=_kernel_layout(raw, kind, order, tensor=t), bias=bias, exact=exact,
                             stored=kind)  # the blocks now live in the kernel's layout: ``exact`` maps them back
        else:
            gq = _groups(raw, kind)
            ql = QuantLinear.from_groups(gq if order is None else gq.take_rows(order), bias=bias, exact=exact,
                                         stored=kind)
        _install(model, name, QuantHead.of(ql, tied=False) if name == "head.weight" else ql)
        stored[name] = f"{kind} → {ql.describe_kernel()}"
    tensors = ((n, load_tensor(t, n, hf, path, keep_interleaved=True)) for n, t in rest)
    for n, t in rest:
        stored[family.posenc_name(n)] = f"{type_name(t)} → {str(dtype).removeprefix('torch.')}"
    load_llama_weights(model, tensors, source=str(path), dtype=dtype, device="cpu", source_pairing=source_pairing)
    release_map(mapped)  # what the small reads mapped around them (whole folios, with a cold page cache)
    return {"model": model.eval(), "config": cfg, "hf_config": hf,
            "tokenizer": gguf_tokenizer(meta, path) if tokenizer is None else tokenizer, "stored": stored}


def quantise_model(model: nn.Module, bits: int) -> dict[str, str]:
    """Replace every projection ``nn.Linear`` and the output head by a weight-only int8 / int4 QuantLinear.

    Returns:
        posenc module name → how it is held.
    """
    from posenc.embedding import OutputHead
    from posenc.models.quant import QuantHead, QuantLinear, quantise_groups

    def make(weight: Tensor, bias: Tensor | None) -> QuantLinear:
        if bits == 8:
            return QuantLinear.from_int8_rows(weight.detach(), bias=None if bias is None else bias.detach())
        return QuantLinear.from_groups(quantise_groups(weight.detach(), bits=4),
                                       bias=None if bias is None else bias.detach(), stored="int4/32 (quantised)")

    done: dict[str, str] = {}
    for name, module in list(model.named_modules()):
        if type(module) is nn.Linear and module.weight.shape[0] % 16 == 0:
            _install(model, name, make(module.weight, module.bias))
            done[name] = f"int{bits}"
    head = getattr(model, "head", None)
    if isinstance(head, OutputHead) and head.vocab_size % 16 == 0:
        model.head = QuantHead.of(make(head.weight, head.bias), tied=head.tied)
        done["head"] = f"int{bits}"
    return done


def share_quantised(source: nn.Module, target: nn.Module) -> nn.Module:
    """Put ``source``'s quantised modules (same names) into ``target``, shared, not copied.

    For a model rebuilt from ``source``'s config (``posenc.extend.methods.build_variant``): its fresh
    ``nn.Linear`` / embedding / head modules give way to the quantised ones, so that
    ``target.load_state_dict(source.state_dict())`` finds the same keys.
    """
    from posenc.models.quant import QuantEmbedding, QuantLinear

    for name, module in source.named_modules():
        if isinstance(module, (QuantLinear, QuantEmbedding)):
            _install(target, name, module)
    return target


#: The sentence ``logit_error`` scores.
PROBE = "The capital of France is Paris. Rotary position embeddings rotate queries and keys by their position."


def logit_error(pm, path: str | Path, *, dtype: torch.dtype = torch.float32, pairing: str = "interleaved",
                text: str = PROBE) -> dict[str, float]:
    """Logits of ``pm`` against the same checkpoint loaded ``dequantised`` (float32), on ``text``.

    Returns:
        {"max_abs": max |Δlogit|, "top1": share of positions with the same most likely token, "tokens": n}.
    """
    from posenc.pretrained import load_pretrained

    ref = load_pretrained(path, dtype=torch.float32, pairing=pairing, weights="dequantised")
    ids = torch.tensor([pm.tokenizer.encode(text)])
    with torch.no_grad():
        a, b = pm.model(ids).float(), ref.model(ids)
    return {"max_abs": float((a - b).abs().max()), "top1": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
            "tokens": int(ids.shape[1])}
