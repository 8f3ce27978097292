"""A chosen setting leaves posenc: an HF folder and a llama.cpp GGUF whose RoPE block says the same thing.

``export_model(source, position, options, out)`` takes a Llama-family
checkpoint (HF folder or GGUF), the scheme and options measured in posenc
(``rope-yarn`` with ``factor=2``, …) and writes

* ``out/`` — an HF folder: ``config.json`` with the matching
  ``rope_parameters`` block (transformers ≥ 5; ``max_position_embeddings``
  becomes the extended context), ``model.safetensors`` (float32, HF names and
  the half-pairing q/k rows HF stores), ``tokenizer.json`` and, when the source
  has one, ``tokenizer_config.json``;
* ``out/model.gguf`` — a GGUF (``gguf.GGUFWriter``, float32 tensors), with
  llama.cpp's RoPE keys ``llama.rope.freq_base``, ``llama.rope.scaling.type``,
  ``.factor``, ``.original_context_length``, ``.attn_factor`` (YaRN's whole
  attention factor, as llama.cpp's converters write it), ``.yarn_beta_fast``,
  ``.yarn_beta_slow``; each head's q and k rows permuted into llama.cpp's
  interleaved order exactly as its ``convert_hf_to_gguf.py`` does for llama
  (``posenc.formats.gguf`` reads them back with the inverse); the byte-level
  BPE tokenizer as ``tokenizer.ggml.*`` metadata.

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
other scheme. Only models of the ``llama`` family with one scheme for every
layer are exported.

Reference used to verify: HF ``LlamaForCausalLM.from_pretrained`` on the
exported folder, posenc's own readers on both outputs, and transformers' GGUF
loader (``from_pretrained(..., gguf_file=...)``), on tiny random models
(``tests/extend/test_export.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

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
        gguf = {"scaling.type": "yarn", "scaling.factor": factor, "scaling.original_context_length": original,
                "scaling.attn_factor": float(attention), "scaling.yarn_beta_fast": block["beta_fast"],
                "scaling.yarn_beta_slow": block["beta_slow"]}
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


# -- reading the source --------------------------------------------------------------------------------------


@dataclass
class Source:
    """A checkpoint as HF data: config.json, HF-named tensors (half pairing), tokenizer files or metadata."""

    hf_config: dict[str, Any]
    tensors: dict[str, Tensor]
    tokenizer_json: str
    tokenizer_config: dict[str, Any] | None
    gguf_tokenizer: dict[str, Any]  # tokenizer.* metadata for the GGUF


def read_source(path: str | Path) -> Source:
    """Read an HF folder or a GGUF file (float32 tensors, HF names, q/k rows in HF's half layout)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; give an HF model folder or a .gguf file")
    if path.is_file():
        from posenc.formats.gguf import open_gguf, read_gguf, read_metadata

        ckpt = read_gguf(path)
        meta = read_metadata(open_gguf(path))
        tok_meta = {k: v for k, v in meta.items() if k.startswith("tokenizer.")}
        return Source(dict(ckpt.hf_config), {k: v.float() for k, v in ckpt.tensors.items()},
                      ckpt.tokenizer.to_str(), None, tok_meta)
    from safetensors import safe_open

    from posenc.formats.safetensors import MAX_CONFIG_BYTES, find_weights, read_json

    config = read_json(path / "config.json", limit=MAX_CONFIG_BYTES)
    tensors: dict[str, Tensor] = {}
    for file in find_weights(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if not name.endswith("rotary_emb.inv_freq"):
                    tensors[name] = f.get_tensor(name).float()
    tok_path = path / "tokenizer.json"
    if not tok_path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json; export writes the model with its tokenizer")
    tok_config = path / "tokenizer_config.json"
    tc = read_json(tok_config, limit=MAX_CONFIG_BYTES) if tok_config.is_file() else None
    return Source(config, tensors, tok_path.read_text(encoding="utf-8"), tc, gguf_tokenizer_from_json(
        tok_path.read_text(encoding="utf-8"), config, tc, source=str(tok_path)))


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
                             source: str) -> dict[str, Any]:
    """``tokenizer.ggml.*`` metadata of a byte-level BPE tokenizer.json (empty when it has no GGUF spelling)."""
    data = json.loads(text)
    model = data.get("model", {})
    pre = _pre_type(data.get("pre_tokenizer"))
    if model.get("type") != "BPE" or pre is None:
        return {}
    vocab: dict[str, int] = dict(model["vocab"])
    for added in data.get("added_tokens", []):
        vocab.setdefault(added["content"], added["id"])
    tokens = [""] * (max(vocab.values()) + 1)
    for token, i in vocab.items():
        tokens[i] = token
    special = {a["id"] for a in data.get("added_tokens", []) if a.get("special")}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    meta: dict[str, Any] = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
                            "tokenizer.ggml.token_type": [3 if i in special else 1 for i in range(len(tokens))],
                            "tokenizer.ggml.merges": merges}
    for key, hf in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"), ("padding_token_id",
                                                                                          "pad_token_id")):
        if config.get(hf) is not None:
            meta[f"tokenizer.ggml.{key}"] = int(config[hf])
    template = (tokenizer_config or {}).get("chat_template")
    if isinstance(template, str):
        meta["tokenizer.chat_template"] = template
    return meta


