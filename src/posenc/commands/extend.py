"""``posenc extend``: what each context-extension method does to a pretrained model past its trained length.

For a checkpoint (HF folder or .gguf, loaded into posenc's own modules) and
each method × factor, without fine-tuning: perplexity by position over one
long causal pass per document, and needle retrieval (single- and multi-key
passkeys, RULER's multi-value needle) by prompt length, with Wilson intervals
and paired exact McNemar tests between methods (for multi-key also each
method against plain RoPE on whether its answer names any needle's key: the
needles reached, whichever door was taken). Methods are RoPE frequency
scalings and position remappings (Self-Extend, ReRoPE, Leaky ReRoPE, STRING,
Dual Chunk Attention). Cells are saved as they finish; the same command again
resumes; --shard I/N runs every N-th cell so several sittings share a grid.

    posenc extend SmolLM2-135M-Instruct.Q4_1.gguf --text bible --text licenses --factors 2 --out runs/extend
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = "runs/extend"
#: A --quick run reads at most this many positions: it shortens the work, never the model's trained context L₀.
QUICK_TOKENS = 512


def _csv(kind: type, flag: str, *, above: float = 0, choices: tuple[str, ...] | None = None):
    """argparse type: a comma list of finite ``kind`` values > ``above`` (or of ``choices``), none empty, none
    repeated."""
    from posenc.validation import did_you_mean, number, parse_list

    def convert(item: str) -> Any:
        if choices is not None and item not in choices:
            raise ValueError(f"unknown{did_you_mean(item, choices)}; valid: {', '.join(choices)}")
        value = kind(item)
        if kind is not str:
            number(value, "value", above=above, integer=kind is int)
        return value

    def parse(text: str) -> list[Any]:
        try:
            return parse_list(text, flag, convert=convert)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def register(sub: argparse._SubParsersAction) -> None:
    from posenc.cli_options import (add_device, add_dtype, add_force, add_json, add_out, add_quiet, add_seed,
                                    add_threads, command_help)
    from posenc.extend.methods import FAMILY_LAYERS, LAYER_CHOICES, METHODS
    from posenc.extend.retrieval import DEPTH_MODES, TASKS
    from posenc.families.hf_config import MAX_CONTEXT
    from posenc.validation import int_at_least

    p = sub.add_parser("extend", help="context extension on a real model: loss by position and passkey per RoPE scaling",
                       **command_help(__doc__, examples=(
                           "posenc extend smollm2 --quick                      # minutes: the pipeline, shortened",
                           "posenc extend SmolLM2-135M-Instruct.Q4_1.gguf --methods rope,rope-yarn --factors 2,4",
                           "posenc extend gemma3 --shard 0/4 --out runs/extend  # a quarter of the grid")))
    p.add_argument("model", metavar="MODEL", help="HF model folder (config.json + safetensors + tokenizer.json) or .gguf")
    p.add_argument("--text", action="append", metavar="FILE|bible|licenses",
                   help="long document for loss by position (repeatable; default: bible and licenses). bible = "
                        "World English Bible (Debian sword-text-web), licenses = /usr/share/common-licenses texts")
    p.add_argument("--methods", type=_csv(str, "--methods"), default=list(METHODS),
                   help=f"comma-separated methods (default all: {','.join(METHODS)}). On a model with a layer plan "
                        "(Gemma 3) a method replaces the RoPE of the global (full-attention) layers only, as "
                        "Gemma 3's larger sizes scale only those; sliding layers keep theirs")
    p.add_argument("--factors", type=_csv(float, "--factors"), default=[2.0],
                   help="extension factors for the scaled methods (default 2)")
    p.add_argument("--lengths", type=_csv(int, "--lengths", above=1), default=None,
                   help="retrieval prompt lengths in tokens (default L0/2, L0, 1.5·L0, 2·L0, and 4·L0 when a factor "
                        "is ≥ 4)")
    p.add_argument("--tasks", type=_csv(str, "--tasks", choices=TASKS), default=["passkey"],
                   help=f"retrieval tasks, comma-separated: {', '.join(TASKS)} (default passkey)")
    p.add_argument("--layers", choices=LAYER_CHOICES, default=None,
                   help="which layers a method changes in a model with a layer plan: all, global (full-window "
                        "layers) or rotary (RoPE layers); default: what the family does itself — "
                        + ", ".join(f"{k}: {v}" for k, v in FAMILY_LAYERS.items())
                        + "; any other family: all (rotary when some layer has no RoPE)")
    p.add_argument("--depths", choices=DEPTH_MODES, default="strata",
                   help="where the asked needle sits: strata (default; trial t at a seeded depth in fifth t mod 5 of "
                        "the filler, every trial at its own depth) or grid (0, ¼, ½, ¾, 1 in turn: trials at one depth "
                        "differ only in the key, so their answers cluster; how cells before 2026-12-05 were made — "
                        "pass it to continue those)")
    p.add_argument("--no-shared-prefix", dest="share_prefixes", action="store_false",
                   help="read every retrieval prompt whole (default: trials continue the kept KV caches of the filler "
                        "before their first needle, about half the tokens for passkey trials, answers equal up to "
                        "float rounding; the kept caches cost up to 3 prompt lengths of keys and values)")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="run only cells I, I+N, I+2N, … of the grid's fixed order (0 <= I < N); shards share --out "
                        "one after another, or run at once with one --out each (then copy cells/ together and "
                        "--report-only)")
    p.add_argument("--max-tokens", type=int_at_least(0, MAX_CONTEXT), default=None,
                   help="tokens in each loss pass, the longest position measured (default max-factor·L0); 0 skips "
                        "the loss part")
    p.add_argument("--passkey-trials", type=int_at_least(0, 10**6), default=20, metavar="N",
                   help="retrieval trials per task, length and method (the same prompts for every method; the needle "
                        "in each fifth of the filler in turn, see --depths); 0 skips retrieval (default 20)")
    p.add_argument("--original-max-len", type=int_at_least(2, MAX_CONTEXT), default=None, metavar="L0",
                   help="trained context L0 given to the schemes (default: the model's max_position_embeddings)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: at most {QUICK_TOKENS} positions (a loss pass of min(2·L0, {QUICK_TOKENS}) tokens "
                        f"on the first text; passkey at min(L0/2, {QUICK_TOKENS // 2}) and min(2·L0, {QUICK_TOKENS}) "
                        "with 2 trials); L0 stays the model's, and the report says what was shortened")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the cells in --out")
    add_out(p, default=DEFAULT_OUT, help="report folder: cells/, results.json, results.md, index.html")
    add_json(p, help="also write the summary as JSON to FILE ('-': print it on stdout)")
    add_seed(p, help="seeds the passkey keys and depths")
    add_threads(p, help="torch intra-op threads (default: torch's choice; the recorded run used 1)")
    add_device(p)
    add_dtype(p)
    from posenc.commands.generate import add_weights

    add_weights(p)
    add_quiet(p)
    add_force(p)
    p.set_defaults(func=run)


def machine_note(threads: int) -> dict[str, Any]:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch_threads": threads,
            "torch": torch.__version__, "python": platform.python_version(),
            "load_average_at_start": None if load is None else [round(x, 2) for x in load]}


def shortened(args: argparse.Namespace, l0: int, declared_l0: int | None) -> list[str]:
    """What this run changes from the model's own facts and from a full run, one sentence each (first line and
    report)."""
    said = []
    if args.original_max_len is not None and args.original_max_len != declared_l0:
        said.append(f"L0 = {args.original_max_len} given by --original-max-len; the model was trained to "
                    f"{declared_l0}")
    if args.quick:
        reach = min(2 * l0, QUICK_TOKENS)
        said.append(f"--quick: positions up to {reach} only" + (
            f" — nothing past L0 = {l0} is measured, so no finding about extrapolation" if reach <= l0 else ""))
    return said


def grid_config(args: argparse.Namespace, declared_l0: int | None) -> Any:
    from posenc.extend.grid import GridConfig
    from posenc.extend.methods import check_methods

    l0 = args.original_max_len if args.original_max_len is not None else declared_l0
    if not l0 or l0 < 2:
        raise ValueError(f"the model declares no trained context (got {declared_l0}); pass --original-max-len L0")
    factors = [float(f) for f in args.factors]
    if any(not f > 0 for f in factors):
        raise ValueError(f"--factors must be positive, got {factors}")
    top = max(factors)
    texts = tuple(args.text or ("bible", "licenses"))
    if args.quick:  # shorter work, the same L0
        max_tokens = min(2 * l0, QUICK_TOKENS) if args.max_tokens is None else args.max_tokens
        lengths = args.lengths or sorted({min(l0 // 2, QUICK_TOKENS // 2), min(2 * l0, QUICK_TOKENS)})
        trials = min(args.passkey_trials, 2)
        texts = texts[:1]
    else:
        max_tokens = int(top * l0) if args.max_tokens is None else args.max_tokens
        lengths = args.lengths or sorted({l0 // 2, l0, int(1.5 * l0), 2 * l0, *([4 * l0] if top >= 4 else [])})
        trials = args.passkey_trials
    if max_tokens == 0 and trials == 0:
        raise ValueError("--max-tokens 0 skips the loss part and --passkey-trials 0 skips passkey: nothing would be "
                         "measured; keep one of them")
    if max_tokens == 0:
        texts = ()
    elif max_tokens < 2:
        raise ValueError(f"--max-tokens must be 0 (no loss part) or at least 2, got {max_tokens}")
    if trials < 0 or any(n <= 0 for n in lengths):
        raise ValueError(f"--passkey-trials must be >= 0 and --lengths positive, got {trials} and {lengths}")
    return GridConfig(methods=tuple(check_methods(args.methods)), factors=tuple(factors), documents=texts,
                      loss_length=max_tokens, passkey_lengths=tuple(lengths) if trials else (),
                      passkey_trials=trials, original_max_len=int(l0), seed=args.seed,
                      tasks=tuple(args.tasks), layers=args.layers, shard=parse_shard(args.shard),
                      share_prefixes=args.share_prefixes, depths=args.depths)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``I/N`` → (I, N) with 0 ≤ I < N."""
    if text is None:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {text}: need 0 <= I < N")
    return i, n


