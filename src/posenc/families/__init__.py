"""Model families: one file each — an HF-config reader, the layer plan it implies, and its weight names.

A family turns an HF ``config.json`` into a ``DecoderConfig`` (the decoder's plain
data: sizes, parts by name, and the layer plan) and says where each HF tensor
goes in posenc's model; ``posenc.models.decoder.build_decoder`` builds every family
from parts, and ``posenc.pretrained`` loads the weights. Nothing else knows a
family. Encoders and encoder–decoders (BERT, T5, Marian, Whisper) read into their
own configs and name their builder (``posenc.families.stacks.StackFamily``).
Adding one is one file with ``FAMILY = Family(...)``, listed in
``_MODULES`` below, and its comparison test against HF's own modeling code
(``tests/families``); docs/architecture.md walks through it. A family whose
decoder has parts ``Decoder`` lacks reads into a ``DecoderConfig`` subclass with a
``build_model`` method, which ``build_decoder`` calls (Gemma 4:
``posenc.models.gemma4``); fused checkpoint tensors are split, and tensors whose
layout follows another's pairing permuted, by the family's ``split``.

=============  =======================================================================
family         model types (config.json)
=============  =======================================================================
``llama``      llama, mistral, qwen2 (Llama 2/3, Mistral, Qwen2, SmolLM/SmolLM2, TinyLlama)
``gemma3``     gemma3_text (Gemma 3 text models; 5 sliding : 1 global layers)
``qwen3``      qwen3 (Qwen3 dense; QK-norm, sliding layers from ``max_window_layers`` on, YaRN)
``smollm3``    smollm3 (SmolLM3; every 4th layer NoPE, ``no_rope_layers``; the NoPE layers slide)
``cohere2``    cohere2 (Command R7B / A; sliding RoPE : global NoPE, parallel blocks, interleaved rows)
``phi3``       phi3 (Phi-3 / 3.5 / 4-mini; fused qkv and gate_up split, LongRoPE, partial rotary)
``gpt_oss``    gpt_oss (gpt-oss-20b/120b; sliding/full layers, sinks, YaRN, MoE)
``llama4``     llama4_text (Llama 4 text tower; chunked RoPE + NoPE layers, temperature, MoE)
``gpt2``       gpt2 (learned absolute positions, LayerNorm, GELU MLP, fused Conv1D q/k/v)
``bloom``      bloom (ALiBi in every layer, embedding LayerNorm, per-head fused q/k/v)
``gpt_neox``   gpt_neox (Pythia; partial RoPE, half pairing, parallel residual with two norms)
``gptj``       gptj (partial RoPE, interleaved pairing, parallel residual with one norm)
``opt``        opt (learned positions read at an offset of 2; pre- or post-norm)
``mpt``        mpt (ALiBi with ``alibi_bias_max``, no biases, ``clip_qkv``)
``deepseek_v3`` deepseek_v3 (DeepSeek-V3, Kimi-K2; MLA with a decoupled rotary slice, YaRN mscale, MoE)
``bert``       bert (an encoder: learned positions + token types, post-norm; MiniLM, all-MiniLM-L6-v2)
``gemma4``     gemma4_text (Gemma 4 text; proportional RoPE, wide global heads, PLE, KV sharing)
``t5``         t5 (an encoder–decoder: relative-position buckets per stack, RMS norms, unscaled q·k)
``marian``     marian (an encoder–decoder: [sin | cos] sinusoid, post-norm, ×√D tokens, logit bias; opus-mt)
``whisper``    whisper (speech encoder–decoder: conv front end + fixed sinusoid, learned decoder table)
=============  =======================================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from posenc.families.hf_config import HFConfig

#: Modules that define a family (each holds ``FAMILY``).
_MODULES = ("llama", "gemma3", "qwen3", "smollm3", "cohere2", "phi3", "gemma4", "gpt_oss", "llama4", "deepseek_v3", "gpt2", "bloom", "gpt_neox", "gptj", "opt", "mpt", "bert", "t5",
            "marian", "whisper")


@dataclass(frozen=True)
class Family:
    """What posenc knows of one model family.

    Attributes:
        name: the family's name ("gemma3").
        model_types: the ``model_type`` values of config.json it reads.
        config_from_hf: (HFConfig, pairing) → ``DecoderConfig``; raises ValueError naming
            what it refuses.
        top_names: HF tensor name → posenc name, outside the blocks.
        block_names: HF name after ``<prefix>.layers.N.`` → posenc name inside block N.
        prefix: the HF module path of the decoder stack ("model").
        split: (posenc name, tensor, config) → [(posenc name, tensor), …] for fused
            checkpoint tensors (Phi-3's qkv_proj); default: as is.
        hf_pairing: the RoPE pairing of the q/k rows in HF checkpoints ("half" for
            ``rotate_half`` models; "interleaved" for Cohere, Llama 4, GPT-J).
    """

    name: str
    model_types: tuple[str, ...]
    config_from_hf: Callable[[HFConfig, str], Any]
    block_names: dict[str, str]
    top_names: dict[str, str] = field(default_factory=lambda: dict(TOP_NAMES))
    prefix: str = "model"
    split: Callable[[str, Tensor, Any], list[tuple[str, Tensor]]] | None = None
    hf_pairing: str = "half"

    def posenc_name(self, hf_name: str) -> str | None:
        """posenc's parameter name for an HF parameter name, or None if it is not one of this family's."""
        if hf_name in self.top_names:
            return self.top_names[hf_name]
        head = f"{self.prefix}.layers."
        if not hf_name.startswith(head):
            return None
        layer, _, rest = hf_name[len(head):].partition(".")
        if layer.isdigit() and rest in self.block_names:
            return f"layers.{layer}.{self.block_names[rest]}"
        return None

    def tensors(self, name: str, tensor: Tensor, config: Any) -> Iterator[tuple[str, Tensor]]:
        """The posenc tensors one checkpoint tensor becomes (one, unless the family fuses projections)."""
        if self.split is None:
            yield name, tensor
        else:
            yield from self.split(name, tensor, config)


#: HF names → posenc names outside the blocks (every family so far).
TOP_NAMES = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight",
             "lm_head.weight": "head.weight"}
#: The attention and FFN projections inside a block (Llama layout).
PROJECTION_NAMES = {
    "self_attn.o_proj.weight": "attn.out_proj.weight",
    "self_attn.o_proj.bias": "attn.out_proj.bias",
    **{f"self_attn.{p}_proj.{w}": f"attn.{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")},
    **{f"mlp.{p}_proj.{w}": f"ffn.{p}_proj.{w}" for p in ("gate", "up", "down") for w in ("weight", "bias")},
}
QK_NORM_NAMES = {"self_attn.q_norm.weight": "attn.q_norm.weight", "self_attn.k_norm.weight": "attn.k_norm.weight"}

_BY_TYPE: dict[str, Family] = {}


def decoder_sizes(c: HFConfig) -> dict[str, Any]:
    """The ``DecoderConfig`` sizes every decoder family states under the same HF keys, typed and bounded."""
    from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH

    dim, heads = c.int("hidden_size", maximum=MAX_WIDTH), c.int("num_attention_heads", maximum=MAX_HEADS)
    head_dim = c.int("head_dim", dim // heads, maximum=MAX_WIDTH)
    return {
        "vocab_size": c.int("vocab_size", maximum=MAX_VOCAB), "dim": dim,
        "num_layers": c.int("num_hidden_layers", maximum=MAX_LAYERS), "num_heads": heads,
        "num_kv_heads": c.int("num_key_value_heads", heads, maximum=heads),
        "head_dim": head_dim if head_dim * heads != dim else None,
        "ffn_dim": c.int("intermediate_size", maximum=MAX_WIDTH),
        "max_position_embeddings": c.int("max_position_embeddings", 2048, maximum=MAX_CONTEXT),
        "tie_embeddings": c.bool("tie_word_embeddings", False),
    }


def layer_types(c: HFConfig, num_layers: int) -> list[str] | None:
    """config.json's ``layer_types`` (one per layer), checked; None when absent."""
    types = c.list("layer_types", None, length=num_layers)
    if types is not None and not all(isinstance(t, str) for t in types):
        raise ValueError(f"{c.source}: layer_types must be a list of strings, got {types!r}")
    return types


def _load() -> dict[str, Family]:
    if not _BY_TYPE:
        for module in _MODULES:
            family: Family = importlib.import_module(f"posenc.families.{module}").FAMILY
            for model_type in family.model_types:
                _BY_TYPE[model_type] = family
    return _BY_TYPE


def model_types() -> list[str]:
    """Every config.json ``model_type`` posenc runs."""
    return sorted(_load())


def family_for(hf: Any, *, source: str = "config.json") -> Family:
    """The family of a config.json dict (by its ``model_type``).

    Raises:
        ValueError: not a JSON object, or a model type no family reads (listing those that do).
    """
    c = hf if isinstance(hf, HFConfig) else HFConfig(hf, source=source)
    model_type = c.raw("model_type")
    families = _load()
    if model_type not in families:
        raise ValueError(f"{c.source}: model_type {model_type!r} is not supported; posenc runs "
                         f"{', '.join(model_types())} (SmolLM and TinyLlama are 'llama')")
    return families[model_type]


def family_named(name: str) -> Family:
    """The family called ``name`` (a ``DecoderConfig.family``)."""
    for family in _load().values():
        if family.name == name:
            return family
    raise ValueError(f"no model family {name!r}; families: {', '.join(sorted({f.name for f in _load().values()}))}")


def config_from_hf(hf: Any, *, pairing: str = "interleaved", source: str = "config.json") -> Any:
    """The ``DecoderConfig`` of an HF config.json dict of any supported family."""
    c = hf if isinstance(hf, HFConfig) else HFConfig(hf, source=source)
    return family_for(c).config_from_hf(c, pairing)


__all__ = ["Family", "HFConfig", "PROJECTION_NAMES", "QK_NORM_NAMES", "TOP_NAMES", "config_from_hf", "decoder_sizes", "family_for", "family_named", "layer_types",
           "model_types"]
