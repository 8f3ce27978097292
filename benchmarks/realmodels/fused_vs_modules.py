"""Fused decoding blocks against the modules on SmolLM2 as stored: mean NLL of the same decoding steps.

From the KV cache of a GPL-3 prompt (filled by the modules), ``--steps`` tokens are scored one decoding step
at a time twice — every block fused into one kernel call (``posenc.models.fused``), then with the modules
(``POSENC_FUSED=0``) — and the per-token losses compared: their mean difference and its standard error. A
systematic difference between the two paths would show as a mean many standard errors from zero. Usage::

    PYTHONPATH=src python benchmarks/realmodels/fused_vs_modules.py --starts 512,1024,1536 --steps 256
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from as_stored import text_ids  # noqa: E402
from bench import gguf_path  # noqa: E402


def main() -> None:
    import torch
    import torch.nn.functional as F

    from posenc.pretrained import load_pretrained

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", default="512,1024,1536", help="prompt lengths (GPL-3 tokens) to step on from")
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = load_pretrained(gguf_path()).model
    starts = [int(s) for s in args.starts.split(",")]
    ids = torch.tensor([text_ids(max(starts) + args.steps + 1)])
    for start in starts:
        losses = {}
        with torch.no_grad():
            os.environ["POSENC_FUSED"] = "0"
            base = model.new_cache()
            model(ids[:, :start], cache=base)
            for name, switch in (("fused", "1"), ("modules", "0")):
                os.environ["POSENC_FUSED"] = switch
                for layer in model.layers:
                    layer.__dict__.pop("_fused_plan", None)
                cache = copy.deepcopy(base)
                logits = torch.cat([model(ids[:, s : s + 1], cache=cache) for s in range(start, start + args.steps)], 1)
                losses[name] = F.cross_entropy(logits[0], ids[0, start + 1 : start + args.steps + 1], reduction="none")
        d = losses["fused"] - losses["modules"]
        fused, modules = float(losses["fused"].mean()), float(losses["modules"].mean())
        print(f"from {start:5d}: NLL fused {fused:.4f}, modules {modules:.4f}, "
              f"difference {float(d.mean()):+.4f} ± {float(d.std() / len(d) ** 0.5):.4f} (standard error)", flush=True)


if __name__ == "__main__":
    main()
