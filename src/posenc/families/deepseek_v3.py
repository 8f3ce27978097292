"""DeepSeek-V3: multi-head latent attention with a decoupled rotary slice, YaRN with mscale, grouped-routing experts.

config.json ``model_type`` "deepseek_v3" (``DeepseekV3ForCausalLM``; also
Kimi-K2 and the other V3-architecture releases). Every layer runs MLA
(``posenc.models.mla``): queries through a ``q_lora_rank`` bottleneck (or one
projection where it is null), keys and values expanded per head from a
``kv_lora_rank`` latent, and RoPE only on the ``qk_rope_head_dim`` slice — a
query slice per head and one key slice shared by all heads. The scheme is
built with head_dim = ``qk_rope_head_dim`` (HF sets ``head_dim`` to it for
the same reason: YaRN's frequencies are those of the slice).

* RoPE pairing: ``rope_interleave`` (default true) means the checkpoint's rotary
  rows pair (x₀, x₁), (x₂, x₃), … (HF rotates them so, and lays the result out
  half-paired — the same scores); false means ``rotate_half`` pairs. The loader
  permutes the rotary rows of ``q_b_proj`` (or ``q_proj``) and of
  ``kv_a_proj_with_mqa`` from that pairing to the one posenc runs.
* Softmax scale: (qk_nope_head_dim + qk_rope_head_dim)^−½, times
  mscale(factor, mscale_all_dim)² where the RoPE is scaled and ``mscale_all_dim``
  is set (mscale(s, m) = 0.1·m·ln s + 1, posenc's ``yarn_mscale``) — HF's
  ``yarn_apply_mscale``. YaRN's own attention factor mscale(s, mscale) /
  mscale(s, mscale_all_dim) (1 for DeepSeek-V3's mscale = mscale_all_dim = 1)
  multiplies cos and sin, as ``rope-yarn`` does.
* Feed-forward: dense SwiGLU in the first ``first_k_dense_replace`` layers;
  then experts: a sigmoid router whose ``e_score_correction_bias`` ranks the
  experts (not weights them) within the best ``topk_group`` of ``n_group``
  groups, top-k weights normalised (``norm_topk_prob``) and ×
  ``routed_scaling_factor``, plus ``n_shared_experts`` shared experts (one
  SwiGLU of their summed width).

Weights: HF saves experts one by one (``mlp.experts.<e>.gate_proj.weight``);
fused (E, …) tensors are split too. The multi-token-prediction layers some
checkpoints carry past ``num_hidden_layers`` (``model.layers.61``) are skipped,
as HF skips them: they do not take part in next-token logits.

Refused by name: ``scoring_func`` other than sigmoid, ``topk_method`` other
than noaux_tc, ``moe_layer_freq`` ≠ 1, activations other than SiLU, and
``num_key_value_heads`` ≠ ``num_attention_heads`` (MLA has no shared kv heads).

Reference used to verify: HF ``DeepseekV3ForCausalLM`` on tiny random
checkpoints (4 experts in 2 groups, one dense layer), full forward and cached
decoding, both checkpoint pairings, with and without a q rank, and YaRN with
mscale (``tests/families/test_deepseek_v3.py``).
"""

from __future__ import annotations

from torch import Tensor

from posenc.families import Family, TOP_NAMES
from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.rope import rope_blocks, rope_scheme
from posenc.plan import LayerSpec
from posenc.positions import convert_qk_weight
from posenc.positions.rotary_scaling import yarn_mscale

BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn.query_proj.weight",
    "self_attn.q_a_proj.weight": "attn.q_a_proj.weight",
    "self_attn.q_a_proj.bias": "attn.q_a_proj.bias",
    "self_attn.q_a_layernorm.weight": "attn.q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn.q_b_proj.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn.kv_a_proj.weight",
    "self_attn.kv_a_proj_with_mqa.bias": "attn.kv_a_proj.bias",
    "self_attn.kv_a_layernorm.weight": "attn.kv_a_norm.weight",
    "self_attn.kv_b_proj.weight": "attn.kv_b_proj.weight",
    "self_attn.o_proj.weight": "attn.out_proj.weight",
    "self_attn.o_proj.bias": "attn.out_proj.bias",
    **{f"mlp.{p}_proj.weight": f"ffn.{p}_proj.weight" for p in ("gate", "up", "down")},
    **{f"mlp.shared_experts.{p}_proj.weight": f"ffn.shared.{p}_proj.weight" for p in ("gate", "up", "down")},
    "mlp.gate.weight": "ffn.router.weight",
    "mlp.gate.e_score_correction_bias": "ffn.router.correction_bias",
    "mlp.experts.gate_up_proj": "ffn.experts.gate_up_proj",
    "mlp.experts.down_proj": "ffn.experts.down_proj",
}
#: A tensor of a layer past num_hidden_layers (multi-token prediction): named so, then dropped by ``split``.
EXTRA = "extra"