# -- writing -------------------------------------------------------------------------------------------------


def exported_config(src: Source, spelled: RopeSpelling) -> dict[str, Any]:
    config = {k: v for k, v in src.hf_config.items() if k not in ("rope_scaling", "rope_parameters", "rope_theta")}
    config["rope_parameters"] = spelled.hf
    config["rope_theta"] = spelled.hf["rope_theta"]
    config["max_position_embeddings"] = spelled.max_position_embeddings
    config.setdefault("architectures", ["LlamaForCausalLM"])
    config.setdefault("tie_word_embeddings", "lm_head.weight" not in src.tensors)
    return config


def write_hf(out: Path, src: Source, config: dict[str, Any]) -> list[Path]:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in src.tensors.items()
               if not (k == "lm_head.weight" and config.get("tie_word_embeddings"))}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "tokenizer.json").write_text(src.tokenizer_json, encoding="utf-8")
    paths = [out / "config.json", out / "model.safetensors", out / "tokenizer.json"]
    if src.tokenizer_config is not None:
        (out / "tokenizer_config.json").write_text(json.dumps(src.tokenizer_config, indent=2) + "\n", encoding="utf-8")
        paths.append(out / "tokenizer_config.json")
    return paths


def _gguf_tensors(src: Source, config: dict[str, Any]) -> Iterator[tuple[str, Tensor]]:
    """(GGUF name, float32 tensor in llama.cpp's layout): q/k rows half → interleaved per head."""
    from posenc.formats.gguf import _gguf_name

    heads = {"q_proj": config["num_attention_heads"], "k_proj": config.get("num_key_value_heads",
                                                                           config["num_attention_heads"])}
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    for name, t in src.tensors.items():
        if name == "lm_head.weight" and config.get("tie_word_embeddings"):
            continue
        proj = name.split(".")[-2]
        if proj in heads:
            # llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute: each head's (2, d/2) halves → (d/2, 2) pairs
            t = convert_qk_weight(t, num_heads=heads[proj], head_dim=head_dim, source="half", target="interleaved")
        yield _gguf_name(name), t


