#!/bin/sh
# Passkey retrieval through a moving cache, Gemma 3 270M: 4,096-token prompts through a 768-token cache (its 15
# sliding layers keep their 512-token window; the 3 global layers get the policy) and a 1,360-token shift
# (the least that keeps the window: 1,355), 8 trials per placement (needle evicted / held) and policy.
# Resumable: a rerun skips the trials already in $OUT/passkey-gemma3-4096.jsonl.
# Run from the repository root: sh benchmarks/cache/run_passkey_gemma3.sh (about an hour on the shared 2-core machine).
set -e
OUT=${OUT:-/tmp/posenc-cache}
mkdir -p "$OUT"
uptime
/usr/bin/time -f "passkey gemma3: %e s wall, peak RSS %M KiB" .venv/bin/python benchmarks/cache/passkey.py \
  --model gemma3 --length 4096 --cache 768 --shift-ctx 1360 --trials 8 --threads 1 --out "$OUT/passkey-gemma3-4096.jsonl"
uptime
cp "$OUT/passkey-gemma3-4096.jsonl" benchmarks/cache/passkey-gemma3-4096.jsonl
.venv/bin/python benchmarks/cache/passkey.py --report benchmarks/cache/passkey-2048.jsonl \
  benchmarks/cache/passkey-gemma3-4096.jsonl > benchmarks/cache/passkey.txt
