"""Passkey retrieval through a moving KV cache: does any policy keep a needle that left the cache?

The prompts are posenc.extend.passkey's (a 5-digit key in repeated filler, the question at the end), one stream
of LENGTH tokens read through each policy's cache (in the policy's own pieces: Decoder.hidden), then 8 tokens
answered greedily from the same cache. Two placements of the needle:

  evicted  the needle's depth in [0, 0.55] of the filler: it lies more than the cache before the question, so a
           window or a shift has dropped it by the time the question is read;
  held     depth in [0.94, 1]: it sits in the last ~200 tokens, which every policy still holds.

Every policy answers the very same prompts (a seeded key and depth per trial). For each trial the record says
whether all of the needle's tokens were still in the cache when the question's last token was read
(StreamCache.tokens: the stream indices a full-attention layer holds), so "evicted" is checked, not assumed.
Accuracy with a 95 % Wilson interval (posenc.extend.stats.interval); evicted against held per policy by Fisher's
exact test (unpaired: different prompts).

    .venv/bin/python benchmarks/cache/passkey.py --length 2048 --trials 10 --out /tmp/posenc-cache/passkey-2048.jsonl
    .venv/bin/python benchmarks/cache/passkey.py --report /tmp/posenc-cache/passkey-2048.jsonl [...] \
        > benchmarks/cache/passkey.txt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

PLACEMENTS = {"evicted": (0.0, 0.55), "held": (0.94, 1.0)}


def policies(cache: int, shift_ctx: int | None = None) -> list[str]:
    """The four policies compared: ``shift_ctx`` (default ``cache``) for the shift, which Gemma 3 needs larger
    (halving what follows KEEP must not cut into its sliding layers' 512-token window: ctx ≥ 1,355)."""
    return ["full", f"window:{cache}", f"sink:4,window:{cache - 4}", f"shift:4,ctx:{shift_ctx or cache}"]


def done_trials(path: Path, model: str, length: int) -> set[tuple[str, str, int]]:
    """(policy, placement, trial) already recorded in ``path`` for this model and length: a rerun skips them."""
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["policy"], r["placement"], r["trial"]) for r in rows if r["model"] == model and r["length"] == length}


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from posenc.extend.passkey import Trial, build_prompt, score
    from posenc.pretrained import load_pretrained

    pm = load_pretrained(args.model, weights="dequantised")
    model, tok = pm.model, pm.tokenizer
    rng = random.Random(args.seed)
    trials = []
    for placement, (lo, hi) in PLACEMENTS.items():
        for _ in range(args.trials):
            trials.append((placement, Trial(key=str(rng.randint(10000, 99999)), depth=rng.uniform(lo, hi),
                                            length=args.length)))
    done = done_trials(Path(args.out), args.model, args.length)
    out = open(args.out, "a")
    for policy in policies(args.cache, args.shift_ctx):
        for i, (placement, trial) in enumerate(trials):
            if (policy, placement, i) in done:
                continue
            prompt = build_prompt(tok, trial)
            start = time.perf_counter()
            cache = model.new_cache(policy)
            with torch.no_grad():
                h = model.hidden(torch.tensor([prompt.ids]), cache=cache)[:, -1]
                held = len(prompt.ids) if policy == "full" else cache.tokens.numel()
                kept = set(range(len(prompt.ids))) if policy == "full" else set(cache.tokens.tolist())
                needle_held = all(j in kept for j in range(prompt.needle_start, prompt.needle_end))
                answer = []
                for _ in range(8):
                    token = int(model.logits(h).argmax(-1))
                    answer.append(token)
                    h = model.hidden(torch.tensor([[token]]), cache=cache)[:, -1]
            text = tok.decode(answer)
            row = {"model": args.model, "cache": args.cache, "shift_ctx": args.shift_ctx or args.cache,
                   "length": args.length, "policy": policy,
                   "trial": i, "placement": placement, "key": trial.key, "depth": round(trial.depth, 4),
                   "prompt_tokens": len(prompt.ids), "needle_start": prompt.needle_start,
                   "needle_end": prompt.needle_end, "held_at_question": held, "needle_held": needle_held,
                   "answer": text, "found": score(text, trial.key), "seconds": round(time.perf_counter() - start, 2)}
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{policy:<20} {placement:<8} {i:>2} needle {prompt.needle_start}-{prompt.needle_end} of "
                  f"{len(prompt.ids)} held {needle_held!s:<5} key {trial.key} answer {text!r} {row['seconds']} s",
                  file=sys.stderr)


