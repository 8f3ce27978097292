"""``posenc demo``: build a small model, print what it built, and generate a few tokens."""

from __future__ import annotations

import argparse
import json
from typing import Any


def run(args: argparse.Namespace) -> int:
    import torch

    from posenc import ModelConfig, build_decoder_only, build_encoder_decoder

    torch.manual_seed(args.seed)
    cfg = ModelConfig(vocab_size=args.vocab, dim=args.dim, num_heads=args.heads, num_layers=args.layers,
                      position=args.position, tie_embeddings=args.position != "naive")
    model = build_encoder_decoder(cfg) if args.kind == "encoder-decoder" else build_decoder_only(cfg)
    model.eval()
    print(json.dumps(model.describe(), indent=2))
    prompt = torch.randint(0, args.vocab, (1, 5))
    if args.kind == "encoder-decoder":
        out = model.generate(prompt, bos_id=0, max_new_tokens=8)
    else:
        out = model.generate(prompt, max_new_tokens=8)
    print("greedy continuation (untrained):", out.tolist()[0])
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="build a small model and print what it built")
    p.add_argument("--kind", choices=["encoder-decoder", "decoder-only"], default="encoder-decoder")
    p.add_argument("--position", default="sinusoidal", help="a name from `posenc schemes`")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)
