"""How long one interaction of `posenc explore` takes on the server, per scheme and size.

    PYTHONPATH=src nice -n 5 python benchmarks/explore/interactions.py --out benchmarks/explore/interactions.json

For each registered scheme and each (d, L) it times, single-threaded as the server runs (``--threads 1``):
``view`` — what the plots need (/api/view: build the scheme, table, profile, window similarity, attention
example, naive window, JSON encoding) — and ``properties`` — the property row (/api/properties, uncached).
Median of --repeats runs; each row records the 1-minute load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from posenc.explore import params, views
from posenc.explore.server import to_json
from posenc.positions import names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64x512,512x512,64x2048,512x2048", help="DxL,...")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--schemes", default=",".join(names()))
    p.add_argument("--what", default="view,properties", help="which requests to time")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "threads": 1, "rows": []}
    for size in args.sizes.split(","):
        dim, length = (int(x) for x in size.split("x"))
        for name in args.schemes.split(","):
            req = params.parse_view({"scheme": name, "dim": str(dim), "length": str(length)})
            row = {"scheme": name, "dim": dim, "length": length, "load": round(os.getloadavg()[0], 2)}
            for what in args.what.split(","):
                times = []
                for _ in range(args.repeats):
                    views._cache.clear()
                    start = time.perf_counter()
                    try:
                        body = to_json(views.view(req) if what == "view" else views.properties(req))
                    except params.ParamError as err:
                        row[what] = f"refused: {err.en[:60]}"
                        break
                    times.append(time.perf_counter() - start)
                else:
                    row[what + "_ms"] = round(1000 * statistics.median(times), 1)
                    row[what + "_kb"] = round(len(body) / 1024, 1)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
