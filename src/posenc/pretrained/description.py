"""One reading of a model: what a checkpoint *is*, read once and shared by every command.

    from posenc.pretrained.description import describe
    d = describe("gemma-3-270m-q4_k_m.gguf")            # a .gguf file, an HF folder or a config.json
    d.family, d.trained_context, d.layer_groups()[0]     # "gemma3", 32768, (spec of the sliding layers, [0, 1, …])
    d.tokenizer.chat_template[:40], d.tokenizer.add_bos
    json.dumps(d.to_dict())                              # plain data: it round-trips through JSON

A model's facts — its family and that family's defaults (Gemma 3's local base
and every-sixth-layer plan, which a GGUF does not carry), its per-layer plan
(scheme, options, window, query scale), its trained context L₀, its
tokenizer's special ids, BOS behaviour and chat template, and how its weights
are stored — are derived here and nowhere else:

    file → posenc.formats (bytes, bounded and checked)
         → posenc.families (the family's reader and its defaults)
         → ModelDescription
         → the loader (``load_pretrained``), ``posenc rope``, ``inspect``, ``extend``,
           ``finetune``, ``export`` and ``generate --chat``

The description is never patched by a command: a command that needs a fact it
lacks adds it here. ``model_config(pairing)`` rebuilds the family's model config
(``DecoderConfig`` for decoders) from the description's HF-style config by the same
family reader the loader uses, so the plan ``posenc rope`` prints is the plan the
loaded model runs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

#: What a description was read from.
FORMATS = ("gguf", "hf-folder", "config")


@dataclass(frozen=True)
class TokenizerFacts:
    """What every command needs to know of a model's tokenizer, without the tokenizer itself.

    Attributes:
        bos_id, eos_id, pad_id, unk_id: the special ids (None where the model has none).
        eos_ids: every id that ends a generation (some models list several), ``eos_id`` first.
        add_bos: the model expects BOS before a text (GGUF ``tokenizer.ggml.add_bos_token``; an HF folder's
            ``add_bos_token`` or its post-processor).
        chat_template: the Jinja chat template, or None.
        tokens: the special tokens' strings by role (``bos_token``, ``eos_token``, …), as a template sees them.
    """

    bos_id: int | None = None
    eos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    pad_id: int | None = None
    unk_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tokenizer: Any, *, pad_id: int | None = None, unk_id: int | None = None) -> "TokenizerFacts":
        """The facts of a loaded ``posenc.pretrained.tokenizer.Tokenizer``."""
        named = getattr(tokenizer, "special_tokens_map", None)  # as a chat template sees them
        tokens = {k: v for k, v in dict(named or {}).items() if isinstance(v, str)}
        for role, token_id in (("bos_token", tokenizer.bos_id), ("eos_token", tokenizer.eos_id),
                               ("pad_token", pad_id), ("unk_token", unk_id)):
            piece = tokenizer.token(token_id) if token_id is not None and named is None else None
            if piece is not None:
                tokens[role] = piece
        return cls(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, eos_ids=tuple(tokenizer.eos_ids), pad_id=pad_id,
                   unk_id=unk_id, add_bos=bool(tokenizer.add_bos), chat_template=tokenizer.chat_template,
                   tokens=tokens)


@dataclass(frozen=True)
class ModelDescription:
    """A checkpoint's facts as plain data (see the module docstring).

    Attributes:
        source: the path given.
        format: "gguf", "hf-folder" or "config" (a bare config.json: no weights, no tokenizer).
        model_type: the HF ``model_type`` (for a GGUF: the type its architecture is read as).
        family: posenc's family name (``posenc.families``), or None for a model type posenc does not run.
        hf_config: the model's settings under HF ``config.json`` keys, family defaults for what the file does
            not state filled in (for a GGUF: what the file means; for a folder: its config.json as read).
        plan: one ``posenc.plan.LayerSpec`` dict per decoder layer, as the loader builds it (empty for
            encoders, encoder–decoders and types posenc does not run).
        trained_context: L₀, the context the checkpoint was trained for (``max_position_embeddings``).
        rope_original_context: the pre-scaling context a RoPE scaling in the config names
            (``original_max_position_embeddings``), or None.
        tokenizer: the tokenizer's facts, or None (not read, or the checkpoint has none).
        weights: how the weights are stored: {"file", "bytes", "types": {stored type: tensor count}}.
        supplied: facts the file does not state, taken from the family's defaults (one sentence each).
    """

    source: str
    format: str
    model_type: str
    family: str | None
    hf_config: dict[str, Any]
    plan: tuple[dict[str, Any], ...] = ()
    trained_context: int | None = None
    rope_original_context: int | None = None
    tokenizer: TokenizerFacts | None = None
    weights: dict[str, Any] = field(default_factory=dict)
    supplied: tuple[str, ...] = ()

    def model_config(self, pairing: str = "interleaved") -> Any:
        """The family's model config (``DecoderConfig`` for decoders) — the one the loader builds the model from.

        Raises:
            ValueError: posenc does not run this model type, or the family's reader refuses the config.
        """
        from posenc.pretrained.hf import llama_config_from_hf
        from posenc.pretrained.stacks import is_stack_family

        if self.family is None:
            raise ValueError(f"{self.source}: model_type {self.model_type!r} is not one posenc runs")
        if is_stack_family(self.hf_config):
            from posenc.families import config_from_hf

            return config_from_hf(self.hf_config, source=self.source)
        return llama_config_from_hf(self.hf_config, pairing=pairing, source=self.source)

    def layer_groups(self) -> list[tuple[dict[str, Any], list[int]]]:
        """The plan's distinct layer specs, each with the indices of the layers that run it (first-seen order)."""
        groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
        for i, spec in enumerate(self.plan):
            key = json.dumps(spec, sort_keys=True)
            groups.setdefault(key, (spec, []))[1].append(i)
        return list(groups.values())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["plan"] = [dict(s) for s in self.plan]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelDescription":
        tok = data.get("tokenizer")
        return cls(**{**data, "plan": tuple(data.get("plan") or ()), "supplied": tuple(data.get("supplied") or ()),
                      "tokenizer": None if tok is None else TokenizerFacts(**{**tok, "eos_ids": tuple(tok["eos_ids"])})})


