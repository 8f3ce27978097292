"""GPT-OSS (OpenAI, 2025): alternating sliding-window and full layers, attention sinks, YaRN, clamped-SwiGLU experts.

config.json ``model_type`` "gpt_oss" (``GptOssForCausalLM``: gpt-oss-20b and
-120b). The plan comes from ``layer_types`` (default: sliding, full,
sliding, …): ``sliding_attention`` layers see the last ``sliding_window``
keys (128), ``full_attention`` layers all of them; every layer rotates with
one YaRN RoPE (factor 32 over an original 4,096 tokens, ``truncate: false`` —
the ramp bounds are not rounded to whole pairs) in the half pairing. Parts:
pre-norm blocks with RMSNorm, q/k/v/o biases, one learned sink logit per head
(a virtual key with a zero value that takes a share of the softmax mass;
HF subtracts the row maximum, sink included, before the softmax — the same
softmax), and in every layer a mixture of experts: a router with a bias, the
softmax of the top-k logits, and experts with biases whose SwiGLU is clamped
(gate ≤ 7, |up| ≤ 7, (up + 1)·gate·σ(1.702·gate)).

HF's GPT-OSS RMSNorm multiplies the gain in float32 before the cast, posenc's
``rms`` after: the same in float32, one rounding apart in 16-bit.

Refused by name: a ``layer_types`` entry other than the two kinds, and a
sliding layer with no ``sliding_window``.

Reference used to verify: HF ``GptOssForCausalLM`` on tiny random checkpoints
(2–4 experts), full forward and cached decoding past the window, both
pairings (``tests/families/test_gpt_oss.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families import PROJECTION_NAMES, Family, decoder_sizes, layer_types
from posenc.families.hf_config import MAX_WIDTH, HFConfig
from posenc.families.rope import rope_blocks, rope_scheme
from posenc.plan import LayerSpec, Window

SLIDING, FULL_ATTENTION = "sliding_attention", "full_attention"
#: The fused expert tensors (E, …) of an HF checkpoint, split per expert by ``split``.
FUSED = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.sinks": "attn.sinks",
    "mlp.router.weight": "ffn.router.weight",
    "mlp.router.bias": "ffn.router.bias",
    **{f"mlp.experts.{name}": f"ffn.experts.{name}" for name in FUSED},
    **{k: v for k, v in PROJECTION_NAMES.items() if k.startswith("self_attn.")},
}


def gpt_oss_layer_types(c: HFConfig, num_layers: int) -> list[str]:
    """``layer_types``, or HF's default: even layers sliding, odd layers full."""
    types = layer_types(c, num_layers)
    if types is None:
        types = [SLIDING if (i + 1) % 2 else FULL_ATTENTION for i in range(num_layers)]
    unknown = sorted(set(types) - {SLIDING, FULL_ATTENTION})
    if unknown:
        raise ValueError(f"{c.source}: layer_types {unknown} are not GPT-OSS layer types "
                         f"({SLIDING!r}, {FULL_ATTENTION!r})")
    return types


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    sizes = decoder_sizes(c)
    num_layers = sizes["num_layers"]
    head_dim = sizes["head_dim"] or sizes["dim"] // sizes["num_heads"]
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: GPT-OSS uses one RoPE in every layer; rope_parameters per layer type "
                         f"({', '.join(map(str, blocks))}) are not expected")
    name, options = rope_scheme(blocks[None], head_dim=head_dim, pairing=pairing, source=c.source,
                                max_position_embeddings=sizes["max_position_embeddings"])
    types = gpt_oss_layer_types(c, num_layers)
    window = c.int("sliding_window", None)
    if SLIDING in types and window is None:
        raise ValueError(f"{c.source}: layer_types has sliding_attention layers but sliding_window is not set; "
                         "GPT-OSS uses 128")
    specs = {SLIDING: LayerSpec(position=name, position_options=options,
                                window=Window("sliding", window) if window is not None else Window()),
             FULL_ATTENTION: LayerSpec(position=name, position_options=options)}
    experts = c.int("num_local_experts", maximum=MAX_WIDTH)
    moe = {"router": "softmax-topk", "num_experts": experts,
           "top_k": c.int("num_experts_per_tok", maximum=experts), "hidden": sizes["ffn_dim"],
           "layers": list(range(num_layers)), "expert": "clamped-swiglu", "bias": True, "router_bias": True,
           "alpha": c.float("swiglu_alpha", 1.702), "limit": c.float("swiglu_limit", 7.0, above=0)}
    bias = c.bool("attention_bias", True)
    return DecoderConfig(
        **sizes, norm_eps=c.float("rms_norm_eps", 1e-5, above=0), position="none",
        layer_plan=[specs[t].to_dict() for t in types], family="gpt_oss", qkv_bias=bias, out_bias=bias,
        attn_sinks=True, moe=moe,
    )


def split(name: str, tensor: Tensor, config) -> list[tuple[str, Tensor]]:
    """HF's fused expert tensors → one tensor per expert and projection (nn.Linear layout).

    ``gate_up_proj`` (E, D, 2F) interleaves gate and up columns (gate at even, up at odd
    indices); ``down_proj`` is (E, F, D); their biases (E, 2F) and (E, D) follow the same order.
    """
    prefix, _, part = name.rpartition(".")
    if not prefix.endswith("ffn.experts") or part not in FUSED:
        return [(name, tensor)]
    out = []
    for e in range(tensor.shape[0]):
        t = tensor[e]
        if part == "gate_up_proj":  # (D, 2F)
            out += [(f"{prefix}.{e}.gate_proj.weight", t[:, 0::2].T.contiguous()),
                    (f"{prefix}.{e}.up_proj.weight", t[:, 1::2].T.contiguous())]
        elif part == "gate_up_proj_bias":  # (2F,)
            out += [(f"{prefix}.{e}.gate_proj.bias", t[0::2].contiguous()),
                    (f"{prefix}.{e}.up_proj.bias", t[1::2].contiguous())]
        elif part == "down_proj":  # (F, D)
            out.append((f"{prefix}.{e}.down_proj.weight", t.T.contiguous()))
        else:
            out.append((f"{prefix}.{e}.down_proj.bias", t.clone()))
    return out


FAMILY = Family(name="gpt_oss", model_types=("gpt_oss",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                split=split)
