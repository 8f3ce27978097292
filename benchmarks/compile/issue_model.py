"""The issue's own reproduction, re-measured: a d=256, 4-layer RoPE decoder-only model, batch 8 x 256.

Trains with AdamW on random tokens, eager and ``torch.compile`` (inductor), timed in
alternating blocks in one process so both see the same machine load; prints tokens/s
(median over blocks) and the compile time apart. Run from the repository root:

    python benchmarks/compile/issue_model.py --threads 2 --blocks 5 --steps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from posenc import ModelConfig, build_decoder_only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=5, help="alternating timed blocks per contender")
    ap.add_argument("--steps", type=int, default=5, help="training steps per block")
    ap.add_argument("--position", default="rope")
    ap.add_argument("--activation", default="relu", help="the feed-forward activation (ModelConfig.activation)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vocab, batch, length = 1000, 8, 256
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=vocab, dim=256, num_heads=4, num_layers=4, position=args.position, dropout=0.0,
                      activation=args.activation)
    ids = torch.randint(0, vocab, (batch, length + 1))
    steps = {}
    compile_s = None
    for kind in ("eager", "compiled"):
        torch.manual_seed(0)
        model = build_decoder_only(cfg).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        forward = torch.compile(model) if kind == "compiled" else model

        def step(forward=forward, opt=opt) -> None:
            logits = forward(ids[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        t0 = time.perf_counter()
        step()  # the compile (or eager warm-up)
        first = time.perf_counter() - t0
        step()
        if kind == "compiled":
            compile_s = first
        steps[kind] = step
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.blocks):
        for kind, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[kind].append((time.perf_counter() - t0) / args.steps)
    tokens = batch * length
    rate = {k: tokens / statistics.median(v) for k, v in times.items()}
    out = {"model": cfg.to_dict() if hasattr(cfg, "to_dict") else str(cfg), "batch": batch, "length": length,
           "threads": args.threads, "torch": torch.__version__, "tokens_per_s": rate,
           "compiled_over_eager": rate["compiled"] / rate["eager"], "compile_s": compile_s,
           "seconds_per_step": times}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
