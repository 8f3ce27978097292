"""``posenc finetune``: extend a model's context by training — fine-tune with a method, search LongRoPE, replicate.

    posenc finetune run MODEL --method rope-yarn --factor 4 --length 8192 --steps 200 --out runs/ft-yarn
    posenc finetune run SmolLM2-135M-Instruct.Q4_1.gguf --method rope-yarn --factor 8 --length 16384 \\
        --lora-rank 8 --grad-checkpoint --steps 4 --out runs/smollm2-lora      # LoRA on q,k,v,o
    posenc finetune search MODEL --factor 4 --out runs/longrope-x4             # LongRoPE's evolutionary search
    posenc finetune run MODEL --method rope-longrope --longrope runs/longrope-x4 --factor 4 ...
    posenc finetune grid --out runs/replication --shard 0/2                    # the mini-scale replication
    posenc finetune grid --out runs/replication --shard any &  # ×N processes: the cells as a queue

MODEL is a posenc run directory (``posenc finetune grid`` writes one under
OUT/pretrain/checkpoints), an HF model folder or a .gguf file. Every run is
resumable: the same command with --resume (run) or again (search, grid)
continues exactly. Under ``torchrun --nproc_per_node N -m posenc finetune run …``
the run is data-parallel (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from posenc.cli_options import (add_device, add_dtype, add_force, add_json, add_out, add_quiet, add_seed, add_threads,
                                apply_threads, command_help, key_value)
from posenc.malloc import pin_mmap_threshold
from posenc.validation import int_at_least


def _csv(kind: type) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            items = [kind(t.strip()) for t in text.split(",") if t.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma list of {kind.__name__}, got {text!r}") from None
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma list, got {text!r}")
        return items
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _shard(text: str) -> tuple[int, int] | str:
    if text == "any":
        return text
    try:
        a, b = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes INDEX/COUNT, e.g. 0/4, or any, got {text!r}") from None
    if not (b >= 1 and 0 <= a < b):
        raise argparse.ArgumentTypeError(f"--shard {text}: need 0 <= INDEX < COUNT")
    return a, b


def _command() -> str:
    return "posenc " + " ".join(shlex.quote(a) for a in sys.argv[1:])


# -- run ------------------------------------------------------------------------------------------------
def run_finetune(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out, out_dir
    from posenc.extend.methods import check_methods
    from posenc.finetune.model import read_searched
    from posenc.train import init_distributed
    from posenc.validation import check_output

    info = init_distributed()
    apply_threads(args)
    pin_mmap_threshold()  # peak memory that does not grow with freed activations (posenc.malloc)
    out = out_dir(args)
    check_output(out, "--out", kind="dir")  # before the lock makes it and the model loads
    check_output(args.json, "--json")
    if args.resume and out is None:
        raise ValueError("--resume needs --out DIR (the folder of the run to continue)")
    if args.resume:
        from posenc.checkpoint import LATEST, STATE_FILE

        ckpts = out / "checkpoints"
        if not (ckpts / STATE_FILE).exists() and not (ckpts / LATEST).exists():  # stopped before its first save
            raise FileNotFoundError(f"--resume: {ckpts} holds no checkpoint yet (the run was stopped before its first "
                                    "one, or never started there); run the same command without --resume to start "
                                    "it")
    method = check_methods([args.method], searched=args.longrope is not None)[0]
    if method == "rope-longrope" and args.longrope is None:
        raise ValueError("--method rope-longrope needs --longrope FILE|DIR (a search result: posenc finetune search)")
    searched = read_searched(args.longrope) if args.longrope is not None else None
    if method != "rope" and args.factor is None:
        raise ValueError(f"--method {method} needs --factor S (the extension factor)")
    with hold_out(out if info.is_main else None, command="finetune run", force=args.force):  # one run per folder (its checkpoints/ has train's own lock)
        return _finetune(args, info, out, method, searched)


def _finetune(args: argparse.Namespace, info: Any, out: Any, method: str, searched: Any) -> int:
    from posenc.cli_options import device_of, dtype_of, json_to_stdout, write_json
    from posenc.finetune.measure import MeasureSpec
    from posenc.finetune.model import load_start
    from posenc.finetune.run import FinetuneConfig, finetune

    device = info.device if info.world_size > 1 else device_of(args)
    began = time.perf_counter()
    start = load_start(args.model, dtype=dtype_of(args), device=device)
    l0 = args.original_max_len or start.original_max_len
    length = args.length or int((args.factor or 1) * l0)
    eval_length = args.eval_length if args.eval_length is not None else length
    measure = None
    if eval_length or args.passkey_trials:
        measure = MeasureSpec(documents=tuple(args.text or ("bible",)), length=eval_length, original_max_len=l0,
                              passkey_lengths=tuple(args.lengths or ([length] if args.passkey_trials else [])),
                              passkey_trials=args.passkey_trials, seed=args.seed)
    cfg = FinetuneConfig(method=method, factor=None if method == "rope" else args.factor, original_max_len=l0,
                         searched=searched, length=length, batch_size=args.batch_size, steps=args.steps, lr=args.lr,
                         min_lr=args.lr if args.constant_lr else 0.0, warmup_steps=args.warmup,
                         weight_decay=args.weight_decay, lora_rank=args.lora_rank,
                         lora_targets=tuple(args.lora_targets), lora_train=tuple(args.lora_train or ()),
                         grad_checkpoint=args.grad_checkpoint, autocast=args.autocast, chunk=args.chunk,
                         train_text=args.train_text, seed=args.seed, eval_every=args.eval_every,
                         checkpoint_every=args.checkpoint_every, measure=measure)
    stream = sys.stderr if json_to_stdout(args) else sys.stdout
    log = (lambda _m: None) if args.quiet or not info.is_main else (lambda m: print(m, file=stream, flush=True))
    log(f"finetune: {start.source} ({start.kind}), {method}" + (f" ×{cfg.factor:g}" if cfg.factor else "")
        + f" at {length} tokens, {'LoRA r=' + str(cfg.lora_rank) if cfg.lora_rank else 'full fine-tuning'}, "
          f"{cfg.steps} steps × {cfg.batch_size} windows" + (f" on {info.world_size} processes"
                                                              + (" (FSDP)" if args.fsdp else " (DDP)")
                                                              if info.world_size > 1 else ""))
    res = finetune(start, cfg, out_dir=out, resume=args.resume, progress=not args.quiet and info.is_main, log=log,
                   fsdp=args.fsdp)
    summary = {"command": _command(), "config": cfg.to_dict(), "start": start.source, "step": res.step,
               "interrupted": res.interrupted, "before": res.before, "evals": res.evals, "history": res.history,
               "wall_seconds": round(time.perf_counter() - began, 1), "train_seconds": round(res.seconds, 1),
               "peak_memory_mb": round(res.peak_memory_mb, 1), "trainable_parameters": res.trainable,
               "world_size": info.world_size, "parallel": ("fsdp" if args.fsdp else "ddp") if info.world_size > 1
               else None}
    if info.is_main:
        if res.history:
            log(f"step {res.step}: loss {res.history[-1]['loss']:.4f} ({res.seconds:.0f} s, peak memory "
                f"{res.peak_memory_mb:.0f} MiB, {res.trainable:,} trainable parameters)")
        for name, m in [("before", res.before)] + [(f"step {e['step']}", e) for e in res.evals]:
            for doc, v in (m or {}).get("loss", {}).items():
                log(f"  {name}, {doc}: ppl by position " + ", ".join(
                    f"{b['start']}–{b['end']}: {b['ppl']:.2f}" for b in v["buckets"] if b["ppl"]))
            for n, v in (m or {}).get("passkey", {}).items():
                log(f"  {name}, passkey at {n}: {v['correct']}/{v['trials']}")
        write_json(args, summary)
        if args.quiet:  # the one-line result and where it is, even under --quiet
            loss = f", loss {res.history[-1]['loss']:.4f}" if res.history else ""
            print(f"finetune: step {res.step}{loss}" + (" (interrupted)" if res.interrupted else "")
                  + (f"; run in {out}" if out is not None else ""), file=stream, flush=True)
    if info.world_size > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 130 if res.interrupted else 0


# -- search ---------------------------------------------------------------------------------------------
def run_search(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out, out_dir
    from posenc.validation import check_output

    apply_threads(args)
    pin_mmap_threshold()  # peak memory that does not grow with freed activations (posenc.malloc)
    out = out_dir(args)
    check_output(out, "--out", kind="dir")  # before the lock makes it and the model loads
    check_output(args.json, "--json")
    with hold_out(out, command="finetune search", force=args.force):  # one search per folder: two would overwrite each other's search-state.json
        return _search(args, out)


def _search(args: argparse.Namespace, out: Any) -> int:
    from posenc.cli_options import json_to_stdout, write_json
    from posenc.finetune.data import token_stream, training_document
    from posenc.finetune.longrope import START_TOKENS, Search, SearchConfig
    from posenc.finetune.model import load_start

    start = load_start(args.model)
    l0 = args.original_max_len or start.original_max_len
    cfg = SearchConfig(factor=args.factor, original_max_len=l0, length=args.length, samples=args.samples,
                       population=args.population, mutations=args.mutations or max(1, args.population // 4),
                       crossovers=args.crossovers or max(1, args.population // 4), generations=args.generations,
                       start_tokens=tuple(args.start_tokens or START_TOKENS), seed=args.seed)
    stream = sys.stderr if json_to_stdout(args) else sys.stdout
    log = (lambda _m: None) if args.quiet else (lambda m: print(m, file=stream, flush=True))
    tokens = token_stream(training_document(args.train_text), start.tokenizer)
    log(f"search: LongRoPE factors for s = {cfg.factor:g} (L0 = {l0}, {cfg.samples} samples of {cfg.length} tokens "
        f"of {args.train_text}), population {cfg.population}, {cfg.generations} generations")
    result = Search(start.model, tokens, cfg, out=out, progress=not args.quiet, log=log).run()
    if result.get("interrupted"):  # every scored candidate is saved: the same command resumes at the next one
        print(f"finetune search: interrupted at generation {result['generation']} ({result['scored']} candidates "
              f"scored, all saved); run the same command again to resume"
              + (f" ({out})" if out is not None else " — without --out nothing was saved"), file=sys.stderr)
        return 130
    print(f"best: ppl {result['best_ppl']:.4f} with n̂ = {result['start_tokens']} (seeds: "  # even under --quiet
          + ", ".join(f"{k} {2.718281828459045 ** v:.4f}" for k, v in result["seed_losses"].items()) + ")"
          + (f"; result in {out / 'result.json'}" if out is not None else ""), file=stream, flush=True)
    write_json(args, {"command": _command(), **result})
    return 0


# -- grid -----------------------------------------------------------------------------------------------
def run_grid(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    from posenc.cli_options import hold_out, key_values, out_dir
    from posenc.finetune.grid import QUICK, Replication, ReplicationConfig
    from posenc.validation import check_output

    apply_threads(args)
    pin_mmap_threshold()  # peak memory that does not grow with freed activations (posenc.malloc)
    out = out_dir(args)
    if out is None:
        raise ValueError("finetune grid needs --out DIR (its cells are saved there as they finish)")
    check_output(out, "--out", kind="dir")
    base = QUICK if args.quick else ReplicationConfig()
    changes = key_values(args.set, "--set")
    fields = {f.name for f in dataclasses.fields(ReplicationConfig)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise ValueError(f"--set {unknown}: not a setting of the replication; valid: {sorted(fields)}")
    cfg = dataclasses.replace(base, **{k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
    log = (lambda _m: None) if args.quiet else (lambda m: print(m, flush=True))
    stages = tuple(args.stage or ("pretrain", "search", "cells", "report"))
    began = time.perf_counter()
    load = os.getloadavg()
    shard = "any" if args.shard == "any" else f"{args.shard[0]}/{args.shard[1]}"
    log(f"grid: {len(cfg.cells())} cells; shard {shard}; stages {', '.join(stages)}; "
        f"load {load[0]:.1f}")
    rep = Replication(cfg, out, progress=not args.quiet, log=log)
    # the whole grid holds its folder; shards share it by design (after shard 0's pretraining), each cell's
    # checkpoints under train's own lock
    with hold_out(out if args.shard == (0, 1) else None, command="finetune grid", force=args.force):
        cells = rep.run(stages=stages, shard=args.shard)
    # the one-line result and where the report is, even under --quiet
    print(f"grid: {len(cells)} cells this call, {time.perf_counter() - began:.0f} s; load {os.getloadavg()[0]:.1f}"
          + (f"; report in {out / 'results.md'}" if "report" in stages and args.shard == (0, 1)
             and not rep.interrupted else ""),
          flush=True)
    if rep.interrupted:  # the stopped cell's checkpoint is saved: the same command continues it
        print(f"finetune grid: interrupted; run the same command again to resume ({out})", file=sys.stderr)
        return 130
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from posenc.extend.methods import METHODS
    from posenc.validation import MAX_SEARCH as SEARCH_MAX

    p = sub.add_parser("finetune", help="extend a model's context by training: fine-tune, search LongRoPE, replicate",
                       **command_help(__doc__))
    fsub = p.add_subparsers(dest="finetune_command", required=True, metavar="ACTION")

    q = fsub.add_parser("run", help="fine-tune MODEL at a longer length with one method (full or LoRA)",
                        **command_help(description=(
                            "Fine-tune MODEL (a posenc run directory, HF model folder or .gguf) on windows of "
                            "--length tokens with one context-extension method at factor --factor: full fine-tuning, "
                            "or LoRA with --lora-rank. Loss by position and passkey retrieval are measured before and "
                            "after (--eval-every: also during). Checkpoints go to --out; --resume continues exactly. "
                            "Under torchrun the run is data-parallel (DDP, or FSDP with --fsdp)."),
                            examples=("posenc finetune run MODEL --method rope-yarn --factor 4 --steps 200 "
                                      "--out runs/ft-yarn",
                                      "posenc finetune run smollm2 --method rope-yarn --factor 8 --length 16384 "
                                      "--lora-rank 8 --grad-checkpoint --out runs/smollm2-lora",
                                      "posenc finetune run MODEL --method rope-longrope --longrope runs/longrope-x4 "
                                      "--factor 4 --out runs/ft-longrope")))
    q.add_argument("model", metavar="MODEL", help="posenc run directory, HF model folder or .gguf")
    q.add_argument("--method", default="rope-yarn",
                   help=f"{', '.join(METHODS)} or rope-longrope with --longrope (default rope-yarn)")
    q.add_argument("--factor", type=_positive_float, default=None, help="extension factor s (L0 → s·L0)")
    q.add_argument("--longrope", default=None, metavar="FILE|DIR", help="a LongRoPE search result (result.json)")
    q.add_argument("--original-max-len", type=int_at_least(2), default=None, metavar="L0",
                   help="L0 given to the scheme (default: the model's max_position_embeddings)")
    q.add_argument("--length", type=int_at_least(2), default=None, help="training window in tokens (default s·L0)")
    q.add_argument("--steps", type=int_at_least(1), default=100, help="optimiser updates (default 100)")
    q.add_argument("--batch-size", type=int_at_least(1), default=1, help="windows per update, all processes")
    q.add_argument("--lr", type=_positive_float, default=2e-5, help="peak learning rate (default 2e-5, YaRN's)")
    q.add_argument("--constant-lr", action="store_true", help="no cosine decay after the warm-up")
    q.add_argument("--warmup", type=int_at_least(0), default=20, help="warm-up updates (default 20)")
    q.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    q.add_argument("--lora-rank", type=int_at_least(0), default=0, help="LoRA rank r (0: full fine-tuning)")
    q.add_argument("--lora-targets", type=_csv(str), default=["q_proj", "k_proj", "v_proj", "out_proj"],
                   help="projections LoRA adapts (default q_proj,k_proj,v_proj,out_proj)")
    q.add_argument("--lora-train", type=_csv(str), default=None,
                   help="parameter-name parts also trained with LoRA (LongLoRA: embed,norm)")
    q.add_argument("--grad-checkpoint", action="store_true", help="recompute each layer in the backward pass")
    q.add_argument("--autocast", choices=("float32", "bfloat16"), default="float32",
                   help="torch.autocast dtype of the training pass (default float32)")
    q.add_argument("--chunk", type=int_at_least(1), default=1024, help="positions per logits block in the loss")
    q.add_argument("--train-text", default="bible-rest", metavar="FILE|bible-rest|bible|licenses",
                   help="training text (default bible-rest: no text the measures read)")
    q.add_argument("--text", action="append", metavar="FILE|bible|licenses",
                   help="document for loss by position (repeatable; default bible)")
    q.add_argument("--eval-length", type=int_at_least(0), default=None,
                   help="tokens of each loss pass (default the training length; 0: no loss measure)")
    q.add_argument("--lengths", type=_csv(int), default=None, help="passkey prompt lengths (default the training "
                                                                   "length)")
    q.add_argument("--passkey-trials", type=int_at_least(0), default=0, help="passkey trials per length (default 0)")
    q.add_argument("--eval-every", type=int_at_least(0), default=0, help="measure every N updates (0: at the end)")
    q.add_argument("--checkpoint-every", type=int_at_least(0), default=0,
                   help="save every N updates (0: at the end and on Ctrl-C)")
    q.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    q.add_argument("--fsdp", action="store_true",
                   help="under torchrun: shard weights, gradients and AdamW state over the processes (FSDP2) "
                        "instead of replicating them (DDP); same result and checkpoints")
    add_out(q, default=None, help="run folder: checkpoints/, before.json, result.json (--resume needs it)")
    add_json(q)
    add_seed(q, help="seeds the training windows and the passkey trials")
    add_threads(q)
    add_device(q)
    add_dtype(q)
    add_quiet(q)
    add_force(q)
    q.set_defaults(func=run_finetune)

    q = fsub.add_parser("search", help="LongRoPE's evolutionary search for per-pair factors against MODEL",
                        **command_help(description=(
                            "LongRoPE's evolutionary search: find per-pair rescale factors (and the count of "
                            "unscaled start tokens) that give MODEL the lowest perplexity at factor --factor, scored "
                            "on --samples windows of --length tokens. With --out the state is saved every generation "
                            "and the same command resumes; the result.json is what 'finetune run --longrope' and "
                            "'posenc export --setting' read."),
                            examples=("posenc finetune search MODEL --factor 4 --out runs/longrope-x4",
                                      "posenc finetune search smollm2 --factor 2 --population 8 --generations 2 "
                                      "--json -")))
    q.add_argument("model", metavar="MODEL", help="posenc run directory, HF model folder or .gguf")
    q.add_argument("--factor", type=_positive_float, required=True, help="extension factor s")
    q.add_argument("--original-max-len", type=int_at_least(2), default=None, metavar="L0", help="L0 (default: the "
                                                                                                "model's)")
    q.add_argument("--length", type=int_at_least(2), default=None, help="tokens per sample (default s·L0)")
    q.add_argument("--samples", type=int_at_least(1, SEARCH_MAX), default=3, help="samples scored (default 3)")
    q.add_argument("--population", type=int_at_least(2, SEARCH_MAX), default=16,
                   help="population (default 16; paper 64)")
    q.add_argument("--mutations", type=int_at_least(0, SEARCH_MAX), default=None,
                   help="mutants per generation (population/4)")
    q.add_argument("--crossovers", type=int_at_least(0, SEARCH_MAX), default=None, help="crossovers per generation "
                                                                            "(population/4)")
    q.add_argument("--generations", type=int_at_least(1, SEARCH_MAX), default=8,
                   help="generations (default 8; paper 40)")
    q.add_argument("--start-tokens", type=_csv(int), default=None, help="n̂ candidates (default the paper's 0…256)")
    q.add_argument("--train-text", default="bible-rest", metavar="FILE|bible-rest|bible|licenses",
                   help="text the samples are cut from (default bible-rest)")
    add_out(q, default=None, help="folder for search-state.json and result.json (the same command resumes)")
    add_json(q)
    add_seed(q)
    add_threads(q)
    add_quiet(q)
    add_force(q)
    q.set_defaults(func=run_search)

    q = fsub.add_parser("grid", help="the mini-scale replication: pretrain at L0, search, fine-tune every cell, "
                                     "report",
                        **command_help(description=(
                            "The mini-scale replication of the context-extension papers: pretrain a small model at "
                            "L0, run the LongRoPE search, fine-tune every (method, factor, steps, seed) cell and "
                            "write the report. Cells are saved as they finish; the same command continues. --shard "
                            "splits the cells between processes."),
                            examples=("posenc finetune grid --quick                     # the smallest slice",
                                      "posenc finetune grid --out runs/replication --shard 0/2",
                                      "posenc finetune grid --out runs/replication --shard any  # cells as a queue")))
    q.add_argument("--quick", action="store_true", help="the smallest slice (2 layers × 64, L0 = 64, one seed)")
    q.add_argument("--set", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="a setting of the replication (repeatable), e.g. seeds=[0,1] or steps=[0,50]")
    q.add_argument("--stage", action="append", choices=("pretrain", "search", "cells", "report"),
                   help="run only these stages (repeatable; default all)")
    q.add_argument("--shard", type=_shard, default=(0, 1),
                   help="INDEX/COUNT: cells INDEX, INDEX+COUNT, … (shard 0 also pretrains and searches); or any: "
                        "processes sharing --out take the cells as a queue, each the next cell no other holds "
                        "(after --stage pretrain --stage search; the report after the last)")
    add_out(q, default="runs/finetune-grid", help="the replication's report folder: pretrain/, cells, results.md")
    add_threads(q)
    add_quiet(q)
    add_force(q)
    q.set_defaults(func=run_grid)
