"""Finding a checkpoint's position table, token table and output head; tying; RoPE from config.

Tensor names differ across architectures but follow a few habits. Each role
has an ordered list of name *suffixes* (matched on a ``.`` boundary — or ``/``
in CTranslate2's names — so any prefix such as ``bert.``, ``transformer.``,
``model.decoder.`` or ``decoder/`` is allowed);
the first suffix that matches wins, and among several tensors matching it the
shortest name (the outermost module) is taken. The user can name any tensor
explicitly instead.

============  ==========================================================
role          usual names (architecture)
============  ==========================================================
position      ``wpe`` (GPT-2), ``embeddings.position_embeddings`` (BERT,
              MiniLM, RoBERTa, ELECTRA), ``embed_positions`` (OPT, BART:
              rows offset by 2), ``position_embeddings`` (GPT-Neo)
token         ``wte`` (GPT-2), ``embeddings.word_embeddings`` (BERT),
              ``embed_tokens`` (Llama, OPT, BART, Mistral), ``shared`` (T5),
              ``embed_in`` (GPT-NeoX), ``tok_embeddings`` (Meta Llama),
              ``word_embeddings`` (BLOOM)
head          ``lm_head`` (GPT-2, Llama, T5), ``cls.predictions.decoder``
              (BERT MLM), ``lm_head.decoder`` (RoBERTa), ``embed_out``
              (GPT-NeoX), ``output`` (Meta Llama, exact name only)
relative      ``relative_attention_bias`` (T5: buckets × heads)
============  ==========================================================

CTranslate2 models (``formats/ctranslate2.py``) name them
``decoder/position_encodings/encodings``, ``decoder/embeddings/weight`` and
``decoder/projection/weight``; an encoder–decoder's ``encoder/…`` table is
found next to the decoder's and measured too.

Rotary models keep no position table: their angles come from ``config.json``
(``rope_theta`` or ``rope_parameters``, ``rope_scaling``, ``head_dim``,
``partial_rotary_factor``/``rotary_pct``/``rotary_dim``), which
:func:`rope_from_config` turns into the matching scheme of the registry.
ALiBi models (BLOOM, MPT, Falcon with ``alibi``) keep none either: their
slopes follow from the head count (and MPT's ``alibi_bias_max``), which
:func:`alibi_from_config` turns into the registry's ``alibi``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from posenc.formats.safetensors import Checkpoint, CheckpointError, to_float64
from posenc.positions import PositionScheme, alibi_slopes, build, names, option_names

ROLE_SUFFIXES: dict[str, tuple[str, ...]] = {
    "position": ("wpe.weight", "embeddings.position_embeddings.weight", "embed_positions.weight",
                 "position_embeddings.weight", "pos_embed.weight", "position_embedding.weight",
                 "position_encodings/encodings"),
    "token": ("wte.weight", "embeddings.word_embeddings.weight", "embed_tokens.weight", "shared.weight",
              "embed_in.weight", "tok_embeddings.weight", "word_embeddings.weight", "token_embedding.weight",
              "embeddings/weight"),
    "head": ("lm_head.weight", "cls.predictions.decoder.weight", "lm_head.decoder.weight", "embed_out.weight",
             "projection/weight"),
    "relative": ("relative_attention_bias.weight",),
}
#: Exact names (no prefix allowed) tried after the suffixes.
ROLE_EXACT: dict[str, tuple[str, ...]] = {"head": ("output.weight",)}
#: Model types whose learned position rows start at index 2 (fairseq's padding offset).
POSITION_OFFSET_2 = ("opt", "bart", "mbart", "blenderbot", "plbart", "biogpt")
#: Model types whose positions start at pad_token_id + 1 (fairseq's RoBERTa convention); their
#: ``max_position_embeddings`` counts those rows too.
POSITION_AFTER_PADDING = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "mpnet",
                          "data2vec-text", "ibert")
#: Architectures (config ``architectures``) that carry an output head over the vocabulary.
HEAD_SUFFIXES = ("LMHeadModel", "ForCausalLM", "ForMaskedLM", "ForConditionalGeneration", "ForPreTraining",
                 "MTModel")  # MarianMTModel


def _matches(name: str, suffix: str) -> bool:
    return name == suffix or name.endswith(("." + suffix, "/" + suffix))


def find_role(names_: list[str], role: str) -> list[str]:
    """Tensor names that fill ``role``, best first (empty when none does)."""
    for suffix in ROLE_SUFFIXES[role]:
        hits = sorted((n for n in names_ if _matches(n, suffix)), key=lambda n: (n.count(".") + n.count("/"), n))
        if hits:
            return hits
    return [n for n in ROLE_EXACT.get(role, ()) if n in names_]


@dataclass
class Located:
    """Which tensor plays which role, and what else was noticed on the way."""

    position: str | None = None
    token: str | None = None
    head: str | None = None
    relative: list[str] = field(default_factory=list)
    position_offset: int = 0
    also: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def default_offset(cfg: dict[str, Any], name: str) -> tuple[int, bool]:
    """Rows of position table ``name`` before position 0 by the model type's convention, and whether
    ``max_position_embeddings`` counts them (fairseq's RoBERTa does, OPT/BART do not)."""
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type in POSITION_OFFSET_2 and name.endswith("embed_positions.weight"):
        return 2, False
    if model_type in POSITION_AFTER_PADDING:
        return int(cfg.get("pad_token_id", 1)) + 1, True
    return 0, False


def _check_matrix(ckpt: Checkpoint, name: str, role: str) -> tuple[int, int]:
    shape = ckpt.shape(name)
    if len(shape) != 2 or 0 in shape:
        raise CheckpointError(f"{ckpt.source}: the {role} tensor {name!r} has shape {list(shape)}; a {role} table "
                              f"must be a non-empty matrix (rows × width). Name another one with --{role}-tensor")
    return shape[0], shape[1]


def locate(ckpt: Checkpoint, *, position: str | None = None, token: str | None = None,
           head: str | None = None, position_offset: int | None = None) -> Located:
    """Find the position table, token table and output head of ``ckpt``.

    Explicit names override the search (and must exist). Shapes are checked
    against each other and against ``config.json``.

    Raises:
        CheckpointError: a named tensor is missing, a table is not a matrix, or
            widths/row counts disagree with each other or with the config.
    """
    all_names = ckpt.names()
    found = Located()
    for role, explicit in (("position", position), ("token", token), ("head", head)):
        if explicit is not None:
            ckpt.shape(explicit)  # raises, naming close matches, when missing
            setattr(found, role, explicit)
            continue
        hits = find_role(all_names, role)
        if hits:
            setattr(found, role, hits[0])
            if len(hits) > 1:
                found.also[role] = hits[1:]
    found.relative = find_role(all_names, "relative")
    cfg = ckpt.config
    model_type = str(cfg.get("model_type", "")).lower()

    if found.token is not None:
        rows, width = _check_matrix(ckpt, found.token, "token")
        vocab_size = cfg.get("vocab_size")
        if isinstance(vocab_size, int) and vocab_size != rows:
            raise CheckpointError(
                f"{ckpt.source}: config.json says vocab_size={vocab_size} but the token table {found.token!r} has "
                f"{rows} rows; fix config.json or name the right tensor with --token-tensor")
    if found.head is not None:
        _check_matrix(ckpt, found.head, "head")
    if found.position is not None:
        rows, width = _check_matrix(ckpt, found.position, "position")
        if found.token is not None and width != ckpt.shape(found.token)[1]:
            raise CheckpointError(
                f"{ckpt.source}: the position table {found.position!r} is {width} wide but the token table "
                f"{found.token!r} is {ckpt.shape(found.token)[1]} wide; an added position table must match the "
                "token width — name the right tensors with --position-tensor / --token-tensor")
        counted = False  # does max_position_embeddings count the offset rows?
        if position_offset is None:
            position_offset, counted = default_offset(cfg, found.position)
        if not 0 <= position_offset < rows:
            raise ValueError(f"position offset {position_offset} must be in [0, {rows}) for a {rows}-row table")
        found.position_offset = position_offset
        if position_offset:
            found.notes.append(f"rows 0..{position_offset - 1} of {found.position!r} are a padding offset "
                               f"({model_type or 'user-given'}: position p is row p + {position_offset}); "
                               "they are left out of every measure")
        max_pos = cfg.get("max_position_embeddings", cfg.get("n_positions"))
        if isinstance(max_pos, int) and max_pos != rows - (0 if counted else position_offset):
            raise CheckpointError(
                f"{ckpt.source}: config.json says max_position_embeddings={max_pos} but {found.position!r} has "
                f"{rows} rows (offset {position_offset}); fix config.json, or pass --position-tensor/--position-offset")
    return found


# -- tying -------------------------------------------------------------------
def detect_tying(ckpt: Checkpoint, found: Located) -> dict[str, Any]:
    """Are the input (token) and output (head) tables one table?

    Evidence, strongest first: one storage (tensors in memory; the safetensors
    format itself forbids two names sharing bytes, so tied weights are saved
    once); equal values; a head missing from a checkpoint whose architecture
    has one (the tied copy is dropped at save time) read with the config's
    ``tie_word_embeddings`` (Hugging Face's default: true).

    Returns:
        {"status": "tied" | "untied" | "no-head" | "unknown", "evidence": str,
        "max_abs_diff": float | None}.
    """
    cfg = ckpt.config
    tie_cfg = cfg.get("tie_word_embeddings")
    if found.token is None:
        return {"status": "unknown", "evidence": "no token table found", "max_abs_diff": None}
    if found.head is None:
        archs = [str(a) for a in cfg.get("architectures", [])]
        has_head = any(a.endswith(HEAD_SUFFIXES) for a in archs)
        if has_head and tie_cfg is not False:
            return {"status": "tied", "max_abs_diff": None,
                    "evidence": f"{archs[0]} has an output head but the checkpoint stores none: it is the token "
                                "table reused (tie_word_embeddings="
                                f"{tie_cfg if tie_cfg is not None else 'default true'})"}
        if has_head:
            return {"status": "unknown", "max_abs_diff": None,
                    "evidence": f"config says tie_word_embeddings=false but no head tensor was found; "
                                "name it with --head-tensor"}
        return {"status": "no-head", "max_abs_diff": None,
                "evidence": f"no output-head tensor and architecture {archs or '(not given)'} has none "
                            "(an encoder without an LM head)"}
    if ckpt.shares_storage(found.token, found.head):
        return {"status": "tied", "evidence": "head and token table share storage", "max_abs_diff": 0.0}
    if ckpt.shape(found.token) != ckpt.shape(found.head):
        return {"status": "untied", "max_abs_diff": None,
                "evidence": f"shapes differ: token {list(ckpt.shape(found.token))}, "
                            f"head {list(ckpt.shape(found.head))}"}
    a, b = ckpt.tensor(found.token), ckpt.tensor(found.head)
    if torch.equal(a, b):
        return {"status": "tied", "evidence": "separate copies with identical values", "max_abs_diff": 0.0}
    diff = float((to_float64(a) - to_float64(b)).abs().max())
    scale = float(to_float64(a).abs().max())
    return {"status": "untied", "max_abs_diff": diff,
            "evidence": f"values differ: max |head − token| = {diff:.3g} (largest |token| entry {scale:.3g})"}


# -- RoPE from config ---------------------------------------------------------
def _rope_settings(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Base, scaling and widths of a rotary model from its config, or None when it has none."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else {}
    base = params.get("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base")))
    rotary_pct = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", cfg.get("rotary_pct")))
    if base is None and not params and "rotary_dim" not in cfg and rotary_pct is None:
        return None
    heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    hidden = cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if not (isinstance(heads, int) and isinstance(hidden, int) and heads > 0):
            raise CheckpointError("config.json has rotary settings but neither head_dim nor "
                                  "hidden_size/num_attention_heads; add head_dim to the config")
        head_dim = hidden // heads
    rotary_dim = cfg.get("rotary_dim")
    if rotary_dim is None and rotary_pct is not None:
        rotary_dim = int(head_dim * float(rotary_pct))
    rope_type = str(params.get("rope_type", params.get("type",
                                                     scaling.get("rope_type", scaling.get("type", "default")))))
    extra = {k: v for k, v in {**scaling, **params}.items() if k not in ("rope_theta", "rope_type", "type")}
    model_type = str(cfg.get("model_type", "")).lower()
    return {"base": float(base if base is not None else 10000.0), "head_dim": int(head_dim),
            "rotary_dim": int(rotary_dim) if rotary_dim is not None else int(head_dim),
            "pairing": "interleaved" if model_type in ("gptj", "codegen") else "half",
            "rope_type": rope_type, "scaling": extra,
            "max_position_embeddings": cfg.get("max_position_embeddings", cfg.get("n_positions"))}


