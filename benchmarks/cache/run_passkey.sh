#!/bin/sh
# Passkey retrieval through a moving cache, SmolLM2-135M, a 512-token cache, 2,048-token prompts, 10 trials per
# placement (needle evicted / held) and policy (full, window:512, sink:4,window:508, shift:4,ctx:512).
# Run from the repository root: sh benchmarks/cache/run_passkey.sh (about 15-20 min on the shared 2-core machine).
set -e
OUT=${OUT:-/tmp/posenc-cache}
mkdir -p "$OUT"
: > "$OUT/passkey-2048.jsonl"
uptime
/usr/bin/time -f "passkey: %e s wall, peak RSS %M KiB" .venv/bin/python benchmarks/cache/passkey.py --length 2048 \
  --cache 512 --trials 10 --threads 1 --out "$OUT/passkey-2048.jsonl"
uptime
cp "$OUT/passkey-2048.jsonl" benchmarks/cache/passkey-2048.jsonl
# passkey.txt holds every model's record (Gemma 3's: run_passkey_gemma3.sh)
.venv/bin/python benchmarks/cache/passkey.py --report benchmarks/cache/passkey-2048.jsonl \
  $(ls benchmarks/cache/passkey-gemma3-4096.jsonl 2>/dev/null) > benchmarks/cache/passkey.txt
