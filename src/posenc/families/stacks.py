"""What the pre-Llama families share: their own names for the block list, fused q/k/v tensors, mask buffers.

GPT-2 keeps its blocks under ``transformer.h``, OPT under ``model.decoder.layers``,
MPT under ``transformer.blocks``; ``StackFamily`` is a ``Family`` that says
where (``stack``), accepts the names of a checkpoint saved from the bare model
(``h.0.…`` for ``transformer.h.0.…``, as the original GPT-2 upload has them),
and drops the causal-mask buffers old checkpoints stored next to the weights
(GPT-2's and GPT-NeoX's ``attn.bias`` / ``masked_bias``: no weights).

Fused q/k/v projections come in two layouts:

* ``split_qkv`` — [q; k; v] stacked (GPT-2's ``c_attn``, MPT's ``Wqkv``);
* ``split_qkv_per_head`` — for each head h: [q_h; k_h; v_h] (BLOOM's and
  GPT-NeoX's ``query_key_value``, whose forward views the output as (H, 3, Dh)).

Shape legend: H heads, Dh head width, D model width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from posenc.families import Family

#: The posenc name a dropped checkpoint tensor maps to; ``StackFamily.tensors`` yields nothing for it.
DROPPED = "<dropped>"


@dataclass(frozen=True)
class StackFamily(Family):
    """A ``Family`` whose blocks sit under ``<prefix>.<stack>.N.`` and whose checkpoints may carry buffers.

    Attributes:
        stack: the HF module name of the block list under ``prefix`` ("h", "layers", "blocks").
        dropped: suffixes of stored non-weights (causal-mask buffers) to skip.
        strip: name prefixes removed first (a task model's base-model prefix: "bert." of ``BertForMaskedLM``).
        builder: (config, device=...) → the model, for families that are not ``Decoder`` decoders
            (encoders, encoder–decoders); ``posenc.pretrained`` then loads them with ``load_named``.
    """

    stack: str = "layers"
    dropped: tuple[str, ...] = ()
    strip: tuple[str, ...] = ()
    builder: Callable[..., Any] | None = None

    def _outside_blocks(self, hf_name: str) -> tuple[str, str | None]:
        """(the name with ``strip`` removed, ``DROPPED`` or its top-level posenc name — None for a block's)."""
        for head in self.strip:
            hf_name = hf_name.removeprefix(head)
        if hf_name.endswith(self.dropped):
            return hf_name, DROPPED
        return hf_name, self.top_names.get(hf_name)

    def posenc_name(self, hf_name: str) -> str | None:
        hf_name, top = self._outside_blocks(hf_name)
        if top is not None:
            return top
        if not hf_name.startswith(f"{self.prefix}.") and f"{self.prefix}.{hf_name}" in self.top_names:
            return self.top_names[f"{self.prefix}.{hf_name}"]  # saved from the bare model: no prefix
        for head in (f"{self.prefix}.{self.stack}", self.stack):
            if hf_name.startswith(f"{head}."):
                return block_name(hf_name, head, self.block_names, "layers")
        return None

    def tensors(self, name: str, tensor: Tensor, config) -> Iterator[tuple[str, Tensor]]:
        if name == DROPPED:
            return
        yield from super().tensors(name, tensor, config)


def block_name(hf_name: str, stack: str, names: dict[str, str], ours: str) -> str | None:
    """``<stack>.N.<rest>`` → ``<ours>.N.<names[rest]>``; None when ``rest`` is not one of a block's tensors."""
    layer, _, rest = hf_name[len(stack) + 1:].partition(".")
    return f"{ours}.{layer}.{names[rest]}" if layer.isdigit() and rest in names else None


def split_qkv(prefix: str, tensor: Tensor) -> list[tuple[str, Tensor]]:
    """[q; k; v] rows (a weight (3·D, D) or a bias (3·D,)) → the three projections of ``prefix`` ("layers.0.attn")."""
    if tensor.shape[0] % 3:
        raise ValueError(f"{prefix}: a fused q/k/v tensor needs a multiple of 3 rows, got shape {tuple(tensor.shape)}")
    q, k, v = tensor.chunk(3, dim=0)
    kind = "weight" if tensor.dim() == 2 else "bias"
    return [(f"{prefix}.{p}_proj.{kind}", t.contiguous()) for p, t in zip("qkv", (q, k, v))]


def split_qkv_per_head(prefix: str, tensor: Tensor, *, num_heads: int) -> list[tuple[str, Tensor]]:
    """Per-head [q_h; k_h; v_h] rows → the three projections of ``prefix`` (BLOOM, GPT-NeoX)."""
    rows = tensor.shape[0]
    if rows % (3 * num_heads):
        raise ValueError(f"{prefix}: a fused q/k/v tensor of {num_heads} heads needs a multiple of {3 * num_heads} "
                         f"rows, got shape {tuple(tensor.shape)}")
    head_dim = rows // (3 * num_heads)
    grouped = tensor.reshape(num_heads, 3, head_dim, *tensor.shape[1:])  # (H, 3, Dh[, D])
    kind = "weight" if tensor.dim() == 2 else "bias"
    return [(f"{prefix}.{p}_proj.{kind}", grouped[:, i].reshape(num_heads * head_dim, *tensor.shape[1:]).contiguous())
            for i, p in enumerate("qkv")]


def fused_prefix(name: str, fused: str) -> str | None:
    """"layers.3.attn" for ``name`` "layers.3.attn.<fused>.weight" (or .bias); None for any other name."""
    for kind in ("weight", "bias"):
        if name.endswith(f".{fused}.{kind}"):
            return name[: -len(f".{fused}.{kind}")]
    return None


#: HF activation names → posenc's plain MLPs (``posenc.models.decoder_parts.MLPS``).
MLP_ACTIVATIONS = {"gelu_new": "gelu-tanh-mlp", "gelu_pytorch_tanh": "gelu-tanh-mlp", "gelu": "gelu-mlp",
                   "relu": "relu-mlp", "swish": "silu-mlp", "silu": "silu-mlp"}


def mlp_activation(c, key: str, default: str) -> str:
    """posenc's MLP name for the activation config.json states under ``key``; refuses any other by name."""
    act = c.str(key, default)
    if act not in MLP_ACTIVATIONS:
        raise ValueError(f"{c.source}: {key} {act!r} is not supported; posenc runs {', '.join(MLP_ACTIVATIONS)}")
    return MLP_ACTIVATIONS[act]


@dataclass(frozen=True)
class Seq2SeqFamily(StackFamily):
    """A ``StackFamily`` with two block lists: the encoder's and the decoder's (T5, Marian, Whisper).

    ``prefix`` + ``stack`` name the encoder's blocks (``encoder.block``), ``decoder_stack``
    the decoder's (``decoder.block``); ``block_names`` and ``decoder_names`` say where each
    tensor of one block goes in posenc's ``EncoderDecoder`` (``encoder.N.…``, ``decoder.N.…``).
    """

    decoder_stack: str = "decoder.layers"
    decoder_names: dict[str, str] = field(default_factory=dict)

    def posenc_name(self, hf_name: str) -> str | None:
        hf_name, top = self._outside_blocks(hf_name)
        if top is not None:
            return top
        for stack, names, ours in ((f"{self.prefix}.{self.stack}", self.block_names, "encoder"),
                                   (self.decoder_stack, self.decoder_names, "decoder")):
            if hf_name.startswith(f"{stack}."):
                return block_name(hf_name, stack, names, ours)
        return None


def _bart_attention(hf: str, ours: str) -> dict[str, str]:
    return {f"{hf}.{p}_proj.{w}": f"{ours}.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")}


#: One encoder layer of the BART lineage (Marian, Whisper, M2M100): HF name → posenc ``EncoderLayer`` name.
BART_ENCODER_NAMES = {
    **_bart_attention("self_attn", "attn"),
    **{f"self_attn_layer_norm.{w}": f"attn_res.norm.{w}" for w in ("weight", "bias")},
    **{f"fc1.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"fc2.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
    **{f"final_layer_norm.{w}": f"ffn_res.norm.{w}" for w in ("weight", "bias")},
}
#: One decoder layer of the BART lineage: HF name → posenc ``DecoderLayer`` name.
BART_DECODER_NAMES = {
    **_bart_attention("self_attn", "self_attn"),
    **{f"self_attn_layer_norm.{w}": f"self_res.norm.{w}" for w in ("weight", "bias")},
    **_bart_attention("encoder_attn", "cross_attn"),
    **{f"encoder_attn_layer_norm.{w}": f"cross_res.norm.{w}" for w in ("weight", "bias")},
    **{f"fc1.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"fc2.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
    **{f"final_layer_norm.{w}": f"ffn_res.norm.{w}" for w in ("weight", "bias")},
}


def fixed_table(stack: str) -> str:
    """The posenc name of a stack's stored fixed table (a sinusoid HF keeps as a weight): checked against
    posenc's scheme by ``seq2seq_split``, then dropped — the scheme computes it."""
    return f"<fixed {stack} table>"


def check_fixed_table(hf_name: str, table: Tensor, scheme_name: str, options: dict[str, Any], *,
                      shape: tuple[int | None, int] | None = None, source: str = "checkpoint") -> None:
    """Refuse a stored fixed position table unless it is posenc's scheme ``scheme_name`` with ``options``.

    HF stores Whisper's encoder sinusoid as ``embed_positions.weight``, computed in
    float32: its angles p·ω_i carry float32 rounding, ≈ 1.2e-7·p radians at
    position p, so the tolerance grows with the table's length (plus half a unit
    in the last place of the stored dtype: float16 tables exist). A table that
    differs by more (fine-tuned, or another formula) is not the scheme posenc
    runs, and loading it as if it were would change the model silently.

    Args:
        shape: (rows or None for any, width) the config implies.

    Raises:
        CheckpointError: naming the tensor, and the shape expected or the largest difference and where it is.
    """
    from posenc.formats import CheckpointError
    from posenc.positions import build

    if table.dim() != 2 or (shape is not None and (table.shape[1] != shape[1]
                                                  or shape[0] not in (None, table.shape[0]))):
        want = "(positions, width)" if shape is None else f"({shape[0] or 'positions'}, {shape[1]})"
        raise CheckpointError(f"{source}: {hf_name!r} has shape {tuple(table.shape)}, the config implies {want}; "
                              "config.json and the weights disagree — use the files of one model")
    rows, width = table.shape
    scheme = build(scheme_name, dim=width, num_heads=1, **options)
    ours = scheme.encode(torch.arange(rows)).double()
    diff = (table.double() - ours).abs()
    tol = 1e-5 + 4e-7 * rows + torch.finfo(table.dtype).eps / 2  # angles' float32 rounding + the storage's
    if not bool(torch.isfinite(table).all()) or float(diff.max()) > tol:
        row = int(diff.max(dim=1).values.argmax())
        raise CheckpointError(f"{source}: the stored position table {hf_name!r} is not posenc's {scheme.describe()} "
                              f"(max |stored − scheme| = {float(diff.max()):.3g} at position {row}, tolerance "
                              f"{tol:.2g}); posenc computes this table rather than loading it, so a changed table "
                              "cannot run — use an unmodified checkpoint")


def seq2seq_split(name: str, tensor: Tensor, config: Any) -> list[tuple[str, Tensor]]:
    """An encoder–decoder's checkpoint tensors: a stored fixed table checked, then dropped (``fixed_table``);
    Marian's (1, V) ``final_logits_bias`` buffer as the head's (V,) bias; every other tensor as is."""
    for stack in ("encoder", "decoder"):
        if name == fixed_table(stack):
            rows = config.source_length if stack == "encoder" and config.front_end == "audio" else None
            check_fixed_table(f"model.{stack}.embed_positions.weight", tensor, getattr(config, f"{stack}_position"),
                              getattr(config, f"{stack}_position_options"), shape=(rows, config.dim))
            return []
    if name == "head.bias" and tensor.dim() == 2:
        return [(name, tensor.reshape(-1))]
    return [(name, tensor)]


def seq2seq_builder(config: Any, *, device: Any = None) -> Any:
    """``posenc.models.seq2seq.build_seq2seq`` (imported when a model is built, not with the family)."""
    from posenc.models.seq2seq import build_seq2seq

    return build_seq2seq(config, device=device)


def bart_family(name: str, model_types: tuple[str, ...], config_from_hf: Callable[..., Any],
                top_names: dict[str, str]) -> Seq2SeqFamily:
    """An encoder–decoder family of the BART lineage (Marian, Whisper): blocks under ``model.encoder.layers`` and
    ``model.decoder.layers`` with BART's names, ``seq2seq_split``, built by ``build_seq2seq``."""
    return Seq2SeqFamily(name=name, model_types=model_types, config_from_hf=config_from_hf,
                         block_names=BART_ENCODER_NAMES, top_names=top_names, prefix="model.encoder", stack="layers",
                         decoder_stack="model.decoder.layers", decoder_names=BART_DECODER_NAMES, split=seq2seq_split,
                         builder=seq2seq_builder)


def bart_sizes(c: Any) -> dict[str, int]:
    """The ``Seq2SeqConfig`` sizes the BART lineage states under the same keys (``d_model``, ``encoder_layers``, …)."""
    from posenc.families.hf_config import MAX_HEADS, MAX_LAYERS, MAX_WIDTH

    sizes = {"dim": c.int("d_model", maximum=MAX_WIDTH)}
    for stack in ("encoder", "decoder"):
        sizes |= {f"{stack}_layers": c.int(f"{stack}_layers", maximum=MAX_LAYERS),
                  f"{stack}_heads": c.int(f"{stack}_attention_heads", maximum=MAX_HEADS),
                  f"{stack}_ffn_dim": c.int(f"{stack}_ffn_dim", maximum=MAX_WIDTH)}
    return sizes
