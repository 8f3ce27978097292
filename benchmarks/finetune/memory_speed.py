"""Does gradient checkpointing or bf16 autocast help a fine-tuning step on this machine? Time and peak memory.

Each setting runs in a fresh process (peak RSS is per process): the mini-scale model of the replication
(256 wide, 6 layers, byte vocabulary) fine-tuned with YaRN at T tokens, batch 1, ``steps`` timed updates
after one warm-up update. Run:

    PYTHONPATH=src python benchmarks/finetune/memory_speed.py --length 2048 --steps 3 --out benchmarks/finetune/memory_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def one(length: int, steps: int, autocast: str, ckpt: bool, threads: int) -> dict:
    import torch

    from posenc.finetune.data import ByteTokenizer
    from posenc.finetune.model import Start
    from posenc.finetune.run import FinetuneConfig, finetune
    from posenc.models.decoder import DecoderConfig, build_decoder

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_decoder(DecoderConfig(vocab_size=256, dim=256, num_layers=6, num_heads=4, ffn_dim=688,
                                    max_position_embeddings=256, tie_embeddings=True,
                                    position_options={"pairing": "interleaved"}))
    tokens = torch.randint(0, 256, (20 * length,))
    start = Start(model, ByteTokenizer(), 256, "mini", "bench")
    times = []
    for n in (1, steps + 1):  # the first call pays the warm-up; the difference is `steps` updates
        cfg = FinetuneConfig(method="rope-yarn", factor=length / 256, original_max_len=256, length=length, steps=n,
                             lr=1e-4, warmup_steps=0, grad_checkpoint=ckpt, autocast=autocast)
        began = time.perf_counter()
        res = finetune(start, cfg, tokens=tokens, progress=False, log=lambda m: None)
        times.append(time.perf_counter() - began)
    return {"length": length, "autocast": autocast, "grad_checkpoint": ckpt, "threads": threads,
            "seconds_per_step": (times[1] - times[0]) / steps, "final_loss": res.history[-1]["loss"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        autocast, ckpt = args.one.split(":")
        print(json.dumps(one(args.length, args.steps, autocast, ckpt == "1", args.threads)))
        return
    rows = []
    load_start = os.getloadavg()
    for autocast in ("float32", "bfloat16"):
        for ckpt in ("0", "1"):
            out = subprocess.run([sys.executable, __file__, "--one", f"{autocast}:{ckpt}", "--length",
                                  str(args.length), "--steps", str(args.steps), "--threads", str(args.threads)],
                                 capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    record = {"command": " ".join(sys.argv), "load_average_start": load_start, "load_average_end": os.getloadavg(),
              "cpu": os.cpu_count(), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
