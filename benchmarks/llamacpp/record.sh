#!/bin/sh
# The recorded run of bench.py (README.md here): speed, generate and load in 5 rounds, the 2,048-token prefill
# and the 8,192-token scoring pass in 2, both models, 1 and 2 threads. BIN: llama.cpp's bin folder (setup.sh).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-$HERE/../../.venv/bin/python}
BIN=${1:?usage: record.sh BIN   (sh benchmarks/llamacpp/setup.sh prints BIN)}
"$PY" "$HERE/bench.py" --bin "$BIN" --stream --rounds 5 --threads 1 2 --tests speed generate load --out "$HERE"
"$PY" "$HERE/bench.py" --bin "$BIN" --rounds 2 --threads 1 2 --tests prefill2048 score8192 --out "$HERE"
