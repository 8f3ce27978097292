"""Reading a llama.cpp GGUF file: HF-style config, dequantised tensors in HF layout, and its tokenizer.

>>> from posenc.formats.gguf import read_gguf                     # doctest: +SKIP
>>> ckpt = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")             # doctest: +SKIP
>>> ckpt.hf_config["num_key_value_heads"], ckpt.tokenizer.encode("Hello").ids   # doctest: +SKIP
(3, [19556])

A GGUF file (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) holds
key/value metadata (the model's shape under llama.cpp's key names, and the
tokenizer's vocabulary, merges and special ids) followed by tensors, each in
one GGML type: float (F32, F16, BF16) or block-quantised (Q8_0, Q4_1, Q4_K,
...). It is read with the ``gguf`` package that llama.cpp itself publishes
(``GGUFReader``, memory-mapped) and dequantised with that package's numpy
dequantisers, one tensor at a time. Nothing is unpickled.

What differs from a Hugging Face checkpoint is undone here:

- names: ``blk.N.attn_q.weight`` → ``model.layers.N.self_attn.q_proj.weight``
  and so on, per architecture (``posenc.formats.gguf_arch``);
- shapes: GGUF lists dimensions fastest-first (``[in, out]``); the numpy view
  the reader gives is already ``(out, in)``, the ``nn.Linear`` layout;
- q/k row order (``llama`` architecture only): llama.cpp's converter
  (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) reorders each head's q
  and k projection rows from HF's half pairing (rotate coordinate i with
  i + d/2) into the interleaved pairing its kernels use (rotate 2i with
  2i + 1). :func:`read_gguf` undoes it by default (``pairing="half"``, the rows
  exactly as HF stores them); with ``keep_interleaved=True`` the rows stay as
  stored and a model must rotate with posenc's interleaved pairing — both
  compute the same attention scores. qwen2, qwen3 and gemma3 rows are stored
  as HF's and run by llama.cpp's NeoX-mode (half-pairing) kernel;
- Gemma's norm gains, stored as 1 + w;
- Llama 3.1's ``rope_freqs`` tensor, read back into a llama3-type ``rope_scaling``.

What loads (``general.architecture``; tensors in one of :data:`SUPPORTED_TYPES`):

- ``llama`` with full rotary and RoPE scaling none / linear / yarn / ``rope_freqs``
  (llama3): SmolLM / SmolLM2 (checked against HF on the real SmolLM2-135M-Instruct
  Q4_1), Llama 2 / 3 / 3.1 / 3.2, TinyLlama, Mistral v0.1–v0.3 (the SentencePiece
  ones through ``gguf_tokenizer``'s SPM builder; not tried on real files);
- ``qwen2`` (q/k/v biases), ``qwen3`` (QK-norm), with partial rotary where a file has it;
- ``gemma3`` (text): Gemma 3 270M–27B, checked against HF on the real Gemma 3 270M Q4_K_M.

Tokenizers: byte-level BPE (``tokenizer.ggml.model == "gpt2"``) with a
``tokenizer.ggml.pre`` of ``posenc.formats.gguf_tokenizer.PRE_TOKENIZERS``, and
SentencePiece (``"llama"``: Gemma, Llama 2, TinyLlama, Mistral v0.1–v0.3).

Refused, each with an error naming the file and the key or tensor: other
architectures; a pre-tokenizer not in the list (e.g. Mistral's ``tekken``);
partial rotary under ``llama`` (the converter's permutation spans the whole
head, see ``gguf_arch``); ``rope_freqs`` factors that do not follow Llama 3's
bands; RoPE scaling types other than linear and yarn; other GGML types; llama
tensors with biases.

The models refused here load from their HF folders (``posenc.pretrained.hf``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from posenc.formats.gguf_header import check_header, check_values
from posenc.formats.gguf_error import GGUFError
from posenc.formats.gguf_arch import ARCHS, ROPE_FREQS, arch_named, arch_of, layer_shapes, llama3_scaling_from_factors
from posenc.formats.safetensors import Checkpoint, CheckpointError, TensorEntry
from posenc.positions.rotary import convert_qk_weight

#: Architectures (``general.architecture``) read by :func:`read_gguf` (``posenc.formats.gguf_arch``).
SUPPORTED_ARCHS = tuple(sorted(ARCHS))
#: GGML tensor types dequantised (with the ``gguf`` package's own numpy dequantisers).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
#: GGUF tensor name → HF name for the tensors outside the blocks.
TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
#: ``blk.N.<key>`` → ``model.layers.N.<value>`` for the ``llama`` architecture (the others: ``gguf_arch.ARCHS``).
LAYER_NAMES = ARCHS["llama"].layer_names
#: Values dequantised per call (a large table is decoded in row chunks of about this size).
DEQUANT_CHUNK = 1 << 20
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")
_BAD = "the file is corrupt or was not written by llama.cpp's converter; download or convert it again"


@dataclass
class GGUFCheckpoint:
    """What :func:`read_gguf` returns.

    Attributes:
        path: the file read.
        hf_config: the model's settings under HF ``config.json`` keys (``model_type`` "llama").
        tensors: HF name → float tensor in HF layout (``nn.Linear`` weights ``(out, in)``).
        pairing: "half" (q/k rows un-permuted, as HF stores them) or "interleaved" (as llama.cpp stores them).
        tokenizer: a ``tokenizers.Tokenizer`` built from the file's metadata.
        chat_template, bos_id, eos_id, pad_id, unk_id, add_bos_token: from the metadata (None when absent).
        tensor_types: HF name → the GGML type it was stored in ("Q4_1", "F32", ...).
        metadata: every scalar metadata value (arrays left out), by GGUF key.
    """

    path: Path
    hf_config: dict[str, Any]
    tensors: dict[str, Tensor]
    pairing: str
    tokenizer: Any
    chat_template: str | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    unk_id: int | None = None
    add_bos_token: bool = False
    tensor_types: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


# -- opening ------------------------------------------------------------------------------------------------------
def _gguf():
    from posenc.checks import require

    return require("gguf", "reading .gguf files")


def _reader_class():
    """``gguf.GGUFReader`` reading metadata arrays in one piece.

    The package's reader parses every element of an array as its own memory-mapped
    view; a 262,144-piece vocabulary (Gemma 3) is then three arrays of 262,144 — about
    a minute and a half to open on a loaded machine. This subclass maps an array of
    numbers as one view and walks an array of strings in a flat loop; the fields it
    builds read the same through ``ReaderField.contents()`` (tests/pretrained/test_gguf_arch.py).
    Files of the other byte order take the package's own path.
    """
    gguf = _gguf()
    global _FAST_READER
    if _FAST_READER is not None:
        return _FAST_READER

    class Reader(gguf.GGUFReader):
        def _get_field_parts(self, orig_offs, raw_type):
            kind = gguf.GGUFValueType(raw_type)
            if kind != gguf.GGUFValueType.ARRAY or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)
            item_type = self._get(orig_offs, np.uint32)
            count = self._get(orig_offs + 4, np.uint64)
            offs, item, n = orig_offs + 12, gguf.GGUFValueType(int(item_type[0])), int(count[0])
            numeric = self.gguf_scalar_to_np.get(item)
            if numeric is not None:
                values = self._get(offs, numeric, n)
                if len(values) != n:
                    raise ValueError(f"array of {n} values runs past the end of the file")
                return 12 + int(values.nbytes), [item_type, count, values], [2] if n else [], [kind, item]
            if item != gguf.GGUFValueType.STRING:
                return super()._get_field_parts(orig_offs, raw_type)
            parts, data, raw = [item_type, count], [], self.data
            for _ in range(n):  # (u64 length, bytes) pairs, as the package stores them
                length = raw[offs:offs + 8].view(np.uint64)
                size = int(length[0])
                parts += [length, raw[offs + 8:offs + 8 + size]]
                data.append(len(parts) - 1)
                offs += 8 + size
            return offs - orig_offs, parts, data, [kind, item]

    _FAST_READER = Reader
    return Reader


_FAST_READER = None


def open_gguf(path: str | Path):
    """A memory-mapped ``gguf.GGUFReader`` over ``path``, with a clear error for a file that is not one.

    Raises:
        FileNotFoundError: nothing at ``path``.
        GGUFError: not a GGUF file (wrong magic), truncated, or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (it starts with {magic!r}, a GGUF file starts with b'GGUF'). "
                        "Point posenc at a .gguf file written by llama.cpp or the gguf package")
    check_header(path)  # every count, length and shape bounded by the file and the memory budget first
    reader_cls = _reader_class()
    try:
        reader = reader_cls(str(path), "r")
    except (ValueError, IndexError, KeyError, OSError, UnicodeDecodeError, OverflowError) as err:
        raise GGUFError(f"{path}: cannot be read as GGUF ({type(err).__name__}: {err}) — the file is truncated or "
                        "corrupt. Download it again") from None
    size = path.stat().st_size
    for t in reader.tensors:  # the reader maps lazily; a short file shows as a tensor running past the end
        if t.data_offset + t.n_bytes > size:
            raise GGUFError(f"{path}: tensor {t.name!r} ends at byte {t.data_offset + t.n_bytes} but the file has "
                            f"{size} bytes — the file is truncated. Download it again")
    return reader


