"""GPT-NeoX / Pythia (Black et al., 2022; Biderman et al., 2023): partial RoPE and a parallel residual.

config.json ``model_type`` "gpt_neox" (``GPTNeoXForCausalLM``: Pythia 14m … 12b,
GPT-NeoX-20B). Positions are posenc's ``rope`` on the first
``partial_rotary_factor`` (``rotary_pct``) of each head, the rest passed through;
the checkpoint's rows are in the *half* pairing (``rotate_half``) and are moved
to the pairing asked for. Parts: LayerNorm (gain and bias), the exact-GELU MLP,
biases, an untied head (``embed_out``), and with ``use_parallel_residual`` (every
Pythia) both branches read the same input through their own norms:
x + attn(n₁(x)) + mlp(n₂(x)); without it, an ordinary pre-norm block.

Checkpoint layout: the fused ``query_key_value`` is per head (the forward views
it as (H, 3·Dh)) and is split that way; the causal-mask buffers old checkpoints
carry (``attention.bias`` / ``masked_bias``) are skipped. Both config styles are
read: transformers 5's ``rope_parameters`` and the original ``rotary_pct`` +
``rotary_emb_base``.

Reference used to verify: HF ``GPTNeoXForCausalLM`` on tiny random checkpoints,
full forward and cached decoding, both pairings (``tests/families/test_gpt_neox.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families import decoder_sizes
from posenc.families.hf_config import HFConfig
from posenc.families.rope import rope_blocks, rope_scheme
from posenc.families.stacks import StackFamily, fused_prefix, mlp_activation, split_qkv_per_head

TOP_NAMES = {"gpt_neox.embed_in.weight": "embed.weight",
             **{f"gpt_neox.final_layer_norm.{w}": f"norm.{w}" for w in ("weight", "bias")},
             "embed_out.weight": "head.weight"}
BLOCK_NAMES = {
    **{f"input_layernorm.{w}": f"attn_norm.{w}" for w in ("weight", "bias")},
    **{f"post_attention_layernorm.{w}": f"ffn_norm.{w}" for w in ("weight", "bias")},
    **{f"attention.query_key_value.{w}": f"attn.query_key_value.{w}" for w in ("weight", "bias")},
    **{f"attention.dense.{w}": f"attn.out_proj.{w}" for w in ("weight", "bias")},
    **{f"mlp.dense_h_to_4h.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"mlp.dense_4h_to_h.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
}


def neox_rope_block(c: HFConfig) -> dict:
    """The one RoPE block: ``rope_parameters`` (transformers 5) or ``rotary_pct`` / ``rotary_emb_base`` (original)."""
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: RoPE parameters per layer type are not expected for gpt_neox")
    block = dict(blocks[None])
    if "rope_parameters" not in c:  # the original config: the rotary fields sit at the top level
        if "rotary_emb_base" in c:
            block["rope_theta"] = c.float("rotary_emb_base", above=1)
        if "partial_rotary_factor" not in block:
            block["partial_rotary_factor"] = c.float("rotary_pct", 1.0, above=0, maximum=1)
    return block


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    sizes = decoder_sizes(c) | {"num_kv_heads": None, "head_dim": None}  # GPT-NeoX: D = H · Dh, no grouping
    head_dim = sizes["dim"] // sizes["num_heads"]
    name, options = rope_scheme(neox_rope_block(c), head_dim=head_dim, pairing=pairing, source=c.source,
                                max_position_embeddings=sizes["max_position_embeddings"])
    bias = c.bool("attention_bias", True)
    return DecoderConfig(
        **sizes, norm_eps=c.float("layer_norm_eps", 1e-5, above=0), position=name, position_options=options,
        qkv_bias=bias, out_bias=bias, ffn_bias=True, family="gpt_neox",
        block="parallel-two" if c.bool("use_parallel_residual", True) else "pre", norm="layernorm",
        ffn=mlp_activation(c, "hidden_act", "gelu"),
    )


def split(name: str, tensor: Tensor, cfg) -> list[tuple[str, Tensor]]:
    """The per-head fused query_key_value → q, k, v (rows still in HF's half pairing; the loader moves them)."""
    prefix = fused_prefix(name, "query_key_value")
    return [(name, tensor)] if prefix is None else split_qkv_per_head(prefix, tensor, num_heads=cfg.num_heads)


FAMILY = StackFamily(name="gpt_neox", model_types=("gpt_neox",), config_from_hf=config_from_hf,
                     block_names=BLOCK_NAMES, top_names=TOP_NAMES, prefix="gpt_neox", stack="layers", split=split,
                     dropped=(".attention.bias", ".attention.masked_bias"))
