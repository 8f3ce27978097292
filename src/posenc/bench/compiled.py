"""Eager vs ``torch.compile``: training and cached-decoding throughput of posenc and its peer, one process.

Contenders (each eager and compiled): posenc's ``EncoderDecoder`` with RoPE,
ALiBi and T5 biases, and ``torch.nn.Transformer`` wrapped as the same
seq2seq model (``posenc.bench.peers.TorchTransformerSeq2Seq``).

* **train** — one AdamW step on random tokens (forward, cross-entropy,
  backward, optimizer step); compiled = ``torch.compile(model)`` (forward and,
  through AOT autograd, backward; the optimizer stays eager in both).
* **decode** — greedy decoding of ``new_tokens`` tokens for a batch of
  sources. posenc decodes with its KV cache (``generate``; compiled =
  ``encode`` and ``decode`` compiled, the cache length marked dynamic: one
  decoding graph). ``nn.Transformer`` has no cache: it re-runs the decoder
  over the whole prefix each step, the way its tutorial decodes (compiled
  with a dynamic target length).

All contenders of a kind are timed interleaved (``posenc.bench.timing.measure``)
after each has been compiled; the first call of a compiled contender — its
compile time — is reported separately and not timed with the steps.

Shape legend: B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from posenc.bench.timing import measure
from posenc.bench.worker import seq2seq_train_step

PEER = "torch.nn.Transformer"


def _models(spec: dict[str, Any]) -> dict[str, nn.Module]:
    from posenc import ModelConfig, build_encoder_decoder
    from posenc.bench.peers import TorchTransformerSeq2Seq

    models: dict[str, nn.Module] = {}
    for scheme in spec["schemes"]:
        torch.manual_seed(0)
        models[f"posenc {scheme}"] = build_encoder_decoder(ModelConfig(
            vocab_size=spec["vocab"], dim=spec["dim"], num_heads=spec["heads"], num_layers=spec["layers"],
            ffn_dim=spec["ffn"], dropout=0.0, position=scheme, norm_first=True, tie_embeddings=True))
    torch.manual_seed(0)
    models[PEER] = TorchTransformerSeq2Seq(
        vocab_size=spec["vocab"], dim=spec["dim"], num_heads=spec["heads"], num_layers=spec["layers"],
        ffn_dim=spec["ffn"], dropout=0.0, max_len=spec["length"] + spec["new_tokens"] + 2)
    return models


def _peer_greedy(model: Callable[[Tensor, Tensor], Tensor], src: Tensor, bos_id: int, new_tokens: int) -> Tensor:
    """nn.Transformer decoding without a cache: the whole prefix through the decoder at every step."""
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(new_tokens):
        nxt = model(src, out)[:, -1].argmax(-1)  # (B,)
        out = torch.cat((out, nxt[:, None]), dim=1)
    return out


def _decoder(model: nn.Module, name: str, *, compiled: bool, backend: str, src: Tensor,
             new_tokens: int) -> Callable[[], Tensor]:
    model = copy.deepcopy(model).eval()
    if name == PEER:
        forward = torch.compile(model, backend=backend, dynamic=True) if compiled else model
        return torch.no_grad()(lambda: _peer_greedy(forward, src, 1, new_tokens))
    if compiled:  # generate calls encode and decode: compile those (the instance attributes shadow the methods)
        model.encode = torch.compile(model.encode, backend=backend, fullgraph=True)
        model.decode = torch.compile(model.decode, backend=backend, fullgraph=True)
    return lambda: model.generate(src, bos_id=1, max_new_tokens=new_tokens)


def _first_call(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compile_bench(spec: dict[str, Any]) -> dict[str, Any]:
    """Time every contender eager and compiled; return stats, tokens/s and compile seconds per contender."""
    backend = spec.get("backend", "inductor")
    # dynamo's recompile limit (8) counts graphs per code object, and the posenc contenders share
    # EncoderDecoder.forward/encode/decode: three models × (prefill, two step graphs) would exceed it
    torch._dynamo.config.recompile_limit = 64
    vocab, batch, length, new_tokens = spec["vocab"], spec["batch"], spec["length"], spec["new_tokens"]
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(0, vocab, (batch, length), generator=gen)
    tgt = torch.randint(0, vocab, (batch, length + 1), generator=gen)
    models = _models(spec)
    out: dict[str, Any] = {"backend": backend, "parameters": {k: sum(p.numel() for p in m.parameters())
                                                              for k, m in models.items()}}

    train: dict[str, Callable[[], Any]] = {}
    decode: dict[str, Callable[[], Any]] = {}
    first_s: dict[str, dict[str, float]] = {"train": {}, "decode": {}}
    for name, model in models.items():
        for compiled in (False, True):
            label = f"{name} {'compiled' if compiled else 'eager'}"
            m = copy.deepcopy(model).train()
            forward = torch.compile(m, backend=backend) if compiled else m
            train[label] = seq2seq_train_step(forward, torch.optim.AdamW(m.parameters(), lr=1e-4), src, tgt, vocab)
            first_s["train"][label] = _first_call(train[label])
            decode[label] = _decoder(model, name, compiled=compiled, backend=backend, src=src, new_tokens=new_tokens)
            first_s["decode"][label] = _first_call(decode[label])
    # decoded ids agree eager vs compiled (greedy; a near-tie may flip an argmax, so record rather than fail)
    out["decode_agrees"] = {name: bool(torch.equal(decode[f"{name} eager"](), decode[f"{name} compiled"]()))
                            for name in models}
    repeats, warmup = spec["repeats"], spec.get("warmup", 1)
    for kind, fns, tokens in (("train", train, batch * length), ("decode", decode, batch * new_tokens)):
        stats = measure(fns, repeats=repeats, warmup=warmup)
        out[kind] = {
            "stats": {k: s.to_dict() for k, s in stats.items()},
            "tokens_per_s": {k: tokens / (s.median_ms / 1e3) for k, s in stats.items()},
            # the first call of a compiled contender less one timed call: what compiling cost
            "compile_s": {k: max(0.0, first_s[kind][k] - stats[k].median_ms / 1e3)
                          for k in stats if k.endswith("compiled")},
        }
    return out