def read_metadata(reader) -> dict[str, Any]:
    """Every metadata value by key (arrays as lists; the ``GGUF.*`` header fields left out)."""
    out: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        out[key] = f.contents()
    return out


# -- config ---------------------------------------------------------------------------------------------------------
def _need(meta: dict[str, Any], key: str, path: Path) -> Any:
    if key not in meta:
        raise GGUFError(f"{path}: metadata key {key!r} is missing; the file was not written by a llama.cpp converter "
                        "for this architecture. Re-convert it with llama.cpp's convert_hf_to_gguf.py")
    return meta[key]


def llama_cpp_attention_factor(kind: str | None, factor: float | None, key: float) -> float:
    """The whole attention factor llama.cpp puts on the rotation for ``{arch}.rope.scaling.attn_factor`` = key:
    the key alone, except under YaRN, where llama.cpp applies 0.1·ln s + 1 itself and the key multiplies it
    (llama-context.cpp: ``yarn_attn_factor *= rope_attn_factor``)."""
    from posenc.positions.rotary_scaling import yarn_mscale

    return float(key) * (yarn_mscale(float(factor)) if kind == "yarn" and factor is not None else 1.0)


def _rope_scaling(meta: dict[str, Any], arch: str, path: Path) -> dict[str, Any] | None:
    """HF ``rope_scaling`` from llama.cpp's ``{arch}.rope.scaling.*`` keys (None when unscaled)."""
    kind = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor", meta.get(f"{arch}.rope.scale_linear"))
    if kind is None and factor is not None:
        kind = "linear"  # older files: only rope.scale_linear
    if kind in (None, "none") or factor in (None, 1.0) and kind == "linear":
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    if kind == "yarn":
        out: dict[str, Any] = {"rope_type": "yarn", "factor": float(factor)}
        original = meta.get(f"{arch}.rope.scaling.original_context_length")
        if original is not None:
            out["original_max_position_embeddings"] = int(original)
        for key, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            value = meta.get(f"{arch}.rope.scaling.{key}")
            if value is not None:
                out[hf] = float(value)
        extra = meta.get(f"{arch}.rope.scaling.attn_factor")
        if extra is not None and float(extra) != 1.0:
            out["attention_factor"] = llama_cpp_attention_factor(kind, factor, extra)
        return out
    raise GGUFError(f"{path}: RoPE scaling type {kind!r} ({arch}.rope.scaling.type) is not supported; "
                    "supported: none, linear, yarn")


