"""``posenc export``: a checkpoint with a chosen RoPE setting, written as an HF folder and a llama.cpp GGUF.

    posenc export SmolLM2-135M-Instruct.Q4_1.gguf --position rope-yarn --position-option factor=2 --out smollm2-yarn2

writes ``smollm2-yarn2/`` (config.json with the matching ``rope_parameters``,
model.safetensors, tokenizer.json) and ``smollm2-yarn2/model.gguf`` (llama.cpp's
``rope.scaling.*`` keys). A scheme with no spelling in a format is refused by
name, saying which format lacks it (``--format hf`` or ``gguf`` writes one).
A LongRoPE search's result exports as it was found:

    posenc export MODEL --setting runs/longrope/result.json --format hf --out model-longrope

(``--setting`` reads its ``method`` and ``options``; ``--position-option`` pairs override them).

Gemma 3 (every sixth layer global): the scheme goes to the global layers, as the family does itself;
``--layers all`` scales the sliding ones too (HF only: llama.cpp keeps them unscaled):

    posenc export gemma-3-270m.gguf --position rope-yarn --position-option factor=2 --out gemma3-yarn2

See ``posenc.extend.export``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from posenc.cli_options import add_json, add_position, add_quiet
    from posenc.extend.methods import LAYER_CHOICES

    p = sub.add_parser("export", help="write a checkpoint with a RoPE scaling as an HF folder and a GGUF",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="HF model folder (config.json + safetensors + tokenizer.json) or .gguf")
    add_position(p, default="rope", help="the scheme to write: rope, rope-ntk, rope-linear, rope-yarn, rope-llama3 "
                                         "and rope-longrope (HF only); others are refused by name (default: rope)")
    p.add_argument("--setting", default=None, metavar="FILE",
                   help="a JSON file with the scheme ('method' or 'position') and its 'options', e.g. the "
                        "result.json of `posenc finetune search` (LongRoPE); replaces --position")
    p.add_argument("--format", default="hf,gguf", metavar="hf,gguf",
                   help="which outputs: hf, gguf or both (default both)")
    p.add_argument("--layers", choices=LAYER_CHOICES, default=None,
                   help="which layers of a Gemma 3 checkpoint take the scheme: global (default, what the family "
                        "does; the only choice a GGUF can state) or all/rotary (HF only); a llama checkpoint has one "
                        "scheme for every layer")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (the GGUF is DIR/model.gguf)")
    add_json(p, help="also write what was written as JSON to FILE ('-': print it on stdout)")
    add_quiet(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out, position_options, write_json
    from posenc.extend.export import export_model
    from posenc.validation import check_output

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    check_output(args.out, "--out", kind="dir")  # before the model is read
    position, options = args.position, position_options(args)
    if args.setting is not None:
        position, found = read_setting(Path(args.setting))
        options = {**found, **options}
    with hold_out(Path(args.out)):  # one export per folder: two would mix their config.json, weights and GGUF
        result = export_model(args.model, position, options, args.out, formats=formats, layers=args.layers)
    if not args.quiet:
        print(f"rope_parameters: {result['rope_parameters']}; GGUF keys: {result['gguf_rope'] or 'none (plain RoPE)'}")
        for path in result.get("hf", []) + ([result["gguf"]] if "gguf" in result else []):
            print(f"wrote {path}")
    write_json(args, result)
    return 0


def read_setting(path: Path) -> tuple[str, dict]:
    """(scheme, options) of a ``--setting`` file: ``{"method" or "position": NAME, "options": {...}}``."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"--setting {path}: not a readable JSON file ({err})") from None
    name = data.get("position", data.get("method")) if isinstance(data, dict) else None
    if not isinstance(name, str) or not isinstance(data.get("options", {}), dict):
        raise ValueError(f"--setting {path}: needs a 'method' (or 'position') name and an 'options' object, as "
                         "`posenc finetune search` writes in result.json")
    return name, dict(data.get("options", {}))
