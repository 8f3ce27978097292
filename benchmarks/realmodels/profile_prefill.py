"""Where a prefill's time goes in posenc (as stored): one timed pass, then torch.profiler's operators by self time.

posenc's kernel calls (the quantised products) do not appear among the operators: they are the difference
between the timed pass and the operators' total. Usage::

    PYTHONPATH=src python benchmarks/realmodels/profile_prefill.py --model gemma3 --tokens 2048 --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import as_stored
    from posenc.pretrained import load_pretrained

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=as_stored.MODELS, default="gemma3")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", type=Path, default=Path("/tmp/posenc-realmodels"))
    args = p.parse_args()
    as_stored._MODEL[0] = args.model
    torch.set_num_threads(args.threads)
    m = load_pretrained(as_stored.model_gguf(args.work)).model
    ids = torch.tensor([as_stored.text_ids(args.tokens, args.work)])
    with torch.no_grad():
        m.logits(m.hidden(ids[:, :256])[:, -1])  # warm-up
        begin = time.perf_counter()
        m.logits(m.hidden(ids)[:, -1])
        print(f"prefill of {args.tokens} tokens: {time.perf_counter() - begin:.2f} s ({args.threads} thread(s))")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            m.logits(m.hidden(ids)[:, -1])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
