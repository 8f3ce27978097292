"""Phi-3 / Phi-3.5 / Phi-4-mini: the Llama layout with fused projections, LongRoPE and partial rotary.

config.json ``model_type`` "phi3" (``Phi3ForCausalLM``). Read: the Llama
sizes; the fused ``self_attn.qkv_proj`` (rows q | k | v) and
``mlp.gate_up_proj`` (rows gate | up), split at load into posenc's separate
projections (``Family.split``); one RoPE for every layer — ``default`` or
``longrope`` (HF's Phi-3 reader also calls ``su`` and ``yarn`` longrope, and
so does this one) with its ``short_factor`` / ``long_factor`` lists, ``factor``
(default max_position_embeddings / original_max_position_embeddings) and
``attention_factor`` (default √(1 + ln factor / ln L₀)); the top-level
``original_max_position_embeddings`` (4096 when absent, as HF's ``Phi3Config``)
takes priority over the block's, as in HF; ``partial_rotary_factor`` (Phi-3.5 /
Phi-4-mini rotate the first 3/4 of each head: ``rotary_dim``); the
``sliding_window`` of every layer (Phi-3-mini-4k: 2047 keys), kept as stated
even where it exceeds the trained context (it then binds only past it, as in HF).

Crossing ``original_max_position_embeddings`` (L₀)
--------------------------------------------------
HF's rotary module picks the factor set per *forward call* from
max(position_ids) + 1: long factors for every position of the call when that
exceeds L₀, short ones otherwise. So HF gives one sequence two rotations:

* **HF full forward** of T > L₀ tokens: every position — including 0 … L₀ − 1
  — rotated with the long factors (and a forward of ≤ L₀ tokens: short
  everywhere). Logits at position 5 change when the sequence grows from L₀ to
  L₀ + 1 tokens.
* **HF cached decoding** from a prompt of ≤ L₀ tokens: the keys cached below
  L₀ keep the short-factor rotation they were computed with; each token from
  L₀ on is rotated with the long factors, and its query meets short-rotated
  old keys. A prompt longer than L₀ puts every prompt key on the long factors.

This is the bug class HF and llama.cpp users report (quality or logits that
depend on how a sequence was fed, a cliff at L₀). posenc's ``rope-longrope``
rotates by *position*, never by call, so its cached and full forwards always
agree; which of HF's two behaviours it reproduces is an option
(``max_seq_len``), set by ``fixed_longrope``:

* default, ``max_seq_len=None`` (what this reader builds): position p uses the
  short factors if p < L₀, the long ones from L₀ on — **equal to HF's cached
  decoding from a prompt of ≤ L₀ tokens**, and to HF's full forward of any
  sequence of ≤ L₀ tokens; not equal to HF's full forward of a longer one
  (there HF puts positions < L₀ on the long factors too).
* ``fixed_longrope(config, L)``: every position uses the set of length L —
  for L > L₀ the long factors everywhere, **equal to HF's full forward of any
  sequence longer than L₀, and to HF's cached decoding from a prompt longer
  than L₀**; for L ≤ L₀ the short factors everywhere.

The attention factor does not depend on the length in either (HF computes it
once from ``factor``). ``tests/families/test_phi3.py`` checks each pairing of
modes above against ``Phi3ForCausalLM``, full and cached.

Refused by name: a ``hidden_act`` other than silu; RoPE types other than
default / longrope (HF's ``Phi3Config`` refuses them too); factor lists of the
wrong length (one per rotated pair); RoPE parameters nested per layer type.

Reference used to verify: HF ``Phi3ForCausalLM`` on tiny random checkpoints
(``tests/families/test_phi3.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from posenc.families import Family, decoder_sizes
from posenc.families.hf_config import HFConfig
from posenc.families.rope import rope_blocks, rope_scheme, with_defaults

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.qkv_proj.weight": "attn.qkv_proj.weight",  # fused: split by ``split``
    "self_attn.o_proj.weight": "attn.out_proj.weight",
    "mlp.gate_up_proj.weight": "ffn.gate_up_proj.weight",  # fused: split by ``split``
    "mlp.down_proj.weight": "ffn.down_proj.weight",
}
#: HF ``Phi3Config``'s defaults where they differ from the generic reader's.
DEFAULTS = {"max_position_embeddings": 4096, "original_max_position_embeddings": 4096}
#: HF's Phi-3 reader renames these RoPE types to longrope.
LONGROPE_ALIASES = ("su", "yarn")


def phi3_rope(c: HFConfig, *, head_dim: int, pairing: str) -> tuple[str, dict]:
    """(scheme, options) of Phi-3's one RoPE, with HF's Phi-3 rules for the type and L₀."""
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: RoPE parameters per layer type ({', '.join(map(str, blocks))}) are not "
                         "expected for Phi-3, which uses one RoPE for every layer")
    block = dict(blocks[None])
    if block["rope_type"] in LONGROPE_ALIASES:
        block["rope_type"] = "longrope"
    if block["rope_type"] not in ("default", "longrope"):
        raise ValueError(f"{c.source}: RoPE type {block['rope_type']!r} is not a Phi-3 type; Phi-3 uses 'default' "
                         "or 'longrope' (HF's Phi3Config refuses others too)")
    if block["rope_type"] == "longrope":  # the top-level field wins, as in HF's standardize_rope_params
        block["original_max_position_embeddings"] = c.int("original_max_position_embeddings")
    return rope_scheme(block, head_dim=head_dim, pairing=pairing, source=c.source,
                       max_position_embeddings=c.int("max_position_embeddings"))


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; Phi-3's SwiGLU uses 'silu'")
    c = with_defaults(c, **DEFAULTS)
    sizes = decoder_sizes(c)
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    name, options = phi3_rope(c, head_dim=head_dim, pairing=pairing)
    return DecoderConfig(**sizes, norm_eps=c.float("rms_norm_eps", 1e-5, above=0), position=name,
                       position_options=options, sliding_window=c.int("sliding_window", None), family="phi3")


def split(name: str, tensor: Tensor, config: Any) -> list[tuple[str, Tensor]]:
    """Phi-3's fused tensors → posenc's: qkv_proj rows q | k | v; gate_up_proj rows gate | up (HF's ``chunk(2)``)."""
    head, _, leaf = name.rpartition(".")
    if head.endswith("attn.qkv_proj"):
        stem = head.removesuffix("qkv_proj")
        q, kv = config.num_heads * config.attention_head_dim, config.kv_heads * config.attention_head_dim
        if tensor.shape[0] != q + 2 * kv:  # the loader names the tensor; say what the rows should be
            return [(f"{stem}qkv_proj.{leaf}", tensor)]
        return [(f"{stem}q_proj.{leaf}", tensor[:q]), (f"{stem}k_proj.{leaf}", tensor[q:q + kv]),
                (f"{stem}v_proj.{leaf}", tensor[q + kv:])]
    if head.endswith("ffn.gate_up_proj"):
        stem = head.removesuffix("gate_up_proj")
        if tensor.shape[0] != 2 * config.ffn_dim:
            return [(name, tensor)]
        return [(f"{stem}gate_proj.{leaf}", tensor[:config.ffn_dim]), (f"{stem}up_proj.{leaf}", tensor[config.ffn_dim:])]
    return [(name, tensor)]


def fixed_longrope(config: Any, max_seq_len: int | None) -> Any:
    """``config`` with every LongRoPE layer's ``max_seq_len`` set: None (per position, the default) or a length.

    See the module docstring for which HF behaviour each reproduces. Build it with
    ``build_decoder`` and load the same weights (``model.load_state_dict(old.state_dict())``).
    """
    def fix(position: str, options: dict[str, Any]) -> dict[str, Any]:
        return {**options, "max_seq_len": max_seq_len} if position == "rope-longrope" else dict(options)

    if config.layer_plan is None:
        return dataclasses.replace(config, position_options=fix(config.position, config.position_options))
    plan = [{**spec, "position_options": fix(spec["position"], spec["position_options"])}
            for spec in config.layer_plan]
    return dataclasses.replace(config, layer_plan=plan)


FAMILY = Family(name="phi3", model_types=("phi3",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                split=split)