def rope_from_config(cfg: dict[str, Any]) -> tuple[PositionScheme, dict[str, Any]] | None:
    """The registry's scheme matching the config's rotary settings, and what was read.

    ``rope_type`` "default" builds ``rope``; a scaled type ("linear", "dynamic",
    "yarn", "llama3", ...) builds the registry scheme of that name when there is
    one (``rope-<type>``, ``rope_<type>`` or ``<type>``), passing the config's
    scaling fields that its constructor accepts. When the registry has no such
    scheme the unscaled RoPE is measured and the settings say so.
    """
    settings = _rope_settings(cfg)
    if settings is None:
        return None
    base_opts = {"head_dim": settings["head_dim"], "base": settings["base"], "pairing": settings["pairing"],
                 "rotary_dim": settings["rotary_dim"]}
    heads = max(1, int(cfg.get("num_attention_heads", 1) or 1))
    dim = settings["head_dim"] * heads
    rope_type = settings["rope_type"]
    if rope_type not in ("default", "rope"):
        for candidate in (f"rope-{rope_type}", f"rope_{rope_type}", rope_type):
            if candidate not in names():
                continue
            accepted = set(option_names(candidate))
            opts = {k: v for k, v in {**base_opts, **settings["scaling"]}.items() if k in accepted}
            try:
                scheme = build(candidate, dim=dim, num_heads=heads, **opts)
            except (TypeError, ValueError) as err:
                settings["note"] = f"registry scheme {candidate!r} could not be built from the config ({err})"
                break
            settings["scheme"] = candidate
            return scheme, settings
        settings.setdefault("note", f"rope_type {rope_type!r} has no scheme in the registry: the UNSCALED RoPE "
                                    "with the same base and widths is measured instead")
    settings["scheme"] = "rope"
    return build("rope", dim=dim, num_heads=heads, **base_opts), settings


