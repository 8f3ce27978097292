"""``inspect_checkpoint``: load safely, locate the tables, measure them — one plain-data result.

>>> from posenc.inspect import inspect_checkpoint           # doctest: +SKIP
>>> result = inspect_checkpoint("path/to/model-folder")     # doctest: +SKIP
>>> result["tying"]["status"], result["position"]["kind"]   # doctest: +SKIP
('no-head', 'learned')
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from posenc.inspect.analysis import analyse_positions, analyse_tokens
from posenc.inspect.locate import alibi_from_config, default_offset, detect_tying, locate, rope_from_config
from posenc.inspect.sinusoid import recognise_sinusoid
from posenc.formats import Checkpoint, CheckpointError, load_checkpoint
from posenc.families import config_from_hf
from posenc.formats.safetensors import to_float64
from posenc.plan import plan_rows
from posenc.positions import PositionScheme, build, lookup
from posenc.lab.measures import diagonal_profile, monotonicity, scheme_similarity, scheme_table
from posenc.validation import check_memory, number

#: Positions measured for a rotary scheme (it is defined everywhere; this bounds the L × L Gram).
ROTARY_POSITIONS = 1024


def family_config(cfg: dict[str, Any], **kwargs: Any) -> Any:
    """The config a posenc family reads from ``cfg``, or None for a model type posenc does not run.

    A model type posenc runs is read by its family's reader, the loader's: a value the loader refuses
    (T5's ``relative_attention_num_buckets`` 0, Marian's ``d_model`` "x") is refused here by the reader's
    message — not measured as if the model had no positions. A config lacking a field the reader needs
    gives None (the generic readers measure what the checkpoint stores).

    Raises:
        CheckpointError: the family's reader refuses the config (its message names the key).
    """
    from posenc.families import model_types

    if not isinstance(cfg.get("model_type"), str) or cfg["model_type"] not in model_types():
        return None  # not a family posenc runs: the generic readers below still measure what they can
    from posenc.families.hf_config import MissingField

    try:
        return config_from_hf(cfg, **kwargs)
    except MissingField:
        return None  # an incomplete config (a bare table's): the generic readers measure what they can
    except ValueError as err:
        raise CheckpointError(f"{err} (posenc's {cfg['model_type']} reader, the loader's, refuses it; "
                              "fix config.json)") from None


def layer_plan(cfg: dict[str, Any]) -> Any:
    """The ``DecoderConfig`` of a config with a per-layer plan that a posenc family reads, else None.

    Raises:
        CheckpointError: a model type posenc runs whose config its reader refuses.
    """
    config = family_config(cfg, pairing="half")
    return config if getattr(config, "layer_plan", None) is not None else None  # encoders have no plan


def seq2seq_config(cfg: dict[str, Any]) -> Any:
    """The ``Seq2SeqConfig`` of an encoder–decoder config a posenc family reads (T5, Marian, Whisper), else None.

    Raises:
        CheckpointError: a model type posenc runs whose config its reader refuses.
    """
    from posenc.models.seq2seq import Seq2SeqConfig

    config = family_config(cfg)
    return config if isinstance(config, Seq2SeqConfig) else None


def _stacks(ckpt: Checkpoint, found: Any, config: Any) -> dict[str, Any]:
    """Each stack's position scheme (the one posenc runs, from the family's reader) and the tensor that holds it.

    A stored table (Whisper's encoder sinusoid, its decoder's learned table) is fitted
    to every sinusoid layout, by fit (``recognise_sinusoid``); a T5 bucket table is named.
    """
    tables = [n for n in (found.position, *found.also.get("position", [])) if n]
    out: dict[str, Any] = {}
    from posenc.models.seq2seq import stack_position

    for stack in ("encoder", "decoder"):
        scheme = stack_position(config, stack)
        entry: dict[str, Any] = {"scheme": scheme.describe(), "tensor": None}
        stored = next((n for n in tables if n.startswith(f"{stack}.") or f".{stack}." in n), None)
        relative = next((n for n in found.relative if n.startswith(f"{stack}.") or f".{stack}." in n), None)
        if stored is not None:
            rows, width = ckpt.shape(stored)
            check_memory(_gram_bytes(rows, width), f"fitting the {rows} × {width} table {stored!r}",
                         fix="measure it on a machine with more memory, or set POSENC_MEMORY_BUDGET")
            raw = ckpt.tensor(stored)
            entry["tensor"] = stored
            entry["sinusoid"] = recognise_sinusoid(finite_table(to_float64(raw), f"position table {stored!r}"),
                                                   dtype=raw.dtype)
        elif relative is not None:
            entry["tensor"] = relative
        elif any(True for _ in scheme.parameters()):  # a learned scheme (T5's buckets): its table must be stored
            name = scheme.describe().get("name")
            where = (f" ({stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight)" if name == "t5"
                     else "")
            raise CheckpointError(f"{ckpt.source}: the {stack}'s position scheme ({name}) is learned, but the "
                                  f"checkpoint stores no {stack} table for it{where}; the checkpoint is incomplete "
                                  "or corrupt — it is not computed by the scheme")
        else:
            entry["note"] = "computed by the scheme, not stored in the checkpoint"
        out[stack] = entry
    return out


def _planned_rotary(config: Any) -> tuple[PositionScheme, dict[str, Any]] | None:
    """The scheme of the plan's first full-attention rotary layer (else its first rotary layer) and its settings."""
    rotary = [(i, spec) for i, spec in enumerate(config.plan) if lookup(spec.position).family == "rotary"]
    if not rotary:
        return None
    layer, spec = next(((i, s) for i, s in rotary if s.window.full), rotary[0])
    heads = config.num_heads
    # a family may give layers their own head width (Gemma 4's global layers): the measured layer's
    head_dim = config.head_dims()[layer] if hasattr(config, "head_dims") else config.attention_head_dim
    scheme = build(spec.position, dim=heads * head_dim, num_heads=heads, **dict(spec.position_options))
    options = dict(spec.position_options)
    settings = {"scheme": spec.position, "base": options.get("base", 10000.0), "head_dim": head_dim,
                "rotary_dim": options.get("rotary_dim", head_dim), "pairing": options.get("pairing", "half"),
                "rope_type": spec.position, "max_position_embeddings": config.max_position_embeddings,
                "note": f"layer {layer}'s scheme is measured ({spec.window} attention); the layer plan lists "
                        "every layer's"}
    return scheme, settings


