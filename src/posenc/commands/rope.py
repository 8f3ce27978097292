"""``posenc rope CONFIG|MODEL``: a model's RoPE per layer type, against float64 and against HF's own functions.

    posenc rope path/to/config.json            # any model_type; a model folder or a .gguf file too
    posenc rope model.gguf --positions 4096,131072 --json -
    posenc rope --calc yarn --original-max-len 8192 --target-len 32768 --base 500000 --head-dim 128

The model is read once (``posenc.pretrained.description``: the plan the loader builds the model from); the
numbers come from ``posenc.ropecheck.audit`` (plain data); this module prints them.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from posenc.cli_options import add_json, command_help, json_to_stdout, write_json
from posenc.validation import parse_list


def _g(x: float) -> str:
    if x == math.inf:
        return "inf"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def _indices(indices: list[int]) -> str:
    """[0, 1, 2, 4, 5] → "0-2, 4-5"."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def print_audit(report: dict[str, Any]) -> None:
    family = f" (posenc family {report['family']})" if report.get("family") else " (not a family posenc runs)"
    hf = (f"yes, against {report['hf_reading']}" if report["hf_checked"]
          else f"no ({report.get('hf_reading') or 'transformers absent or the model type unknown to it'})")
    print(f"{report['source']}: model_type {report['model_type']}{family}, trained context L₀ "
          f"{report.get('trained_context') or report['max_position_embeddings']}; HF check: {hf}")
    for line in report.get("supplied") or ():
        print(f"  not stated by the file, supplied by posenc's {report.get('family')} family: {line}")
    for entry in report["layer_types"]:
        layers = (f" ({entry['layers']} layer{'s' if entry['layers'] != 1 else ''})" if entry.get("layers") else "")
        window = entry.get("window") or {}
        where = (f"  layers {_indices(entry['layer_indices'])}" if entry.get("layer_indices") else "") + (
            f"; window {window['kind']} {window['size']}" if window.get("size") else "")
        print(f"\n[{entry['layer_type']}]{layers}: {entry['scheme']} "
              + " ".join(f"{k}={v}" for k, v in entry["options"].items() if v is not None and k not in
                         ("short_factor", "long_factor")))
        if where:
            print(where)
        if entry["scheme"] == "none":
            t = entry.get("temperature")
            if t:
                factors = ", ".join(f"p={p}: {f:.4g}" for p, f in t["factor_at"].items())
                print(f"  NoPE layers {entry['layer_indices']}; Llama 4 query temperature "
                      f"(floor_scale {t['floor_scale']}, attn_scale {t['attn_scale']}): {factors}")
            else:
                print(f"  NoPE layers {entry['layer_indices']}")
            continue
        print(f"  head width {entry['head_dim']}, {entry['pairs']} pairs ({entry['unrotated_pairs']} unrotated); "
              f"attention factor {entry['attention_factor']:.6g}; L₀ = {entry['original_max_len']}")
        print(f"  pairs turning fully inside L₀ (wavelength ≤ L₀): {entry['full_turn_pairs']} of {entry['pairs']}")
        print("  pair  inv_freq      wavelength    turns in L₀")
        for i, (t, w, n) in enumerate(zip(entry["inv_freq"], entry["wavelength"], entry["turns_in_L0"])):
            print(f"  {i:>4}  {t:<12.6g}  {_g(w):<12}  {n:.4g}")
        print("  position   arithmetic                held as     angle err (rad)  cos err    sin err")
        for r in entry["precision"]:
            print(f"  {r['position']:<9}  {r['arithmetic']:<24}  {_g(r['position_held_as']):<10}  "
                  f"{_g(r['angle_error']):<15}  {_g(r['cos_error']):<9}  {_g(r['sin_error'])}")
        hf = entry.get("hf")
        if hf and hf.get("computed_by"):
            verdict = "same" if hf.get("same") else "DIFFERENT"
            rel = hf.get("max_rel_diff")
            kinds = ", ".join(t for t in hf.get("hf_layer_types") or [] if t != "all")
            print(f"  HF check ({hf['computed_by']}{'; HF layer type ' + kinds if kinds else ''}): {verdict} inv_freq "
                  f"on every layer (max rel diff {_g(rel) if rel is not None else '—'}) and attention factor "
                  f"({hf['attention_factor']:.6g})")
    print("\nfindings:" if report["findings"] else "\nfindings: none")
    for f in report["findings"]:
        where = f" [{f['layer_type']}]" if f["layer_type"] else ""
        print(f"  {f['severity']}{where}: {f['message']}")


def print_calc(calc: dict[str, Any]) -> None:
    import json

    print(f"{calc['method']}: L₀ {calc['original_max_len']} → {calc['target_len']} (factor {calc['factor']:g})")
    print("HF config.json:")
    print("  " + json.dumps(calc["hf_config"], indent=2).replace("\n", "\n  "))
    print("GGUF metadata ({arch} = general.architecture):")
    for k, v in calc["gguf_metadata"].items():
        print(f"  {k} = {v}")
    if calc["llama_cpp_flags"]:
        print("llama.cpp: " + " ".join(calc["llama_cpp_flags"]))
    print(f"posenc: {calc['posenc']['scheme']} " + " ".join(f"{k}={v}" for k, v in calc["posenc"]["options"].items()))