def mscale_softmax_scale(block: dict, qk_head_dim: int) -> float:
    """HF's ``yarn_apply_mscale``: qk_head_dim^−½ · mscale(factor, mscale_all_dim)² for a scaled RoPE with
    ``mscale_all_dim`` set, else qk_head_dim^−½."""
    scale = qk_head_dim ** -0.5
    all_dim = block.get("mscale_all_dim") or 0
    if block.get("rope_type", "default") != "default" and all_dim:
        factor = float(block["factor"])
        scale *= yarn_mscale(factor, float(all_dim)) ** 2
    return scale


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.decoder import DecoderConfig

    act = c.str("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{c.source}: hidden_act {act!r} is not supported; DeepSeek-V3's SwiGLU uses 'silu'")
    for key, want in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
        if key in c and c.str(key) != want:
            raise ValueError(f"{c.source}: {key} = {c.str(key)!r} is not supported; DeepSeek-V3 uses {want!r} "
                             "(DeepSeek-V2's softmax routing is another model type)")
    if "moe_layer_freq" in c and c.int("moe_layer_freq") != 1:
        raise ValueError(f"{c.source}: moe_layer_freq = {c.int('moe_layer_freq')} is not supported; HF's "
                         "DeepSeek-V3 puts experts in every layer after first_k_dense_replace (frequency 1)")
    dim, heads = c.int("hidden_size", maximum=MAX_WIDTH), c.int("num_attention_heads", maximum=MAX_HEADS)
    if c.int("num_key_value_heads", heads, maximum=MAX_HEADS) != heads:
        raise ValueError(f"{c.source}: num_key_value_heads = {c.int('num_key_value_heads')} differs from "
                         f"num_attention_heads = {heads}; multi-head latent attention expands keys and values "
                         "for every head (HF's DeepSeek-V3 runs only with the two equal)")
    num_layers = c.int("num_hidden_layers", maximum=MAX_LAYERS)
    mla = {"q_lora_rank": c.int("q_lora_rank", None, maximum=MAX_WIDTH),
           "kv_lora_rank": c.int("kv_lora_rank", maximum=MAX_WIDTH),
           "qk_nope_head_dim": c.int("qk_nope_head_dim", maximum=MAX_WIDTH),
           "qk_rope_head_dim": c.int("qk_rope_head_dim", maximum=MAX_WIDTH),
           "v_head_dim": c.int("v_head_dim", maximum=MAX_WIDTH), "bias": c.bool("attention_bias", False),
           "source_pairing": "interleaved" if c.bool("rope_interleave", True) else "half"}
    rope_dim, qk_head_dim = mla["qk_rope_head_dim"], mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    max_pos = c.int("max_position_embeddings", 4096, maximum=MAX_CONTEXT)
    blocks = rope_blocks(c)
    if None not in blocks:
        raise ValueError(f"{c.source}: DeepSeek-V3 uses one RoPE; rope_parameters per layer type "
                         f"({', '.join(map(str, blocks))}) are not expected")
    name, options = rope_scheme(blocks[None], head_dim=rope_dim, pairing=pairing, source=c.source,
                                max_position_embeddings=max_pos)
    spec = LayerSpec(position=name, position_options={**options, "head_dim": rope_dim})  # the rotary slice's width
    experts = c.int("n_routed_experts", maximum=MAX_WIDTH)
    first_moe = c.int("first_k_dense_replace", 0, minimum=0, maximum=num_layers)
    expert_hidden = c.int("moe_intermediate_size", maximum=MAX_WIDTH)
    shared = c.int("n_shared_experts", 0, minimum=0, maximum=MAX_WIDTH)
    moe = {"router": "grouped-sigmoid", "num_experts": experts,
           "top_k": c.int("num_experts_per_tok", maximum=experts), "hidden": expert_hidden,
           "shared_hidden": expert_hidden * shared if shared else None, "layers": list(range(first_moe, num_layers)),
           "n_group": c.int("n_group", 1, maximum=experts), "topk_group": c.int("topk_group", 1, maximum=experts),
           "norm_topk_prob": c.bool("norm_topk_prob", True),
           "routed_scaling_factor": c.float("routed_scaling_factor", 1.0, above=0)}
    return DecoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=dim, num_layers=num_layers, num_heads=heads,
        head_dim=qk_head_dim, ffn_dim=c.int("intermediate_size", maximum=MAX_WIDTH), max_position_embeddings=max_pos,
        tie_embeddings=c.bool("tie_word_embeddings", False), norm_eps=c.float("rms_norm_eps", 1e-6, above=0),
        position="none", layer_plan=[spec.to_dict()] * num_layers, family="deepseek_v3",
        attn_scale=mscale_softmax_scale(blocks[None], qk_head_dim), moe=moe, mla=mla,
    )


