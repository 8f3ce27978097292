"""A chosen setting leaves posenc: an HF folder and a llama.cpp GGUF whose RoPE block says the same thing.

``export_model(source, position, options, out)`` takes a Llama-family
checkpoint (HF folder or GGUF), the scheme and options measured in posenc
(``rope-yarn`` with ``factor=2``, …) and writes

* ``out/`` — an HF folder: ``config.json`` with the matching
  ``rope_parameters`` block (transformers ≥ 5; ``max_position_embeddings``
  becomes the extended context) and, beside it, the same setting in
  transformers 4's spelling (``rope_scaling`` without ``rope_theta``,
  top-level ``rope_theta``; Gemma 3: ``rope_scaling`` for the global layers and
  ``rope_local_base_freq`` for the sliding ones — transformers 5 reads
  ``rope_scaling`` first, so both spellings hold the same block);
  ``model.safetensors`` in ``dtype`` (``--dtype``; default: the source's own
  float type, ``bfloat16`` for a quantised GGUF — the dtype SmolLM2 and Gemma 3
  are published in, float32's range, half its size; the dequantised 4- to
  8-bit values are not exactly representable in any 16-bit type either way;
  ``config.json``'s ``dtype``/``torch_dtype`` say which), HF names and the
  half-pairing q/k rows HF stores; the tokenizer: ``tokenizer.json`` and —
  for a GGUF source — ``tokenizer_config.json`` (``tokenizer_class``
  ``PreTrainedTokenizerFast``, so transformers 4 and 5 use tokenizer.json as
  it is, the special tokens' strings, ``add_bos_token``/``add_eos_token`` as
  the file's flags, ``chat_template``), ``special_tokens_map.json`` and
  ``chat_template.jinja`` (what transformers ≥ 4.50 and 5 save and read first;
  the tokenizer_config.json key is for older 4.x) — for an HF source its own
  ``tokenizer_config.json``, ``special_tokens_map.json``,
  ``chat_template.jinja`` and ``generation_config.json``, byte for byte;
* ``out/model.gguf`` — a GGUF (``gguf.GGUFWriter``). From a GGUF source every
  tensor is the source's, block for block (a RoPE setting changes no weight,
  and the written architecture stores q/k rows in the same order as the
  source, so nothing is permuted) and every metadata key is the source's
  (``general.*``, ``tokenizer.*`` with its chat template, special ids and
  ``add_bos_token``), but the context length and the RoPE keys;
  ``gguf_type`` (``--gguf-type q8_0|f16|bf16|f32``) requantises instead, from
  the dequantised float32 values, matrices only (norms stay F32, and a Q8_0
  row that is not a whole number of 32-value blocks is F16, as llama.cpp's
  converter does). From an HF folder each matrix is written in its own float
  type (F32, F16, BF16) unless ``gguf_type`` says otherwise. llama.cpp's RoPE keys
  ``llama.rope.freq_base``, ``llama.rope.scaling.type``,
  ``.factor``, ``.original_context_length``, ``.yarn_beta_fast``,
  ``.yarn_beta_slow`` and, only for an attention factor other than YaRN's own
  0.1·ln s + 1, ``.attn_factor`` = that factor ÷ (0.1·ln s + 1): llama.cpp
  applies YaRN's own factor itself and multiplies this key on top (a file
  holding the whole factor there reads 0.1·ln s + 1 twice; checked against
  llama.cpp, ``benchmarks/extend/export_check.py --llama-logits``); each head's
  q and k rows in llama.cpp's interleaved order exactly as its
  ``convert_hf_to_gguf.py`` writes them for llama (``posenc.formats.gguf`` reads them
  back with the inverse); the tokenizer as
  ``tokenizer.ggml.*`` metadata — a GGUF source's own, key by key (a
  SentencePiece vocabulary with its scores), or an HF folder's tokenizer.json
  converted: byte-level BPE (SmolLM2, GPT-2) or SentencePiece BPE (Gemma 3,
  Llama 2; ``posenc.formats.gguf_spm.spm_gguf_vocabulary``: scores from the
  vocabulary's order); any other tokenizer.json: ``--format hf`` only.

Every file is written under a temporary name in ``out`` and renamed into place
when whole, with the mode a plain ``open`` gives (0644 under umask 022).

Refused before anything is written (``check_out``, ``check_options``): an
``out`` that is, holds or lies inside the source folder, or is or holds a
source file's folder (export never writes into its input; a folder beside the
file, or under its folder, is fine); an ``out`` that holds files, unless
``force`` (then the files export writes are replaced and those of an earlier
export this one does not write are removed); NaN or ±inf weights, or a value
beyond ``dtype``'s range (``posenc.formats.finite.check_finite``); an option
that is not a finite number, a ``factor`` below 1 or whose extended context
passes 2³¹ − 1 positions, an ``mscale``/``mscale_all_dim`` ≤ 0.

==========================  ===========================================  ======================================
posenc scheme               HF ``rope_parameters``                       GGUF
==========================  ===========================================  ======================================
``rope``                    ``default``                                  no scaling keys
``rope-ntk``                ``default`` with rope_theta = the NTK base   freq_base = the NTK base
``rope-linear``             ``linear`` + factor                          ``linear`` + factor
``rope-yarn``               ``yarn`` + factor, original, betas, attn.    ``yarn`` + the same keys
``rope-llama3``             ``llama3`` + factor, low/high, original      refused (llama.cpp spells it as a
                                                                         ``rope_freqs.weight`` tensor, which
                                                                         transformers' GGUF loader does not read)
``rope-longrope``           ``longrope``: the one factor list in use as  refused (the same: per-pair factors
(fixed: ``max_seq_len``)    both short_ and long_factor, factor,         are a ``rope_freqs.weight`` tensor
                            original, attention_factor                   to llama.cpp)
==========================  ===========================================  ======================================

transformers 4 reads the same ``rope_scaling`` block (``default`` is
``rope_scaling: null``; NTK is the top-level ``rope_theta``): checked on
4.57.1, every scheme to posenc's logits. YaRN needs 4.51 or later: 4.45–4.50
took its original context from ``max_position_embeddings`` (the extended one
here), not from the block; 4.51–4.55 re-derive the factor as
max_position_embeddings ÷ original, the same where factor × original is whole.
The one setting 4.x cannot state is a Gemma 3 scheme other than NTK on the
sliding layers (``layers="all"``): it has no scaling field for them, so the
folder's ``rope_scaling`` states the global layers' and the result's
``transformers4`` says so.

LongRoPE: HF's ``longrope`` picks one factor list per forward call — short
for a call of at most ``original_max_position_embeddings`` positions, long
beyond — which is posenc's fixed mode (``max_seq_len``: one list for every
position); the exported block holds the list that mode uses as both lists, so
HF rotates as posenc's variant at every length. posenc's per-position mode
(``max_seq_len`` unset: positions below ``original_max_len`` take the short
factors — LongRoPE's n̂ start tokens) has no HF spelling and is refused,
naming the option; ``posenc finetune search`` writes the fixed mode for
n̂ = 0.

Refused by name, saying which format lacks it (``REFUSED``): dynamic NTK (HF's
``dynamic`` re-derives the base from each forward call's length — neither of
posenc's modes; GGUF has no dynamic type), the remapping methods (Self-Extend,
ReRoPE, STRING, DCA: no field of either format; llama.cpp's Self-Extend is a
run-time flag, ``--grp-attn-n/--grp-attn-w``, not model metadata), and every
other scheme.

Two families are exported (``FAMILIES``): ``llama`` (one scheme for every
layer) and Gemma 3 (``gemma3_text``: five sliding layers with base 10⁴, then a
global one with base 10⁶). For Gemma 3, ``layers`` says which layers take the
scheme, as ``posenc extend --layers`` does: ``global`` (the default, what the
family itself does — Gemma 3 4B–27B ship linear ×8 on their global layers) or
``all`` (``rotary`` is the same here: every Gemma 3 layer rotates). HF spells
both with its per-layer-type ``rope_parameters`` ({"full_attention": …,
"sliding_attention": …}, each block with its own base). The GGUF is written as
llama.cpp's ``gemma3`` architecture (norm gains stored as 1 + w, rows as HF
stores them); llama.cpp fixes that architecture's sliding layers at base 10⁴,
unscaled (``rope_freq_scale_train_swa = 1``), and its plan at every sixth layer
global, so a GGUF is written for ``global`` only and for a checkpoint whose plan
and local base are those; anything else is refused, naming the fix.

Reference used to verify: HF ``LlamaForCausalLM`` / ``Gemma3ForCausalLM``
``from_pretrained`` on the exported folder, posenc's own readers on both
outputs, and transformers' GGUF loader (``from_pretrained(..., gguf_file=...)``),
on tiny random models (``tests/extend/test_export.py``,
``tests/extend/test_export_gemma3.py``); llama.cpp itself (built from source)
on the real checkpoints, recorded in ``benchmarks/extend/README.md``.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc.families.gemma3 import FULL_ATTENTION as GLOBAL
from posenc.families.gemma3 import SLIDING
from posenc.positions.rotary import convert_qk_weight
from posenc.positions.rotary_scaling import ntk_base, yarn_mscale

HF_TYPES = ("rope", "rope-ntk", "rope-linear", "rope-yarn", "rope-llama3", "rope-longrope")
GGUF_TYPES = ("rope", "rope-ntk", "rope-linear", "rope-yarn")
_REMAP = ("no field of HF's config.json describes per-pair positions (transformers implements none of "
          "Self-Extend, ReRoPE, STRING, DCA)")
_REMAP_GGUF = ("GGUF metadata has no key for it (llama.cpp's Self-Extend is the run-time flag --grp-attn-n/"
               "--grp-attn-w, not model metadata)")
#: scheme → {format: why it has no spelling there}
REFUSED: dict[str, dict[str, str]] = {
    "rope-dynamic-ntk": {
        "hf": "HF's 'dynamic' type re-derives the base from each forward call's length (a cached key keeps the "
              "base of the call that made it), which is neither posenc's per-position nor its fixed mode",
        "gguf": "llama.cpp has no dynamic NTK scaling type"},
    "rope-llama3": {"gguf": "llama.cpp spells Llama 3.1 scaling as a rope_freqs.weight tensor, which transformers' "
                            "GGUF loader does not read, so the file would not load to the same logits there"},
    "rope-longrope": {"gguf": "llama.cpp takes per-pair factors for llama only as a rope_freqs.weight tensor, which "
                              "transformers' GGUF loader does not read, so the file would not load to the same logits "
                              "there"},
    **{name: {"hf": _REMAP, "gguf": _REMAP_GGUF} for name in ("self-extend", "rerope", "rerope-leaky", "string",
                                                            "dca")},
}
FORMATS = ("hf", "gguf")
#: HF model_type → the GGUF architecture the export writes (None: a config that states none, read as llama)
FAMILIES = {"llama": "llama", None: "llama", "gemma3_text": "gemma3"}
#: ``--dtype``: the HF folder's weights
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: ``--gguf-type``: requantise every matrix of the GGUF to one type (None: keep the source's own types)
GGUF_OUT_TYPES = ("q8_0", "f16", "bf16", "f32")
#: The longest context an export states: config.json's and llama.cpp's (int32 n_ctx) context lengths.
MAX_CONTEXT = 2**31 - 1
#: Every file an export writes into ``out`` (``--force`` removes those of an earlier export this one does not write).
EXPORT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja", "generation_config.json", "model.gguf")
#: An HF source's tokenizer and generation files, copied byte for byte.
HF_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "generation_config.json")


def refusal(position: str, fmt: str) -> str | None:
    """Why ``position`` cannot be written in format ``fmt`` (None: it can)."""
    if position in REFUSED and fmt in REFUSED[position]:
        return REFUSED[position][fmt]
    if position not in (HF_TYPES if fmt == "hf" else GGUF_TYPES):
        known = ", ".join(HF_TYPES if fmt == "hf" else GGUF_TYPES)
        return f"the exporter writes only {known} in {fmt.upper()}"
    return None


def check_exportable(position: str, formats: tuple[str, ...]) -> None:
    """Raise naming the scheme and each format that lacks a spelling for it."""
    missing = [(fmt, refusal(position, fmt)) for fmt in formats]
    missing = [(f, why) for f, why in missing if why is not None]
    if missing:
        said = "; ".join(f"{f.upper()}: {why}" for f, why in missing)
        raise ValueError(f"--position {position} cannot be exported — {said}. Choose --format "
                         f"{' or '.join(f for f in formats if f not in dict(missing)) or '(none fits)'} or another "
                         f"scheme ({', '.join(HF_TYPES)})")


@dataclass(frozen=True)
class RopeSpelling:
    """One setting in both formats: HF's block, the context it claims, and llama.cpp's keys."""

    hf: dict[str, Any]
    max_position_embeddings: int
    gguf: dict[str, Any]


def spelling(position: str, options: dict[str, Any], *, base: float, rotary_dim: int, l0: int) -> RopeSpelling:
    """The HF ``rope_parameters`` block and llama.cpp keys of a posenc scheme's options.

    Args:
        options: the scheme's own options (factor, original_max_len, …; base/pairing are the checkpoint's).
        base: the checkpoint's RoPE base; rotary_dim: its rotated width; l0: its trained context.
    """
    factor = float(options.get("factor", 1.0))
    original = int(options.get("original_max_len", l0))
    if position == "rope":
        return RopeSpelling({"rope_type": "default", "rope_theta": base}, l0, {})
    if position == "rope-ntk":
        theta = ntk_base(rotary_dim, base, factor)
        return RopeSpelling({"rope_type": "default", "rope_theta": theta}, round(factor * l0), {"freq_base": theta})
    if position == "rope-linear":
        return RopeSpelling({"rope_type": "linear", "rope_theta": base, "factor": factor}, round(factor * l0),
                            {"scaling.type": "linear", "scaling.factor": factor})
    if position == "rope-yarn":
        block = {"rope_type": "yarn", "rope_theta": base, "factor": factor, "original_max_position_embeddings": original,
                 "beta_fast": float(options.get("beta_fast", 32.0)), "beta_slow": float(options.get("beta_slow", 1.0))}
        for key in ("attention_factor", "mscale", "mscale_all_dim"):
            if options.get(key) is not None:
                block[key] = float(options[key])
        if not options.get("truncate", True):
            block["truncate"] = False
        attention = options.get("attention_factor")
        if attention is None:
            mscale, all_dim = options.get("mscale"), options.get("mscale_all_dim")
            attention = (yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dim) if mscale and all_dim
                         else yarn_mscale(factor))
        if not (math.isfinite(float(attention)) and float(attention) > 0):
            raise ValueError(f"--position-option mscale/mscale_all_dim/attention_factor give YaRN an attention factor "
                             f"of {float(attention):.4g}; it multiplies queries and keys and must be a finite number "
                             "> 0 (leave them unset for YaRN's own 0.1·ln s + 1)")
        gguf = {"scaling.type": "yarn", "scaling.factor": factor, "scaling.original_context_length": original,
                "scaling.yarn_beta_fast": block["beta_fast"], "scaling.yarn_beta_slow": block["beta_slow"]}
        # llama.cpp multiplies the rotation by YaRN's 0.1·ln s + 1 itself and by rope.scaling.attn_factor on top
        # (llama-context.cpp: yarn_attn_factor *= rope_attn_factor): the key holds only what is beyond the default
        if abs(float(attention) / yarn_mscale(factor) - 1.0) > 1e-7:
            gguf["scaling.attn_factor"] = float(attention) / yarn_mscale(factor)
        if not options.get("truncate", True):
            raise ValueError("rope-yarn with truncate=false has no GGUF key (llama.cpp always rounds the ramp bounds)")
        return RopeSpelling(block, round(factor * original), gguf)
    if position == "rope-llama3":
        block = {"rope_type": "llama3", "rope_theta": base, "factor": factor,
                 "low_freq_factor": float(options.get("low_freq_factor", 1.0)),
                 "high_freq_factor": float(options.get("high_freq_factor", 4.0)),
                 "original_max_position_embeddings": original}
        return RopeSpelling(block, round(factor * original), {})
    if position == "rope-longrope":
        length = options.get("max_seq_len")
        if length is None:
            raise ValueError("rope-longrope in its per-position mode (positions below original_max_len take the short "
                             "factors, LongRoPE's start tokens) has no HF spelling: HF's longrope picks one list per "
                             "forward call. Give --position-option max_seq_len=N (one list for every position: the "
                             "long factors when N > original_max_len, as the LongRoPE search writes for n̂ = 0)")
        used = [float(v) for v in options["long_factor" if int(length) > original else "short_factor"]]
        from posenc.positions.rotary_scaling import LongRoPE

        attention = options.get("attention_factor")
        if attention is None:  # the scheme's own default, written out so HF need not re-derive it
            attention = LongRoPE(head_dim=rotary_dim, factor=factor, original_max_len=original,
                                 short_factor=used, long_factor=used).attention_factor
        block = {"rope_type": "longrope", "rope_theta": base, "short_factor": used, "long_factor": used,
                 "factor": factor, "original_max_position_embeddings": original, "attention_factor": float(attention)}
        return RopeSpelling(block, round(factor * original), {})
    raise ValueError(f"no spelling for {position!r}")  # check_exportable refuses it first


# -- refusals before anything is written ---------------------------------------------------------------------


def check_options(options: dict[str, Any], *, l0: int) -> None:
    """Refuse, by name, an option that is not a finite number, or one out of the range an export can state.

    Args:
        l0: the checkpoint's trained context (``original_max_len`` when the options do not give one).
    """
    fixed = sorted(set(options) & {"base", "pairing", "head_dim", "rotary_dim", "dim", "num_heads"})
    if fixed:  # the checkpoint's own: passed to the scheme beside the options, a second value was a TypeError
        raise ValueError(f"--position-option {', '.join(fixed)}: set by the checkpoint (its RoPE base, pairing and "
                         "head width), not by an export option; give the scheme's own options (factor, "
                         "original_max_len, beta_fast, …)")
    for key, value in options.items():
        for x in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isfinite(x):
                raise ValueError(f"--position-option {key}={value!r}: not a finite number")
    for key in ("mscale", "mscale_all_dim"):
        value = options.get(key)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"--position-option {key}={value!r}: must be a number > 0 (YaRN's attention factor is "
                             f"0.1·{key}·ln s + 1; DeepSeek-V3 uses mscale = mscale_all_dim = 1)")
    factor = options.get("factor")
    if factor is None:
        return
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 1:
        raise ValueError(f"--position-option factor={factor!r}: must be a number >= 1 (an export extends the context "
                         "to factor × the trained length; HF's config validation warns below 1)")
    original = options.get("original_max_len", l0)
    if not isinstance(original, (int, float)) or isinstance(original, bool):
        return  # the scheme refuses it by name
    if float(factor) * float(original) > MAX_CONTEXT:
        raise ValueError(f"--position-option factor={factor!r}: the extended context factor × {original:,} = "
                         f"{float(factor) * float(original):.4g} positions is beyond the {MAX_CONTEXT:,} a config.json "
                         "or a GGUF states; a factor of 2-32 is usual")


def _source_folders(source: Path) -> list[Path]:
    """The folder(s) an export must not write into: the source folder, or a source file's folder (also the folder
    of the file a symbolic link points at)."""
    if source.is_dir():
        return [source.resolve()]
    return list(dict.fromkeys([source.absolute().parent.resolve(), source.resolve().parent]))


def _entries(out: Path) -> list[str]:
    """What ``out`` holds, but for the ``.lock`` the command line's run lock puts there."""
    from posenc.checkpoint import LOCK_FILE

    return sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE) if out.is_dir() else []


