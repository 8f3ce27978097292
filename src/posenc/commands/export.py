"""``posenc export``: a checkpoint with a chosen RoPE setting, written as an HF folder and a llama.cpp GGUF.

    posenc export SmolLM2-135M-Instruct.Q4_1.gguf --position rope-yarn --position-option factor=2 --out smollm2-yarn2

The first example writes ``smollm2-yarn2/`` (config.json with the matching ``rope_parameters`` and transformers 4's
``rope_scaling`` beside it, model.safetensors, tokenizer.json, tokenizer_config.json, special_tokens_map.json and
chat_template.jinja: the chat template, special tokens and BOS rule transformers needs) and
``smollm2-yarn2/model.gguf`` (llama.cpp's ``rope.scaling.*`` keys). A scheme with no spelling in a format is refused
by name, saying which format lacks it (``--format hf`` or ``gguf`` writes one).

Sizes: the HF folder's weights are in ``--dtype`` (float32, bfloat16 or float16; default the source's own float
type, bfloat16 for a quantised GGUF); the GGUF keeps a GGUF source's quantised blocks byte for byte (the 98 MB
SmolLM2 Q4_1 file exports as a 98 MB GGUF), or ``--gguf-type q8_0|f16|bf16|f32`` requantises its matrices.

``--out`` must be a new or empty folder (``--force``: replace an earlier export there) outside the source: a folder
that is, holds or lies inside the source folder, or is or holds a source file's folder, is refused, as are NaN or
infinite weights and options out of range, all before anything is written.

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
    from posenc.cli_options import DTYPES, add_json, add_position, add_quiet, command_help
    from posenc.extend.export import GGUF_OUT_TYPES
    from posenc.extend.methods import LAYER_CHOICES

    p = sub.add_parser("export", help="write a checkpoint with a RoPE scaling as an HF folder and a GGUF",
                       **command_help(__doc__))
    p.add_argument("model", metavar="MODEL", help="HF model folder (config.json + safetensors + tokenizer.json) or .gguf")
    add_position(p, default="rope", help="the scheme to write: rope, rope-ntk, rope-linear, rope-yarn, rope-llama3 "
                                         "and rope-longrope (HF only); others are refused by name (default: rope)")
    p.add_argument("--setting", default=None, metavar="FILE",
                   help="a JSON file with the scheme ('method' or 'position') and its 'options', e.g. the "
                        "result.json of 'posenc finetune search' (LongRoPE); replaces --position")
    p.add_argument("--format", default="hf,gguf", metavar="hf,gguf",
                   help="which outputs: hf, gguf or both (default both)")
    p.add_argument("--layers", choices=LAYER_CHOICES, default=None,
                   help="which layers of a Gemma 3 checkpoint take the scheme: global (default, what the family "
                        "does; the only choice a GGUF can state) or all/rotary (HF only); a llama checkpoint has one "
                        "scheme for every layer")
    p.add_argument("--dtype", choices=DTYPES, default=None,
                   help="the HF folder's weights (default: the source's own float type; bfloat16 for a quantised "
                        "GGUF, the dtype these models are published in)")
    p.add_argument("--gguf-type", choices=GGUF_OUT_TYPES, default=None,
                   help="requantise the GGUF's matrices (norms stay f32) from the dequantised weights (default: keep "
                        "the source's own types, a GGUF source's blocks byte for byte)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder, new or empty, outside the source (the GGUF is DIR/model.gguf); required: the "
                        "folder is export's result (commands whose result is a report folder default to "
                        "runs/COMMAND)")
    p.add_argument("--force", action="store_true",
                   help="write into an --out that holds files: an earlier export's files are replaced, and those this "
                        "export does not write are removed")
    add_json(p, help="also write what was written as JSON to FILE ('-': print it on stdout)")
    add_quiet(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out, position_options, write_json
    from posenc.extend.export import check_out, export_model
    from posenc.validation import check_output

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    check_output(args.out, "--out", kind="dir")  # before the model is read
    check_out(args.model, args.out, force=args.force)  # before the run lock puts its file there
    position, options = args.position, position_options(args)
    if args.setting is not None:
        position, found = read_setting(Path(args.setting))
        options = {**found, **options}
    with hold_out(Path(args.out)):  # one export per folder: two would mix their config.json, weights and GGUF
        result = export_model(args.model, position, options, args.out, formats=formats, layers=args.layers,
                              dtype=args.dtype, gguf_type=args.gguf_type, force=args.force)
    if not args.quiet:
        print(f"rope_parameters: {result['rope_parameters']}; GGUF keys: {result['gguf_rope'] or 'none (plain RoPE)'}")
        for path, size in result["sizes"].items():
            print(f"wrote {path} ({size:,} bytes)")
        if "dtype" in result:
            print(f"HF weights: {result['dtype']}")
        if "gguf_types" in result:
            print("GGUF tensor types: " + ", ".join(f"{k} {n}" for k, n in result["gguf_types"].items()))
        if result.get("transformers4"):
            print(f"note: {result['transformers4']}")
    write_json(args, result)
    return 0


def read_setting(path: Path) -> tuple[str, dict]:
    """(scheme, options) of a ``--setting`` file: ``{"method" or "position": NAME, "options": {...}}``."""
    from posenc.validation import UnreadableFile, read_json

    try:
        data = read_json(path, "--setting file", fix="give a result.json of posenc finetune search, or "
                         '{"method": NAME, "options": {...}}')
    except UnreadableFile as err:
        raise ValueError(f"--setting {err}") from None
    name = data.get("position", data.get("method"))
    if not isinstance(name, str) or not isinstance(data.get("options", {}), dict):
        raise ValueError(f"--setting {path}: needs a 'method' (or 'position') name and an 'options' object, as "
                         "`posenc finetune search` writes in result.json")
    return name, dict(data.get("options", {}))
