"""``posenc generate MODEL --prompt TEXT``: continue a prompt with a pretrained Llama-family model.

Greedy by default; ``--temperature`` (with ``--top-k`` / ``--top-p`` / ``--seed``)
samples. The KV cache is always on (``--cache POLICY`` moves it as a long generation outgrows it:
window, attention sinks, context shift, rescaled RoPE — ``posenc.models.cache_policy``); ``--chat`` wraps the prompt in the
tokenizer's chat template. The continuation streams to stdout; the speed
(prefill and decode tokens/s) goes to stderr unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from posenc.cli_options import (add_device, add_dtype, add_json, add_quiet, add_threads, apply_threads,
                                command_help, device_of, dtype_of, json_to_stdout, write_json)

def add_model_flags(p: argparse.ArgumentParser) -> None:
    """MODEL and the flags every command that runs a pretrained model shares."""
    p.add_argument("model", metavar="MODEL",
                   help="an HF model folder (config.json + *.safetensors + tokenizer.json) or a .gguf file")
    add_device(p)
    add_dtype(p)
    add_threads(p)
    p.add_argument("--pairing", default="interleaved", choices=("interleaved", "half"),
                   help="RoPE pairing to run (default interleaved, the fast kernel; q/k rows are converted at load; "
                        "same results either way)")
    add_weights(p)
    add_quiet(p)
    add_json(p)


def add_weights(p: argparse.ArgumentParser) -> None:
    """``--weights``: how the checkpoint's weights are held (``posenc.pretrained.as_stored``)."""
    from posenc.pretrained.as_stored import WEIGHTS

    p.add_argument("--weights", choices=WEIGHTS, default=None,
                   help="as-stored: a GGUF file's quantised blocks kept and run by posenc's compiled decoding kernel, "
                        "built once per machine (PyTorch's int4 CPU kernel where it cannot be; POSENC_KERNELS=0 "
                        "chooses that) — the default for .gguf; dequantised: every weight in --dtype (the default for HF folders); "
                        "int8 / int4: weight-only quantisation at load, its logit error against float32 printed")


def add_cache_flag(p: argparse.ArgumentParser) -> None:
    """``--cache POLICY``: what the KV cache keeps when the stream outgrows it (``posenc.models.cache_policy``)."""
    p.add_argument("--cache", default="full", metavar="POLICY",
                   help="KV cache policy: full (default), window:W (the last W tokens), sink:S,window:W "
                        "(StreamingLLM: the first S and the last W), shift:KEEP[,ctx:N] (llama.cpp's context "
                        "shift), rescale (dynamic YaRN / LongRoPE / dynamic NTK: cached keys re-rotated as the "
                        "stream grows); positions are renumbered inside the cache, keys re-rotated exactly")


def cache_policy_arg(args: argparse.Namespace) -> Any:
    """The parsed ``--cache`` policy (a bad one is refused with the grammar)."""
    from posenc.models.cache_policy import parse_policy

    return parse_policy(getattr(args, "cache", None) or "full")


def position_text(config: Any) -> str:
    """The loaded model's positions in a few words: its scheme, or its layer plan's one-line summary (Gemma 3)."""
    from posenc.plan import plan_rows, plan_summary

    return config.position if config.layer_plan is None else plan_summary(plan_rows(config.plan))