def check_out(source: str | Path, out: str | Path, *, force: bool = False) -> None:
    """Refuse an ``out`` that would make the export write into its input, or over other files without ``force``.

    Refused: ``out`` is, holds or lies inside a source folder; ``out`` is or holds a source file's folder (a folder
    under it, beside the file, is fine: ``posenc export model.gguf --out model-yarn``); ``out`` holds anything
    (unless ``force``).
    """
    source, out = Path(source), Path(out)
    target = out.resolve()
    for folder in _source_folders(source):
        inside = source.is_dir() and folder in target.parents
        if target == folder or target in folder.parents or inside:
            how = "is" if target == folder else ("lies inside" if inside else "holds")
            what = "the source folder" if source.is_dir() else f"the folder of the source file {source.name}"
            raise ValueError(f"--out {out} {how} {what} ({folder}); export never writes into its input: give a "
                             "folder outside it")
    left = _entries(out)
    if left and not force:
        shown = ", ".join(left[:4]) + (" …" if len(left) > 4 else "")
        raise ValueError(f"--out {out} is not empty ({len(left)} entries: {shown}); give a new or empty folder, or "
                         "--force to replace an earlier export there")


def check_weights(src: Source, dtypes: tuple[torch.dtype, ...]) -> None:
    """Refuse NaN/±inf weights, and values beyond the range of a dtype they are written in, naming the tensor."""
    from posenc.formats.finite import check_finite

    narrowest = min(dtypes, key=lambda d: torch.finfo(d).max, default=None)
    for name, t in src.tensors.items():
        check_finite(name, t, source=str(src.path), dtype=narrowest)


