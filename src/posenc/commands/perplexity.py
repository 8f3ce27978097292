"""``posenc perplexity MODEL FILE``: per-token loss of a pretrained model over a text file.

The text is tokenized once and scored in windows of ``--window`` tokens that
start every ``--stride`` tokens (HF's "perplexity of fixed-length models"
recipe): each token is scored once, by the window that first reaches it, with
up to window − stride tokens of context before it. Stride = window gives
back-to-back windows (fastest, least context: each starts with the last token
of the one before, as the context of its first scored token); a smaller stride
gives more context per scored token. The first token of the file has no context and is
not scored.

``--per-token PATH`` (``-``: stdout) also writes each scored token's loss, one
JSON object a line, in token order::

    {"index": 1, "id": 504, "text": " capital", "loss": 3.2187}

``--cache POLICY`` (``posenc.models.cache_policy``: window:W, sink:S,window:W, shift:KEEP[,ctx:N], rescale)
scores the file as one stream instead: every token once, through a KV cache that moves as the policy says,
``--stride`` tokens per forward (default 1: each token sees exactly what the policy keeps; more is faster, and
a token then sees up to stride − 1 more). Loss by position under a policy is the per-token output.

``index`` is the token's position in the tokenized file (0 is the unscored
first token), ``id`` its vocabulary id, ``text`` the token decoded alone
(special tokens kept; a piece of a multi-byte character decodes to U+FFFD),
``loss`` its negative log-likelihood in nats. Their mean is the printed loss.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from posenc.cli_options import command_help, json_to_stdout, write_json
from posenc.commands.generate import add_cache_flag, add_model_flags, cache_policy_arg, load_model, position_text


def window_plan(num_tokens: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(start, end, scored) per window: tokens [start, end) are fed, the last ``scored`` are scored."""
    plan, scored_to, start = [], 1, 0  # token 0 has no context
    while scored_to < num_tokens:
        first = min(start, scored_to - 1)  # a window holds at least one token before those it scores
        end = min(first + window, num_tokens)
        plan.append((first, end, end - scored_to))
        scored_to = end
        start += stride
    return plan


def score(model: Any, ids: Any, plan: list[tuple[int, int, int]], *, quiet: bool = False,
          per_token: list[float] | None = None) -> tuple[float, int]:
    """(summed negative log-likelihood in nats, tokens scored) over the windows of ``plan``.

    With ``per_token`` (a list), each scored token's loss is appended to it in token order
    (``plan`` scores tokens 1, 2, … once each); the returned sum is the sum of those values.
    """
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    total, count = 0.0, 0
    rows = logit_rows(model.config.vocab_size)
    with torch.inference_mode():
        for start, end, scored in tqdm(plan, desc="windows", unit="window", disable=quiet):
            window = ids[None, start:end]  # (1, T)
            h = model.hidden(window)[0, -scored - 1:-1]  # (scored, D): the positions that predict scored tokens
            targets = window[0, -scored:]
            # the logits `rows` positions at a time (each chunk routed as the whole window): a window's logits at
            # once took 1.6 GB for SmolLM2 at 8,192 tokens, 8.6 GB for Gemma 3, twice over with the softmax
            losses = torch.cat([F.cross_entropy(model.logits(h[a : a + rows], pass_rows=end - start).float(),
                                                targets[a : a + rows], reduction="none").double()
                                for a in range(0, scored, rows)])  # (scored,)
            total += float(losses.sum())
            if not math.isfinite(total):  # a NaN loss is not a perplexity: say so instead of printing nan
                raise FloatingPointError(f"the model's loss is NaN or ±inf in the window of tokens {start}–{end}; "
                                         "its weights or activations overflow (try --dtype float32)")
            count += scored
            if per_token is not None:
                per_token.extend(losses.tolist())
    return total, count


#: Bytes of float32 logits a scoring pass holds at a time (``logit_rows``).
LOGIT_BYTES = 256 << 20