def _rotary(cfg: dict[str, Any], max_positions: int, plan: Any = None) -> dict[str, Any] | None:
    try:
        built = _planned_rotary(plan) if plan is not None else rope_from_config(cfg)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"config.json's rotary settings cannot be measured: {err}; fix config.json") from None
    if built is None:
        return None
    scheme, settings = built
    number(max_positions, "max_positions", minimum=2, integer=True)
    declared = settings.get("max_position_embeddings")
    if declared is not None and not (isinstance(declared, int) and declared >= 2):
        raise CheckpointError(f"config.json: max_position_embeddings={declared!r} must be an integer >= 2")
    length = min(max_positions, declared or max_positions)
    check_memory(_gram_bytes(length, 0), f"measuring {length} rotary positions (an L × L similarity)",
                 fix="lower --max-positions")
    sim = scheme_similarity(scheme, length)  # (L, L)
    diag = diagonal_profile(sim)
    profile = diag["mean"][length - 1 :]  # lags 0 … L − 1
    table = scheme_table(scheme, torch.arange(length))  # rotated all-ones head vectors, (L, Dh)
    return {
        "kind": "rotary",
        "settings": settings,
        "scheme": scheme.describe(),
        "length": length,
        "similarity_profile": profile,
        "relative_spread": diag["relative_spread"],
        "translation_invariant": diag["translation_invariant"],
        "monotonic": monotonicity(profile),
        "analysis": analyse_positions(table) if table is not None else None,
    }


def _alibi(cfg: dict[str, Any], max_positions: int) -> dict[str, Any] | None:
    """The ALiBi bias a config implies, measured per head over ``max_positions`` (bounded) positions."""
    built = alibi_from_config(cfg)
    if built is None:
        return None
    scheme, settings = built
    length = min(max(2, int(max_positions)), 256)
    diag = diagonal_profile(scheme_similarity(scheme, length))  # (H, L, L): −m_h·|i − j|
    return {"kind": "alibi", "settings": settings, "scheme": scheme.describe(), "length": length,
            "relative_spread": diag["relative_spread"], "translation_invariant": diag["translation_invariant"]}


