"""The Llama family: model types llama, mistral and qwen2 (Llama 2/3/3.1, Mistral, Qwen2, SmolLM, TinyLlama).

Pre-norm blocks (RMSNorm → grouped-query attention → residual, RMSNorm →
SwiGLU → residual), one RoPE for every layer (``rope_theta``, partial rotary,
``rope_scaling`` linear / dynamic / yarn / llama3 / longrope), Mistral's
sliding window in every layer, Qwen2's q/k/v biases. Refused by name: other
activations, Qwen2 with ``use_sliding_window`` (its window applies from
``max_window_layers`` on — a layer plan the qwen3 family reads), and RoPE
types posenc lacks.

Reference used to verify: HF ``LlamaForCausalLM``, ``MistralForCausalLM``,
``Qwen2ForCausalLM`` on tiny random checkpoints (``tests/pretrained/test_hf_llama.py``).
"""

from __future__ import annotations

from posenc.families import PROJECTION_NAMES, Family, decoder_sizes
from posenc.families.hf_config import HFConfig
from posenc.families.rope import rope_blocks, rope_scheme

#: One block's HF names → posenc's (Llama layout).
BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    **PROJECTION_NAMES,
}


def single_rope(c: HFConfig, *, head_dim: int, pairing: str) -> tuple[str, dict]:
    """The one RoPE of a model that uses the same in every layer (a nested block is refused)."""
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: RoPE parameters per layer type ({', '.join(map(str, blocks))}) are not "
                         f"expected for model_type {c.raw('model_type')!r}, which uses one RoPE for every layer")
    return rope_scheme(blocks[None], head_dim=head_dim, pairing=pairing, source=c.source,
                       max_position_embeddings=c.int("max_position_embeddings", 2048))


def sliding_window(c: HFConfig) -> int | None:
    """Mistral's window in every layer; None where it never binds (≥ the trained context) or is off."""
    window = c.int("sliding_window", None)
    if window is None or window >= c.int("max_position_embeddings", 2048):
        return None
    return window


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    model_type = c.str("model_type")
    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; Llama-family SwiGLU uses 'silu'")
    sizes = decoder_sizes(c)
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    name, options = single_rope(c, head_dim=head_dim, pairing=pairing)
    window = None
    if model_type == "qwen2":
        if c.bool("use_sliding_window", False):
            raise ValueError(f"{c.source}: Qwen2 with use_sliding_window=true (sliding attention in some layers "
                             "only) is not supported by this reader; posenc runs Qwen2 with full attention")
    else:
        window = sliding_window(c)
    bias = c.bool("attention_bias", False)
    return DecoderConfig(
        **sizes, norm_eps=c.float("rms_norm_eps", 1e-6, above=0), position=name, position_options=options,
        qkv_bias=model_type == "qwen2" or bias, out_bias=model_type != "qwen2" and bias,
        ffn_bias=c.bool("mlp_bias", False), sliding_window=window, family="llama",
    )


FAMILY = Family(name="llama", model_types=("llama", "mistral", "qwen2"), config_from_hf=config_from_hf,
                block_names=BLOCK_NAMES)
