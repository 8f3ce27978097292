#!/bin/sh
# The recorded comparison (see README.md). Run from the repository root:
#   sh benchmarks/translation/run.sh [OUT_DIR]
# Trains 5 models one after the other on one thread each (same split, tokenizer, budget),
# scores each on the first 400 verses of the test / long / x3 sets with greedy decoding, and
# writes results.md, results.json and curves.png into OUT_DIR. Rerunning continues where it stopped.
set -eu
OUT=${1:-runs/translation-compare}
sh scripts/ensure-sword.sh
OMP_NUM_THREADS=1 posenc translate --threads 1 compare \
    --data "$OUT/data" --vocab 4000 --out "$OUT" \
    --model torch,posenc --position sinusoidal,rope,alibi,learned \
    --dim 128 --heads 4 --layers 2 --dropout 0.0 --steps 250 --warmup 25 --lr 2e-3 \
    --batch-tokens 2000 --eval-every 50 --eval-sentences 0 --beam 1 --limit 400