def _rotary_rows(t: Tensor, *, heads: int, width: int, offset: int, rope: int, source: str, target: str) -> Tensor:
    """Permute rows [offset, offset + rope) of each of ``heads`` row groups of ``width`` between RoPE pairings."""
    rows = t.reshape(heads, width, -1)  # (heads, width, in) — a bias is one column
    rot = rows[:, offset:offset + rope].reshape(heads * rope, -1)
    rot = convert_qk_weight(rot, num_heads=heads, head_dim=rope, source=source, target=target)
    rows = rows.clone()
    rows[:, offset:offset + rope] = rot.view(heads, rope, -1)
    return rows.reshape(t.shape)


def split(name: str, tensor: Tensor, config) -> list[tuple[str, Tensor]]:
    """Drop multi-token-prediction layers, split fused experts, and move the rotary rows to the layer's pairing."""
    parts = name.split(".")
    if parts[0] == "layers" and int(parts[1]) >= config.num_layers:
        return []  # model.layers.61 in DeepSeek-V3: multi-token prediction, not next-token logits
    prefix, _, part = name.rpartition(".")
    if prefix.endswith("ffn.experts") and part in ("gate_up_proj", "down_proj"):
        out = []
        for e in range(tensor.shape[0]):  # HF's in-memory layout: gate_up (E, 2F, D) = [gate; up], down (E, D, F)
            if part == "gate_up_proj":
                gate, up = tensor[e].chunk(2, dim=0)
                out += [(f"{prefix}.{e}.gate_proj.weight", gate.contiguous()),
                        (f"{prefix}.{e}.up_proj.weight", up.contiguous())]
            else:
                out.append((f"{prefix}.{e}.down_proj.weight", tensor[e].contiguous()))
        return out
    mla = config.mla
    source = mla["source_pairing"]
    target = config.plan[int(parts[1])].position_options.get("pairing", source) if parts[0] == "layers" else source
    if source == target:
        return [(name, tensor)]
    nope, rope, rank = mla["qk_nope_head_dim"], mla["qk_rope_head_dim"], mla["kv_lora_rank"]
    if name.endswith(("attn.q_b_proj.weight", "attn.query_proj.weight")):  # per head: [nope | rope] rows
        tensor = _rotary_rows(tensor, heads=config.num_heads, width=nope + rope, offset=nope, rope=rope,
                              source=source, target=target)
    elif name.endswith(("attn.kv_a_proj.weight", "attn.kv_a_proj.bias")):  # [latent | shared k_pe] rows
        tensor = _rotary_rows(tensor, heads=1, width=rank + rope, offset=rank, rope=rope, source=source,
                              target=target)
    return [(name, tensor)]


class DeepseekV3Family(Family):
    """Names layer tensors this family's static table cannot list: per-expert weights and extra layers."""

    def posenc_name(self, hf_name: str) -> str | None:
        mapped = super().posenc_name(hf_name)
        if mapped is not None:
            return mapped
        head = f"{self.prefix}.layers."
        if not hf_name.startswith(head):
            return None
        layer, _, rest = hf_name[len(head):].partition(".")
        if not layer.isdigit():
            return None
        bits = rest.split(".")
        if (len(bits) == 5 and bits[:2] == ["mlp", "experts"] and bits[2].isdigit()
                and bits[3] in ("gate_proj", "up_proj", "down_proj") and bits[4] == "weight"):
            return f"layers.{layer}.ffn.experts.{bits[2]}.{bits[3]}.weight"
        return f"layers.{layer}.{EXTRA}.{rest}"  # kept only if the layer is past the model (split drops it)


FAMILY = DeepseekV3Family(name="deepseek_v3", model_types=("deepseek_v3",), config_from_hf=config_from_hf,
                          block_names=BLOCK_NAMES, top_names=dict(TOP_NAMES), split=split)