def _model_id(path: Path, dtype: str = "float32", weights: str | None = None) -> str:
    """The model a saved cell was made with: the file (path and size) and, when they are not the defaults
    (float32; the file's own default weights, as-stored for GGUF), the dtype and the weights — a bfloat16 or
    dequantised cell is not reused for a float32 or as-stored run, and cells saved before these were named
    stay valid for the defaults."""
    files = [path] if path.is_file() else sorted(path.glob("*"))
    from posenc.pretrained.as_stored import check_weights

    out = f"{path.resolve()} ({sum(f.stat().st_size for f in files if f.is_file())} bytes)"
    default = check_weights(None, gguf=path.is_file() and path.suffix.lower() == ".gguf", device="cpu")
    extra = ([dtype] if dtype != "float32" else []) + (
        [f"{weights} weights"] if weights is not None and weights != default else [])
    return out + (f"; {', '.join(extra)}" if extra else "")


def run(args: argparse.Namespace) -> int:
    from posenc.cli_options import hold_out, out_dir
    from posenc.validation import check_output

    out = out_dir(args)
    check_output(out, "--out", kind="dir")  # before the model loads and the grid runs
    check_output(args.json, "--json")
    if args.report_only and out is not None and not out.is_dir():
        raise FileNotFoundError(f"--report-only: {out} is not a folder of cells (give the --out of an extend run)")
    if not args.report_only:
        from posenc.pretrained import require_causal_lm

        if not Path(args.model).exists():
            raise FileNotFoundError(f"model {args.model!r} not found: give an HF model folder or a .gguf file")
        require_causal_lm(args.model, command="extend")
    # one run at a time per folder: a second one would write the same cells and report (train's lock, the same file)
    with hold_out(out, shards="extend MODEL", command="extend", force=args.force):
        return _run(args, out)


