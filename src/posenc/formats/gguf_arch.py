"""The GGUF architectures posenc reads: HF config, tensor names, and what llama.cpp's converter did to each.

llama.cpp's converter (``convert_hf_to_gguf.py``) writes every model under an
architecture name (``general.architecture``) with ``{arch}.*`` metadata keys
and ``blk.N.*`` tensor names, and changes some tensors on the way:

==========  ==============  =====================================================================
arch        HF model_type   what the converter did, undone here
==========  ==============  =====================================================================
``llama``   llama           q/k rows permuted per head into interleaved pairs (``LlamaModel.permute``);
                            Llama 3.1/3.2's RoPE scaling stored as a ``rope_freqs`` tensor of per-pair
                            factors, not as metadata
``qwen2``   qwen2           nothing (rows as HF stores them); q/k/v biases
``qwen3``   qwen3           nothing; QK-norm gains ``attn_q_norm`` / ``attn_k_norm``
``gemma3``  gemma3_text     nothing to the rows; every norm gain stored as (1 + w) (``norm_shift``:
                            Gemma's RMSNorm multiplies by 1 + w, llama.cpp's by the stored gain)
==========  ==============  =====================================================================

The reference for every choice here is transformers' GGUF loader
(``modeling_gguf_pytorch_utils.load_gguf_checkpoint``: it un-permutes only the
``llama`` architecture and subtracts 1 from Gemma's norms), and posenc's tensors
equal the ones it loads (tests/pretrained/test_gguf_arch.py and, on the real file,
test_gguf_gemma3.py). Where llama.cpp and that loader differ, posenc follows
llama.cpp, which is what the file was made for, and says so:

- **Gemma 3's layer plan and local base.** The file states the global layers'
  base (``rope.freq_base``) and the window, not the sliding layers' base nor
  which layers are global; llama.cpp supplies base 10,000 and "every sixth layer
  global" for the architecture (``llama-model.cpp``, ``LLM_ARCH_GEMMA3``), as
  does HF's ``Gemma3TextConfig``: both are stated once, here
  (``GEMMA3_LOCAL_BASE``, ``GEMMA3_PATTERN``), and ``posenc.families.gemma3``
  reads configs that leave them out with the same values, imported from here.
  A RoPE scaling in the file (Gemma 3 4B–27B: linear ×8; ``posenc export``:
  linear or YaRN) applies to the global layers only, as in llama.cpp, whose
  sliding layers stay unscaled (HF's GGUF loader drops the scaling).
- **Gemma 3's softmax scale.** Not in the file: llama.cpp uses head_dim^−½,
  except for the 27B model (62 layers), which uses (hidden/heads)^−½ — so
  posenc writes ``query_pre_attn_scalar`` that way (HF's loader leaves its
  default, 256, which is right for every size but 27B).
- **Llama 3.1's ``rope_freqs``.** HF's loader ignores the tensor (and so runs
  plain RoPE); posenc recovers the llama3-type scaling it encodes
  (:func:`llama3_scaling_from_factors`) and refuses, by name, factors that do not
  follow Llama 3's wavelength bands.

Partial rotary (``rope.dimension_count`` < head width) loads for the
architectures whose rows are not permuted (HF ``partial_rotary_factor``:
llama.cpp's NeoX-mode kernel rotates the first ``dimension_count`` channels
in halves, as HF does). It is refused for ``llama``: the converter's permutation
acts on the whole head, mixing the rotated and the pass-through channels, so
no such llama file computes the HF model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from posenc.formats.gguf_error import GGUFError

#: ``blk.N.<key>`` → ``model.layers.N.<value>`` (the Llama layout every architecture here starts from).
LLAMA_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BIASES = {f"attn_{p}.bias": f"self_attn.{p}_proj.bias" for p in "qkv"}
_QK_NORMS = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
#: Gemma's sandwich: a norm before and after attention and FFN (llama.cpp's names).
_GEMMA3_NORMS = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
#: The one tensor outside the HF layout that posenc reads: Llama 3.1/3.2's per-pair RoPE factors.
ROPE_FREQS = "rope_freqs.weight"
#: Gemma 3's two layer types (HF's names, as ``layer_types`` spells them).
GEMMA3_SLIDING, GEMMA3_GLOBAL = "sliding_attention", "full_attention"
#: What a gemma3 file leaves out and llama.cpp supplies (``llama-model.cpp``, ``LLM_ARCH_GEMMA3``), the same as
#: HF's ``Gemma3TextConfig`` defaults: every sixth layer global, the sliding layers' RoPE base 10,000. Stated
#: once, here; ``posenc.families.gemma3`` takes them from here for configs that leave them out.
GEMMA3_PATTERN = 6
GEMMA3_LOCAL_BASE = 10_000.0


def gemma3_plan(num_layers: int, pattern: int = GEMMA3_PATTERN) -> list[str]:
    """Every ``pattern``-th layer global, the others sliding (llama.cpp's fixed plan for gemma3 at the default)."""
    return [GEMMA3_GLOBAL if (i + 1) % pattern == 0 else GEMMA3_SLIDING for i in range(num_layers)]


@dataclass(frozen=True)
class GGUFArch:
    """One ``general.architecture`` posenc reads.

    Attributes:
        name: the GGUF architecture ("gemma3").
        model_type: the HF ``model_type`` its config becomes ("gemma3_text").
        hf_class: HF's class for it (``architectures`` in the config).
        layer_names: ``blk.N.<key>`` → HF name inside ``model.layers.N``.
        permuted_qk: the converter reordered each head's q/k rows into interleaved pairs.
        norm_shift: the converter stored every ``*norm.weight`` as w + this.
        partial_rotary: ``rope.dimension_count`` below the head width is a valid file.
        settings: (metadata, path, config so far) → the architecture's own HF config fields.
        supplied: what ``settings`` fills in that the file does not state (one sentence each; the model
            description carries them and ``posenc rope`` prints them).
    """

    name: str
    model_type: str
    hf_class: str
    layer_names: dict[str, str]
    permuted_qk: bool = False
    norm_shift: float = 0.0
    partial_rotary: bool = True
    settings: Callable[[dict[str, Any], Path, dict[str, Any]], dict[str, Any]] = field(default=lambda m, p, c: {})
    supplied: tuple[str, ...] = ()


def _error(message: str) -> GGUFError:
    return GGUFError(message)


def _llama_settings(meta: dict[str, Any], path: Path, config: dict[str, Any]) -> dict[str, Any]:
    return {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}


def _qwen2_settings(meta: dict[str, Any], path: Path, config: dict[str, Any]) -> dict[str, Any]:
    # llama.cpp runs every Qwen2 layer with full attention; HF's use_sliding_window (off in every released
    # Qwen2/2.5 config) is not written to the file
    return {"hidden_act": "silu", "use_sliding_window": False}


def _qwen3_settings(meta: dict[str, Any], path: Path, config: dict[str, Any]) -> dict[str, Any]:
    return {"hidden_act": "silu", "attention_bias": False, "use_sliding_window": False}


def _gemma3_settings(meta: dict[str, Any], path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's plan: every ``GEMMA3_PATTERN``-th layer global (base ``rope.freq_base``, scaled if the
    file says so), the others sliding with ``GEMMA3_LOCAL_BASE`` — llama.cpp's values for the architecture."""
    window = meta.get("gemma3.attention.sliding_window")
    if window is None:
        raise _error(f"{path}: metadata key 'gemma3.attention.sliding_window' is missing; every Gemma 3 file "
                     "states its window (512 for 270M and 1B). Re-convert it with llama.cpp's convert_hf_to_gguf.py")
    layers, heads, hidden = config["num_hidden_layers"], config["num_attention_heads"], config["hidden_size"]
    global_rope: dict[str, Any] = {"rope_type": "default", "rope_theta": config["rope_theta"]}
    scaling = config.pop("rope_scaling", None)
    if scaling is not None:
        global_rope = {**global_rope, **scaling}  # linear (Gemma 3 4B–27B) or yarn (posenc export)
    out: dict[str, Any] = {
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": int(window),
        "layer_types": gemma3_plan(layers),
        "rope_parameters": {GEMMA3_SLIDING: {"rope_type": "default", "rope_theta": GEMMA3_LOCAL_BASE},
                            GEMMA3_GLOBAL: global_rope},
        # llama.cpp (LLM_ARCH_GEMMA3): 1/sqrt(head_dim), except 27B (62 layers): 1/sqrt(hidden / heads)
        "query_pre_attn_scalar": hidden // heads if layers == 62 else config["head_dim"],
        "attention_bias": False,
    }
    softcap = meta.get("gemma3.final_logit_softcapping")
    if softcap is not None and float(softcap) > 0:
        out["final_logit_softcapping"] = float(softcap)
    return out


ARCHS: dict[str, GGUFArch] = {a.name: a for a in (
    GGUFArch("llama", "llama", "LlamaForCausalLM", LLAMA_LAYER_NAMES, permuted_qk=True, partial_rotary=False,
             settings=_llama_settings),
    GGUFArch("qwen2", "qwen2", "Qwen2ForCausalLM", LLAMA_LAYER_NAMES | _BIASES, settings=_qwen2_settings),
    GGUFArch("qwen3", "qwen3", "Qwen3ForCausalLM", LLAMA_LAYER_NAMES | _QK_NORMS, settings=_qwen3_settings),
    GGUFArch("gemma3", "gemma3_text", "Gemma3ForCausalLM",
             {k: v for k, v in LLAMA_LAYER_NAMES.items() if "norm" not in k} | _GEMMA3_NORMS | _QK_NORMS,
             norm_shift=1.0, settings=_gemma3_settings,
             supplied=("which layers are global: every 6th layer (llama.cpp's and HF's plan for gemma3)",
                       "the sliding layers' RoPE base: 10,000 (llama.cpp's and HF's value for gemma3)",
                       "the softmax scale: head_dim^-1/2, for 27B (hidden/heads)^-1/2 (as llama.cpp computes it)")),
)}
_BY_MODEL_TYPE = {a.model_type: a for a in ARCHS.values()}


def arch_named(name: str, path: Path) -> GGUFArch:
    """The architecture ``general.architecture`` names, or a GGUFError listing those posenc reads."""
    if name not in ARCHS:
        raise _error(f"{path}: architecture {name!r} is not supported; posenc reads GGUF architectures "
                     f"{sorted(ARCHS)} (llama: Llama, Mistral, SmolLM, TinyLlama files). Use the model's HF "
                     "safetensors folder instead if posenc supports its model_type")
    return ARCHS[name]


def arch_of(config: dict[str, Any]) -> GGUFArch:
    """The architecture of an HF config dict :func:`posenc.formats.gguf.config_from_metadata` wrote."""
    return _BY_MODEL_TYPE[config["model_type"]]


def layer_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF name inside a block → shape, for every tensor a block of this architecture holds."""
    d, inter = config["hidden_size"], config["intermediate_size"]
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    shapes = {"self_attn.q_proj.weight": (q, d), "self_attn.k_proj.weight": (kv, d),
              "self_attn.v_proj.weight": (kv, d), "self_attn.o_proj.weight": (d, q),
              "mlp.gate_proj.weight": (inter, d), "mlp.up_proj.weight": (inter, d), "mlp.down_proj.weight": (d, inter),
              "self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
              "self_attn.q_norm.weight": (config["head_dim"],), "self_attn.k_norm.weight": (config["head_dim"],)}
    names = arch_of(config).layer_names.values()
    return {n: shapes.get(n, (d,)) for n in names}  # every other block tensor is a norm over D


# -- Llama 3.1's rope_freqs ---------------------------------------------------------------------------------------
def llama3_factors(rotary_dim: int, base: float, *, factor: float, low_freq_factor: float, high_freq_factor: float,
                   original_max_len: int) -> np.ndarray:
    """The per-pair divisors of θ_i that Llama 3.1's RoPE scaling implies (Meta's rule, as HF's ``llama3`` type).

    λ_i = 2π/θ_i: 1 where λ < L₀/high_freq_factor, ``factor`` where λ > L₀/low_freq_factor, and in between
    1 / ((1 − s)/factor + s) with s = (L₀/λ − low_freq_factor)/(high_freq_factor − low_freq_factor).
    """
    theta = base ** -(np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    wavelength = 2 * math.pi / theta
    smooth = (original_max_len / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = 1 / ((1 - smooth) / factor + smooth)
    out = np.where(wavelength > original_max_len / low_freq_factor, factor, mixed)
    return np.where(wavelength < original_max_len / high_freq_factor, 1.0, out)


def llama3_scaling_from_factors(factors: np.ndarray, *, base: float, rotary_dim: int,
                                path: Path) -> dict[str, Any] | None:
    """HF ``rope_scaling`` (type llama3) whose per-pair factors are the ``rope_freqs`` tensor; None if all are 1.

    The tensor fixes the factor (its largest entry) and the band edges only as wavelengths
    L₀/high_freq_factor and L₀/low_freq_factor, so (L₀, low, high) is known up to one common
    scale; posenc takes low_freq_factor = 1, as every Llama 3.x release states, and solves the
    smooth band's entries for L₀ and high_freq_factor. The result is checked by recomputing every
    factor (relative error ≤ 1e-4; the file holds them in float32).

    Raises:
        GGUFError: a length other than rotary_dim / 2, a non-positive entry, fewer than two entries
            inside the smooth band, or factors that do not follow Llama 3's bands — naming the tensor.
    """
    f = np.asarray(factors, dtype=np.float64).reshape(-1)
    where = f"{path}: tensor {ROPE_FREQS!r} (llama 3 style RoPE frequency factors)"
    if f.size != rotary_dim // 2 or not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise _error(f"{where} must hold rotary_dim / 2 = {rotary_dim // 2} positive factors, got {f.size} "
                     f"entries (min {f.min() if f.size else None}); the file is inconsistent. Re-convert it")
    if np.allclose(f, 1.0, rtol=0, atol=1e-7):
        return None
    top = float(np.float32(f.max()))
    theta = base ** -(np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    inside = (f > 1 + 1e-5) & (f < top * (1 - 1e-5))
    if inside.sum() < 2:
        raise _error(f"{where}: only {int(inside.sum())} factor(s) lie between 1 and {top:g}, so Llama 3's "
                     "band edges cannot be recovered from it; posenc runs rope_freqs as the rope-llama3 scheme only. "
                     "Load the model's HF folder instead (its config states rope_scaling)")
    s = (1 / f[inside] - 1 / top) / (1 - 1 / top)  # Llama 3's smooth weight of each pair in the band
    slope, intercept = np.polyfit(theta[inside] / (2 * math.pi), s, 1)  # s = L₀/(h−1) · (1/λ) − 1/(h−1)
    high = 1 - 1 / intercept if intercept < 0 else float("nan")
    original = slope * (high - 1)
    options = {"factor": top, "low_freq_factor": 1.0,
               "high_freq_factor": round(high, 4) if math.isfinite(high) else high,
               "original_max_len": int(round(original)) if math.isfinite(original) else 0}
    ok = options["original_max_len"] > 0 and options["high_freq_factor"] > 1
    if ok:
        want = llama3_factors(rotary_dim, base, **options)
        error = float(np.max(np.abs(want - f) / f))
        ok = error <= 1e-4
    else:
        error = float("inf")
    if not ok:
        raise _error(f"{where}: the factors do not follow Llama 3's wavelength bands (best fit: factor {top:g}, "
                     f"original context {options['original_max_len']}, high_freq_factor "
                     f"{options['high_freq_factor']}; relative error {error:.2g}); posenc runs rope_freqs as the "
                     "rope-llama3 scheme only. Load the model's HF folder instead")
    return {"rope_type": "llama3", "factor": top, "low_freq_factor": 1.0,
            "high_freq_factor": options["high_freq_factor"],
            "original_max_position_embeddings": options["original_max_len"]}
