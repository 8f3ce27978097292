#!/bin/sh
# Issue 26, Gemma 3 270M (L0 = 32,768): single-key passkey past L0 (default 1.5·L0 = 49,152 tokens), factor 2 on
# the global layers, grown in rounds of 5 trials so every method has the same (paired) trials whenever the run
# is stopped. bfloat16 weights and activations (dequantised): on a CPU with bf16 matrix units (AMX) a 64k pass
# is ≈ 2.3× faster than float32 as stored, at +0.0007 nats mean per token (benchmarks/extend/README.md, "Gemma 3").
# Every trial is saved as it finishes; rerun to continue. Two processes need one OUT each.
#   OUT=/tmp/g3-pk METHODS=rope,rope-yarn,rope-ntk sh benchmarks/extend/run-gemma3-passkey.sh
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/models/gemma3-270m.gguf}
OUT=${OUT:-benchmarks/extend/gemma3/x2-bf16}
PY=${PY:-.venv/bin/python}
METHODS=${METHODS:-rope,rope-yarn,rope-ntk}
LENGTHS=${LENGTHS:-49152}
for n in ${ROUNDS:-5 10 15 20}; do
    echo "== round of $n trials, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n 10 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 0 --threads 1 --out "$OUT" \
        --dtype bfloat16 --weights dequantised --methods "$METHODS" --tasks passkey --lengths "$LENGTHS" \
        --passkey-trials "$n" --depths "${DEPTHS:-grid}" --quiet "$@" || exit 1
done
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
