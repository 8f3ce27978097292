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

from collections.abc import Iterator
from dataclasses import dataclass

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
    """

    stack: str = "layers"
    dropped: tuple[str, ...] = ()

    def posenc_name(self, hf_name: str) -> str | None:
        if hf_name.endswith(self.dropped):
            return DROPPED
        if hf_name in self.top_names:
            return self.top_names[hf_name]
        if not hf_name.startswith(f"{self.prefix}.") and f"{self.prefix}.{hf_name}" in self.top_names:
            return self.top_names[f"{self.prefix}.{hf_name}"]  # saved from the bare model: no prefix
        for head in (f"{self.prefix}.{self.stack}.", f"{self.stack}."):
            if hf_name.startswith(head):
                layer, _, rest = hf_name[len(head):].partition(".")
                if layer.isdigit() and rest in self.block_names:
                    return f"layers.{layer}.{self.block_names[rest]}"
                return None
        return None

    def tensors(self, name: str, tensor: Tensor, config) -> Iterator[tuple[str, Tensor]]:
        if name == DROPPED:
            return
        yield from super().tensors(name, tensor, config)


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
                   "relu": "relu-mlp"}


def mlp_activation(c, key: str, default: str) -> str:
    """posenc's MLP name for the activation config.json states under ``key``; refuses any other by name."""
    act = c.str(key, default)
    if act not in MLP_ACTIVATIONS:
        raise ValueError(f"{c.source}: {key} {act!r} is not supported; posenc runs {', '.join(MLP_ACTIVATIONS)}")
    return MLP_ACTIVATIONS[act]
