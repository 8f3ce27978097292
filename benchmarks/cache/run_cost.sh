#!/bin/sh
# Cost per token and memory against the stream's length, SmolLM2-135M through a 512-token cache (and full):
# one process per (policy, length), one after another, 1 thread; /usr/bin/time adds wall time and the whole
# process's peak RSS (KiB) to the log. Two passes (the machine is shared: the second shows the timings' spread).
# Run from the repository root after run.sh (it reuses $OUT/licenses.txt): sh benchmarks/cache/run_cost.sh
set -e
OUT=${OUT:-/tmp/posenc-cache}
mkdir -p "$OUT"
[ -f "$OUT/licenses.txt" ] || (cd /usr/share/common-licenses && cat GPL-3 GFDL-1.3 Apache-2.0 LGPL-2.1 MPL-1.1 Artistic GPL-2 > "$OUT/licenses.txt")
for PASS in ${PASSES:-1 2}; do
  : > "$OUT/cost-$PASS.jsonl"; : > "$OUT/cost-$PASS.stderr"
  for N in 1024 4096 16384; do
    for P in full window:512 sink:4,window:508 shift:4,ctx:512; do
      uptime
      /usr/bin/time -f "pass $PASS $P $N: %e s wall, peak RSS %M KiB" .venv/bin/python benchmarks/cache/cost.py \
        --policy "$P" --length $N --threads 1 --text "$OUT/licenses.txt" 2>>"$OUT/cost-$PASS.stderr" >> "$OUT/cost-$PASS.jsonl"
      tail -n 1 "$OUT/cost-$PASS.stderr"
    done
  done
  cp "$OUT/cost-$PASS.jsonl" benchmarks/cache/cost-$PASS.jsonl
done
uptime
.venv/bin/python benchmarks/cache/cost.py --report benchmarks/cache/cost-*.jsonl --plot docs/img/cache-cost.png \
  > benchmarks/cache/cost.txt
