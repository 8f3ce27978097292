#!/bin/sh
# Issue 29, the mini-scale replication (posenc.finetune.grid's default ReplicationConfig), in resumable stages.
# Pretraining takes ~80 min on 2 quiet threads (1.2-1.5 s per step of 16 x 256 bytes); the committed model in
# benchmarks/finetune/mini/pretrain spares it (copied into OUT when OUT has none). Then LongRoPE's search for
# s = 4 and 8, then the 30 fine-tuning cells in two shards of one thread each (a cell is saved when it finishes;
# a stopped cell resumes from its last 50-step checkpoint), then the report. Rerun to continue.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/replication}
PY=${PY:-.venv/bin/python}
log() { echo "== $1, $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
if [ ! -f "$OUT/pretrain/result.json" ] && [ -f benchmarks/finetune/mini/pretrain/result.json ]; then
    mkdir -p "$OUT" && cp -r benchmarks/finetune/mini/pretrain "$OUT/" && log "pretrained model copied from the records"
fi
log "pretrain"
$PY -m posenc.cli finetune grid --out "$OUT" --stage pretrain --threads 2 --quiet || exit 1
log "search"
$PY -m posenc.cli finetune grid --out "$OUT" --stage search --threads 2 --quiet || exit 1
log "cells"
$PY -m posenc.cli finetune grid --out "$OUT" --stage cells --shard 0/2 --threads 1 --quiet &
$PY -m posenc.cli finetune grid --out "$OUT" --stage cells --shard 1/2 --threads 1 --quiet &
wait
log "report"
$PY -m posenc.cli finetune grid --out "$OUT" --stage report --quiet || exit 1
log "done"
