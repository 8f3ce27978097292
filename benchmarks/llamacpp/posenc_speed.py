"""posenc's side of ``llama-bench``: the same tests on the same file, printed as one JSON line.

    python benchmarks/llamacpp/posenc_speed.py MODEL.gguf --threads 1 --prompt 128 2048 --decode 64 --depth 128

As llama-bench runs them (``-p 128,2048 -n 64 -d 128``): ``ppN`` feeds N random token ids into an empty
cache in one batch and keeps the last position's logits; ``tgN`` feeds N single tokens one after another into
a cache already holding ``--depth`` tokens (the prefill is not timed), each step's logits computed. One
untimed warm-up of each shape first (llama-bench warms up too). posenc runs with its defaults for a GGUF file:
weights as stored, float32 activations, ``torch.set_num_threads(threads)``.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--prompt", type=int, nargs="*", default=[128, 2048])
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--depth", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from posenc.models.decoder import greedy
    from posenc.pretrained import load_pretrained

    start = time.perf_counter()
    pm = load_pretrained(args.model)
    load_s = time.perf_counter() - start
    model = pm.model
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(args.seed)
    ids = lambda n: torch.randint(0, vocab, (1, n), generator=gen)  # noqa: E731

    def prefill(n: int) -> float:
        cache = model.new_cache()
        x = ids(n)
        t0 = time.perf_counter()
        model.logits(model.hidden(x, cache=cache)[:, -1])
        return time.perf_counter() - t0

    def decode(n: int, depth: int) -> float:
        cache = model.new_cache()
        model.hidden(ids(depth), cache=cache)
        tok = ids(1)
        t0 = time.perf_counter()
        for _ in range(n):
            tok = greedy(model.logits(model.hidden(tok, cache=cache)[:, -1]))[:, None]  # as posenc generate picks
        return time.perf_counter() - t0

    out = {"load_s": load_s, "threads": torch.get_num_threads()}
    with torch.no_grad():
        for n in args.prompt:
            prefill(min(n, 16))  # warm-up
            out[f"pp{n}"] = n / prefill(n)
        if args.decode:
            decode(2, args.depth)  # warm-up
            out[f"tg{args.decode}@d{args.depth}"] = args.decode / decode(args.decode, args.depth)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