# -- ALiBi from config --------------------------------------------------------
#: Model types that always use ALiBi (their configs have no switch for it).
ALIBI_MODEL_TYPES = ("bloom",)


def alibi_from_config(cfg: dict[str, Any]) -> tuple[PositionScheme, dict[str, Any]] | None:
    """The registry's ``alibi`` for a model whose config implies ALiBi, and what was read; else None.

    BLOOM always has ALiBi; MPT when ``attn_config.alibi`` (default true), with
    ``alibi_bias_max`` as the slopes' scale; any other config when its top-level
    ``alibi`` is true (Falcon).
    """
    model_type = str(cfg.get("model_type", "")).lower()
    attn = cfg.get("attn_config") if isinstance(cfg.get("attn_config"), dict) else {}
    if model_type == "mpt":
        on, max_bias = attn.get("alibi", True) is True, attn.get("alibi_bias_max", 8)
    else:
        on, max_bias = model_type in ALIBI_MODEL_TYPES or cfg.get("alibi") is True, 8
    if not on:
        return None
    heads = cfg.get("n_head", cfg.get("n_heads", cfg.get("num_attention_heads")))
    if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0:
        raise CheckpointError(f"config.json implies ALiBi but states no head count (n_head / n_heads / "
                              f"num_attention_heads), got {heads!r}; add it to the config")
    if isinstance(max_bias, bool) or not isinstance(max_bias, (int, float)) or not max_bias > 0:
        raise CheckpointError(f"config.json: alibi_bias_max = {max_bias!r} must be a number > 0 (MPT uses 8)")
    scheme = build("alibi", dim=heads, num_heads=heads, max_bias=float(max_bias))
    return scheme, {"scheme": "alibi", "num_heads": heads, "max_bias": float(max_bias),
                    "slopes": alibi_slopes(heads, float(max_bias)).tolist()}
