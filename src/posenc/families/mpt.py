"""MPT (MosaicML, 2023): ALiBi with its own slope scale, no biases anywhere, clipped q/k/v.

config.json ``model_type`` "mpt" (``MptForCausalLM``: mpt-7b and its variants).
Positions are posenc's ``alibi`` bias scheme in every layer with ``max_bias`` =
``attn_config.alibi_bias_max``: slopes 2^(−max_bias·k/n). MPT builds them for the
next power of two and takes the odd ones first (``build_mpt_alibi_tensor``),
which is the paper's layout for any head count (``tests/families/test_mpt.py``
checks both). Parts: LayerNorm with a gain and no bias (float32), the exact-GELU
MLP (4·D) without biases, projections without biases, the fused ``Wqkv``
([q; k; v]) split, ``clip_qkv`` clamping the q, k, v outputs, ``softmax_scale``,
a tied head.

Where posenc departs from HF's code: HF's ``MptModel`` calls its ALiBi builder
without ``alibi_bias_max`` and so always uses 8; posenc uses the configured
value, as MosaicML's own code does (every released MPT has 8, where the two agree).

Refused by name: ``alibi`` false, ``qk_ln``, ``prefix_lm``,
``attn_uses_sequence_id``, ``no_bias`` false, ``logit_scale`` and an
``expansion_ratio`` other than 4 (HF's code fixes the MLP at 4·D).

Reference used to verify: HF ``MptForCausalLM`` on tiny random checkpoints, full
forward and cached decoding, with and without ``clip_qkv``; HF's
``build_mpt_alibi_tensor`` for other ``alibi_bias_max`` (``tests/families/test_mpt.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily, fused_prefix, split_qkv

TOP_NAMES = {"transformer.wte.weight": "embed.weight", "transformer.norm_f.weight": "norm.weight",
             "lm_head.weight": "head.weight"}
BLOCK_NAMES = {
    "norm_1.weight": "attn_norm.weight", "norm_2.weight": "ffn_norm.weight",
    "attn.Wqkv.weight": "attn.Wqkv.weight", "attn.out_proj.weight": "attn.out_proj.weight",
    "ffn.up_proj.weight": "ffn.fc_in.weight", "ffn.down_proj.weight": "ffn.fc_out.weight",
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    attn = c.sub("attn_config", c.dict("attn_config", {}))
    if not attn.bool("alibi", True):
        raise ValueError(f"{attn.source}: alibi = false is not supported; HF's MPT has no other position scheme")
    for key in ("qk_ln", "prefix_lm", "attn_uses_sequence_id"):
        if attn.bool(key, False):
            raise ValueError(f"{attn.source}: {key} = true is not supported by posenc's MPT (HF's code ignores it)")
    if not c.bool("no_bias", True):
        raise ValueError(f"{c.source}: no_bias = false is not supported; HF's MPT builds no biases")
    if c.raw("logit_scale") is not None:
        raise ValueError(f"{c.source}: logit_scale = {c.raw('logit_scale')!r} is not supported (HF's MPT ignores it); "
                         "released MPTs leave it null")
    if c.float("expansion_ratio", 4) != 4:
        raise ValueError(f"{c.source}: expansion_ratio = {c.raw('expansion_ratio')} is not supported; HF's MPT fixes "
                         "the MLP width at 4·d_model")
    dim, heads = c.int("d_model", maximum=MAX_WIDTH), c.int("n_heads", maximum=MAX_HEADS)
    if dim % heads:
        raise ValueError(f"{c.source}: d_model = {dim} is not divisible by n_heads = {heads}")
    max_bias = attn.float("alibi_bias_max", 8.0, above=0)
    clip = attn.float("clip_qkv", None, minimum=0)
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim, num_layers=c.int("n_layers", maximum=MAX_LAYERS),
        num_heads=heads, ffn_dim=4 * dim, norm_eps=c.float("layer_norm_epsilon", 1e-5, above=0),
        max_position_embeddings=c.int("max_seq_len", 2048, maximum=MAX_CONTEXT),
        position="alibi", position_options={} if max_bias == 8.0 else {"max_bias": max_bias},
        tie_embeddings=c.bool("tie_word_embeddings", True), family="mpt", block="pre", norm="layer",
        ffn="gelu-mlp", attn_scale=attn.float("softmax_scale", None, above=0), clip_qkv=clip or None,
    )


def split(name: str, tensor: Tensor, cfg) -> list[tuple[str, Tensor]]:
    """The fused Wqkv ([q; k; v]) → q, k, v."""
    prefix = fused_prefix(name, "Wqkv")
    return [(name, tensor)] if prefix is None else split_qkv(prefix, tensor)


FAMILY = StackFamily(name="mpt", model_types=("mpt",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="transformer", stack="blocks", split=split)
