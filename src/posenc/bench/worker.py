"""Work that must run in a fresh process: peak memory (``ru_maxrss``) and training throughput.

``run_in_subprocess(spec)`` starts ``python -m posenc.bench.worker '<json spec>'``
with this process's interpreter, environment and torch thread count, and
returns the JSON the worker prints last. Each contender gets its own process,
so one's memory high-water mark cannot hide another's.

Peak memory is ``ru_maxrss`` at the end minus ``ru_maxrss`` just before the
work starts (after imports, model and inputs are built): the extra resident
memory the work needed at its peak.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


class PeakMemory:
    """Extra resident memory at the peak of a piece of work, in MiB.

    On Linux the high-water mark is reset first (``/proc/self/clear_refs``, "5"),
    so the peak is the work's own and not an earlier one (imports); the result
    is VmHWM after minus VmRSS before. Elsewhere: ``ru_maxrss`` after minus
    before (a lower bound when an earlier peak was higher).
    """

    def __enter__(self) -> "PeakMemory":
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
                fh.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        rss = _status_mb("VmRSS")
        self.before = rss if (self.reset and rss is not None) else _maxrss_mb()
        self.extra_mb = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        hwm = _status_mb("VmHWM") if self.reset else None
        self.extra_mb = max(0.0, (hwm if hwm is not None else _maxrss_mb()) - self.before)


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_in_subprocess(spec: dict[str, Any], *, timeout: float = 1800) -> dict[str, Any]:
    """Run one worker task in a fresh interpreter; raise RuntimeError with its stderr if it fails."""
    import torch

    spec = {"threads": torch.get_num_threads(), **spec}
    proc = subprocess.run([sys.executable, "-m", "posenc.bench.worker", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    if proc.returncode != 0:
        raise RuntimeError(f"bench worker {spec.get('task')} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def attention_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak extra memory of one attention forward (SDPA or naive) on (B, H, T, Dh) inputs."""
    import torch
    import torch.nn.functional as F

    from posenc.bench.peers import naive_attention

    b, h, t, dh = spec["shape"]
    q, k, v = (torch.randn(b, h, t, dh) for _ in range(3))
    with torch.no_grad(), PeakMemory() as peak:
        out = F.scaled_dot_product_attention(q, k, v) if spec["kind"] == "sdpa" else naive_attention(q, k, v)
        del out
    return {"peak_extra_mb": peak.extra_mb}


def train(spec: dict[str, Any]) -> dict[str, Any]:
    """Time AdamW training steps of posenc's EncoderDecoder or torch.nn.Transformer on random tokens."""
    import torch

    from posenc import ModelConfig, build_encoder_decoder
    from posenc.bench.peers import TorchTransformerSeq2Seq
    from posenc.bench.steps import seq2seq_train_step
    from posenc.bench.timing import minor_faults

    torch.manual_seed(0)
    vocab, dim, heads, layers, ffn = spec["vocab"], spec["dim"], spec["heads"], spec["layers"], spec["ffn"]
    batch, length, dropout = spec["batch"], spec["length"], spec["dropout"]
    if spec["kind"] == "posenc":
        model = build_encoder_decoder(ModelConfig(
            vocab_size=vocab, dim=dim, num_heads=heads, num_layers=layers, ffn_dim=ffn, dropout=dropout,
            position="sinusoidal", norm_first=True, tie_embeddings=True))
    else:
        model = TorchTransformerSeq2Seq(vocab_size=vocab, dim=dim, num_heads=heads, num_layers=layers,
                                        ffn_dim=ffn, dropout=dropout, max_len=max(length + 1, 16))
    model.train()
    if spec.get("optimizer", "adamw") == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:  # "sgd": for quick tests (AdamW's first construction imports much of torch._dynamo)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(0, vocab, (batch, length), generator=gen)
    tgt = torch.randint(0, vocab, (batch, length + 1), generator=gen)

    step = seq2seq_train_step(model, opt, src, tgt, vocab)
    times, faults = [], []
    with PeakMemory() as peak:  # the warm-up steps allocate the optimizer state: part of training's peak
        for _ in range(spec["warmup"]):
            step()
        for _ in range(spec["steps"]):
            f0 = minor_faults()
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
            faults.append(minor_faults() - f0)
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    median = statistics.median(times)
    return {
        "median_step_ms": median, "p25_step_ms": q[0], "p75_step_ms": q[2], "steps": len(times),
        "tokens_per_s": batch * length / (median / 1e3), "faults_per_step": statistics.median(faults),
        "peak_extra_mb": peak.extra_mb,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def compile_bench(spec: dict[str, Any]) -> dict[str, Any]:
    """Eager vs torch.compile training and decoding (``posenc.bench.compiled``), all contenders in this process."""
    from posenc.bench.compiled import compile_bench as run

    return run(spec)


TASKS = {"attention_memory": attention_memory, "train": train, "compile": compile_bench}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    import torch

    torch.set_num_threads(int(spec.get("threads", torch.get_num_threads())))
    print(json.dumps(TASKS[spec["task"]](spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
