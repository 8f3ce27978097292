"""GPT-J (Wang & Komatsuzaki, 2021): partial RoPE with interleaved pairs, attention and MLP in parallel.

config.json ``model_type`` "gptj" (``GPTJForCausalLM``: GPT-J-6B and its
fine-tunes). Positions are posenc's ``rope`` (base 10⁴, fixed in GPT-J's code)
on the first ``rotary_dim`` coordinates of each head; GPT-J rotates
*interleaved* pairs (``rotate_every_two``: coordinates 2i, 2i + 1), so its q/k
rows are already in posenc's fast pairing and move only if "half" is asked for.
Parts: one LayerNorm feeding both branches, x + attn(n(x)) + mlp(n(x)) (posenc's
``parallel`` block), the tanh-GELU MLP with biases, projections without biases,
an untied head with a bias.

Refused by name: ``rotary_dim`` null (HF's code then builds a table of the
model width, which only runs for one head).

Reference used to verify: HF ``GPTJForCausalLM`` on tiny random checkpoints,
full forward and cached decoding, both pairings (``tests/families/test_gptj.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily, mlp_activation

#: GPT-J's RoPE base, a constant of its modeling code (``create_sinusoidal_positions``).
GPTJ_BASE = 10000.0

TOP_NAMES = {"transformer.wte.weight": "embed.weight",
             **{f"transformer.ln_f.{w}": f"norm.{w}" for w in ("weight", "bias")},
             **{f"lm_head.{w}": f"head.{w}" for w in ("weight", "bias")}}
BLOCK_NAMES = {
    **{f"ln_1.{w}": f"attn_norm.{w}" for w in ("weight", "bias")},
    **{f"attn.{p}_proj.weight": f"attn.{p}_proj.weight" for p in ("q", "k", "v", "out")},
    **{f"mlp.{p}.{w}": f"ffn.{p}.{w}" for p in ("fc_in", "fc_out") for w in ("weight", "bias")},
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    dim, heads = c.int("n_embd", maximum=MAX_WIDTH), c.int("n_head", maximum=MAX_HEADS)
    if dim % heads:
        raise ValueError(f"{c.source}: n_embd = {dim} is not divisible by n_head = {heads}")
    head_dim = dim // heads
    rotary_dim = c.int("rotary_dim", None, maximum=head_dim)
    if rotary_dim is None:
        raise ValueError(f"{c.source}: rotary_dim is null; posenc runs GPT-J with a rotary_dim <= the head width "
                         f"{head_dim} (GPT-J-6B: 64)")
    context = c.int("n_positions", 2048, maximum=MAX_CONTEXT)
    options = {"base": GPTJ_BASE, "pairing": pairing} | ({"rotary_dim": rotary_dim} if rotary_dim != head_dim else {})
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim, num_layers=c.int("n_layer", maximum=MAX_LAYERS),
        num_heads=heads, ffn_dim=c.int("n_inner", 4 * dim, maximum=MAX_WIDTH),
        norm_eps=c.float("layer_norm_epsilon", 1e-5, above=0), max_position_embeddings=context,
        position="rope", position_options=options, ffn_bias=True,
        tie_embeddings=c.bool("tie_word_embeddings", False), head_bias=True, family="gptj", block="parallel",
        norm="layernorm", ffn=mlp_activation(c, "activation_function", "gelu_new"),
    )


FAMILY = StackFamily(name="gptj", model_types=("gptj",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="transformer", stack="h", hf_pairing="interleaved",
                     dropped=(".attn.bias", ".attn.masked_bias"))