# -- reading the source --------------------------------------------------------------------------------------


@dataclass
class Source:
    """A checkpoint as HF data: config.json, HF-named tensors (half pairing), tokenizer files or metadata."""

    hf_config: dict[str, Any]
    tensors: dict[str, Tensor]
    tokenizer_json: str
    tokenizer_config: dict[str, Any] | None
    gguf_tokenizer: dict[str, Any]  # tokenizer.* metadata for the GGUF (empty: none)
    no_gguf_tokenizer: str = ""  # why there is none, where the tokenizer.json is of a kind posenc spells
    path: Path | None = None
    is_gguf: bool = False  # a GGUF file (its tensors and metadata are copied from it)
    types: dict[str, str] = field(default_factory=dict)  # HF name → how it is stored: "Q4_1", "F32", "bfloat16", …
    tokenizer: Any = None  # posenc's Tokenizer (posenc.pretrained.tokenizer), None where it cannot be built
    side_files: dict[str, bytes] = field(default_factory=dict)  # an HF source's HF_SIDE_FILES, byte for byte


def read_source(path: str | Path) -> Source:
    """Read an HF folder or a GGUF file (float32 tensors, HF names, q/k rows in HF's half layout)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; give an HF model folder or a .gguf file")
    if path.is_file():
        from posenc.formats.gguf import open_gguf, read_gguf, read_metadata
        from posenc.pretrained.tokenizer import gguf_tokenizer

        ckpt = read_gguf(path)
        meta = read_metadata(open_gguf(path))
        tok_meta = {k: v for k, v in meta.items() if k.startswith("tokenizer.")}
        return Source(dict(ckpt.hf_config), {k: v.float() for k, v in ckpt.tensors.items()},
                      ckpt.tokenizer.to_str(), None, tok_meta, path=path, is_gguf=True, types=dict(ckpt.tensor_types),
                      tokenizer=gguf_tokenizer(meta, path))
    from safetensors import safe_open

    from posenc.formats.safetensors import MAX_CONFIG_BYTES, find_weights, read_json

    config = read_json(path / "config.json", limit=MAX_CONFIG_BYTES)
    tensors: dict[str, Tensor] = {}
    types: dict[str, str] = {}
    for file in find_weights(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if not name.endswith("rotary_emb.inv_freq"):
                    t = f.get_tensor(name)
                    types[name] = str(t.dtype).removeprefix("torch.")
                    tensors[name] = t.float()
    tok_path = path / "tokenizer.json"
    if not tok_path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json; export writes the model with its tokenizer")
    tok_config = path / "tokenizer_config.json"
    tc = read_json(tok_config, limit=MAX_CONFIG_BYTES) if tok_config.is_file() else None
    side = {}
    for name in HF_SIDE_FILES:
        if (path / name).is_file():
            if (path / name).stat().st_size > MAX_CONFIG_BYTES:
                raise ValueError(f"{path / name}: {(path / name).stat().st_size:,} bytes, more than the "
                                 f"{MAX_CONFIG_BYTES:,} a settings file may hold; the folder is corrupt")
            side[name] = (path / name).read_bytes()
    text = tok_path.read_text(encoding="utf-8")
    try:
        from posenc.pretrained.tokenizer import load_hf_tokenizer

        tokenizer = load_hf_tokenizer(path, config)
    except ValueError:  # ids its files contradict: the HF folder is still copied, without a synthesised config
        tokenizer = None
    template = getattr(tokenizer, "chat_template", None)
    src = Source(config, tensors, text, tc, {}, path=path, types=types, tokenizer=tokenizer, side_files=side)
    try:
        src.gguf_tokenizer = gguf_tokenizer_from_json(text, config, tc, source=str(tok_path), chat_template=template)
    except ValueError as e:  # an HF folder can still be written; a GGUF is refused with this reason
        src.no_gguf_tokenizer = str(e)
    return src


def _pre_type(pre: dict[str, Any] | None) -> str | None:
    """llama.cpp's ``tokenizer.ggml.pre`` for a tokenizer.json pre-tokenizer posenc can spell, else None."""
    if pre is None:
        return None
    if pre.get("type") == "ByteLevel":
        return "gpt2"
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    kinds = [s.get("type") for s in steps]
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
        return "smollm"
    return None