def _float32(value: float) -> float:
    """A float32 metadata value as the decimal it was written from (1e-05, not 9.999999747378752e-06)."""
    return float(repr(np.float32(value)).removeprefix("np.float32(").removesuffix(")"))


def config_from_metadata(meta: dict[str, Any], path: Path, *, vocab_size: int | None = None,
                         rope_freqs: np.ndarray | None = None) -> dict[str, Any]:
    """The HF ``config.json`` dict of a GGUF file of any architecture in :data:`SUPPORTED_ARCHS`.

    Args:
        rope_freqs: the file's ``rope_freqs.weight`` (Llama 3.1's per-pair RoPE factors), if it has one.
    """
    check_values(meta, path)  # every model key typed and bounded, even in metadata built in memory
    arch = arch_named(_need(meta, "general.architecture", path), path)
    key = lambda name: _need(meta, f"{arch.name}.{name}", path)  # noqa: E731
    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    kv_heads = int(meta.get(f"{arch.name}.attention.head_count_kv", heads))
    head_dim = int(meta.get(f"{arch.name}.attention.key_length", hidden // heads))
    rope_dim = int(meta.get(f"{arch.name}.rope.dimension_count", head_dim))
    if head_dim < 2 or rope_dim > head_dim or rope_dim % 2:
        raise GGUFError(f"{path}: the head width {head_dim} ({arch.name}.attention.key_length, or embedding_length / "
                        f"attention.head_count) and rope.dimension_count {rope_dim} must be an even count of "
                        f"rotated channels within a head of at least 2 — {_BAD}")
    if rope_dim != head_dim and not arch.partial_rotary:
        raise GGUFError(f"{path}: {arch.name}.rope.dimension_count = {rope_dim} but the head width is {head_dim}; "
                        "partial rotary llama files are not supported: llama.cpp's converter permutes the rows of "
                        "the whole head while its kernel rotates only the first rope.dimension_count channels, so "
                        "the stored rows do not compute the HF model. Load the model's HF folder instead")
    vocab = meta.get(f"{arch.name}.vocab_size", vocab_size)
    if vocab is None:
        tokens = meta.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if tokens is not None else None
    if vocab is None:
        raise GGUFError(f"{path}: neither {arch.name}.vocab_size nor a tokenizer vocabulary gives the vocabulary size")
    config: dict[str, Any] = {
        "model_type": arch.model_type,
        "architectures": [arch.hf_class],
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": _float32(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": _float32(meta.get(f"{arch.name}.rope.freq_base", 10000.0)),  # llama.cpp's default when absent
        "max_position_embeddings": int(key("context_length")),
        "vocab_size": int(vocab),
    }
    if rope_dim != head_dim:
        config["partial_rotary_factor"] = rope_dim / head_dim
    scaling = _rope_scaling(meta, arch.name, path)
    if rope_freqs is not None:
        from_factors = llama3_scaling_from_factors(rope_freqs, base=config["rope_theta"], rotary_dim=rope_dim,
                                                   path=path)
        if from_factors is not None and scaling is not None:
            raise GGUFError(f"{path}: the file states RoPE scaling twice ({arch.name}.rope.scaling.type = "
                            f"{scaling['rope_type']!r} and a {ROPE_FREQS!r} tensor); the file is inconsistent. "
                            "Re-convert it")
        scaling = from_factors or scaling
    if scaling is not None:
        config["rope_scaling"] = scaling
    config.update(arch.settings(meta, path, config))
    for gguf_key, hf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("padding_token_id", "pad_token_id")):
        if f"tokenizer.ggml.{gguf_key}" in meta:
            config[hf_key] = int(meta[f"tokenizer.ggml.{gguf_key}"])
    return config


def hf_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The HF name of a GGUF tensor name in architecture ``arch``, or None for a name outside its layout."""
    if gguf_name in TOP_NAMES:
        return TOP_NAMES[gguf_name]
    m = _BLOCK.match(gguf_name)
    names = ARCHS[arch].layer_names
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}"
    return None


def expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF name → shape of every tensor a checkpoint with this config holds (head included).

    Biases are listed for the architectures that have them (``qwen2``); :func:`index_tensors`
    requires every listed tensor but the head.
    """
    d, v = config["hidden_size"], config["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,),
                                          "lm_head.weight": (v, d)}
    per_layer = layer_shapes(config)
    for i in range(config["num_hidden_layers"]):
        shapes.update({f"model.layers.{i}.{k}": s for k, s in per_layer.items()})
    return shapes


def rope_freqs_of(reader, path: Path) -> np.ndarray | None:
    """The ``rope_freqs.weight`` tensor (Llama 3.1's per-pair RoPE factors) as float64, or None."""
    for t in reader.tensors:
        if t.name == ROPE_FREQS:
            return dequantize(t, path).astype(np.float64).reshape(-1)
    return None


def config_of(reader, meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """:func:`config_from_metadata` with the file's ``rope_freqs`` tensor, if any."""
    return config_from_metadata(meta, path, rope_freqs=rope_freqs_of(reader, path))


# -- tensors --------------------------------------------------------------------------------------------------------
def type_name(t) -> str:
    return t.tensor_type.name


def tensor_shape(t) -> tuple[int, ...]:
    """HF shape of a reader tensor: GGUF's dimensions (fastest first) reversed."""
    return tuple(int(n) for n in reversed(t.shape.tolist()))


def dequantize(t, path: Path) -> np.ndarray:
    """One reader tensor as a float32 array of its HF shape (refusing types posenc does not dequantise)."""
    kind = type_name(t)
    if kind not in SUPPORTED_TYPES:
        raise GGUFError(f"{path}: tensor {t.name!r} is stored as {kind}, which posenc does not dequantise; "
                        f"supported: {', '.join(SUPPORTED_TYPES)}. Use a file quantised to one of those "
                        "(e.g. Q8_0 or Q4_K_M)")
    shape = tensor_shape(t)
    if kind == "F32":
        return np.array(t.data, dtype=np.float32).reshape(shape)  # a copy out of the memory map
    data = t.data.reshape(shape[0], -1) if len(shape) > 1 else t.data.reshape(1, -1)  # whole blocks per row
    out = np.empty((data.shape[0], shape[-1]), dtype=np.float32)
    step = max(1, DEQUANT_CHUNK // shape[-1])
    for i in range(0, data.shape[0], step):  # row chunks: the dequantiser's temporaries stay small
        out[i : i + step] = _gguf().quants.dequantize(data[i : i + step], t.tensor_type)
    return out.reshape(shape)


def index_tensors(reader, path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """HF name → reader tensor, after checking every name and shape against ``config`` (nothing is read).

    ``rope_freqs.weight`` is not listed: :func:`config_of` has read it into ``rope_scaling``.

    Raises:
        GGUFError: a tensor outside the architecture's layout, a shape the metadata contradicts, or missing tensors.
    """
    arch = arch_of(config)
    want = expected_shapes(config)
    found: dict[str, Any] = {}
    for t in reader.tensors:
        if t.name == ROPE_FREQS and arch.name == "llama":
            continue
        name = hf_name(t.name, arch.name)
        if name is None:
            expected = ", ".join(k.removesuffix(".weight") for k in arch.layer_names)
            raise GGUFError(f"{path}: tensor {t.name!r} is not part of the {arch.name} layout posenc reads; "
                            f"expected token_embd, blk.N.{{{expected}}}, output_norm and (optionally) output")
        if name not in want:
            raise GGUFError(f"{path}: tensor {t.name!r} is beyond the {config['num_hidden_layers']} blocks the "
                            "metadata declares; the file is inconsistent. Re-convert it")
        if tensor_shape(t) != want[name]:
            raise GGUFError(f"{path}: tensor {t.name!r} has shape {list(tensor_shape(t))} (HF layout) but the "
                            f"metadata implies {list(want[name])}; the file is inconsistent. Re-convert it")
        found[name] = t
    missing = [n for n in want if n not in found and n != "lm_head.weight"]
    if missing:
        raise GGUFError(f"{path}: {len(missing)} tensor(s) missing, e.g. {missing[:3]} (GGUF names: "
                        f"{[_gguf_name(n, arch.name) for n in missing[:3]]}); the file is incomplete. Download it "
                        "again")
    return found


def load_tensor(t, name: str, config: dict[str, Any], path: Path, *, keep_interleaved: bool = False) -> Tensor:
    """One tensor dequantised to float32 in HF layout, with the converter's changes undone.

    q/k rows of the ``llama`` architecture are un-permuted unless ``keep_interleaved``; Gemma's
    norm gains, stored as 1 + w, become w again (in float32, as HF's loader does).
    """
    arch = arch_of(config)
    data = dequantize(t, path)
    if arch.norm_shift and name.endswith("norm.weight"):
        data = data - np.float32(arch.norm_shift)
    w = torch.from_numpy(data)
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    proj = name.split(".")[-2]
    if arch.permuted_qk and proj in heads and not keep_interleaved:
        # llama.cpp stored each head's rows as (d/2, 2) pairs; HF stores them as (2, d/2) halves
        w = convert_qk_weight(w, num_heads=heads[proj], head_dim=config["head_dim"],
                              source="interleaved", target="half")
    return w


def stored_pairing(config: dict[str, Any], *, keep_interleaved: bool) -> str:
    """The RoPE pairing of the q/k rows :func:`load_tensor` returns ("interleaved": llama rows kept as stored)."""
    return "interleaved" if keep_interleaved and arch_of(config).permuted_qk else "half"


def iter_tensors(reader, path: Path, config: dict[str, Any], *, keep_interleaved: bool = False,
                 dtype: torch.dtype = torch.float32) -> Iterator[tuple[str, str, Tensor]]:
    """(HF name, GGML type, tensor) for each tensor of the file, dequantised one at a time.

    Names and shapes are checked against ``config`` before anything is dequantised.
    """
    for name, t in index_tensors(reader, path, config).items():
        yield name, type_name(t), load_tensor(t, name, config, path, keep_interleaved=keep_interleaved).to(dtype)


def _gguf_name(name: str, arch: str = "llama") -> str:
    for g, h in TOP_NAMES.items():
        if h == name:
            return g
    layer, rest = name.removeprefix("model.layers.").split(".", 1)
    return f"blk.{layer}." + {v: k for k, v in ARCHS[arch].layer_names.items()}[rest]


# -- reading a whole file ------------------------------------------------------------------------------------------
def read_gguf(path: str | Path, *, keep_interleaved: bool = False, dtype: torch.dtype = torch.float32,
              config: dict[str, Any] | None = None, tokenizer: bool = True) -> GGUFCheckpoint:
    """Read a GGUF file: config, dequantised tensors (HF names and layout) and tokenizer.

    Args:
        path: the ``.gguf`` file (an architecture of :data:`SUPPORTED_ARCHS`).
        keep_interleaved: keep the q/k projection rows of ``llama`` files in llama.cpp's interleaved-pair
            order (``pairing`` then says "interleaved"; run the model with that pairing); default:
            un-permute them to HF's half layout. Other architectures store HF's rows: "half" either way.
        dtype: dtype of the returned tensors (dequantisation itself is float32; each tensor is cast as read).
        config: the file's HF config as already read (``posenc.pretrained.description``: the one reading of a
            model); None reads it here.
        tokenizer: build the tokenizer (False: ``tokenizer`` is None, for a caller that has it already).

    Returns:
        A :class:`GGUFCheckpoint`. With tied embeddings (no ``output.weight``),
        ``tensors`` holds no ``lm_head.weight`` and ``hf_config["tie_word_embeddings"]`` is True.

    Raises:
        FileNotFoundError: nothing at ``path``.
        GGUFError: not GGUF, truncated, unsupported architecture / tensor type / tokenizer,
            missing tensors or shapes that disagree with the metadata.
    """
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata

    path = Path(path)
    reader = open_gguf(path)
    meta = read_metadata(reader)
    config = config_of(reader, meta, path) if config is None else config
    tensors: dict[str, Tensor] = {}
    types: dict[str, str] = {}
    for name, kind, w in iter_tensors(reader, path, config, keep_interleaved=keep_interleaved, dtype=dtype):
        tensors[name], types[name] = w, kind
    config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    tok = tokenizer_from_metadata(meta, path) if tokenizer else None
    get = lambda key: int(meta[key]) if key in meta else None  # noqa: E731
    return GGUFCheckpoint(
        path=path, hf_config=config, tensors=tensors, pairing=stored_pairing(config, keep_interleaved=keep_interleaved),
        tokenizer=tok, chat_template=meta.get("tokenizer.chat_template"),
        bos_id=get("tokenizer.ggml.bos_token_id"), eos_id=get("tokenizer.ggml.eos_token_id"),
        pad_id=get("tokenizer.ggml.padding_token_id"), unk_id=get("tokenizer.ggml.unknown_token_id"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)), tensor_types=types,
        metadata={k: v for k, v in meta.items() if not isinstance(v, list)},
    )


def read_tokenizer(path: str | Path):
    """Just the tokenizer of a GGUF file (no tensor is read): ``gguf_tokenizer.tokenizer_from_metadata`` of its
    metadata."""
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata

    return tokenizer_from_metadata(read_metadata(open_gguf(path)), Path(path))


# -- `posenc inspect` -----------------------------------------------------------------------------------------------
@dataclass
class GGUFInspectCheckpoint(Checkpoint):
    """A GGUF file seen through ``posenc inspect``'s :class:`Checkpoint`: tensors dequantised on demand.

    ``entries`` carry HF names, HF shapes and the GGML type as ``dtype``; reading
    the token table dequantises that one tensor only.
    """

    reader_tensors: dict[str, Any] = field(default_factory=dict)

    def tensor(self, name: str) -> Tensor:
        self._check_name(name)
        return load_tensor(self.reader_tensors[name], name, self.config, Path(self.source))


def inspect_checkpoint_of(path: str | Path) -> Checkpoint:
    """The :class:`Checkpoint` ``posenc inspect`` measures for a GGUF file: HF names, config and vocabulary."""
    path = Path(path)
    reader = open_gguf(path)
    meta = read_metadata(reader)
    config = config_of(reader, meta, path)
    found = index_tensors(reader, path, config)
    config["tie_word_embeddings"] = "lm_head.weight" not in found
    entries = {name: TensorEntry(name, path, type_name(t), tensor_shape(t), (int(t.data_offset),
                                                                            int(t.data_offset + t.n_bytes)))
               for name, t in found.items()}
    tokens = meta.get("tokenizer.ggml.tokens")
    ckpt = GGUFInspectCheckpoint(source=str(path), entries=entries, config=config,
                                 vocab=list(tokens) if tokens is not None else None,
                                 vocab_source=f"{path} (tokenizer.ggml.tokens)" if tokens is not None else None,
                                 reader_tensors=found)
    ckpt.notes.append(f"GGUF file: config from its metadata; tensors dequantised from "
                      f"{', '.join(sorted(set(e.dtype for e in entries.values())))} when measured")
    return ckpt


# -- quantised blocks as stored (posenc.models.quant runs them) -----------------------------------------------------
#: GGML types whose blocks are integers with one float scale and one float offset per 32 values:
#: value = scale · q + minimum exactly (float32), q unsigned with this many bits.
GROUP_TYPES = {"Q4_0": 4, "Q4_1": 4, "Q4_K": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q8_0": 8}
#: GGML types whose blocks are integers with one float scale per 16 values, symmetric: value = scale · (q − 2^(bits−1))
#: exactly (float32), given as scale · q + minimum with minimum = −2^(bits−1) · scale.
GROUP16_TYPES = {"Q6_K": 6}
#: Bytes of one block and the values it holds (ggml-common.h).
BLOCK_BYTES = {"Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
               "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256)}


def raw_blocks(t) -> Tensor:
    """A reader tensor's stored bytes as a ``(rows, bytes per row)`` uint8 tensor over the memory map (no copy).

    The map is read-only: the tensor must not be written to (nothing in posenc does).
    """
    import warnings

    data = t.data.reshape(tensor_shape(t)[0], -1) if len(t.shape) > 1 else t.data.reshape(1, -1)
    with warnings.catch_warnings():  # torch warns that the array is not writable; it is only read
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(data.view(np.uint8))


def _unmap(handle: Any, first: int, last: int) -> None:
    """``madvise(MADV_DONTNEED)`` bytes ``first … last`` of a memory map; a no-op where that is missing (Windows)
    or refused."""
    import mmap

    if handle is None or not hasattr(handle, "madvise") or not hasattr(mmap, "MADV_DONTNEED") or last <= first:
        return
    with contextlib.suppress(OSError, ValueError):
        handle.madvise(mmap.MADV_DONTNEED, first, last - first)


def release_pages(t, start: int = 0, stop: int | None = None) -> None:
    """Unmap a memory-mapped tensor's pages (bytes ``start … stop`` of it, default all) from this process
    (``madvise(MADV_DONTNEED)``).

    For a tensor whose bytes were copied into another layout: the pages it touched no longer count in the
    process's memory (whole-process RSS counts mapped file pages). Nothing is lost — the map is read-only and
    a later read maps the pages back from the file (the OS page cache). A no-op for tensors not on a map, and
    where ``madvise`` is missing (Windows) or refused.
    """
    import mmap

    handle = getattr(getattr(t, "data", None), "_mmap", None)  # numpy memmap views carry their map
    if handle is None:
        return
    page = mmap.PAGESIZE  # the map is the whole file (np.memmap at offset 0): file offsets are map offsets
    stop = t.n_bytes if stop is None else min(stop, t.n_bytes)
    first = (t.data_offset + start) // page * page
    _unmap(handle, first, min(len(handle), -(-(t.data_offset + stop) // page) * page))


def release_map(mapped: "MappedGGUF") -> None:
    """Unmap every page of a GGUF's memory map from this process (``madvise(MADV_DONTNEED)`` over the whole file).

    At the end of a load, once each tensor is copied or put into the kernel's layout: a read of a few bytes
    (a norm's weights) maps the whole page-cache folio around them, and with a cold cache the kernel reads a
    file into large folios (megabytes each), so the small reads of a load can leave tens of megabytes mapped
    that :func:`release_pages` on each copied tensor does not cover. Later reads (token lookups, tensors used
    where they lie) map their pages back from the page cache. A no-op where :func:`release_pages` is one.
    """
    handle = next((getattr(t.data, "_mmap", None) for t in mapped.tensors), None)
    if handle is not None:
        _unmap(handle, 0, len(handle))


def fp16_field(raw: Tensor, at: int) -> Tensor:
    """(R, G, bytes) blocks → (R, G) float32 from the float16 stored at byte ``at`` of each block."""
    return raw[..., at : at + 2].contiguous().view(torch.float16)[..., 0].float()


def _nibbles(qs: Tensor) -> Tensor:
    """(…, 16) bytes → (…, 32) values: low nibbles are values 0–15, high nibbles 16–31 (Q4_0, Q4_1, Q5_*)."""
    return torch.cat((qs & 15, qs >> 4), dim=-1)


def _bits(qh: Tensor, count: int) -> Tensor:
    """(…, count // 8) bytes, little-endian → (…, count) bits (bit j of the little-endian word)."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((qh[..., :, None] >> shifts) & 1).reshape(*qh.shape[:-1], count)


def _k_scales(s: Tensor) -> tuple[Tensor, Tensor]:
    """(…, 12) packed 6-bit scales and mins of a Q4_K / Q5_K block → (…, 8) each (ggml's get_scale_min_k4)."""
    d, m, md = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = torch.cat((d & 63, (md & 15) | ((d >> 2) & 48)), dim=-1)
    mn = torch.cat((m & 63, (md >> 4) | ((m >> 2) & 48)), dim=-1)
    return sc, mn


def decode_groups(raw: Tensor, kind: str) -> tuple[Tensor, Tensor, Tensor, int]:
    """Stored blocks → (values, scale, minimum, bits) with value = scale · q + minimum per 32 values (per 16 for
    :data:`GROUP16_TYPES`: Q6_K).

    Args:
        raw: ``(rows, bytes per row)`` uint8 blocks of one of :data:`GROUP_TYPES` or :data:`GROUP16_TYPES` (from
            :func:`raw_blocks`, or any rows of it).
        kind: the GGML type.

    Returns:
        q ``(rows, K)`` uint8 in ``[0, 2**bits)``, scale and minimum ``(rows, K // 32)`` (``K // 16``) float32.
        Computed in float32 as ``scale * q + minimum`` (a multiply, then an add) they give exactly the values of
        :func:`dequantize` (the ``gguf`` package's dequantisers): every product of a float16 scale and a
        small integer is exact in float32, and K-quants' sub-block scale ``d · sc`` (11 + 6 bits; Q6_K's
        11 + 7) too.
    """
    if kind not in GROUP_TYPES and kind not in GROUP16_TYPES:
        raise ValueError(f"{kind} blocks are not 32 (or 16) integers with one scale and offset; group types: "
                         f"{', '.join([*GROUP_TYPES, *GROUP16_TYPES])}")
    size, per = BLOCK_BYTES[kind]
    rows = raw.shape[0]
    b = raw.reshape(rows, -1, size)  # (R, blocks, bytes)
    if kind == "Q6_K":  # 256 values: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, float16 d
        ql, qh = b[..., :128].reshape(rows, -1, 2, 2, 32), b[..., 128:192].reshape(rows, -1, 2, 1, 32)
        # per half of 128 values: values 32c + l take the low (c = 0, 1) or high (c = 2, 3) nibble of byte
        # 32 · (c mod 2) + l and bits 2c, 2c + 1 of qh byte l
        low = torch.cat((ql & 15, ql >> 4), dim=3)  # (R, B, half, c, 32)
        high = (qh >> (2 * torch.arange(4, dtype=torch.uint8))[:, None]) & 3  # (R, B, half, c, 32)
        q = (low | (high << 4)).reshape(rows, -1)
        scale = (fp16_field(b, 208)[..., None] * b[..., 192:208].contiguous().view(torch.int8).float()).reshape(rows, -1)
        return q, scale, scale * -32.0, GROUP16_TYPES[kind]
    if kind in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        d = fp16_field(b, 0)  # (R, G)
        if kind == "Q8_0":
            q = (b[..., 2:].contiguous().view(torch.int8).to(torch.int16) + 128).to(torch.uint8)  # (R, G, 32)
            return q.reshape(rows, -1), d, d * -128.0, 8
        offset = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 2, "Q5_1": 4}[kind]
        if kind in ("Q5_0", "Q5_1"):
            high = _bits(b[..., offset : offset + 4], 32)  # (R, G, 32): the fifth bit of each value
            q = _nibbles(b[..., offset + 4 :]) | (high << 4)
        else:
            q = _nibbles(b[..., offset:])
        minimum = fp16_field(b, 2) if kind in ("Q4_1", "Q5_1") else d * (-8.0 if kind == "Q4_0" else -16.0)
        return q.reshape(rows, -1), d, minimum, GROUP_TYPES[kind]
    # K-quants: 256 values in 8 sub-blocks of 32, each with a 6-bit scale and min under two float16 factors
    d, dmin = fp16_field(b, 0)[..., None], fp16_field(b, 2)[..., None]  # (R, G, 1)
    sc, mn = _k_scales(b[..., 4:16])  # (R, G, 8)
    scale, minimum = d * sc.float(), -(dmin * mn.float())
    qs = b[..., -128:].reshape(rows, -1, 4, 32)  # 4 chunks of 32 bytes: sub-blocks 2c (low) and 2c + 1 (high)
    q = torch.stack((qs & 15, qs >> 4), dim=3).reshape(rows, -1, 8, 32)  # (R, G, sub-block, 32)
    if kind == "Q5_K":
        qh = b[..., 16:48]  # (R, G, 32): bit i of byte l is the fifth bit of value l of sub-block i
        q = q | ((qh[:, :, None, :] >> torch.arange(8, dtype=torch.uint8)[:, None]) & 1) << 4
    return q.reshape(rows, -1), scale.reshape(rows, -1), minimum.reshape(rows, -1), GROUP_TYPES[kind]


# -- a memory-mapped view without the gguf package's reader ----------------------------------------------------------
@dataclass
class MappedTensor:
    """One tensor of a GGUF file over its memory map, with the attributes of ``gguf``'s ``ReaderTensor`` that
    posenc reads: ``name``, ``tensor_type``, ``shape`` (dimensions fastest first), ``data`` (a numpy view:
    float32 / float16 for those types, else the bytes as ``(…, bytes per row)`` uint8), ``data_offset``, ``n_bytes``.
    """

    name: str
    tensor_type: Any
    shape: np.ndarray
    data: np.ndarray
    data_offset: int
    n_bytes: int


@dataclass
class MappedGGUF:
    """What :func:`open_mapped` returns: metadata by key (arrays as lists) and the tensors, in file order."""

    path: Path
    metadata: dict[str, Any]
    tensors: list[MappedTensor]


def open_mapped(path: str | Path) -> MappedGGUF:
    """Metadata and memory-mapped tensors of a GGUF file from posenc's own bounded header walk.

    The same file checks as :func:`open_gguf` (``check_header`` bounds every size first), without
    ``gguf.GGUFReader``'s per-element numpy views of the metadata (which take most of a load: ~147,000
    elements for SmolLM2). Tensor bytes are not read: ``data`` views the map.

    Raises:
        FileNotFoundError, GGUFError: as :func:`open_gguf`.
    """
    gguf = _gguf()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (it starts with {magic!r}, a GGUF file starts with b'GGUF'). "
                        "Point posenc at a .gguf file written by llama.cpp or the gguf package")
    header = check_header(path)
    meta = {k: (v.items if v.type == 9 else v.value) for k, v in header.metadata.items()}
    if any(v.type == 9 and v.items is None for v in header.metadata.values()):
        meta = {k: v for k, v in meta.items() if v is not None}  # arrays of arrays: no key posenc reads
    whole = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = []
    for (name, kind, dims), offset in zip(header.tensors, header.offsets):
        qtype = gguf.GGMLQuantizationType(kind)
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n_bytes = int(np.prod(dims)) // block * type_size
        start = header.data_offset + offset
        raw = whole[start : start + n_bytes]
        hf_shape = tuple(reversed(dims))
        if qtype.name in ("F32", "F16"):
            data = raw.view(np.float32 if qtype.name == "F32" else np.float16).reshape(hf_shape)
        else:
            data = raw.reshape(*hf_shape[:-1], hf_shape[-1] // block * type_size)
        tensors.append(MappedTensor(name, qtype, np.array(dims), data, start, n_bytes))
    return MappedGGUF(path, meta, tensors)

