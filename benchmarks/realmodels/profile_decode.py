"""Where one decoded token's time goes in posenc (SmolLM2-135M Q4_1): torch.profiler over decoding steps.

Prints ms per token (eager, unprofiled), ATen calls per token (every level), and the operators with the most
self time per token, with their share; the int4 kernel's share is the matrix work, the rest is everything
around it. Usage::

    PYTHONPATH=src python benchmarks/realmodels/profile_decode.py --threads 1 [--weights dequantised]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import gguf_path  # noqa: E402


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from posenc.pretrained import load_pretrained

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--weights", default=None, help="as for load_pretrained (default: as-stored)")
    p.add_argument("--steps", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    m = load_pretrained(gguf_path(), weights=args.weights).model
    step = lambda t, cache: int(m.logits(m.hidden(t, cache=cache)[:, -1]).argmax(-1))  # noqa: E731
    with torch.no_grad():
        cache = m.new_cache()
        nxt = step(torch.arange(100, 228)[None], cache)  # a 128-token prompt
        for _ in range(8):
            nxt = step(torch.tensor([[nxt]]), cache)
        begin = time.perf_counter()
        for _ in range(args.steps):
            nxt = step(torch.tensor([[nxt]]), cache)
        ms = (time.perf_counter() - begin) / args.steps * 1e3
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                nxt = step(torch.tensor([[nxt]]), cache)
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    calls = sum(e.count for e in ev if e.key.startswith("aten::"))
    print(f"threads {args.threads}, weights {args.weights or 'as-stored'}: {ms:.1f} ms per token unprofiled "
          f"({1e3 / ms:.1f} tok/s); ATen calls per token {calls / args.steps:.0f}; profiled self time "
          f"{total / args.steps / 1e3:.1f} ms per token")
    for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:15]:
        print(f"{e.key:52s} {e.count / args.steps:7.1f}/token {e.self_cpu_time_total / args.steps / 1e3:7.2f} ms "
              f"{100 * e.self_cpu_time_total / total:5.1f}%")


if __name__ == "__main__":
    main()
