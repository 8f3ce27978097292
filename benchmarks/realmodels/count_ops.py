"""How many operators one decoded token dispatches in posenc (SmolLM2-135M Q4_1, as stored), and from which line.

A count, not a timing: it does not depend on machine load, so it tells whether a change to the decoding
path removed per-token work even on a busy machine. Counts top-level ATen operators (a
``TorchDispatchMode``: what Python hands to ATen, not the calls ATen makes inside them — torch.profiler's
"ATen calls" count those too and is larger), after a 128-token prompt and one warm-up step, grouped by the
innermost posenc source line. Usage::

    PYTHONPATH=src python benchmarks/realmodels/count_ops.py [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import gguf_path  # noqa: E402


def main() -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from posenc.pretrained import load_pretrained

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=40, help="source lines to list")
    args = p.parse_args()
    torch.set_num_threads(1)
    m = load_pretrained(gguf_path()).model

    def step(ids, cache):
        return int(m.logits(m.hidden(ids, cache=cache)[:, -1]).argmax(-1))

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.by_line: collections.Counter[str] = collections.Counter()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.total += 1
            frames = [f for f in traceback.extract_stack() if "/posenc/" in f.filename]
            where = (f"{frames[-1].filename.split('/posenc/')[-1]}:{frames[-1].lineno} {frames[-1].name}"
                     if frames else "(outside posenc)")
            self.by_line[where] += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        cache = m.new_cache()
        nxt = step(torch.arange(100, 228)[None], cache)  # a 128-token prompt
        nxt = step(torch.tensor([[nxt]]), cache)  # warm-up: the rows a step reuses are made here
        with Count() as count:
            step(torch.tensor([[nxt]]), cache)
    print(f"dispatched operators per decoded token: {count.total}")
    for where, n in count.by_line.most_common(args.top):
        print(f"{n:6d} {where}")


if __name__ == "__main__":
    main()