def load_model(args: argparse.Namespace, *, command: str) -> Any:
    """Set threads, check the device, load ``args.model`` (a causal LM); usage errors raise ValueError (exit 2)."""
    from posenc.pretrained import load_pretrained, require_causal_lm

    require_causal_lm(args.model, command=command)
    apply_threads(args)
    device = device_of(args)
    start = time.perf_counter()
    pm = load_pretrained(args.model, dtype=dtype_of(args), device=device, pairing=args.pairing,
                         weights=getattr(args, "weights", None))
    if pm.tokenizer is None:
        raise ValueError(f"{args.model}: no tokenizer.json next to the weights; this command needs the model's "
                         "tokenizer (download tokenizer.json from the model's repository)")
    if not args.quiet:
        print(f"loaded {args.model} ({pm.config.num_layers} layers, d={pm.config.dim}, {position_text(pm.config)}, "
              f"{args.dtype}, {args.device}, weights {pm.weights}) in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
        from posenc.models.quant import QuantLinear

        quantised = sum(isinstance(m, QuantLinear) for m in pm.model.modules())
        if quantised:
            from posenc import kernels
            from posenc.models import fused

            done, blocks = fused.count(pm.model)
            print(f"{quantised} quantised matrices on {kernels.status()}"
                  + ((f"; a decoded token runs its {blocks} blocks in one kernel call" if done == blocks else
                      f"; {done} of {blocks} blocks decode in one kernel call each") if done else ""), file=sys.stderr)
        if pm.weights in ("int8", "int4"):
            from posenc.pretrained.as_stored import logit_error

            err = logit_error(pm, args.model, dtype=dtype_of(args), pairing=args.pairing)
            print(f"{pm.weights} weights against float32 on a probe sentence: max |Δlogit| {err['max_abs']:.3g}, "
                  f"top-1 agreement {err['top1']:.1%}", file=sys.stderr)
    return pm


def run(args: argparse.Namespace) -> int:
    import torch

    from posenc.models.decoder import check_sampling

    from posenc.validation import check_output

    check_output(args.json, "--json")  # before the model loads and the text is generated
    if args.system is not None and not args.chat:
        raise ValueError("--system is a message of the chat template: add --chat, or put the text in --prompt")
    check_sampling(args.temperature, args.top_k, args.top_p)
    cache_policy_arg(args)  # a bad --cache is refused before the model loads
    pm = load_model(args, command="generate")
    tok = pm.tokenizer
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        ids = tok.encode_chat(messages + [{"role": "user", "content": args.prompt}])
    else:
        ids = tok.encode(args.prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens; give a non-empty --prompt")
    usable = pm.config.sliding_window or pm.config.max_position_embeddings
    policy = cache_policy_arg(args)
    if policy.kind == "full" and len(ids) + args.max_new_tokens > usable:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens:,} after a {len(ids):,}-token prompt exceeds the "
                         f"{usable:,} tokens this model was trained for; give --max-new-tokens "
                         f"{max(usable - len(ids), 0):,} or less")
    prompt = torch.tensor([ids], device=args.device)

    new: list[int] = []
    shown = ""
    stamps: list[float] = []
    stream = not args.quiet and not json_to_stdout(args)

    def on_token(token: torch.Tensor) -> None:
        nonlocal shown
        stamps.append(time.perf_counter())
        new.append(int(token[0]))
        if stream:  # print the newly completed text (decoding the whole tail keeps multi-byte characters whole)
            text = tok.decode(new)
            if not text.endswith("\ufffd"):
                sys.stdout.write(text[len(shown):])
                sys.stdout.flush()
                shown = text

    if stream and not args.chat:
        sys.stdout.write(args.prompt)
    start = time.perf_counter()
    with torch.inference_mode():
        pm.model.generate(prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                          top_p=args.top_p, eos_id=tok.eos_ids or None, seed=args.seed, on_token=on_token,
                          cache_policy=None if policy.kind == "full" else policy)
    end = time.perf_counter()
    completion = tok.decode(new)
    if stream:
        sys.stdout.write(completion[len(shown):] + "\n")
    elif not json_to_stdout(args):
        print(completion)
    prefill_s = (stamps[0] - start) if stamps else 0.0
    decode_s = (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    result = {
        "model": args.model, "prompt": args.prompt, "chat": args.chat, "completion": completion,
        "prompt_tokens": len(ids), "new_tokens": len(new), "stopped_at_eos": bool(new) and new[-1] in tok.eos_ids,
        "prefill_s": prefill_s, "prefill_tokens_per_s": len(ids) / prefill_s if prefill_s else None,
        "decode_tokens_per_s": (len(new) - 1) / decode_s if decode_s else None, "total_s": end - start,
        "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
        "dtype": args.dtype, "device": args.device, "threads": torch.get_num_threads(), "cache": str(policy),
    }
    if not args.quiet:
        threads = torch.get_num_threads()
        decode = f"{result['decode_tokens_per_s']:.1f}" if result["decode_tokens_per_s"] else "-"
        print(f"{len(ids)} prompt tokens in {prefill_s:.2f} s, {len(new)} new tokens at {decode} tokens/s "
              f"({'greedy' if args.temperature == 0 else f'sampled, temperature {args.temperature}'}, "
              f"{threads} thread{'s' if threads != 1 else ''})", file=sys.stderr)
    write_json(args, result)
    return 0


def register(sub: Any) -> None:
    from posenc.families.hf_config import MAX_CONTEXT
    from posenc.validation import finite_float, int_at_least, seed_arg

    p = sub.add_parser("generate", help="continue a prompt with a pretrained Llama-family model (HF folder or GGUF)",
                       description="Load a Llama/Mistral/Qwen2-family checkpoint (HF folder or .gguf) into posenc's "
                                   "own modules and continue a prompt: greedy by default, sampling with "
                                   "--temperature. Prints the text, then the speed (tokens/s) on stderr.",
                       **command_help(examples=('posenc generate smollm2 --prompt "The capital of France is"',
                                                'posenc generate smollm2 --chat --prompt "Name three colours." '
                                                '--temperature 0.7 --seed 1',
                                                'posenc generate model.gguf --prompt "Once upon a time" '
                                                '--max-new-tokens 32 --json -')))
    add_model_flags(p)
    p.add_argument("--prompt", required=True, help="the text to continue (the user message with --chat)")
    p.add_argument("--max-new-tokens", type=int_at_least(0, MAX_CONTEXT), default=64, metavar="N",
                   help="new tokens at most (default 64); prompt + N must fit the model's trained context")
    p.add_argument("--temperature", type=finite_float(minimum=0), default=0.0,
                   help="0 = greedy (default); > 0 samples")
    p.add_argument("--top-k", type=int_at_least(1), metavar="K", help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=finite_float(above=0, maximum=1), metavar="P",
                   help="nucleus sampling: the smallest set with mass P, in (0, 1]")
    p.add_argument("--seed", type=seed_arg, metavar="N",
                   help="seed of the sampler, 0 to 2**63 - 1 (sampling is reproducible with a seed)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    p.add_argument("--system", metavar="TEXT", help="a system message (with --chat)")
    add_cache_flag(p)
    p.set_defaults(func=run)
