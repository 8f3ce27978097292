"""Cost per token and memory of a cache policy against the stream's length (one policy and length per process).

One stream of LENGTH tokens (the licence texts run.sh concatenates) goes through the policy's cache: the first
LENGTH − 32 tokens read 128 per forward (full too, so every policy runs forwards of the same size), then the last
32 one per forward — decoding steps, each timed. Printed as one JSON line: the median decode step (ms/token), the
reading time per token, the tokens the cache holds at the end, the bytes of its tensors (keys, values, raw keys,
positions), and the whole process's resident memory right after the model loaded and its peak while the stream
ran: the high-water mark is reset after loading (/proc/self/clear_refs; loading the GGUF peaks above what the
model then holds), so VmHWM, getrusage's ru_maxrss and /usr/bin/time's "peak RSS" all read the stream's peak.
One process per (policy, length): a peak is a process's.

    .venv/bin/python benchmarks/cache/cost.py --policy window:512 --length 4096 >> /tmp/posenc-cache/cost-1.jsonl
    .venv/bin/python benchmarks/cache/cost.py --report benchmarks/cache/cost-1.jsonl benchmarks/cache/cost-2.jsonl \
        --plot docs/img/cache-cost.png > benchmarks/cache/cost.txt      (sh benchmarks/cache/run_cost.sh runs it all)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

STEPS = 32
PIECE = 128


def rss_mib(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cache_bytes(cache: list) -> int:
    total = 0
    for c in cache:
        for t in (c.k, c.v, c.raw, c.positions):
            if t is not None:
                total += t.numel() * t.element_size()
    return total


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from posenc.pretrained import load_pretrained

    start = time.perf_counter()
    pm = load_pretrained(args.model, weights="dequantised")
    loaded = time.perf_counter() - start
    model = pm.model
    ids = pm.tokenizer.encode(Path(args.text).read_text())
    if len(ids) < args.length:
        raise SystemExit(f"{args.text}: {len(ids)} tokens, fewer than --length {args.length}")
    ids = torch.tensor([ids[:args.length]])
    rss_loaded = rss_mib()
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark: VmHWM from here is the stream's peak
    cache = model.new_cache(args.policy)
    read = args.length - STEPS
    steps = []
    with torch.no_grad():
        start = time.perf_counter()
        for lo in range(0, read, PIECE):
            model.hidden(ids[:, lo:min(read, lo + PIECE)], cache=cache)
        reading = time.perf_counter() - start
        for i in range(read, args.length):
            start = time.perf_counter()
            h = model.hidden(ids[:, i:i + 1], cache=cache)[:, -1]
            model.logits(h).argmax(-1)
            steps.append(time.perf_counter() - start)
    held = cache[0].stored
    print(json.dumps({
        "model": args.model, "policy": args.policy, "length": args.length, "threads": args.threads,
        "decode_ms_median": round(1000 * statistics.median(steps), 2),
        "decode_ms_min": round(1000 * min(steps), 2),
        "read_ms_per_token": round(1000 * reading / read, 3), "read_s": round(reading, 1),
        "held": held, "cache_mib": round(cache_bytes(cache) / 2**20, 1),
        "rss_loaded_mib": round(rss_loaded), "stream_peak_rss_mib": round(rss_mib("VmHWM")),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_s": round(loaded, 1), "load_average": round(__import__("os").getloadavg()[0], 2)}))


def report(paths: list[str], plot: str | None = None) -> None:
    rows = [{**json.loads(line), "pass": n} for n, p in enumerate(paths, 1)
            for line in Path(p).read_text().splitlines() if line.strip()]
    model = rows[0]["model"]
    print(f"Cost per token and memory against the stream's length, {model} (weights dequantised to float32, "
          f"1 thread), one process per row;")
    print("the stream (seven /usr/share/common-licenses texts) read 128 tokens per forward, then 32 decoding steps "
          "(one token each, timed: median and fastest);")
    print("held: tokens in a full-attention layer's cache at the end; cache: the MiB of its tensors over all layers "
          "(keys, values, raw keys, positions);")
    print("RSS (MiB, whole process): after loading, and the peak while the stream ran (getrusage ru_maxrss, "
          "its mark reset after loading);")
    print("load: 1-minute load average at the end (2 cores, shared).")
    if len(paths) > 1:
        print("pass: " + "; ".join(f"{n} {Path(p).name}" for n, p in enumerate(paths, 1))
              + " (the same runs repeated, one after another)")
    print()
    print(f"{'policy':<20}{'pass':>5}{'tokens':>7}{'decode ms/token':>17}{'(fastest)':>10}{'read ms/token':>15}"
          f"{'held':>7}"
          f"{'cache MiB':>10}{'RSS loaded':>11}{'RSS peak':>9}{'load':>6}")
    for policy in dict.fromkeys(r["policy"] for r in rows):
        for r in sorted((r for r in rows if r["policy"] == policy), key=lambda r: (r["length"], r["pass"])):
            print(f"{policy:<20}{r['pass']:>5}{r['length']:>7}{r['decode_ms_median']:>17.1f}{r['decode_ms_min']:>10.1f}"
                  f"{r['read_ms_per_token']:>15.2f}{r['held']:>7}{r['cache_mib']:>10.1f}{r['rss_loaded_mib']:>11}"
                  f"{r['peak_rss_mib']:>9}{r['load_average']:>6.2f}")
    if plot:
        plot_rows(rows, Path(plot))


def plot_rows(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.2))
    colours = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        for n in sorted({r["pass"] for r in rows}):
            rs = sorted((r for r in rows if r["policy"] == policy and r["pass"] == n), key=lambda r: r["length"])
            if not rs:
                continue
            x = [r["length"] for r in rs]
            style = {"marker": "o", "ls": "-" if n == 1 else "--", "color": colours.get(policy)}
            line, = left.plot(x, [r["decode_ms_min"] for r in rs], label=f"{policy} (pass {n})", **style)
            colours[policy] = line.get_color()
            right.plot(x, [r["peak_rss_mib"] for r in rs], **{**style, "color": colours[policy]})
    for ax, label in ((left, "decode step, fastest of 32 (ms/token)"),
                      (right, "peak RSS, whole process, while streaming (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("stream length (tokens)")
        ax.set_ylabel(label)
    left.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{rows[0]['model']}: cost per token and memory against the stream's length "
                 "(512-token cache; 1 thread, shared 2-core CPU)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--policy", default="full")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--text", default="/tmp/posenc-cache/licenses.txt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", nargs="+", metavar="JSONL", help="summarise these records instead of running")
    ap.add_argument("--plot", metavar="PNG", help="with --report: also draw decode time and peak RSS per length")
    args = ap.parse_args()
    if args.report:
        report(args.report, args.plot)
    else:
        run(args)


if __name__ == "__main__":
    main()
