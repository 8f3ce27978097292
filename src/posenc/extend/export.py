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
  ``.factor``, ``.original_context_length``, ``.yarn_beta_fast``,
  ``.yarn_beta_slow`` and, only for an attention factor other than YaRN's own
  0.1·ln s + 1, ``.attn_factor`` = that factor ÷ (0.1·ln s + 1): llama.cpp
  applies YaRN's own factor itself and multiplies this key on top (a file
  holding the whole factor there reads 0.1·ln s + 1 twice; checked against
  llama.cpp, ``benchmarks/extend/export_check.py --llama-logits``); each head's
  q and k rows permuted into llama.cpp's interleaved order exactly as its
  ``convert_hf_to_gguf.py`` does for llama (``posenc.formats.gguf`` reads them
  back with the inverse); the tokenizer as
  ``tokenizer.ggml.*`` metadata — a GGUF source's own, key by key (a
  SentencePiece vocabulary with its scores), or an HF folder's tokenizer.json
  converted: byte-level BPE (SmolLM2, GPT-2) or SentencePiece BPE (Gemma 3,
  Llama 2; ``posenc.formats.gguf_spm.spm_gguf_vocabulary``: scores from the
  vocabulary's order); any other tokenizer.json: ``--format hf`` only.

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
from collections.abc import Iterator
from dataclasses import dataclass
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
    text = tok_path.read_text(encoding="utf-8")
    try:
        return Source(config, tensors, text, tc, gguf_tokenizer_from_json(text, config, tc, source=str(tok_path)))
    except ValueError as e:  # an HF folder can still be written; a GGUF is refused with this reason
        return Source(config, tensors, text, tc, {}, str(e))


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
    """``tokenizer.ggml.*`` metadata of a byte-level BPE or a SentencePiece tokenizer.json (empty when it has no
    GGUF spelling), with config.json's special ids and tokenizer_config.json's chat template."""
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
    if meta["tokenizer.ggml.model"] == "llama":  # SentencePiece: whether BOS / EOS go around a text, as HF says
        from tokenizers import Tokenizer

        from posenc.pretrained.tokenizer import adds_special

        tok = Tokenizer.from_str(text)
        for x in ("bos", "eos"):
            meta[f"tokenizer.ggml.add_{x}_token"] = adds_special(tok, tokenizer_config, x,
                                                                 meta.get(f"tokenizer.ggml.{x}_token_id"))
    template = (tokenizer_config or {}).get("chat_template")
    if isinstance(template, str):
        meta["tokenizer.chat_template"] = template
    return meta


# -- writing -------------------------------------------------------------------------------------------------


def exported_config(src: Source, spelled: dict[str | None, RopeSpelling], main: str | None) -> dict[str, Any]:
    """The source's config.json with the RoPE block(s) of ``spelled`` ({layer type or None: spelling})."""
    config = {k: v for k, v in src.hf_config.items()
              if k not in ("rope_scaling", "rope_parameters", "rope_theta", "rope_local_base_freq")}
    if main is None:
        config["rope_parameters"] = spelled[None].hf
        config["rope_theta"] = spelled[None].hf["rope_theta"]
    else:  # transformers 5's per-layer-type form, each block with its own base
        config["rope_parameters"] = {t: s.hf for t, s in spelled.items()}
    config["max_position_embeddings"] = spelled[main].max_position_embeddings
    config.setdefault("architectures", ["LlamaForCausalLM" if main is None else "Gemma3ForCausalLM"])
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


def _gguf_tensors(src: Source, config: dict[str, Any], arch: str = "llama") -> Iterator[tuple[str, Tensor]]:
    """(GGUF name, float32 tensor in llama.cpp's layout) as its converter writes architecture ``arch``:
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
        yield _gguf_name(name, arch), t


def _add_tokenizer(writer: Any, tok: dict[str, Any]) -> None:
    """The source's ``tokenizer.*`` metadata, key by key (a SentencePiece vocabulary keeps its scores)."""
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


def write_gguf(path: Path, src: Source, config: dict[str, Any], spelled: RopeSpelling, *,
               arch: str = "llama") -> Path:
    """A float32 GGUF of architecture ``arch`` with the RoPE keys of ``spelled`` (Gemma 3: its global layers')
    and the source's tokenizer metadata."""
    import gguf

    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer = gguf.GGUFWriter(str(path), arch)
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
    _add_tokenizer(writer, src.gguf_tokenizer)
    for name, t in _gguf_tensors(src, config, arch):
        writer.add_tensor(name, t.detach().to(torch.float32).contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def export_model(source: str | Path, position: str, options: dict[str, Any], out: str | Path, *,
                 formats: tuple[str, ...] = FORMATS, layers: str | None = None) -> dict[str, Any]:
    """Write ``source`` with ``position`` + ``options`` as an HF folder and/or a GGUF under ``out``.

    Args:
        layers: which layers take the scheme in a Gemma 3 checkpoint — ``global`` (None: the family's own
            choice) or ``all``/``rotary``; a llama checkpoint has one scheme for every layer (any choice).

    Returns:
        {"hf": [paths], "gguf": path, "rope_parameters": block (Gemma 3: a block per layer type),
        "gguf_rope": keys, "max_position_embeddings": N, "layers": the choice applied}.

    Raises:
        ValueError: a scheme with no spelling in an asked format (named, with the format), a model outside
            ``FAMILIES``, an already scaled checkpoint, a layer choice the asked format cannot state, or
            options the scheme refuses. Nothing is written then.
    """
    from posenc import positions
    from posenc.extend.methods import LAYER_CHOICES

    position = positions.canonical(position)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--format takes {', '.join(FORMATS)}, got {list(formats)}")
    if layers is not None and layers not in LAYER_CHOICES:
        raise ValueError(f"--layers {layers!r} is not one of {', '.join(LAYER_CHOICES)}")
    check_exportable(position, formats)
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
    config = exported_config(src, spelled, main)
    out = Path(out)
    result: dict[str, Any] = {"rope_parameters": config["rope_parameters"], "gguf_rope": spelled[main].gguf,
                              "max_position_embeddings": spelled[main].max_position_embeddings, "layers": choice}
    if "hf" in formats:
        result["hf"] = [str(p) for p in write_hf(out, src, config)]
    if "gguf" in formats:
        out.mkdir(parents=True, exist_ok=True)
        result["gguf"] = str(write_gguf(out / "model.gguf", src, config, spelled[main], arch=arch))
    return result


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


__all__ = ["FAMILIES", "FORMATS", "GGUF_TYPES", "HF_TYPES", "REFUSED", "check_exportable", "check_gemma3_gguf",
           "export_model", "refusal", "spelling"]