def report(paths: list[str]) -> None:
    from posenc.extend.stats import fisher_exact, interval

    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["cache"], r["length"]), []).append(r)
    for (model, cache, length), rs in groups.items():
        first = rs[0]["policy"]
        n = max(sum(r["policy"] == first and r["placement"] == p for r in rs) for p in PLACEMENTS)
        shift = rs[0].get("shift_ctx", cache)
        print(f"Passkey retrieval through a {cache}-token cache" + (f" ({shift} for the shift)" if shift != cache else "")
              + f", {model} (weights dequantised to float32, 1 thread):")
        print(f"streams of {length:,} tokens (posenc.extend.passkey prompts), {n} trials per placement, the same "
              "prompts for every policy;")
        print("evicted: needle at depth 0-0.55 of the filler (more than the cache before the question); "
              "held: depth 0.94-1 (in the last ~200 tokens).")
        print("needle held: trials whose needle tokens were all in the cache when the question was read.")
        print("found: the first 5-digit run of 8 greedy tokens is the key; 95 % Wilson interval; "
              "p: Fisher's exact test, evicted against held.")
        print()
        print(f"{'policy':<20} {'placement':<9} {'needle held':>11} {'found':>7} {'accuracy':>8}  {'Wilson 95 %':<13} "
              f"{'s/trial':>7}")
        for policy in dict.fromkeys(r["policy"] for r in rs):
            counts = {}
            for placement in PLACEMENTS:
                sel = [r for r in rs if r["policy"] == policy and r["placement"] == placement]
                if not sel:
                    continue
                found = sum(r["found"] for r in sel)
                iv = interval(found, len(sel))
                counts[placement] = (found, len(sel))
                secs = sum(r["seconds"] for r in sel) / len(sel)
                print(f"{policy:<20} {placement:<9} {sum(r['needle_held'] for r in sel):>5} of {len(sel):<3}"
                      f"{found:>4}/{len(sel):<3}{iv['accuracy']:>8.2f}  "
                      f"[{iv['wilson_low']:.2f}, {iv['wilson_high']:.2f}]"
                      f"{secs:>9.1f}")
            if len(counts) == 2:
                (k1, n1), (k2, n2) = counts["evicted"], counts["held"]
                print(f"{'':<20} evicted vs held: p = {fisher_exact(k1, n1, k2, n2):.2g}")
        kept_wrong = [r for r in rs if not r["needle_held"] and r["found"]]
        print()
        print(f"trials that found a needle no longer in the cache: {len(kept_wrong)} of "
              f"{sum(not r['needle_held'] for r in rs)}")
        starts = {p: [r["needle_start"] for r in rs if r["placement"] == p] for p in PLACEMENTS}
        print(f"prompt tokens {min(r['prompt_tokens'] for r in rs)}-{max(r['prompt_tokens'] for r in rs)}; "
              "needle start, " + ", ".join(f"{p} {min(v)}-{max(v)}" for p, v in starts.items() if v)
              + "; tokens held at the question "
              + ", ".join(f"{p} {min(r['held_at_question'] for r in rs if r['policy'] == p)}-"
                          f"{max(r['held_at_question'] for r in rs if r['policy'] == p)}"
                          for p in dict.fromkeys(r["policy"] for r in rs)))
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--cache", type=int, default=512, help="tokens every moving policy holds (default 512)")
    ap.add_argument("--shift-ctx", type=int, default=None,
                    help="the shift policy's context (default --cache; Gemma 3 needs 1,355 or more)")
    ap.add_argument("--length", type=int, default=2048, help="prompt length in tokens (default 2048)")
    ap.add_argument("--trials", type=int, default=10, help="trials per placement (default 10)")
    ap.add_argument("--seed", type=int, default=67)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="/tmp/posenc-cache/passkey.jsonl")
    ap.add_argument("--report", nargs="+", metavar="JSONL", help="summarise these records instead of running")
    # a rerun with the same --out skips the trials already recorded there (an interrupted run resumes)
    args = ap.parse_args()
    if args.report:
        report(args.report)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        run(args)


if __name__ == "__main__":
    main()