def _run(args: argparse.Namespace, out: Path | None) -> int:
    import torch

    from posenc.cli_options import apply_threads, device_of, dtype_of, json_to_stdout, write_json
    from posenc.extend.cells import CellStore
    from posenc.extend.grid import Grid, config_dict
    from posenc.extend.methods import LEFT_OUT, trained_context
    from posenc.extend.report import summarise, write_report

    apply_threads(args)
    threads = torch.get_num_threads()
    meta: dict[str, Any] = {"command": "posenc " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                            "machine": machine_note(threads)}
    if args.report_only:
        if out is None:
            raise ValueError("--report-only needs --out DIR holding the cells")
        store = CellStore(out)
        cells = store.all()
        for bad in store.unreadable.values():  # named, left out; a run recomputes them
            print(f"extend: left out, not a cell: {bad}", file=sys.stderr)
        if not cells:
            raise FileNotFoundError(f"no finished cells in {out / 'cells'}"
                                    + (f" ({len(store.unreadable)} file(s) there are not cells)"
                                       if store.unreadable else ""))
        paths = write_report(cells, out, {**meta, "note": "report rewritten from saved cells"})
        print(f"report of {len(cells)} cells: {paths['html']}")
        return 0
    path = Path(args.model)
    try:
        from posenc.models.decoder import build_decoder
        from posenc.pretrained import load_pretrained
    except ImportError as err:
        raise ValueError(f"this posenc build cannot load pretrained checkpoints ({err})") from None
    began = time.perf_counter()
    pm = load_pretrained(str(path), dtype=dtype_of(args), device=device_of(args), weights=args.weights)
    # L0 is the model's own (the one reading: posenc.pretrained.description), whatever --quick shortens
    declared = pm.description.trained_context if pm.description is not None else trained_context(pm.config)
    cfg = grid_config(args, declared)
    notes = shortened(args, cfg.original_max_len, declared)
    meta.update({"model": str(path), "declared_context": declared, "shortened": "; ".join(notes) or "nothing",
                 "grid": config_dict(cfg),
                 "left_out": LEFT_OUT, "load_seconds": round(time.perf_counter() - began, 1)})
    stream = sys.stderr if json_to_stdout(args) else sys.stdout  # keep stdout pure JSON under --json -
    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=stream))
    for note in notes:
        print(f"extend: {note}", file=stream)  # even under --quiet: it changes what the numbers mean
    log(f"extend: {len(cfg.variants())} model variants × {len(cfg.documents)} text(s) at {cfg.loss_length} tokens; "
        f"passkey at {list(cfg.passkey_lengths)} × {cfg.passkey_trials} trials; L0 = {cfg.original_max_len}; "
        f"writing to {out or 'nowhere (--out -)'}")
    store = CellStore(out, log=lambda msg: print(f"extend: {msg}", file=stream))  # even under --quiet
    model_id = _model_id(path, args.dtype or "float32", args.weights)
    grid = Grid(pm.model.eval(), pm.tokenizer, cfg, store, model_id=model_id, builder=build_decoder,
                progress=not args.quiet, log=log)
    cells = grid.run()
    if grid.interrupted:  # Ctrl-C / SIGTERM: every finished cell and trial is saved; no report of half a grid
        print(f"extend: interrupted after {len(cells)} cell(s), all saved" + (
            f" in {out / 'cells'}; run the same command again to resume" if out is not None else
            " nowhere (--out -)"), file=sys.stderr)
        return 130
    meta["wall_seconds_this_invocation"] = round(time.perf_counter() - began, 1)
    meta["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    summary = summarise(cells)
    if out is not None:
        paths = write_report(cells, out, meta)
        print(f"report: {paths['html']}", file=stream)  # even under --quiet: where the results went
    for index, line in enumerate(summary["reading"]):
        if index == 0:
            print(line, file=stream)  # the one-line result, even under --quiet
        else:
            log(line)
    write_json(args, {"meta": meta, "summary": summary})
    return 0