def gguf_tokenizer_from_json(text: str, config: dict[str, Any], tokenizer_config: dict[str, Any] | None, *,
                             source: str, chat_template: str | None = None) -> dict[str, Any]:
    """``tokenizer.ggml.*`` metadata of a byte-level BPE or a SentencePiece tokenizer.json (empty when it has no
    GGUF spelling), with config.json's special ids, whether BOS / EOS go around a text, and the chat template
    (``chat_template``: the folder's as posenc reads it — tokenizer_config.json's or chat_template.jinja; None:
    tokenizer_config.json's)."""
    from posenc.formats.gguf_spm import dense_size, spm_gguf_vocabulary

    data = json.loads(text)
    model = data.get("model", {})
    pre = _pre_type(data.get("pre_tokenizer"))
    meta = spm_gguf_vocabulary(data, source=source)
    if meta is None:
        if model.get("type") != "BPE" or pre is None:
            return {}
        vocab: dict[str, int] = dict(model["vocab"])
        for added in data.get("added_tokens", []):
            vocab.setdefault(added["content"], added["id"])
        tokens = [""] * dense_size(list(vocab.values()), source=source)
        for token, i in vocab.items():
            tokens[i] = token
        special = {a["id"] for a in data.get("added_tokens", []) if a.get("special")}
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.token_type": [3 if i in special else 1 for i in range(len(tokens))],
                "tokenizer.ggml.merges": merges}
    for key, hf in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")):
        if config.get(hf) is not None:  # of a list (Gemma 3's eos_token_id [1, 106]) the first, as llama.cpp's
            ids = config[hf]
            meta[f"tokenizer.ggml.{key}_token_id"] = int(ids[0] if isinstance(ids, list) else ids)
    from posenc.checks import require

    require("tokenizers", "converting a tokenizer.json to GGUF")
    from tokenizers import Tokenizer

    from posenc.pretrained.tokenizer import adds_special

    tok = Tokenizer.from_str(text)
    for x in ("bos", "eos"):  # whether BOS / EOS go around a text, as HF says (llama.cpp's default differs by type)
        meta[f"tokenizer.ggml.add_{x}_token"] = adds_special(tok, tokenizer_config, x,
                                                             meta.get(f"tokenizer.ggml.{x}_token_id"))
    template = chat_template if chat_template is not None else (tokenizer_config or {}).get("chat_template")
    if isinstance(template, str):
        meta["tokenizer.chat_template"] = template
    return meta


