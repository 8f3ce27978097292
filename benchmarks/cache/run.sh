#!/bin/sh
# Loss by position over one long stream through a small cache, SmolLM2-135M (Q4_1 GGUF), per cache policy.
# The text: seven of /usr/share/common-licenses concatenated (146 kB); the first 4,096 tokens are scored.
# --weights dequantised: the GGUF's as-stored kernel runs a long prefill and 16-token steps through different
# kernels (0.008 nats apart on the first 255 tokens, nothing moved); dequantised, the two agree to 1e-7.
# Run from the repository root: sh benchmarks/cache/run.sh; then python benchmarks/cache/report.py.
set -e
OUT=${OUT:-/tmp/posenc-cache}
mkdir -p "$OUT"
cd /usr/share/common-licenses && cat GPL-3 GFDL-1.3 Apache-2.0 LGPL-2.1 MPL-1.1 Artistic GPL-2 > "$OUT/licenses.txt" && cd - >/dev/null
N=4096
for P in full window:256 sink:4,window:252 sink:1,window:255 sink:16,window:240 shift:4,ctx:256; do
  F=$(echo "$P" | tr ':,' '-_')
  if [ "$P" = full ]; then EXTRA="--window $N --stride $N"; else EXTRA="--cache $P --stride 16"; fi
  /usr/bin/time -f "$P %e s" posenc perplexity smollm2 "$OUT/licenses.txt" $EXTRA --max-tokens $N --threads 1 --weights dequantised \
    --quiet --per-token "$OUT/$F.jsonl" --json "$OUT/$F.json"
done
uptime