def write_gguf(path: Path, src: Source, config: dict[str, Any], spelled: RopeSpelling) -> Path:
    """A float32 llama GGUF with the RoPE keys of ``spelled`` and the source's tokenizer metadata."""
    import gguf

    if not src.gguf_tokenizer:
        raise ValueError("the tokenizer has no GGUF spelling posenc writes (byte-level BPE with a GPT-2 or SmolLM "
                         "pre-tokenizer); export --format hf only")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(str(config.get("_name_or_path", "posenc export")))
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
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    rope = spelled.gguf
    writer.add_rope_freq_base(float(rope.get("freq_base", spelled.hf["rope_theta"])))
    if "scaling.type" in rope:
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope["scaling.type"]))
        writer.add_rope_scaling_factor(float(rope["scaling.factor"]))
    if "scaling.original_context_length" in rope:
        writer.add_rope_scaling_orig_ctx_len(int(rope["scaling.original_context_length"]))
        writer.add_rope_scaling_attn_factors(float(rope["scaling.attn_factor"]))
        writer.add_rope_scaling_yarn_beta_fast(float(rope["scaling.yarn_beta_fast"]))
        writer.add_rope_scaling_yarn_beta_slow(float(rope["scaling.yarn_beta_slow"]))
    tok = src.gguf_tokenizer
    writer.add_tokenizer_model(str(tok["tokenizer.ggml.model"]))
    writer.add_tokenizer_pre(str(tok.get("tokenizer.ggml.pre", "default")))
    writer.add_token_list(list(tok["tokenizer.ggml.tokens"]))
    writer.add_token_types([int(t) for t in tok.get("tokenizer.ggml.token_type", [])] or
                           [1] * len(tok["tokenizer.ggml.tokens"]))
    if tok.get("tokenizer.ggml.merges"):
        writer.add_token_merges(list(tok["tokenizer.ggml.merges"]))
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("padding_token_id", writer.add_pad_token_id), ("unknown_token_id", writer.add_unk_token_id)):
        if f"tokenizer.ggml.{key}" in tok:
            add(int(tok[f"tokenizer.ggml.{key}"]))
    if "tokenizer.ggml.add_bos_token" in tok:
        writer.add_add_bos_token(bool(tok["tokenizer.ggml.add_bos_token"]))
    if "tokenizer.chat_template" in tok:
        writer.add_chat_template(str(tok["tokenizer.chat_template"]))
    for name, t in _gguf_tensors(src, config):
        writer.add_tensor(name, t.detach().to(torch.float32).contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def export_model(source: str | Path, position: str, options: dict[str, Any], out: str | Path, *,
                 formats: tuple[str, ...] = FORMATS) -> dict[str, Any]:
    """Write ``source`` with ``position`` + ``options`` as an HF folder and/or a GGUF under ``out``.

    Returns:
        {"hf": [paths], "gguf": path, "rope_parameters": block, "gguf_rope": keys}.

    Raises:
        ValueError: a scheme with no spelling in an asked format (named, with the format), a model that is not
            a Llama-family model with one scheme for every layer, or options the scheme refuses.
    """
    from posenc import positions

    position = positions.canonical(position)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--format takes {', '.join(FORMATS)}, got {list(formats)}")
    check_exportable(position, formats)
    src = read_source(source)
    if src.hf_config.get("model_type") not in ("llama", None):
        raise ValueError(f"{source}: model_type {src.hf_config.get('model_type')!r}; export writes Llama-family "
                         "models with one RoPE for every layer")
    if src.hf_config.get("rope_scaling") or (src.hf_config.get("rope_parameters") or {}).get("rope_type",
                                                                                             "default") != "default":
        raise ValueError(f"{source}: the checkpoint is already RoPE-scaled; export starts from plain RoPE")
    heads = int(src.hf_config["num_attention_heads"])
    head_dim = int(src.hf_config.get("head_dim") or int(src.hf_config["hidden_size"]) // heads)
    rotary_dim = int(head_dim * float(src.hf_config.get("partial_rotary_factor", 1.0)))
    base = float((src.hf_config.get("rope_parameters") or {}).get("rope_theta", src.hf_config.get("rope_theta",
                                                                                                  10000.0)))
    l0 = int(src.hf_config["max_position_embeddings"])
    if "original_max_len" in positions.option_names(position) and "original_max_len" not in options:
        options = {**options, "original_max_len": l0}  # the checkpoint's L0, not the scheme's generic default
    # the scheme itself checks the options (a typo or a bad value fails here, before anything is written)
    built = positions.build(position, dim=heads * head_dim, num_heads=heads, base=base, **options)
    given = {k: v for k, v in built.options().items() if k not in ("head_dim", "base", "pairing", "rotary_dim")}
    if position != "rope" and "factor" not in options:
        raise ValueError(f"--position {position} needs --position-option factor=S (the extension factor)")
    spelled = spelling(position, given, base=base, rotary_dim=rotary_dim, l0=l0)
    config = exported_config(src, spelled)
    out = Path(out)
    result: dict[str, Any] = {"rope_parameters": spelled.hf, "gguf_rope": spelled.gguf,
                              "max_position_embeddings": spelled.max_position_embeddings}
    if "hf" in formats:
        result["hf"] = [str(p) for p in write_hf(out, src, config)]
    if "gguf" in formats:
        out.mkdir(parents=True, exist_ok=True)
        result["gguf"] = str(write_gguf(out / "model.gguf", src, config, spelled))
    return result


__all__ = ["FORMATS", "GGUF_TYPES", "HF_TYPES", "REFUSED", "check_exportable", "export_model", "refusal", "spelling"]