def run(args: argparse.Namespace) -> int:
    from posenc.ropecheck.audit import audit, calculator, read_source

    if args.calc:
        if args.original_max_len is None or args.target_len is None:
            raise ValueError("--calc needs --original-max-len and --target-len")
        data = calculator(args.calc, original_max_len=args.original_max_len, target_len=args.target_len,
                          base=args.base, head_dim=args.head_dim)
        if not json_to_stdout(args):
            print_calc(data)
        write_json(args, data, indent=2)
        return 0
    if args.source is None:
        raise ValueError("give a config.json, a model folder or a .gguf file (or --calc METHOD)")
    positions = None if args.positions is None else parse_list(args.positions, "--positions", convert=int)
    if positions is not None and any(p < 0 for p in positions):
        raise ValueError(f"--positions must be >= 0, got {positions}")
    import sys

    model = read_source(args.source)
    say = None if json_to_stdout(args) else (lambda line: print(line, file=sys.stderr, flush=True))
    report = audit(model, positions=positions, hf_check=not args.no_hf, source=str(args.source), progress=say)
    if not json_to_stdout(args) and not args.lint:
        print_audit(report)
    from posenc.commands.engines import rope_extras  # lint findings, --engines (exit status 3 when one differs)

    code = rope_extras(args, model, report, positions if args.engines else None, say)
    write_json(args, report, indent=1)
    return code


def _logits_tokens(text: str) -> int:
    """--logits-tokens: 0 (no logits check) or at least 16 (half of the prompt is scored)."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if n != 0 and n < 16:
        raise argparse.ArgumentTypeError(f"{n}: give 0 (no logits check) or at least 16 tokens")
    return n


def register(sub: Any) -> None:
    p = sub.add_parser("rope", help="a model's RoPE per layer type: frequencies, precision, HF check; or a calculator",
                       **command_help(__doc__, description=(
                           "Read a model's rotary position settings (config.json of any model_type, a model folder "
                           "or a .gguf file) and print, for each layer type: the scheme and its options, the "
                           "frequencies and wavelengths, the float32 precision of the angles at chosen positions "
                           "against float64, and whether transformers' own functions give the same frequencies. "
                           "With --calc, a calculator instead: a context-extension method's HF rope_parameters "
                           "block, GGUF keys and llama.cpp flags for a target length.")))
    p.add_argument("source", nargs="?", default=None, metavar="CONFIG|MODEL",
                   help="config.json (any model_type), a model folder holding one, or a .gguf file")
    p.add_argument("--positions", default=None,
                   help="comma list of positions for the precision table (default L₀ − 1, 4·L₀, 131071)")
    p.add_argument("--no-hf", action="store_true", help="skip the comparison with transformers' own functions")
    p.add_argument("--calc", default=None, metavar="METHOD",
                   help="calculator: linear, ntk, dynamic, yarn or llama3 → the HF block, GGUF keys, llama.cpp flags")
    p.add_argument("--original-max-len", type=int, default=None, help="calculator: the trained length L₀")
    p.add_argument("--target-len", type=int, default=None, help="calculator: the length to reach")
    p.add_argument("--base", type=float, default=10000.0, help="calculator: the RoPE base (default 10000)")
    p.add_argument("--head-dim", type=int, default=128, help="calculator: the head width (NTK's exponent)")
    p.add_argument("--engines", default=None, metavar="NAMES",
                   help="compare each engine's own RoPE with posenc's float64 one: hf, torchtune, x-transformers, "
                        "rotary-embedding-torch, mlx, llama.cpp, vllm, or all (exit status 3 when one differs; "
                        "posenc engines install NAME installs one)")
    p.add_argument("--logits-tokens", type=_logits_tokens, default=None, metavar="N",
                   help="with --engines llama.cpp on a .gguf: llama.cpp's next-token distributions on the first N "
                        "tokens of the licence texts against posenc's under each reading of the file's positions "
                        "(default 512; 0 skips; past the original context for a scaling that switches there; a few "
                        "hundred tokens or more: the verdict is a mean over the second half)")
    p.add_argument("--lint", action="store_true", help="print only the config's lint findings (and --engines)")
    p.add_argument("--pairing-check", action="store_true",
                   help="also load the weights (dequantised) and read which RoPE pairing the q/k rows are in from "
                        "a short text's loss under each (lint finding pairing-from-weights when it is not the "
                        "declared one)")
    p.add_argument("--hf-config", default=None, metavar="PATH",
                   help="with a .gguf: the HF config.json it was converted from (lints its rope keys against it)")
    add_json(p)
    p.set_defaults(func=run)