# -- writing -------------------------------------------------------------------------------------------------


def _legacy_block(block: dict[str, Any]) -> dict[str, Any] | None:
    """transformers 4's ``rope_scaling`` of a ``rope_parameters`` block: the block without ``rope_theta`` (a top-level
    key there), None for plain RoPE."""
    if block.get("rope_type", "default") == "default":
        return None
    return {k: v for k, v in block.items() if k != "rope_theta"}


def exported_config(src: Source, spelled: dict[str | None, RopeSpelling], main: str | None,
                    dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The source's config.json with the RoPE block(s) of ``spelled`` ({layer type or None: spelling}), in
    transformers 5's spelling (``rope_parameters``) and 4's beside it (``rope_scaling``, ``rope_theta``, Gemma 3's
    ``rope_local_base_freq``), and the weights' ``dtype``."""
    config = {k: v for k, v in src.hf_config.items()
              if k not in ("rope_scaling", "rope_parameters", "rope_theta", "rope_local_base_freq")}
    if main is None:
        config["rope_parameters"] = spelled[None].hf
        config["rope_theta"] = spelled[None].hf["rope_theta"]
        config["rope_scaling"] = _legacy_block(spelled[None].hf)
    else:  # transformers 5's per-layer-type form, each block with its own base
        config["rope_parameters"] = {t: s.hf for t, s in spelled.items()}
        # transformers 4's Gemma 3: rope_theta + rope_scaling for the global layers, rope_local_base_freq (unscaled)
        # for the sliding ones; transformers 5 merges rope_scaling into its full_attention block (the same block)
        config["rope_theta"] = spelled[GLOBAL].hf["rope_theta"]
        config["rope_local_base_freq"] = spelled[SLIDING].hf["rope_theta"]
        config["rope_scaling"] = _legacy_block(spelled[GLOBAL].hf)
    config["max_position_embeddings"] = spelled[main].max_position_embeddings
    config.setdefault("architectures", ["LlamaForCausalLM" if main is None else "Gemma3ForCausalLM"])
    config.setdefault("tie_word_embeddings", "lm_head.weight" not in src.tensors)
    if dtype is not None:  # transformers 5 reads dtype, 4 torch_dtype; from_pretrained's "auto" loads in it
        config["dtype"] = config["torch_dtype"] = str(dtype).removeprefix("torch.")
    return config


def transformers4_note(spelled: dict[str | None, RopeSpelling]) -> str | None:
    """Why transformers 4 would not read the folder as the variant (None: it does)."""
    sliding = spelled.get(SLIDING)
    if sliding is not None and _legacy_block(sliding.hf) is not None:
        return ("transformers 4 has no field for a scaled Gemma 3 sliding layer: it reads the global layers' "
                "rope_scaling only (load the folder with transformers >= 5)")
    return None


def _special_tokens(tok: Any) -> dict[str, str]:
    """The named special tokens' strings of a posenc Tokenizer (bos/eos/unk/pad/…), as HF's special_tokens_map."""
    found = {}
    for name, token_id in (("bos_token", tok.bos_id), ("eos_token", tok.eos_id)):
        if token_id is not None and tok.token(token_id) is not None:
            found[name] = tok.token(token_id)
    found.update(getattr(tok, "special_tokens_map", None) or {})  # unk/pad/sep/… where the tokenizer names them
    return found


def hf_tokenizer_files(tok: Any, *, model_max_length: int | None = None,
                       extra_special: dict[str, str] | None = None) -> dict[str, bytes]:
    """tokenizer_config.json, special_tokens_map.json and chat_template.jinja for a tokenizer.json that lacks them,
    from posenc's Tokenizer ``tok``: transformers 4 and 5 then load tokenizer.json as it is (``tokenizer_class``
    ``PreTrainedTokenizerFast``), with the special tokens, BOS behaviour and chat template posenc uses.

    Args:
        extra_special: further named special tokens ({"unk_token": "<unk>", …}) where ``tok`` does not name them.
    """
    from posenc.pretrained.tokenizer import adds_special

    special = {**(extra_special or {}), **_special_tokens(tok)}
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **special,
                              # transformers 5 takes these from tokenizer.json's post-processor, which says the same
                              "add_bos_token": bool(tok.add_bos),
                              "add_eos_token": adds_special(tok.tokenizer, None, "eos", tok.eos_id),
                              "clean_up_tokenization_spaces": False}
    if model_max_length is not None:
        config["model_max_length"] = int(model_max_length)
    if tok.chat_template:
        config["chat_template"] = tok.chat_template  # transformers 4 before chat_template.jinja
    files = {"tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
             "special_tokens_map.json": json.dumps(special, indent=2, ensure_ascii=False) + "\n"}
    if tok.chat_template:
        files["chat_template.jinja"] = tok.chat_template
    return {name: text.encode("utf-8") for name, text in files.items()}