@dataclass
class Reading:
    """What :func:`read_model` read, for the loader: the description plus the open file and built tokenizer, so
    that nothing is read twice."""

    description: ModelDescription
    mapped: Any = None  # posenc.formats.gguf.MappedGGUF of a GGUF file
    tokenizer: Any = None  # posenc.pretrained.tokenizer.Tokenizer, when asked for


def describe(path: str | Path, *, tokenizer: bool = True) -> ModelDescription:
    """The :class:`ModelDescription` of a ``.gguf`` file, an HF model folder, a ``config.json`` or a short name of
    ``posenc models`` ("smollm2", "gemma3").

    Args:
        tokenizer: also read the tokenizer's facts (builds the tokenizer: a second or two for large vocabularies).

    Raises:
        FileNotFoundError: nothing at ``path``, or a folder without config.json.
        ValueError: a file or config the loader would refuse, with the loader's message.
    """
    return read_model(path, tokenizer=tokenizer).description


def read_model(path: str | Path, *, tokenizer: bool = True) -> Reading:
    """:func:`describe`, keeping what the loader reuses (the GGUF's memory map, the tokenizer)."""
    from posenc.pretrained.catalogue import MODELS, resolve

    if not Path(path).exists() and str(path).lower() in MODELS:  # a short name: `posenc models`
        path = resolve(path)
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").exists():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:  # a folder holding one .gguf (an installed model package) opens it
                return read_model(ggufs[0], tokenizer=tokenizer)
            raise FileNotFoundError(f"{path}: no config.json; a model folder needs config.json next to its "
                                    ".safetensors weights" + (f" (it holds {len(ggufs)} .gguf files: name one)"
                                                              if ggufs else ""))
        return _read_folder(path, tokenizer=tokenizer)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; give an HF model folder, a .gguf file or a "
                                "config.json")
    from posenc.validation import regular_file

    regular_file(path, "the model file")  # a FIFO or a device would block the read
    with path.open("rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return _read_gguf(path, tokenizer=tokenizer)
    if path.suffix.lower() == ".gguf":
        from posenc.formats.gguf import GGUFError

        raise GGUFError(f"{path}: not a GGUF file (it starts with {magic!r}, a GGUF file starts with b'GGUF'). "
                        "Point posenc at a .gguf file written by llama.cpp or the gguf package")
    if path.suffix.lower() == ".json":
        return Reading(describe_config(_read_config(path), source=str(path)))
    from posenc.formats.safetensors import refuse_pickle

    refuse_pickle(path)
    raise ValueError(f"{path}: give the model's folder (config.json + *.safetensors + tokenizer.json), a .gguf file "
                     "or a config.json, not a single weight file")


def describe_config(hf: dict[str, Any], *, source: str = "config.json", format: str = "config",
                    tokenizer: TokenizerFacts | None = None, weights: dict[str, Any] | None = None,
                    supplied: tuple[str, ...] = (), config_source: str | None = None) -> ModelDescription:
    """The description of an HF-style config dict (the family's reader decides the plan and checks every field).

    A ``model_type`` posenc does not run is described without a family or plan (``posenc rope`` still reads its
    RoPE block); one posenc runs but whose config its reader refuses is refused here, by the reader's message
    (naming ``config_source``, default ``source``: a folder's messages name its config.json).
    """
    from posenc.families import family_for
    from posenc.families.hf_config import HFConfig

    named = config_source or source
    HFConfig(hf, source=named)  # a JSON object
    model_type = str(hf.get("model_type"))
    try:
        family = family_for(hf, source=named)
    except ValueError:
        family = None
    description = ModelDescription(source=source, format=format, model_type=model_type,
                                   family=None if family is None else family.name, hf_config=dict(hf),
                                   tokenizer=tokenizer, weights=weights or {}, supplied=supplied)
    if family is None:
        return _with_context(description, None)
    # the reader's checks (messages naming the config file); the pairing does not change the facts
    config = replace(description, source=named).model_config(pairing="half")
    plan = tuple(spec.to_dict() for spec in getattr(config, "plan", ()))
    return _with_context(replace(description, plan=plan), config)


def _with_context(d: ModelDescription, config: Any) -> ModelDescription:
    """Fill L₀ (and the RoPE scaling's pre-scaling context) from the model config or, failing that, the dict."""
    hf = d.hf_config
    trained = getattr(config, "max_position_embeddings", None)
    if trained is None:
        value = hf.get("max_position_embeddings", hf.get("n_positions"))
        trained = value if isinstance(value, int) and not isinstance(value, bool) else None
    original = None
    for spec in d.plan:
        value = spec.get("position_options", {}).get("original_max_len")
        if isinstance(value, int):
            original = value
            break
    return replace(d, trained_context=None if trained is None else int(trained), rope_original_context=original)


def _read_config(path: Path) -> dict[str, Any]:
    from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json

    config = read_json(path, limit=MAX_CONFIG_BYTES)  # not JSON: refused naming the file
    if not isinstance(config, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(config).__name__}; use the config.json that came with the weights")
    return config


def _read_folder(folder: Path, *, tokenizer: bool) -> Reading:
    from posenc.pretrained.tokenizer import load_hf_tokenizer

    hf = _read_config(folder / "config.json")
    if tokenizer:
        from posenc.progress import stage

        stage("building the tokenizer")  # shown when inside a slow load (posenc.progress.Stages)
    tok = load_hf_tokenizer(folder, hf) if tokenizer else None
    facts = None
    if tok is not None:
        pad, unk = hf.get("pad_token_id"), None
        facts = TokenizerFacts.of(tok, pad_id=pad if isinstance(pad, int) and not isinstance(pad, bool) else None,
                                  unk_id=unk)
    files = sorted(folder.glob("*.safetensors"))
    weights = {"file": [f.name for f in files], "bytes": sum(f.stat().st_size for f in files if f.is_file())}
    if files:
        weights["types"] = _safetensors_types(files)
    return Reading(describe_config(hf, source=str(folder), format="hf-folder", tokenizer=facts, weights=weights,
                                   config_source=str(folder / "config.json")), tokenizer=tok)


def _safetensors_types(files: list[Path]) -> dict[str, int]:
    """{dtype: tensor count} from the safetensors headers (bounded reads; nothing else is read)."""
    from posenc.formats.safetensors import read_header

    counts: Counter[str] = Counter()
    for f in files:
        try:
            header = read_header(f)
        except (ValueError, OSError):
            return {}
        counts.update(str(entry.dtype) for entry in header.values())
    return dict(counts)


def _read_gguf(path: Path, *, tokenizer: bool) -> Reading:
    from posenc.formats.gguf import config_from_metadata, dequantize, open_mapped
    from posenc.formats.gguf_arch import ARCHS, ROPE_FREQS

    mapped = open_mapped(path)  # posenc's bounded header walk; tensor bytes stay on disk
    meta = mapped.metadata
    arch = meta.get("general.architecture")
    types = Counter(t.tensor_type.name for t in mapped.tensors)
    weights = {"file": path.name, "bytes": path.stat().st_size, "types": dict(types)}
    if arch not in ARCHS:  # an architecture posenc does not load: described from its generic keys alone
        return Reading(ModelDescription(source=str(path), format="gguf", model_type=f"gguf:{arch}", family=None,
                                        hf_config=generic_gguf_config(meta, path), weights=weights,
                                        supplied=(f"posenc does not load GGUF architecture {arch!r}: its RoPE is read "
                                                  f"from the {arch}.rope.* keys alone, without the architecture's "
                                                  "defaults",)),
                       mapped=mapped)
    freqs = next((dequantize(t, path).reshape(-1) for t in mapped.tensors if t.name == ROPE_FREQS), None)
    hf = config_from_metadata(meta, path, rope_freqs=freqs)
    hf["tie_word_embeddings"] = not any(t.name == "output.weight" for t in mapped.tensors)
    supplied = ARCHS[arch].supplied
    tok, facts = None, None
    if tokenizer:
        from posenc.pretrained.tokenizer import gguf_tokenizer

        from posenc.progress import stage

        stage("building the tokenizer")  # shown when inside a slow load (posenc.progress.Stages)
        tok = gguf_tokenizer(meta, path)
        get = lambda key: int(meta[key]) if key in meta else None  # noqa: E731
        facts = TokenizerFacts.of(tok, pad_id=get("tokenizer.ggml.padding_token_id"),
                                  unk_id=get("tokenizer.ggml.unknown_token_id"))
    return Reading(describe_config(hf, source=str(path), format="gguf", tokenizer=facts, weights=weights,
                                   supplied=supplied), mapped=mapped, tokenizer=tok)


def generic_gguf_config(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """An HF-style dict of a GGUF file's RoPE metadata for an architecture posenc does not load
    (``{arch}.rope.*`` keys): enough for ``posenc rope`` to read its RoPE, with nothing filled in."""
    from posenc.formats.gguf import GGUFError, _rope_scaling
    from posenc.formats.gguf_header import check_values

    check_values(meta, path)  # typed and bounded: no array, string or zero reaches the arithmetic below
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{path}: GGUF metadata has no general.architecture")
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
    heads = int(get("attention.head_count", 1) or 1)
    hidden = int(get("embedding_length", 0))
    head_dim = int(get("attention.key_length", hidden // heads if heads else 0))
    rope_dim = int(get("rope.dimension_count", head_dim))
    if head_dim < 2 or rope_dim > head_dim or rope_dim % 2:
        raise ValueError(f"{path}: the head width {head_dim} ({arch}.attention.key_length, or embedding_length / "
                         f"attention.head_count) and rope.dimension_count {rope_dim} must be an even count of rotated "
                         "channels within a head of at least 2; the file is corrupt")
    config: dict[str, Any] = {"model_type": f"gguf:{arch}", "num_attention_heads": heads, "hidden_size": hidden,
                              "head_dim": head_dim, "max_position_embeddings": int(get("context_length", 2048)),
                              "num_hidden_layers": int(get("block_count", 0))}
    if rope_dim != head_dim:
        config["partial_rotary_factor"] = rope_dim / head_dim
    if get("rope.freq_base") is not None:
        config["rope_theta"] = float(get("rope.freq_base"))
    try:  # the scaling as the loader reads it (linear, yarn: with llama.cpp's attention factor)
        block = _rope_scaling(meta, arch, path)
    except GGUFError:  # a type the loader does not run: stated as the file states it, for rope to read
        factor = get("rope.scaling.factor", get("rope.scale_linear"))
        block = {"rope_type": str(get("rope.scaling.type")), "factor": None if factor is None else float(factor)}
        if get("rope.scaling.original_context_length") is not None:
            block["original_max_position_embeddings"] = int(get("rope.scaling.original_context_length"))
    if block is not None:
        config["rope_scaling"] = block
    return config


__all__ = ["ModelDescription", "Reading", "TokenizerFacts", "describe", "describe_config", "read_model"]