def logit_rows(vocab_size: int) -> int:
    """Positions whose logits are computed at once in a scoring pass: :data:`LOGIT_BYTES` of float32 (1,365 for
    SmolLM2's 49,152 tokens, 256 for Gemma 3's 262,144)."""
    return max(1, LOGIT_BYTES // (4 * vocab_size))


def score_stream(model: Any, ids: Any, policy: Any, *, step: int = 1, quiet: bool = False,
                 per_token: list[float] | None = None) -> tuple[float, int]:
    """(summed negative log-likelihood in nats, tokens scored): the whole of ``ids`` as one stream through a
    cache under ``policy`` (``Decoder.new_cache``), ``step`` tokens per forward; tokens 1 … N − 1 scored once each.
    """
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    total, count = 0.0, 0
    cache = model.new_cache(policy)
    try:
        with torch.inference_mode():
            for start in tqdm(range(0, len(ids) - 1, step), desc="stream", unit="step", disable=quiet):
                end = min(start + step, len(ids) - 1)
                logits = model.logits(model.hidden(ids[None, start:end], cache=cache)).float()  # (1, n, V)
                losses = F.cross_entropy(logits[0], ids[start + 1:end + 1], reduction="none").double()
                total += float(losses.sum())
                if not math.isfinite(total):
                    raise FloatingPointError(f"the model's loss is NaN or ±inf at tokens {start + 1}–{end}; its "
                                             "weights or activations overflow (try --dtype float32)")
                count += end - start
                if per_token is not None:
                    per_token.extend(losses.tolist())
    finally:
        restore = getattr(cache, "restore", None)
        if restore is not None:
            restore()
    return total, count


def per_token_rows(tokenizer: Any, ids: list[int], losses: list[float]) -> list[dict[str, Any]]:
    """One row per scored token (tokens 1 … len(ids) − 1): index, id, text, loss in nats."""
    if len(losses) != len(ids) - 1:
        raise AssertionError(f"{len(losses)} losses for {len(ids) - 1} scored tokens")
    return [{"index": i, "id": ids[i], "text": tokenizer.decode([ids[i]], skip_special_tokens=False), "loss": loss}
            for i, loss in enumerate(losses, start=1)]


def write_per_token(target: str, rows: list[dict[str, Any]]) -> None:
    """JSON lines to ``target`` ('-': stdout; a file is written atomically)."""
    import json

    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from posenc.checkpoint import atomic_write_text

    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def run(args: argparse.Namespace) -> int:
    import torch

    from posenc.validation import check_output, regular_file

    if args.per_token == "-" and json_to_stdout(args):
        raise ValueError("--per-token - and --json - both ask for stdout; send one of them to a file")
    if args.per_token not in (None, "-") and args.json not in (None, "-") and \
            Path(args.per_token).resolve() == Path(args.json).resolve():
        raise ValueError(f"--per-token and --json both name {args.json}; give two files")
    check_output(args.json, "--json")  # before the model loads and the text is scored
    check_output(args.per_token, "--per-token")
    if args.stride is not None and args.window is not None and args.stride > args.window:
        raise ValueError(f"--stride {args.stride} is larger than --window {args.window}: tokens between windows "
                         "would not be scored; give --stride <= --window")
    path = regular_file(args.file, "text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err})") from None
    policy = cache_policy_arg(args)
    if policy.kind != "full" and args.window is not None:
        raise ValueError(f"--window is the windowed recipe; --cache {policy} streams the whole file through the "
                         "cache (--stride: tokens per forward, default 1)")
    pm = load_model(args, command="perplexity")
    if policy.kind != "full":
        return run_stream(args, pm, path, text, policy)
    window = args.window if args.window is not None else min(1024, pm.config.max_position_embeddings)
    stride = args.stride if args.stride is not None else window // 2
    if window < 2:
        raise ValueError(f"--window must be >= 2, got {window}")
    if not 1 <= stride <= window:
        raise ValueError(f"--stride must be in [1, --window={window}], got {stride}")
    ids = pm.tokenizer.encode(text)
    if args.max_tokens is not None:
        ids = ids[: args.max_tokens]
    if len(ids) < 2:
        raise ValueError(f"{path}: {len(ids)} token(s); perplexity needs at least 2")
    plan = window_plan(len(ids), window, stride)
    from posenc.validation import check_memory

    widest = max(end - first for first, end, _ in plan)
    chunk = min(widest, logit_rows(pm.config.vocab_size))
    check_memory(8.0 * chunk * pm.config.vocab_size + 4.0 * widest * pm.config.dim,
                 f"the logits of {chunk:,} positions at a time (× {pm.config.vocab_size:,} vocabulary, float32, "
                 f"twice) and a {widest:,}-token window's hidden states", fix="lower --window")
    start = time.perf_counter()
    losses: list[float] | None = [] if args.per_token is not None else None
    nll, count = score(pm.model, torch.tensor(ids, device=args.device), plan, quiet=args.quiet, per_token=losses)
    seconds = time.perf_counter() - start
    if losses is not None:
        write_per_token(args.per_token, per_token_rows(pm.tokenizer, ids, losses))
    result = {
        "model": args.model, "file": str(path), "tokens": count, "perplexity": math.exp(nll / count),
        "nll_per_token": nll / count, "bits_per_token": nll / count / math.log(2), "window": window,
        "stride": stride, "windows": len(plan), "seconds": seconds, "tokens_per_s": sum(e - s for s, e, _ in plan) / seconds,
        "dtype": args.dtype, "device": args.device, "threads": torch.get_num_threads(),
        "position": position_text(pm.config),
    }
    if not json_to_stdout(args):  # with --per-token - on stdout, the summary goes to stderr
        print(f"perplexity {result['perplexity']:.3f} over {count:,} tokens "
              f"(loss {result['nll_per_token']:.4f} nats/token; window {window}, stride {stride}, "
              f"{len(plan)} windows, {seconds:.1f} s)", file=sys.stderr if args.per_token == "-" else sys.stdout)
    write_json(args, result)
    return 0


def run_stream(args: argparse.Namespace, pm: Any, path: Path, text: str, policy: Any) -> int:
    """``--cache POLICY``: the file as one stream through the moving cache, ``--stride`` tokens per forward."""
    import torch

    step = args.stride if args.stride is not None else 1
    ids = pm.tokenizer.encode(text)
    if args.max_tokens is not None:
        ids = ids[: args.max_tokens]
    if len(ids) < 2:
        raise ValueError(f"{path}: {len(ids)} token(s); perplexity needs at least 2")
    start = time.perf_counter()
    losses: list[float] | None = [] if args.per_token is not None else None
    nll, count = score_stream(pm.model, torch.tensor(ids, device=args.device), policy, step=step, quiet=args.quiet,
                              per_token=losses)
    seconds = time.perf_counter() - start
    if losses is not None:
        write_per_token(args.per_token, per_token_rows(pm.tokenizer, ids, losses))
    result = {
        "model": args.model, "file": str(path), "tokens": count, "perplexity": math.exp(nll / count),
        "nll_per_token": nll / count, "bits_per_token": nll / count / math.log(2), "cache": str(policy),
        "stride": step, "seconds": seconds, "tokens_per_s": count / seconds, "dtype": args.dtype,
        "device": args.device, "threads": torch.get_num_threads(), "position": position_text(pm.config),
    }
    if not json_to_stdout(args):
        print(f"perplexity {result['perplexity']:.3f} over {count:,} tokens (loss {result['nll_per_token']:.4f} "
              f"nats/token; cache {policy}, {step} token{'s' if step != 1 else ''} per step, {seconds:.1f} s)",
              file=sys.stderr if args.per_token == "-" else sys.stdout)
    write_json(args, result)
    return 0


def register(sub: Any) -> None:
    from posenc.families.hf_config import MAX_CONTEXT
    from posenc.validation import int_at_least

    p = sub.add_parser("perplexity", help="per-token loss of a pretrained model over a text file, in windows",
                       description="Score every token of a UTF-8 text file with a pretrained Llama-family model "
                                   "(HF folder or .gguf) in windows of --window tokens every --stride tokens; "
                                   "print the perplexity and the number of tokens scored; --per-token writes "
                                   "each scored token's loss.",
                       **command_help(examples=("posenc perplexity smollm2 book.txt",
                                                "posenc perplexity model.gguf book.txt --window 2048 --stride 1024 "
                                                "--max-tokens 20000",
                                                "posenc perplexity smollm2 book.txt --per-token losses.jsonl --json -")))
    add_model_flags(p)
    p.add_argument("file", metavar="FILE", help="a UTF-8 text file")
    p.add_argument("--window", type=int_at_least(2, MAX_CONTEXT), metavar="T",
                   help="tokens per forward pass, >= 2 (default min(1024, the model's trained context))")
    p.add_argument("--stride", type=int_at_least(1, MAX_CONTEXT), metavar="S",
                   help="tokens between window starts, 1 to --window (default window / 2)")
    p.add_argument("--max-tokens", type=int_at_least(2), metavar="N",
                   help="score only the first N tokens of the file (N >= 2)")
    add_cache_flag(p)
    p.add_argument("--per-token", metavar="PATH",
                   help="also write each scored token's loss as JSON lines to PATH ('-': stdout, the summary then "
                        "goes to stderr): {\"index\", \"id\", \"text\", \"loss\"} per token, loss in nats; "
                        "their mean is the printed loss")
    p.set_defaults(func=run)
