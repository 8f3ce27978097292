#!/bin/sh
# The same stream through Gemma 3 270M (Q4_K_M GGUF): 15 sliding layers (window 512) keep their window, the 3
# global layers get the policy; a 768-token cache (a window policy needs 683 to keep a 512 window: it may bring
# W/4 tokens at once); the shift needs ctx:1360 (it drops half of what follows KEEP: 1,355 is the least).
# Run from the repository root after run.sh (it reuses $OUT/licenses.txt); then python benchmarks/cache/report.py.
set -e
OUT=${OUT:-/tmp/posenc-cache}
N=4096
for P in full window:768 sink:4,window:764 shift:4,ctx:1360; do
  F=gemma3-$(echo "$P" | tr ':,' '-_')
  if [ "$P" = full ]; then EXTRA="--window $N --stride $N"; else EXTRA="--cache $P --stride 16"; fi
  /usr/bin/time -f "gemma3 $P %e s" posenc perplexity gemma3 "$OUT/licenses.txt" $EXTRA --max-tokens $N \
    --threads 1 --weights dequantised --quiet --per-token "$OUT/$F.jsonl" --json "$OUT/$F.json"
done
uptime