def _gguf_special(src: Source) -> dict[str, str]:
    """unk/pad strings of a GGUF source's metadata ids (for a Tokenizer that does not name them itself)."""
    tokens = src.gguf_tokenizer.get("tokenizer.ggml.tokens") or []
    found = {}
    for key, name in (("unknown_token_id", "unk_token"), ("padding_token_id", "pad_token")):
        i = src.gguf_tokenizer.get(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and 0 <= i < len(tokens):
            found[name] = src.tokenizer.token(i) or tokens[i]
    return found


def tokenizer_files(src: Source, config: dict[str, Any]) -> dict[str, bytes]:
    """Every file of the HF folder's tokenizer: tokenizer.json, an HF source's own side files byte for byte, and —
    where the source has no tokenizer_config.json (every GGUF) — those :func:`hf_tokenizer_files` makes from the
    source's tokenizer for the names it lacks."""
    files = {"tokenizer.json": src.tokenizer_json.encode("utf-8"), **src.side_files}
    if "tokenizer_config.json" not in files and src.tokenizer is not None:
        made = hf_tokenizer_files(src.tokenizer, model_max_length=config.get("max_position_embeddings"),
                                  extra_special=_gguf_special(src) if src.is_gguf else None)
        for name, data in made.items():
            files.setdefault(name, data)
    return files


def _write(path: Path, fill: Callable[[Path], None]) -> Path:
    """Write ``path`` through ``fill(temporary path)``, then rename it into place, with the mode a plain ``open``
    gives (0666 less the umask, a default ACL applied): writers that go through a private temporary file
    (safetensors: 0600) leave theirs. A symbolic link at ``path`` is replaced, never written through."""
    tmp = path.with_name(f".{path.name}.posenc-tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    os.close(fd)
    try:
        fill(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_hf(out: Path, src: Source, config: dict[str, Any], dtype: torch.dtype = torch.float32) -> list[Path]:
    """config.json, model.safetensors (in ``dtype``) and the tokenizer files."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(dtype).contiguous() for k, v in src.tensors.items()
               if not (k == "lm_head.weight" and config.get("tie_word_embeddings"))}
    paths = [_write(out / "model.safetensors", lambda p: save_file(tensors, str(p), metadata={"format": "pt"})),
             _write(out / "config.json", lambda p: p.write_text(json.dumps(config, indent=2) + "\n",
                                                                 encoding="utf-8"))]
    for name, data in tokenizer_files(src, config).items():
        paths.append(_write(out / name, lambda p, data=data: p.write_bytes(data)))
    return paths


def _gguf_tensors(src: Source, config: dict[str, Any], arch: str = "llama") -> Iterator[tuple[str, str, Tensor]]:
    """(GGUF name, HF name, float32 tensor in llama.cpp's layout) as its converter writes architecture ``arch``:
    llama's q/k rows half → interleaved per head; Gemma's norm gains stored as 1 + w."""
    from posenc.formats.gguf import _gguf_name
    from posenc.formats.gguf_arch import ARCHS

    spec = ARCHS[arch]
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config.get("num_key_value_heads",
                                                                           config["num_attention_heads"])}
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    for name, t in src.tensors.items():
        if name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue
        proj = name.split(".")[-2]
        if spec.permuted_qk and proj in heads:
            # llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute: each head's (2, d/2) halves → (d/2, 2) pairs
            t = convert_qk_weight(t, num_heads=heads[proj], head_dim=head_dim, source="half", target="interleaved")
        if spec.norm_shift and name.endswith("norm.weight"):
            t = t + spec.norm_shift  # Gemma3Model.modify_tensors: llama.cpp's RMSNorm multiplies by the stored gain
        yield _gguf_name(name, arch), name, t


def _add_tokenizer(writer: Any, tok: dict[str, Any]) -> None:
    """An HF source's tokenizer as ``tokenizer.*`` metadata (``gguf_tokenizer_from_json``)."""
    writer.add_tokenizer_model(str(tok["tokenizer.ggml.model"]))
    writer.add_tokenizer_pre(str(tok.get("tokenizer.ggml.pre", "default")))
    writer.add_token_list(list(tok["tokenizer.ggml.tokens"]))
    writer.add_token_types([int(t) for t in tok.get("tokenizer.ggml.token_type", [])] or
                           [1] * len(tok["tokenizer.ggml.tokens"]))
    if tok.get("tokenizer.ggml.scores") is not None:
        writer.add_token_scores([float(v) for v in tok["tokenizer.ggml.scores"]])
    if tok.get("tokenizer.ggml.merges"):
        writer.add_token_merges(list(tok["tokenizer.ggml.merges"]))
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("padding_token_id", writer.add_pad_token_id), ("unknown_token_id", writer.add_unk_token_id)):
        if f"tokenizer.ggml.{key}" in tok:
            add(int(tok[f"tokenizer.ggml.{key}"]))
    for key, add in (("add_bos_token", writer.add_add_bos_token), ("add_eos_token", writer.add_add_eos_token),
                     ("add_space_prefix", writer.add_add_space_prefix)):
        if f"tokenizer.ggml.{key}" in tok:
            add(bool(tok[f"tokenizer.ggml.{key}"]))
    if "tokenizer.chat_template" in tok:
        writer.add_chat_template(str(tok["tokenizer.chat_template"]))


def _copy_metadata(writer: Any, reader: Any, arch: str) -> None:
    """Every metadata key of a GGUF source the writer does not hold yet, with its own type — ``general.*``,
    ``tokenizer.*`` and the architecture's keys — but the header's, the alignment, the file type, the context
    length and the RoPE keys (written for the export)."""
    import gguf

    skip = ("general.architecture", "general.alignment", "general.file_type", f"{arch}.context_length")
    for key, f in reader.fields.items():
        if (key.startswith("GGUF.") or key in skip or key.startswith(f"{arch}.rope.")
                or any(key in kv for kv in writer.kv_data)):
            continue
        value, types = f.contents(), list(f.types)
        if types[0] == gguf.GGUFValueType.ARRAY:
            if not value or len(types) > 2:  # an empty or nested array: nothing llama.cpp reads for these models
                continue
            writer.add_key_value(key, value, types[0], sub_type=types[-1])
        else:
            writer.add_key_value(key, value, types[0])


#: --gguf-type → (GGML type, llama.cpp's file type)
_REQUANT = {"q8_0": ("Q8_0", "MOSTLY_Q8_0"), "f16": ("F16", "MOSTLY_F16"), "bf16": ("BF16", "MOSTLY_BF16"),
            "f32": ("F32", "ALL_F32")}
#: an HF source's torch dtype → its GGML type
_GGML_OF = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _encode(t: Tensor, kind: str) -> tuple[Any, Any]:
    """(array, raw GGML type or None) of a float32 tensor stored as ``kind`` (F32, F16, BF16 or Q8_0)."""
    import gguf

    if kind == "F32":
        return t.detach().to(torch.float32).contiguous().numpy(), None
    if kind == "F16":
        return t.detach().to(torch.float16).contiguous().numpy(), None
    if kind == "BF16":  # round to nearest even, as gguf.quants' BF16 and llama.cpp do; bytes as GGUF stores them
        return t.detach().to(torch.bfloat16).contiguous().view(torch.uint8).numpy(), gguf.GGMLQuantizationType.BF16
    return gguf.quants.quantize(t.detach().to(torch.float32).contiguous().numpy(),
                                gguf.GGMLQuantizationType[kind]), gguf.GGMLQuantizationType[kind]


def _stored_kind(t: Tensor, source_kind: str, gguf_type: str | None) -> str:
    """The GGML type a tensor is written in: 1-D (norms) F32; a matrix in ``gguf_type``'s, or its source dtype's."""
    if t.dim() < 2:
        return "F32"
    kind = _REQUANT[gguf_type][0] if gguf_type is not None else _GGML_OF.get(source_kind, "F32")
    if kind == "Q8_0" and t.shape[-1] % 32:  # llama.cpp's converter: rows not in whole blocks go F16
        kind = "F16"
    return kind


def write_gguf(path: Path, src: Source, config: dict[str, Any], spelled: RopeSpelling, *,
               arch: str = "llama", gguf_type: str | None = None) -> Path:
    """A GGUF of architecture ``arch`` with the RoPE keys of ``spelled`` (Gemma 3: its global layers'): a GGUF
    source's tensors block for block and its metadata key for key (``gguf_type`` None), or every matrix in
    ``gguf_type``; an HF source's tokenizer converted."""
    from posenc.checks import require

    require("gguf", "writing .gguf files")  # before anything is written

    def fill(tmp: Path) -> None:
        import gguf

        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        writer = gguf.GGUFWriter(str(tmp), arch)
        writer.add_context_length(int(config["max_position_embeddings"]))
        writer.add_embedding_length(int(config["hidden_size"]))
        writer.add_block_count(int(config["num_hidden_layers"]))
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_head_count(int(config["num_attention_heads"]))
        writer.add_head_count_kv(int(config.get("num_key_value_heads", config["num_attention_heads"])))
        writer.add_key_length(int(head_dim))
        writer.add_value_length(int(head_dim))
        writer.add_rope_dimension_count(int(head_dim))
        writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
        writer.add_vocab_size(int(config["vocab_size"]))
        if arch == "gemma3":  # Gemma3Model.set_gguf_parameters: the window, and the final soft cap where there is one
            writer.add_sliding_window(int(config["sliding_window"]))
            if config.get("final_logit_softcapping"):
                writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
        rope = spelled.gguf
        writer.add_rope_freq_base(float(rope.get("freq_base", spelled.hf["rope_theta"])))
        if "scaling.type" in rope:
            writer.add_rope_scaling_type(gguf.RopeScalingType(rope["scaling.type"]))
            writer.add_rope_scaling_factor(float(rope["scaling.factor"]))
        if "scaling.original_context_length" in rope:
            writer.add_rope_scaling_orig_ctx_len(int(rope["scaling.original_context_length"]))
            if "scaling.attn_factor" in rope:
                writer.add_rope_scaling_attn_factors(float(rope["scaling.attn_factor"]))
            writer.add_rope_scaling_yarn_beta_fast(float(rope["scaling.yarn_beta_fast"]))
            writer.add_rope_scaling_yarn_beta_slow(float(rope["scaling.yarn_beta_slow"]))
        reader = None
        if src.is_gguf:
            from posenc.formats.gguf import open_gguf

            reader = open_gguf(src.path)
        if reader is not None and gguf_type is None:  # the source's blocks, byte for byte, and its file type
            for t in reader.tensors:
                writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
            kept = reader.fields.get("general.file_type")
            if kept is not None:
                writer.add_file_type(int(kept.contents()))
        else:
            kinds = []
            for gguf_name, hf_name, t in _gguf_tensors(src, config, arch):
                kind = _stored_kind(t, src.types.get(hf_name, "float32"), gguf_type)
                data, raw = _encode(t, kind)
                writer.add_tensor(gguf_name, data, raw_dtype=raw)
                kinds.append(kind)
            if gguf_type is not None:
                file_type = _REQUANT[gguf_type][1]
            else:  # an HF source in its own types: the matrices' most common type names the file
                common = max(set(k for k in kinds if k != "F32") or {"F32"}, key=kinds.count)
                file_type = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "BF16": "MOSTLY_BF16"}[common]
            writer.add_file_type(gguf.LlamaFileType[file_type])
        if reader is not None:
            _copy_metadata(writer, reader, arch)
        else:
            writer.add_name(str(config.get("_name_or_path", "posenc export")))
            _add_tokenizer(writer, src.gguf_tokenizer)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    return _write(path, fill)


def source_dtype(src: Source) -> torch.dtype:
    """The HF folder's default dtype: the float type the source stores its matrices in — float32, float16 or
    bfloat16 — and bfloat16 for quantised ones (the dtype SmolLM2, Gemma 3 and Llama are published in: float32's
    range at half its size; a dequantised 4- to 8-bit value is not exactly a 16-bit float either way); float32 where
    the matrices mix float types."""
    named = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, **DTYPES}
    found = {named.get(src.types.get(n, "float32"), torch.bfloat16) for n, t in src.tensors.items() if t.dim() >= 2}
    return found.pop() if len(found) == 1 else torch.float32


def export_model(source: str | Path, position: str, options: dict[str, Any], out: str | Path, *,
                 formats: tuple[str, ...] = FORMATS, layers: str | None = None, dtype: str | None = None,
                 gguf_type: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write ``source`` with ``position`` + ``options`` as an HF folder and/or a GGUF under ``out``.

    Args:
        layers: which layers take the scheme in a Gemma 3 checkpoint — ``global`` (None: the family's own
            choice) or ``all``/``rotary``; a llama checkpoint has one scheme for every layer (any choice).
        dtype: the HF folder's weights, a name of :data:`DTYPES` (None: :func:`source_dtype`).
        gguf_type: requantise the GGUF's matrices to one of :data:`GGUF_OUT_TYPES` (None: the source's own types,
            a GGUF source's blocks byte for byte).
        force: write into an ``out`` that holds files (an earlier export's are replaced or removed).

    Returns:
        {"hf": [paths], "gguf": path, "rope_parameters": block (Gemma 3: a block per layer type),
        "gguf_rope": keys, "max_position_embeddings": N, "layers": the choice applied, "dtype": the HF folder's,
        "gguf_types": {GGML type: tensors}, "sizes": {path: bytes}, "transformers4": None or why transformers 4
        reads the folder otherwise}.

    Raises:
        ValueError: a scheme with no spelling in an asked format (named, with the format), a model outside
            ``FAMILIES``, an already scaled checkpoint, a layer choice the asked format cannot state, options the
            scheme or the export refuses (``check_options``), an ``out`` refused by ``check_out``, or weights that
            are not finite (``check_weights``). Nothing is written then.
    """
    from posenc import positions
    from posenc.extend.methods import LAYER_CHOICES

    position = positions.canonical(position)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--format takes {', '.join(FORMATS)}, got {list(formats)}")
    if layers is not None and layers not in LAYER_CHOICES:
        raise ValueError(f"--layers {layers!r} is not one of {', '.join(LAYER_CHOICES)}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if gguf_type is not None and gguf_type not in GGUF_OUT_TYPES:
        raise ValueError(f"--gguf-type {gguf_type!r} is not one of {', '.join(GGUF_OUT_TYPES)}")
    check_exportable(position, formats)
    check_out(source, out, force=force)
    src = read_source(source)
    model_type = src.hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"{source}: model_type {model_type!r}; export writes "
                         f"{', '.join(repr(t) for t in FAMILIES if t)} checkpoints")
    arch = FAMILIES[model_type]
    blocks = _rope_blocks(src, source)
    if any(b.get("rope_type", "default") != "default" for b in blocks.values()):
        raise ValueError(f"{source}: the checkpoint is already RoPE-scaled; export starts from plain RoPE")
    heads = int(src.hf_config["num_attention_heads"])
    head_dim = int(src.hf_config.get("head_dim") or int(src.hf_config["hidden_size"]) // heads)
    rotary_dim = int(head_dim * float(src.hf_config.get("partial_rotary_factor", 1.0)))
    l0 = int(src.hf_config["max_position_embeddings"])
    main = GLOBAL if GLOBAL in blocks else None  # the block whose layers always take the scheme
    base = float(blocks[main]["rope_theta"])
    check_options(options, l0=l0)
    if "original_max_len" in positions.option_names(position) and "original_max_len" not in options:
        options = {**options, "original_max_len": l0}  # the checkpoint's L0, not the scheme's generic default
    # the scheme itself checks the options (a typo or a bad value fails here, before anything is written)
    built = positions.build(position, dim=heads * head_dim, num_heads=heads, base=base, **options)
    given = {k: v for k, v in built.options().items() if k not in ("head_dim", "base", "pairing", "rotary_dim")}
    if position != "rope" and "factor" not in options:
        raise ValueError(f"--position {position} needs --position-option factor=S (the extension factor)")
    choice = "all" if main is None else (layers or "global")
    scaled = {main} if choice == "global" else set(blocks)
    spelled = {t: spelling(position if t in scaled else "rope", given if t in scaled else {},
                           base=float(b["rope_theta"]), rotary_dim=rotary_dim, l0=l0) for t, b in blocks.items()}
    if "gguf" in formats and arch == "gemma3":
        check_gemma3_gguf(src.hf_config, blocks, position, choice, spelled[main].gguf)
    if "gguf" in formats and not src.gguf_tokenizer:
        raise ValueError(f"{source}: the tokenizer has no GGUF spelling posenc writes (byte-level BPE with a GPT-2 or "
                         "SmolLM pre-tokenizer, SentencePiece BPE as HF writes Gemma's and Llama 2's, or a GGUF "
                         "source's own vocabulary); export with --format hf"
                         + (f". {src.no_gguf_tokenizer}" if src.no_gguf_tokenizer else ""))
    weights = DTYPES[dtype] if dtype is not None else source_dtype(src)
    narrow = ([weights] if "hf" in formats else []) + (
        [torch.float16] if "gguf" in formats and gguf_type in ("q8_0", "f16") else [])
    check_weights(src, tuple(narrow))
    config = exported_config(src, spelled, main, weights)
    out = Path(out)
    check_out(source, out, force=force)  # again: the folder may have changed while the source was read
    result: dict[str, Any] = {"rope_parameters": config["rope_parameters"], "gguf_rope": spelled[main].gguf,
                              "max_position_embeddings": spelled[main].max_position_embeddings, "layers": choice,
                              "transformers4": transformers4_note(spelled) if "hf" in formats else None}
    written: list[Path] = []
    if "hf" in formats:
        written += write_hf(out, src, config, weights)
        result["hf"] = [str(p) for p in written]
        result["dtype"] = str(weights).removeprefix("torch.")
    if "gguf" in formats:
        out.mkdir(parents=True, exist_ok=True)
        path = write_gguf(out / "model.gguf", src, config, spelled[main], arch=arch, gguf_type=gguf_type)
        written.append(path)
        result["gguf"] = str(path)
        result["gguf_types"] = gguf_tensor_types(path)
    if force:  # one export per folder: an earlier export's files this one did not write go
        for name in EXPORT_FILES:
            if (out / name) not in written and ((out / name).is_file() or (out / name).is_symlink()):
                (out / name).unlink()
    result["sizes"] = {str(p): p.stat().st_size for p in written}
    return result


def gguf_tensor_types(path: str | Path) -> dict[str, int]:
    """{GGML type: how many tensors} of a GGUF file, most common first."""
    from collections import Counter

    from posenc.formats.gguf import open_gguf

    return dict(Counter(t.tensor_type.name for t in open_gguf(path).tensors).most_common())


def _rope_blocks(src: Source, source: str | Path) -> dict[str | None, dict[str, Any]]:
    """{layer type: RoPE block} of the checkpoint: {None: block} for llama, Gemma 3's two types otherwise."""
    from posenc.families.gemma3 import layer_ropes
    from posenc.families.hf_config import HFConfig
    from posenc.families.rope import rope_blocks

    c = HFConfig(src.hf_config, source=str(source))
    if src.hf_config.get("model_type") == "gemma3_text":
        return layer_ropes(c)
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{source}: rope_parameters has per-layer-type blocks {sorted(blocks)}; a llama checkpoint "
                         "has one RoPE for every layer")
    return blocks


def check_gemma3_gguf(config: dict[str, Any], blocks: dict[str | None, dict[str, Any]], position: str,
                      choice: str, gguf_keys: dict[str, Any]) -> None:
    """Refuse a Gemma 3 GGUF llama.cpp would not run as the HF folder: it fixes the sliding layers at base 10⁴,
    unscaled, and the plan at every sixth layer global."""
    from posenc.families.gemma3 import DEFAULT_LOCAL_BASE, DEFAULT_PATTERN, patterned_plan

    if choice != "global" and position != "rope":
        raise ValueError(f"--layers {choice} cannot be written as a Gemma 3 GGUF: llama.cpp runs the gemma3 "
                         "architecture's sliding layers unscaled at base 10000 whatever the file says; use --layers "
                         "global (the family's own choice) or --format hf")
    if "scaling.attn_factor" in gguf_keys:
        raise ValueError("a YaRN attention factor other than YaRN's own (0.1·ln s + 1) cannot be written as a Gemma 3 "
                         "GGUF: llama.cpp applies rope.scaling.attn_factor to every layer's rotation, the sliding "
                         "layers' too; drop attention_factor/mscale or use --format hf")
    plan = patterned_plan(int(config["num_hidden_layers"]))
    types = config.get("layer_types") or plan
    local = float(blocks[SLIDING]["rope_theta"])
    if list(types) != plan or local != DEFAULT_LOCAL_BASE:
        raise ValueError(f"this Gemma 3 checkpoint (layer_types {list(types)}, sliding base {local:g}) is not the plan "
                         f"llama.cpp hard-codes for gemma3 (every {DEFAULT_PATTERN}th layer global, sliding base "
                         f"{DEFAULT_LOCAL_BASE:g}); a GGUF would not compute it. Use --format hf")


__all__ = ["DTYPES", "EXPORT_FILES", "FAMILIES", "FORMATS", "GGUF_OUT_TYPES", "GGUF_TYPES", "HF_TYPES", "REFUSED",
           "check_exportable", "check_gemma3_gguf", "check_options", "check_out", "check_weights", "export_model",
           "gguf_tensor_types", "hf_tokenizer_files", "refusal", "source_dtype", "spelling"]
