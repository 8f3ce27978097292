"""Eager vs ``torch.compile``: training and cached-decoding throughput of posenc and its peers, one process.

Contenders (each eager and compiled), in two pairs:

* **seq2seq** — posenc's ``EncoderDecoder`` with RoPE, ALiBi and T5 biases, and
  ``torch.nn.Transformer`` wrapped as the same seq2seq model
  (``posenc.bench.peers.TorchTransformerSeq2Seq``);
* **Llama** — HF ``transformers`` ``LlamaForCausalLM`` built from a small
  random-weight ``DecoderConfig`` (SDPA attention, grouped-query with half as many
  key/value heads, untied head, norm gains randomised), and posenc's ``Decoder``
  loaded from that model's state dict and config by posenc's own checkpoint
  loader (``posenc.pretrained.hf.llama_config_from_hf`` and ``load_llama_weights``:
  q/k rows permuted to the interleaved pairing, as ``load_pretrained`` does).
  Their logits must agree before anything is timed (``check_llama_pair``,
  ``MismatchError`` otherwise). Skipped, with the reason recorded, where
  ``transformers`` is not installed (``spec["llama"] = False`` skips it too).

* **train** — one AdamW step on random tokens (forward, cross-entropy,
  backward, optimizer step); compiled = ``torch.compile(model)`` (forward and,
  through AOT autograd, backward; the optimizer stays eager in both).
* **decode** — greedy decoding of ``new_tokens`` tokens for a batch of
  sources. posenc decodes with its KV cache (``generate``; compiled =
  ``encode`` and ``decode`` compiled, the cache length marked dynamic: one
  decoding graph). ``nn.Transformer`` has no cache: it re-runs the decoder
  over the whole prefix each step, the way its tutorial decodes (compiled
  with a dynamic target length). Llama: each library's own KV cache, a
  prompt of S tokens then ``new_tokens`` greedy tokens (prefill included in
  the time). posenc: ``generate`` with ``hidden`` compiled
  (``fullgraph=True``), the cache length dynamic — as docs/compile.md says to
  compile it. HF: a plain greedy loop calling the model with its cache
  (``past_key_values``/``cache``, ``use_cache=True``, ``logits_to_keep=1`` as
  HF's ``generate`` passes), compiled with ``dynamic=True`` and without
  ``fullgraph`` (a graph break is the peer's to have).

For the Llama pair "train" is next-token prediction on S + 1 random tokens
(S predicted per row); tokens/s counts B·S in both pairs.

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
from posenc.bench.checks import MismatchError, check_same
from posenc.bench.steps import seq2seq_train_step, train_step

PEER = "torch.nn.Transformer"
LLAMA = "posenc llama"
LLAMA_PEER = "HF LlamaForCausalLM"


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


# -- the Llama pair -----------------------------------------------------------------------------------------
#: The cache argument of HF's forward and the output field that returns it (transformers >= 5.24, the test pin).
HF_CACHE_ARGUMENT = "cache"


def llama_pair(spec: dict[str, Any]) -> tuple[nn.Module, nn.Module] | str:
    """(posenc Decoder, HF LlamaForCausalLM) with the same random weights, or why the pair is skipped.

    The HF model is built from a ``transformers.LlamaConfig`` of the spec's sizes
    (seeded), its norm gains randomised (HF initialises them to one, which would
    hide a swapped norm); posenc's model is built from that config's dict and
    filled from that state dict by ``posenc.pretrained.hf`` — the loader
    ``load_pretrained`` uses. Both are returned in training mode with every
    parameter trainable.
    """
    if not spec.get("llama", True):
        return "not requested (spec llama = false)"
    from posenc.checks import require

    try:
        transformers = require("transformers", "timing posenc's Decoder against HF's LlamaForCausalLM")
    except ImportError as err:
        return str(err)
    from posenc.models.decoder import build_decoder
    from posenc.pretrained.hf import llama_config_from_hf, load_llama_weights

    heads = spec["heads"]
    config = transformers.LlamaConfig(
        vocab_size=spec["vocab"], hidden_size=spec["dim"], intermediate_size=spec["ffn"],
        num_hidden_layers=spec["layers"], num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max(2048, spec["length"] + spec["new_tokens"] + 1), rms_norm_eps=1e-5,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model = build_decoder(llama_config_from_hf(hf.config.to_dict()), device="meta")
    # cloned: the loader keeps a float32 tensor as given, and the two models must not share storage
    load_llama_weights(model, ((k, v.detach().clone()) for k, v in hf.state_dict().items()),
                       source=f"{LLAMA_PEER} (random weights)")
    for p in model.parameters():  # the loader loads for inference (frozen); the bench trains it
        p.requires_grad_(True)
    return model.train(), hf.train()


def check_llama_pair(model: nn.Module, hf: nn.Module, ids: Tensor) -> float:
    """Raise MismatchError unless posenc's and HF's logits on ``ids`` agree; return the max abs difference.

    Tolerance: float32 round-off of two implementations of the same sums (as tests/pretrained).
    """

    was = model.training, hf.training
    model.eval(), hf.eval()
    try:
        with torch.no_grad():
            want = hf(input_ids=ids, use_cache=False).logits  # (B, T, V)
            got = model(ids)
        try:
            return check_same("posenc Decoder logits", got, want, atol=1e-5 * max(1.0, float(want.abs().max())),
                              rtol=1e-4)
        except MismatchError as err:
            raise MismatchError(f"{err} — posenc Decoder and {LLAMA_PEER} were loaded with the same weights but "
                                "compute different logits; the timings would compare different models") from None
    finally:
        model.train(was[0]), hf.train(was[1])


def _hf_greedy(forward: Callable[..., Any], prompt: Tensor, new_tokens: int, cache_kw: str) -> Tensor:
    """Greedy decoding with HF's own KV cache: the prompt once, then one token per call."""
    out = forward(input_ids=prompt, use_cache=True, logits_to_keep=1)
    ids = prompt
    for i in range(new_tokens):
        nxt = out.logits[:, -1].argmax(-1)  # (B,)
        ids = torch.cat((ids, nxt[:, None]), dim=1)
        if i + 1 < new_tokens:
            out = forward(input_ids=nxt[:, None], use_cache=True, logits_to_keep=1,
                          **{cache_kw: getattr(out, cache_kw)})
    return ids


