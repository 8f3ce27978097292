"""Tiny model files for the hostile-input tests: an HF Llama folder written from posenc's own modules.

``hf_folder(path, config=..., edit=...)`` writes config.json (model_type llama), model.safetensors
under HF names and a byte-level BPE tokenizer.json; ``config`` overrides config.json fields (None
removes one), ``edit(tensors)`` changes the weights before they are saved. ``capped(code)`` runs
Python in a child process limited to 2 GiB of address space and 120 s, for memory bombs.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import save_file

SRC = str(Path(__file__).resolve().parents[2] / "src")
CAP = 2 << 30
VOCAB = 300
BASE_CONFIG: dict[str, Any] = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": VOCAB, "tie_word_embeddings": False,
    "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
}


def hf_tensors(cfg: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    rand = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    out = {"model.embed_tokens.weight": rand(v, d), "model.norm.weight": torch.ones(d), "lm_head.weight": rand(v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": torch.ones(d), p + "post_attention_layernorm.weight": torch.ones(d),
                p + "self_attn.q_proj.weight": rand(q, d), p + "self_attn.k_proj.weight": rand(kv, d),
                p + "self_attn.v_proj.weight": rand(kv, d), p + "self_attn.o_proj.weight": rand(d, q),
                p + "mlp.gate_proj.weight": rand(f, d), p + "mlp.up_proj.weight": rand(f, d),
                p + "mlp.down_proj.weight": rand(d, f)}
    return out


_TOKENIZER: dict[str, str] = {}


def tokenizer_json() -> str:
    if "json" not in _TOKENIZER:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 5] * 10, trainer)
        _TOKENIZER["json"] = tok.to_str()
    return _TOKENIZER["json"]


def hf_folder(path: Path, *, config: dict[str, Any] | None = None,
              edit: Callable[[dict[str, torch.Tensor]], None] | None = None, raw_config: bytes | None = None,
              tokenizer_config: Any = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = {**BASE_CONFIG}
    for key, value in (config or {}).items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    tensors = hf_tensors(BASE_CONFIG)
    if edit is not None:
        edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_bytes(raw_config if raw_config is not None else json.dumps(cfg).encode())
    (path / "tokenizer.json").write_text(tokenizer_json())
    if tokenizer_config is not None:
        (path / "tokenizer_config.json").write_text(
            tokenizer_config if isinstance(tokenizer_config, str) else json.dumps(tokenizer_config))
    return path


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def capped(code: str) -> str:
    """Run ``code`` (which prints its outcome) in a memory-capped child; its last output line."""
    program = f"import sys; sys.path.insert(0, {SRC!r})\n" + code
    try:
        out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                             preexec_fn=_cap)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"
    lines = (out.stdout + out.stderr).strip().splitlines()
    return lines[-1] if lines else f"no output (exit {out.returncode})"


def load_outcome(path: Path) -> str:
    """``load_pretrained(path)`` in a capped child: 'LOADED' or 'ErrorType: message'."""
    return capped("from posenc.pretrained import load_pretrained\n"
                  f"try:\n    load_pretrained({str(path)!r}); print('LOADED')\n"
                  "except Exception as err:\n    print(type(err).__name__ + ': ' + str(err).replace(chr(10), ' | '))\n")
