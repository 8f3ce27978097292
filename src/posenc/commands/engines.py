"""``posenc engines``: the engines ``posenc rope --engines`` compares with — installed or not, and installing them.

    posenc engines
    posenc engines install torchtune
    posenc engines install all
    posenc rope smollm2 --engines all

Each engine but ``hf`` gets its own venv under ``.engines/NAME`` (``$POSENC_ENGINES``), which sees posenc's own
packages; binary wheels only. ``llama.cpp`` is built from source (PyPI's llama-cpp-python sdist, cmake and
ninja, about five minutes on two cores; or ``POSENC_LLAMACPP_BUILD`` names an existing llama.cpp build folder)
and answers for GGUF files; ``vllm`` is listed with why it cannot install here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from posenc.cli_options import add_json, command_help, json_to_stdout, write_json


def engine_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``posenc rope --engines`` as text: one line per engine and layer group."""
    out = ["engines (vs posenc's float64 reference; float32 rounding allowed):"]
    for r in rows:
        head = f"  {r['engine']:<23} [{r['layer_type']}] {r['scheme']}: {r['status']}"
        if r["status"] in ("agrees", "differs") and "logits" in r:
            head += f" (max |Δ loss| of a token {r['max_abs_err']:.3g} nats)"
        elif r["status"] in ("agrees", "differs"):
            head += f" (max abs err {r['max_abs_err']:.3g})"
        if r["status"] == "differs" and r.get("first_diverging"):
            d = r["first_diverging"]
            head += (f"; first diverging: pair {d['pair']} at position {d['position']}" if d.get("pair") is not None
                     else f"; first diverging at position {d['position']}")
            head += f"; bug class: {r['bug_class']}" if r.get("bug_class") else ""
        if r.get("reason"):
            head += f" — {r['reason']}"
        if r.get("version"):
            head += f" [{r['version']}]"
        out.append(head)
    return out


def lint_lines(findings: list[dict[str, Any]]) -> list[str]:
    if not findings:
        return ["lint: no findings"]
    out = ["lint:"]
    for f in findings:
        where = f" [{f['layer_type']}]" if f.get("layer_type") else ""
        out.append(f"  {f['severity']} {f['rule']}{where}: {f['message']}")
    return out


def rope_extras(args: argparse.Namespace, model: Any, report: dict[str, Any], positions: list[int] | None,
                say: Any) -> int:
    """``posenc rope``'s lint findings and ``--engines`` comparison, added to ``report``; the exit status."""
    from pathlib import Path

    from posenc.ropecheck import engines, lint

    gguf = hf_source = None
    if getattr(args, "hf_config", None):
        from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json

        hf_source = read_json(Path(args.hf_config), limit=MAX_CONFIG_BYTES)
        if model.format == "gguf":
            from posenc.formats.gguf_header import check_header

            gguf = check_header(model.source).metadata
    report["lint"] = lint.lint(model.hf_config, gguf=gguf, hf_source=hf_source)
    if getattr(args, "pairing_check", False):
        from posenc.ropecheck.weights import pairing_check

        say("loading the weights (dequantised) to read their pairing from a short text's loss")
        check = pairing_check(model.source)
        report["pairing_check"] = {k: v for k, v in check.items() if k != "finding"}
        if check["finding"] is not None:
            report["lint"].append(check["finding"])
    code = 0
    if getattr(args, "engines", None):
        names = engines.parse_engines(args.engines)
        cases = engines.cases_of(report, model.hf_config, positions)
        from posenc.ropecheck.llamacpp_logits import DEFAULT_TOKENS

        tokens = getattr(args, "logits_tokens", None)
        tokens = DEFAULT_TOKENS if tokens is None else tokens
        report["engines"] = engines.compare(cases, names, progress=say, logits_tokens=tokens)
        code = engines.exit_status(report["engines"])
    if not json_to_stdout(args):
        if not getattr(args, "lint", False) or getattr(args, "engines", None):
            print()
        if "pairing_check" in report:
            c = report["pairing_check"]
            print(f"pairing from the weights ({c['tokens']} tokens, {c['layers']} rotary layers): loss "
                  f"{c['loss_as_declared']:.3f} as declared, {c['loss_if_half_rows']:.3f} if the rows were half, "
                  f"{c['loss_if_interleaved_rows']:.3f} if interleaved")
        print("\n".join(lint_lines(report["lint"])))
        if "engines" in report:
            print("\n" + "\n".join(engine_lines(report["engines"])))
    return code


def run(args: argparse.Namespace) -> int:
    from posenc.ropecheck import install
    from posenc.ropecheck.engines import ENGINE_NAMES, engine

    if args.action == "install":
        names = list(ENGINE_NAMES) if args.names == ["all"] else args.names
        rows = []
        for name in names:
            record = install.install(name, say=lambda line: print(line, file=sys.stderr, flush=True))
            rows.append(record)
            if not json_to_stdout(args):
                print(f"{name}: {record['status']} ({record['seconds']:g} s)"
                      + (f" — {record['reason']}" if record.get("reason") else ""))
        write_json(args, rows, indent=1)
        return 0 if all(r["status"] in ("installed", "in-process", "unavailable") for r in rows) else 1
    rows = []
    for name in ENGINE_NAMES:
        e = engine(name)
        why = e.available()
        record = install.record_of(name) or {}
        rows.append({"engine": name, "available": why is None, "version": e.version(), "reason": why,
                     "install_seconds": record.get("seconds"), "pairing": e.pairing})
    if not json_to_stdout(args):
        for r in rows:
            state = f"available ({r['version']})" if r["available"] else f"unavailable: {r['reason']}"
            print(f"{r['engine']:<23} {state}")
    write_json(args, rows, indent=1)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("engines", help="the engines posenc rope --engines compares with; install them",
                       **command_help(__doc__))
    p.add_argument("action", nargs="?", choices=("list", "install"), default="list",
                   help="list (default) or install")
    p.add_argument("names", nargs="*", default=[], metavar="NAME",
                   help="engines to install: hf, torchtune, x-transformers, rotary-embedding-torch, mlx, llama.cpp, "
                        "vllm, or all")
    add_json(p)
    p.set_defaults(func=run)
