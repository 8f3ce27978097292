"""Server-side time of every `posenc explore` endpoint at the worst settings the size cap admits.

    PYTHONPATH=src nice -n 5 python benchmarks/explore/at_cap.py --out benchmarks/explore/at-cap.json

Single-threaded, as the server runs. For every registered scheme:

* ``properties`` (/api/properties, uncached): for each width d in --dims (d divisible by 4 gives the lab's
  4 heads, d ≡ 2 mod 4 one head), the largest L in 8 … MAX_LENGTH the cap admits (bisection on the server's
  own check, nothing computed), timed at that L; the worst d is the scheme's figure;
* ``view`` (/api/view): d = MAX_DIM, L = MAX_LENGTH, window = MAX_WINDOW, the largest sizes it admits;
* ``options``: the scheme's size options (table rows, MLP width, buckets) at the largest value the cap
  admits, view and property row at the default d and L;
* ``schemes`` (/api/schemes) once.

Each timing includes building the scheme and the JSON encoding, median of --repeats runs; every row records
the 1-minute load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from posenc.explore import params, views
from posenc.explore.server import schemes_payload, to_json
from posenc.positions import names


def admitted(query: dict[str, str], endpoint: str) -> bool:
    """Would the server compute this request (True) or refuse it before computing (False)?"""
    try:
        req = params.parse_view(query)
        if hasattr(views, "check_request"):  # the cost model (params.property_seconds / view_seconds)
            views.check_request(req, endpoint)
        elif endpoint == "properties":  # the cap before the cost model: params.check_work on the row only
            scheme = views.build_scheme(req)
            table = views.measures.scheme_table(scheme, views.default_positions(2))
            params.check_work(req, table_width=None if table is None else table.shape[1], heads=req.heads)
    except (params.ParamError, ValueError, TypeError):  # refused by the cap, or by the scheme itself
        return False
    return True


def largest_length(query: dict[str, str], endpoint: str) -> int | None:
    lo, hi = 8, params.MAX_LENGTH
    if not admitted({**query, "length": str(lo)}, endpoint):
        return None
    while lo < hi:  # the largest admitted L: admitted(lo), and every L above hi refused
        mid = (lo + hi + 1) // 2
        if admitted({**query, "length": str(mid)}, endpoint):
            lo = mid
        else:
            hi = mid - 1
    return lo


def timed(query: dict[str, str], endpoint: str, repeats: int) -> dict[str, Any]:
    req = params.parse_view(query)
    times = []
    for _ in range(repeats):
        views._cache.clear()
        start = time.perf_counter()
        try:
            body = to_json(views.view(req) if endpoint == "view" else views.properties(req))
        except params.ParamError as err:
            return {"refused": err.en}
        except (ValueError, TypeError) as err:
            return {"error": str(err).splitlines()[0]}
        times.append(time.perf_counter() - start)
    return {"ms": round(1000 * statistics.median(times), 1), "kb": round(len(body) / 1024, 1)}


def _seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        views._cache.clear()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def calibrate(args: argparse.Namespace) -> int:
    """The cost model's coefficients, measured on this machine (params.py quotes them rounded up)."""
    from posenc.lab import measures

    views.check_request = lambda *a, **k: None  # time the requests the model is being measured for
    out: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "threads": 1,
                           "load": [round(os.getloadavg()[0], 2)], "property_ns_per_entry": {}, "view_seconds": {}}
    n = 2048  # past the caches, as near the cap (at 1,024 the similarity fits in cache: half the cost per entry)
    views.measures.scheme_properties(views.build_scheme(params.ViewRequest(scheme="none", dim=66, length=n)),
                                     length=n)  # warm up: the first large allocations fault their pages in
    out["shift_ns_per_flop"] = 0.0
    for rows, width in ((512, 1022), (2912, 256)):  # a wide table (additive) and a tall one (rotary, d = 1,024)
        table = torch.randn(rows, width, dtype=torch.float64)
        shift = _seconds(lambda: measures.shift_residual(table, method="qr"), 3)
        out[f"shift_ns_per_flop_{rows}x{width}"] = 1e9 * shift / (30 * rows * width**2)
        out["shift_ns_per_flop"] = max(out["shift_ns_per_flop"], out[f"shift_ns_per_flop_{rows}x{width}"])
    for name in args.schemes.split(","):
        size = 512 if name == "fire" else n  # FIRE's MLP makes it 20× slower per entry (and compute-bound)
        req = params.ViewRequest(scheme=name, dim=66, length=size)  # one head: d ≡ 2 mod 4
        scheme = views.build_scheme(req)
        t = _seconds(lambda: views.measures.scheme_properties(scheme, length=size), args.repeats)
        rows = views.usable_length(scheme, size)
        width = views.measures.scheme_table(scheme, views.default_positions(2))
        t -= 0 if width is None else 1e-9 * out["shift_ns_per_flop"] * 30 * rows * width.shape[1] ** 2
        out["property_ns_per_entry"][name] = round(1e9 * t / rows**2, 1)
        big = params.ViewRequest(scheme=name, dim=params.MAX_DIM, length=params.MAX_LENGTH, window=params.MAX_WINDOW)
        out["view_seconds"][name] = round(_seconds(lambda: to_json(views.view(big)), args.repeats), 3)
        out["load"].append(round(os.getloadavg()[0], 2))
        print(name, out["property_ns_per_entry"][name], out["view_seconds"][name], flush=True)
    wide = params.ViewRequest(scheme="fire", options={"mlp_width": 128}, dim=66, length=512)
    scheme = views.build_scheme(wide)
    t = _seconds(lambda: views.measures.scheme_properties(scheme, length=512), args.repeats)
    out["fire_ns_per_width"] = round((1e9 * t / 512**2 - out["property_ns_per_entry"]["fire"]) / 96, 3)
    wide = params.ViewRequest(scheme="fire", options={"mlp_width": 256}, dim=params.MAX_DIM,
                              length=params.MAX_LENGTH, window=params.MAX_WINDOW)
    t = _seconds(lambda: to_json(views.view(wide)), args.repeats)
    out["fire_view_ns_per_width"] = round(1e9 * (t - out["view_seconds"]["fire"]) / (224 * 128 * params.MAX_LENGTH), 3)
    out["load"].append(round(os.getloadavg()[0], 2))
    print(json.dumps(out, indent=1))
    args.out.write_text(json.dumps(out, indent=1))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dims", default="6,64,66,256,1024")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--schemes", default=",".join(names()))
    p.add_argument("--what", default="schemes,properties,view,options")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the cost model's coefficients (params.PROPERTY_NS_PER_ENTRY, ...) instead")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.calibrate:
        return calibrate(args)
    what = args.what.split(",")
    result: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "threads": 1,
                              "cpus": os.cpu_count(), "rows": []}

    def record(row: dict[str, Any]) -> None:
        row["load"] = round(os.getloadavg()[0], 2)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(result, indent=1))

    if "schemes" in what:
        start = time.perf_counter()
        to_json(schemes_payload())
        record({"endpoint": "schemes", "ms": round(1000 * (time.perf_counter() - start), 1)})
    for name in args.schemes.split(","):
        if "properties" in what:
            for dim in map(int, args.dims.split(",")):
                query = {"scheme": name, "dim": str(dim)}
                length = largest_length(query, "properties")
                row = {"endpoint": "properties", "scheme": name, "dim": dim, "length": length}
                if length is not None:
                    row.update(timed({**query, "length": str(length)}, "properties", args.repeats))
                record(row)
        if "view" in what:
            query = {"scheme": name, "dim": str(params.MAX_DIM), "window": str(params.MAX_WINDOW)}
            length = largest_length(query, "view")
            row = {"endpoint": "view", "scheme": name, "dim": params.MAX_DIM, "length": length,
                   "window": params.MAX_WINDOW}
            if length is not None:
                row.update(timed({**query, "length": str(length)}, "view", args.repeats))
            record(row)
        if "options" in what:
            for option, value in getattr(params, "largest_options", lambda n, d: {})(name, 64).items():
                query = {"scheme": name, "dim": "64", f"opt.{option}": str(value)}
                if name == "t5" and option == "num_buckets":  # T5 needs max_distance past its exact range
                    query["opt.max_distance"] = str(2 * value)
                for endpoint in ("view", "properties"):
                    length = largest_length(query, endpoint)
                    row = {"endpoint": endpoint, "scheme": name, "dim": 64, "length": length, option: value}
                    if length is not None:
                        row.update(timed({**query, "length": str(length)}, endpoint, args.repeats))
                    record(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
