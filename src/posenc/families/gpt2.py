"""GPT-2 (Radford et al., 2019): learned absolute positions added to the tokens, the decoder that made them standard.

config.json ``model_type`` "gpt2" (``GPT2LMHeadModel``: gpt2, distilgpt2, …).
Positions are posenc's ``learned`` additive scheme with ``n_positions`` rows —
the model's input position, not a per-layer one (the layers see no positions).
Parts: pre-norm blocks with LayerNorm (gain and bias), the non-gated tanh-GELU
MLP (``gelu_new``), biases everywhere, a head tied to the token table.

Checkpoint layout: GPT-2's projections are ``Conv1D`` modules whose weights are
stored (in, out) — the transpose of ``nn.Linear`` — so every block weight is
transposed on load, and the fused ``c_attn`` (D → 3·D, [q; k; v]) is split.
Old checkpoints store the causal-mask buffers ``attn.bias`` / ``attn.masked_bias``;
they are skipped. Names saved from the bare ``GPT2Model`` (``h.0.…``) load too.

Refused by name: ``scale_attn_by_inverse_layer_idx`` (a per-layer softmax scale),
``add_cross_attention``, activations posenc lacks.

Reference used to verify: HF ``GPT2LMHeadModel`` on tiny random checkpoints,
full forward and cached decoding (``tests/families/test_gpt2.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily, fused_prefix, mlp_activation, split_qkv

TOP_NAMES = {"transformer.wte.weight": "embed.weight", "transformer.wpe.weight": "position.weight",
             "transformer.ln_f.weight": "norm.weight", "transformer.ln_f.bias": "norm.bias",
             "lm_head.weight": "head.weight"}
BLOCK_NAMES = {
    **{f"ln_1.{w}": f"attn_norm.{w}" for w in ("weight", "bias")},
    **{f"ln_2.{w}": f"ffn_norm.{w}" for w in ("weight", "bias")},
    **{f"attn.c_attn.{w}": f"attn.c_attn.{w}" for w in ("weight", "bias")},  # fused: split below
    **{f"attn.c_proj.{w}": f"attn.out_proj.{w}" for w in ("weight", "bias")},
    **{f"mlp.c_fc.{w}": f"ffn.fc_in.{w}" for w in ("weight", "bias")},
    **{f"mlp.c_proj.{w}": f"ffn.fc_out.{w}" for w in ("weight", "bias")},
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if c.bool(key, False):
            raise ValueError(f"{c.source}: {key} = true is not supported; posenc runs GPT-2 with one softmax scale "
                             "and no cross-attention (the released GPT-2 checkpoints set both false)")
    dim, heads = c.int("n_embd", maximum=MAX_WIDTH), c.int("n_head", maximum=MAX_HEADS)
    if dim % heads:
        raise ValueError(f"{c.source}: n_embd = {dim} is not divisible by n_head = {heads}")
    context = c.int("n_positions", maximum=MAX_CONTEXT)
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim, num_layers=c.int("n_layer", maximum=MAX_LAYERS),
        num_heads=heads, ffn_dim=c.int("n_inner", 4 * dim, maximum=MAX_WIDTH),
        norm_eps=c.float("layer_norm_epsilon", 1e-5, above=0), max_position_embeddings=context,
        position="learned", position_options={"max_len": context},
        qkv_bias=True, out_bias=True, ffn_bias=True, tie_embeddings=c.bool("tie_word_embeddings", True),
        family="gpt2", block="pre", norm="layernorm", ffn=mlp_activation(c, "activation_function", "gelu_new"),
        attn_scale=None if c.bool("scale_attn_weights", True) else 1.0,
    )


def split(name: str, tensor: Tensor, cfg) -> list[tuple[str, Tensor]]:
    """Conv1D weights (in, out) → Linear (out, in); the fused c_attn → q, k, v."""
    if name.startswith("layers.") and tensor.dim() == 2:
        tensor = tensor.t()
    prefix = fused_prefix(name, "c_attn")
    return [(name, tensor)] if prefix is None else split_qkv(prefix, tensor)


FAMILY = StackFamily(name="gpt2", model_types=("gpt2",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="transformer", stack="h", split=split,
                     dropped=(".attn.bias", ".attn.masked_bias"))