def _gram_bytes(length: int, width: int) -> float:
    """Planned memory of the position measures: a few float64 L × L matrices and L × d copies."""
    return 8.0 * (6 * length * length + 8 * length * width)


def measure_table(ckpt: Checkpoint, name: str, offset: int, rows: tuple[int, int | None] | None, *,
                  seed: int = 0) -> dict[str, Any]:
    """One stored position table measured: sinusoid or learned (told by fit), and the table's analysis.

    Args:
        offset: rows before position 0 (left out).
        rows: positions ``start … stop − 1`` only (``stop`` None: to the end); None: all.

    Raises:
        ValueError: ``rows`` selecting fewer than 2 positions, or a table over the memory budget.
        CheckpointError: non-finite entries.
    """
    rows_all, width = ckpt.shape(name)
    available = rows_all - offset
    start, stop = (0, None) if rows is None else rows
    stop = available if stop is None else stop
    if not 0 <= start < stop <= available or stop - start < 2:
        raise ValueError(f"rows {start}:{stop} must select at least 2 of the table's {available} positions")
    check_memory(_gram_bytes(stop - start, width), f"measuring {stop - start} positions × {width} of {name!r}",
                 fix="measure fewer with --rows START:STOP (e.g. --rows 0:2048)")
    stored = ckpt.tensor(name)
    table = to_float64(stored)[offset:][start:stop]
    finite_table(table, f"position table {name!r} (rows {start}:{stop})")
    fit = recognise_sinusoid(table, dtype=stored.dtype)  # a stored fixed sinusoid, told by fit
    return {"kind": "sinusoidal" if fit["is_sinusoid"] else "learned", "tensor": name, "rows": [start, stop],
            "offset": offset, "sinusoid": fit, "analysis": analyse_positions(table, seed=seed)}


