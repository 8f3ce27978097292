"""``posenc demo``: build a small model, print what it built, and generate a few tokens."""

from __future__ import annotations

import argparse
import json
from typing import Any

from posenc.cli_options import add_position, add_seed, command_help, position_options


def run(args: argparse.Namespace) -> int:
    import torch

    from posenc.models import ModelConfig, build_decoder_only, build_encoder_decoder
    from posenc.positions import lookup

    torch.manual_seed(args.seed)
    widens = lookup(args.position).extra_width > 0  # the naive index: a tied head would not fit
    cfg = ModelConfig(vocab_size=args.vocab, dim=args.dim, num_heads=args.heads, num_layers=args.layers,
                      position=args.position, position_options=position_options(args), tie_embeddings=not widens)
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
    p = sub.add_parser("demo", help="build a small model and print what it built",
                       **command_help(description="Build a small untrained model with the chosen position scheme, "
                                      "print what it built (layers, widths, the scheme and its options) as JSON, "
                                      "then greedily continue a random 5-token prompt by 8 tokens. Seconds on a CPU; "
                                      "writes no files.",
                                      examples=("posenc demo",
                                                "posenc demo --kind decoder-only --position rope-yarn "
                                                "--position-option factor=4",
                                                "posenc demo --position nope --dim 128 --heads 8")))
    p.add_argument("--kind", choices=["encoder-decoder", "decoder-only"], default="encoder-decoder",
                   help="model shape (default encoder-decoder)")
    add_position(p, default="sinusoidal")
    p.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="layers, each of encoder and decoder (default 2)")
    p.add_argument("--vocab", type=int, default=100, help="vocabulary size (default 100)")
    add_seed(p, help="seed of the random weights and prompt")
    p.set_defaults(func=run)