def _llama_decoder(model: nn.Module, name: str, *, compiled: bool, backend: str, prompt: Tensor,
                   new_tokens: int) -> Callable[[], Tensor]:
    model = copy.deepcopy(model).eval()
    if name == LLAMA_PEER:
        forward = torch.compile(model, backend=backend, dynamic=True) if compiled else model
        cache_kw = HF_CACHE_ARGUMENT
        return torch.no_grad()(lambda: _hf_greedy(forward, prompt, new_tokens, cache_kw))
    if compiled:  # generate calls hidden (then the head on the last position): compile hidden
        model.hidden = torch.compile(model.hidden, backend=backend, fullgraph=True)
    return lambda: model.generate(prompt, new_tokens)


def lm_train_step(forward: Callable[[Tensor], Tensor], opt: torch.optim.Optimizer, ids: Tensor,
                  vocab: int) -> Callable[[], float]:
    """One causal-LM training step on ids (B, S + 1): predict tokens 1..S, cross-entropy, backward, update."""
    return train_step(lambda: forward(ids[:, :-1]), ids[:, 1:], opt, vocab)


def _llama_logits(name: str, forward: Callable[..., Any]) -> Callable[[Tensor], Tensor]:
    if name == LLAMA_PEER:
        return lambda ids: forward(input_ids=ids, use_cache=False).logits
    return forward


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
    groups: dict[str, list[str]] = {"seq2seq": list(models)}
    llamas: dict[str, nn.Module] = {}
    pair = llama_pair(spec)  # checked before anything is compiled: a mismatch fails in seconds, not minutes
    if isinstance(pair, str):
        out["llama"] = {"skipped": pair}
    else:
        import transformers

        out["llama"] = {"logits_max_abs_diff": check_llama_pair(*pair, tgt),
                        "hf_cache_argument": HF_CACHE_ARGUMENT, "transformers": transformers.__version__}
        llamas = {LLAMA: pair[0], LLAMA_PEER: pair[1]}
        groups["llama"] = list(llamas)
        out["parameters"].update({k: sum(p.numel() for p in m.parameters()) for k, m in llamas.items()})

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
    for name, model in llamas.items():  # the Llama pair: prompt src (B, S); training predicts tgt's S next tokens
        for compiled in (False, True):
            label = f"{name} {'compiled' if compiled else 'eager'}"
            m = copy.deepcopy(model).train()
            forward = torch.compile(m, backend=backend) if compiled else m
            train[label] = lm_train_step(_llama_logits(name, forward), torch.optim.AdamW(m.parameters(), lr=1e-4),
                                         tgt, vocab)
            first_s["train"][label] = _first_call(train[label])
            decode[label] = _llama_decoder(model, name, compiled=compiled, backend=backend, prompt=src,
                                           new_tokens=new_tokens)
            first_s["decode"][label] = _first_call(decode[label])
    if llamas:  # greedy ids of the two libraries, eager (recorded: a near-tie may flip an argmax)
        out["llama"]["decoded_ids_posenc_equal_hf"] = bool(torch.equal(decode[f"{LLAMA} eager"](),
                                                                        decode[f"{LLAMA_PEER} eager"]()))
    out["groups"] = groups
    # decoded ids agree eager vs compiled (greedy; a near-tie may flip an argmax, so record rather than fail)
    out["decode_agrees"] = {name: bool(torch.equal(decode[f"{name} eager"](), decode[f"{name} compiled"]()))
                            for group in groups.values() for name in group}
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
