"""Cohere 2 (Command R7B, Command A): sliding-window RoPE layers and global NoPE layers, parallel blocks.

config.json ``model_type`` "cohere2" (``Cohere2ForCausalLM``). Read:

* the plan — ``layer_types`` if given, else every ``sliding_window_pattern``-th
  layer (4 by default: 3 sliding : 1 global) ``full_attention``, the rest
  ``sliding_attention`` (HF's ``Cohere2Config.__post_init__``). A sliding
  layer rotates q and k (one RoPE, ``rope_parameters`` / ``rope_scaling`` +
  ``rope_theta``) and sees the last ``sliding_window`` keys; a global layer
  has no positions at all (HF applies the rotation only where the layer has a
  window) and sees every key.
* the parts — a parallel block (x + attn(n(x)) + ffn(n(x)), one norm),
  LayerNorm without bias (``layer_norm_eps``) for the blocks and the final
  norm, SwiGLU without biases, ``attention_bias`` on all four projections,
  the head tied to the token table by default, logits × ``logit_scale``
  (0.0625 by default).
* the pairing — Cohere's ``rotate_half`` rotates adjacent coordinates
  (``x[..., ::2]``, ``x[..., 1::2]``) with ``repeat_interleave``d
  frequencies: HF's checkpoints store q/k rows for the *interleaved* pairing
  (``hf_pairing="interleaved"``), the reverse of the Llama family; loading
  with ``pairing="half"`` permutes them the other way.
* ``head_dim`` — always hidden_size // num_attention_heads, as HF forces it
  (a stated ``head_dim`` is ignored, as HF ignores it).

Refused by name: a ``hidden_act`` other than silu; ``layer_types`` other than
``full_attention`` / ``sliding_attention``; no ``sliding_window`` (HF builds
the sliding mask unconditionally and raises without one); RoPE types posenc
lacks. The Cohere 1 type ``cohere`` (RoPE everywhere, per-head QK-norm gains)
is another family, not read here.

Reference used to verify: HF ``Cohere2ForCausalLM`` on tiny random checkpoints,
full forward and cached decoding past the window, both pairings
(``tests/families/test_cohere2.py``).
"""

from __future__ import annotations

from posenc.families import PROJECTION_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import HFConfig
from posenc.families.llama import single_rope
from posenc.families.qwen3 import FULL_ATTENTION, SLIDING, checked_types
from posenc.families.rope import plan_fields, with_defaults
from posenc.plan import LayerSpec, Window

BLOCK_NAMES = {"input_layernorm.weight": "attn_norm.weight", **PROJECTION_NAMES}
#: HF ``Cohere2Config``'s defaults where they differ from the generic reader's.
DEFAULTS = {"max_position_embeddings": 8192, "tie_word_embeddings": True, "sliding_window": 4096}
DEFAULT_PATTERN = 4
DEFAULT_LOGIT_SCALE = 0.0625


def cohere2_layer_types(c: HFConfig, num_layers: int, window: int | None) -> list[str]:
    """Each layer's type: ``layer_types`` if given, else every ``sliding_window_pattern``-th layer global."""
    types = layer_types(c, num_layers)
    if types is None:
        pattern = c.int("sliding_window_pattern", DEFAULT_PATTERN)
        types = [SLIDING if (i + 1) % pattern else FULL_ATTENTION for i in range(num_layers)]
    return checked_types(c, types, window)


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; Cohere 2's SwiGLU uses 'silu'")
    c = with_defaults(c, **DEFAULTS)
    sizes = decoder_sizes(c)
    head_dim = sizes["dim"] // sizes["num_heads"]  # HF's Cohere2Config sets it so, whatever config.json says
    sizes["head_dim"] = head_dim if head_dim * sizes["num_heads"] != sizes["dim"] else None
    name, options = single_rope(c, head_dim=head_dim, pairing=pairing)
    window = c.int("sliding_window", None)
    if window is None:
        raise ValueError(f"{c.source}: sliding_window is null; Cohere 2's sliding layers need one (HF builds "
                         "their mask in every forward and raises without it); Command R7B uses 4096")
    specs = {SLIDING: LayerSpec(position=name, position_options=options, window=Window("sliding", window)),
             FULL_ATTENTION: LayerSpec(position="none")}
    plan = [specs[t] for t in cohere2_layer_types(c, sizes["num_layers"], window)]
    bias = c.bool("attention_bias", False)
    return DecoderConfig(
        **sizes, **plan_fields(plan), norm_eps=c.float("layer_norm_eps", 1e-5, above=0), family="cohere2",
        block="parallel", norm="layer", qkv_bias=bias, out_bias=bias,
        logit_scale=c.float("logit_scale", DEFAULT_LOGIT_SCALE, above=0),
    )


FAMILY = Family(name="cohere2", model_types=("cohere2",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                hf_pairing="interleaved")
