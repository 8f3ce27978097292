"""The lab's measures at scale (L = 65,536, d = 1,024 by default): the code before this change against now.

    PYTHONPATH=src nice -n 5 python benchmarks/explore/measures_at_scale.py --out benchmarks/explore/scale.json

"Before" is posenc.lab.measures at --before (a git commit), loaded from git; "now" is the working tree's.
Each row is saved to --out as soon as it is measured (a rerun skips rows already there), with the wall time,
the machine load (1-minute load average at the start and end of the row) and the torch thread count.
The numbers are compared too: both versions' distance-profile means, and the relative shift residual of a
random table (well conditioned, so both methods must agree to rounding).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from posenc.lab import measures as now
from posenc.positions.absolute import sinusoid_table


def load_before(commit: str):
    source = subprocess.run(["git", "show", f"{commit}:src/posenc/lab/measures.py"], capture_output=True, text=True,
                            check=True).stdout
    path = Path(tempfile.mkdtemp()) / "measures_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("measures_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn):
    load = os.getloadavg()[0]
    start = time.perf_counter()
    value = fn()
    return value, {"seconds": round(time.perf_counter() - start, 3), "load_start": round(load, 2),
                   "load_end": round(os.getloadavg()[0], 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--length", type=int, default=65536)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--before", default="68c6d2c", help="git commit of the measures to compare with")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--offsets", default="1,2,5,17,50")
    p.add_argument("--before-offsets", default="1", help="offsets timed with the old code (it is slow)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    done = json.loads(args.out.read_text()) if args.out.exists() else {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "length": args.length, "dim": args.dim,
        "threads": args.threads, "before": args.before, "rows": {}}
    rows = done["rows"]

    def save() -> None:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=1))
        tmp.replace(args.out)

    before = load_before(args.before)
    table = sinusoid_table(torch.arange(args.length), args.dim)  # (L, d) float64
    gen = torch.Generator().manual_seed(0)
    random = torch.randn(args.length, args.dim, generator=gen, dtype=torch.float64) / math.sqrt(args.dim)
    offsets = [int(k) for k in args.offsets.split(",")]
    before_offsets = [int(k) for k in args.before_offsets.split(",")]
    jobs = {
        "now.norm_summary": lambda: now.norm_summary(table)["norm_spread"],
        "now.table_distance_profile": lambda: now.table_distance_profile(table),
        "before.table_distance_profile": lambda: before.table_distance_profile(table),
        "now.shift_residual.sinusoid": lambda: now.shift_residual(table, offsets),
        "now.shift_residual.random": lambda: now.shift_residual(random, offsets),
        "before.shift_residual.sinusoid": lambda: before.shift_residual(table, before_offsets),
        "before.shift_residual.random": lambda: before.shift_residual(random, before_offsets),
    }
    profiles = {}
    for name, job in jobs.items():
        if name in rows and "profile" not in name:
            print(f"{name}: done before, {rows[name]['seconds']} s", flush=True)
            continue
        value, row = timed(job)
        if isinstance(value, dict) and "mean" in value:
            profiles[name] = torch.tensor(value["mean"], dtype=torch.float64)
            row.update(method=value["method"], max_spread=value["max_spread"])
        elif isinstance(value, dict):
            row.update({k: value[k] for k in ("offsets", "method", "max_residual", "relative_residual")})
            if "residual_error_bound" in value:
                row["residual_error_bound"] = value["residual_error_bound"]
        else:
            row["value"] = value
        rows[name] = row
        save()
        print(f"{name}: {row['seconds']} s (load {row['load_start']} → {row['load_end']})", flush=True)
    if len(profiles) == 2:
        gap = float((profiles["now.table_distance_profile"] - profiles["before.table_distance_profile"]).abs().max())
        done["profile_mean_max_difference"] = gap
    a, b = rows.get("now.shift_residual.random"), rows.get("before.shift_residual.random")
    if a and b:
        done["random_relative_residual_k1"] = {"now": a["relative_residual"][0], "before": b["relative_residual"][0]}
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