def finite_table(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t`` if every entry is finite; else an error naming the first bad row (read from a file, not a forward)."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        rows = bad.reshape(t.shape[0], -1).any(dim=1).nonzero().flatten()
        raise CheckpointError(f"{what} has {int(bad.sum())} non-finite entries (NaN or ±inf) in {rows.numel()} rows, "
                              f"the first at row {int(rows[0])}; the checkpoint is corrupt or was saved after "
                              "training diverged — measure another checkpoint, or select clean rows with --rows")
    return t


def _relative(ckpt: Checkpoint, names: list[str]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        t = to_float64(ckpt.tensor(name))
        if t.dim() != 2:
            raise ValueError(f"{ckpt.source}: relative bias {name!r} has shape {list(t.shape)}, "
                             "expected (buckets, heads)")
        out.append({"tensor": name, "shape": list(t.shape), "bias_by_bucket": t.T.tolist(),
                    "config": {k: ckpt.config.get(k) for k in ("relative_attention_num_buckets",
                                                               "relative_attention_max_distance")}})
    return out


def inspect_checkpoint(
    path: str | Path | Checkpoint,
    *,
    position_tensor: str | None = None,
    token_tensor: str | None = None,
    head_tensor: str | None = None,
    position_offset: int | None = None,
    tokens: Sequence[str] | None = None,
    k: int = 8,
    max_positions: int = ROTARY_POSITIONS,
    seed: int = 0,
    sample: int = 1000,
    rows: tuple[int, int | None] | None = None,
) -> dict[str, Any]:
    """Measure a checkpoint's position and token embeddings.

    Args:
        path: a safetensors file, shard index or model folder, a GGUF file, a CTranslate2
            model folder — or a :class:`Checkpoint` built from tensors in memory.
        position_tensor, token_tensor, head_tensor: names that override the search.
        position_offset: rows of the position table before position 0 (OPT/BART: 2, found automatically).
        tokens: words (or ``#id``) whose neighbour lists to give; default: common words.
        k: neighbours per list.
        max_positions: positions measured for a rotary scheme read from the config.
        seed: seed of the random baseline and of the self-score sample.
        sample: token rows sampled for the self-score (each costs one V × d product).
        rows: measure only positions ``start … stop − 1`` of a learned table (e.g. the
            positions a model was fine-tuned on); default all.

    Returns:
        Plain data: ``source``, ``tensors``, ``config``, ``located``, ``tying``,
        ``position`` (learned table, rotary scheme, or none), ``more_positions`` (every
        further stored position table, measured alike: an encoder–decoder's), ``stacks`` (an
        encoder–decoder's position scheme per stack, with its stored table; else None), ``relative``,
        ``tokens`` and ``notes``.
    """
    from posenc.progress import stage  # shown when the caller's posenc.progress.Stages has taken over ~2 s

    stage("reading the checkpoint")
    ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path)
    stage("finding the position and token tables")
    found = locate(ckpt, position=position_tensor, token=token_tensor, head=head_tensor,
                   position_offset=position_offset)
    cfg = ckpt.config
    result: dict[str, Any] = {
        "source": ckpt.source,
        "tensors": len(ckpt.names()),
        "config": {key: cfg.get(key) for key in ("model_type", "architectures", "hidden_size",
                                                   "num_attention_heads", "max_position_embeddings",
                                                   "vocab_size", "tie_word_embeddings") if key in cfg},
        "vocab_source": ckpt.vocab_source,
        "located": {"position": found.position, "token": found.token, "head": found.head,
                    "relative": found.relative, "position_offset": found.position_offset, "also": found.also},
        "tying": detect_tying(ckpt, found),
        "notes": [*ckpt.notes, *found.notes],
    }
    plan = layer_plan(cfg)
    result["layer_plan"] = None if plan is None else plan_rows(plan.plan)
    result["more_positions"] = []
    stage("measuring the position table")
    if found.position is not None:
        result["position"] = measure_table(ckpt, found.position, found.position_offset, rows, seed=seed)
        if rope_from_config(cfg) is not None:
            result["notes"].append("the config also has rotary settings; the learned table is what is measured")
        for name in found.also.get("position", []):  # an encoder–decoder's second table (Whisper, BART)
            shape = ckpt.shape(name)
            if len(shape) != 2 or shape[0] - default_offset(cfg, name)[0] < 2:
                result["notes"].append(f"{name!r} (shape {list(shape)}) is named like a position table but is "
                                       "not one: not measured")
                continue
            try:
                result["more_positions"].append(measure_table(ckpt, name, default_offset(cfg, name)[0], None,
                                                              seed=seed))
            except ValueError as err:  # over the memory budget, or non-finite: the main table is measured all the same
                result["notes"].append(f"{name!r} not measured: {err}")
    else:
        rotary = _rotary(cfg, max_positions, plan)
        if rotary is not None:
            result["position"] = rotary
            if "note" in rotary["settings"]:
                result["notes"].append(rotary["settings"]["note"])
        elif (alibi := _alibi(cfg, max_positions)) is not None:
            result["position"] = alibi
        elif found.relative:
            result["position"] = {"kind": "relative-bias"}
        else:
            result["position"] = {"kind": "none"}
            result["notes"].append("no position table, no rotary settings and no relative bias were found; "
                                   "name a table with --position-tensor if the model has one")
    seq2seq = seq2seq_config(cfg)
    result["stacks"] = None if seq2seq is None else _stacks(ckpt, found, seq2seq)
    if seq2seq is not None and result["position"]["kind"] == "none":  # Marian: a sinusoid nobody stores
        result["position"] = {"kind": seq2seq.encoder_position, "scheme": result["stacks"]["encoder"]["scheme"],
                              "from": "config.json (the family's reader)"}
        result["notes"] = [n for n in result["notes"] if not n.startswith("no position table")]
    result["relative"] = _relative(ckpt, found.relative)
    if found.token is not None:
        vocab_rows, width = ckpt.shape(found.token)
        stage(f"measuring the token table ({vocab_rows} × {width})")
        check_memory(4.0 * vocab_rows * (3 * width + 8), f"measuring the {vocab_rows} × {width} token table",
                     fix="measure it on a machine with more memory, or set POSENC_MEMORY_BUDGET")
        table = finite_table(ckpt.tensor(found.token).float(), f"token table {found.token!r}")
        result["tokens"] = analyse_tokens(table, ckpt.vocab, tokens=tokens, k=k, sample=sample, seed=seed)
        result["tokens"]["tensor"] = found.token
    else:
        result["tokens"] = None
        result["notes"].append("no token table found; name it with --token-tensor")
    return result
