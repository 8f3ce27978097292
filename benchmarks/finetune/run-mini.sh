#!/bin/sh
# Issue 29, the mini-scale replication (posenc.finetune.grid's default ReplicationConfig), in resumable stages.
# Pretraining takes ~80 min on 2 quiet threads (1.2-1.5 s per step of 16 x 256 bytes); the committed model in
# benchmarks/finetune/mini/pretrain spares it (copied into OUT when OUT has none). Then LongRoPE's search for
# s = 4 and 8, then the 30 fine-tuning cells in two processes of one thread each that take the cells as a queue
# (--shard any: an s = 8 cell costs 2-3x an s = 4 one, so fixed halves ended hours apart; a cell is saved when it
# finishes, a stopped cell resumes from its last 50-step checkpoint), then the report. Rerun to continue.
# Then the YaRN paper's "train short" question in OUT-short: scale s = 8 fine-tuned on 4·L0 windows (PI, NTK,
# YaRN, LongRoPE; 3 seeds; the same pretrained model and s = 8 search), read on [4·L0, 8·L0) — 12 cells of the
# s = 4 cells' cost (≈ 15 min each on one thread).
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
$PY -m posenc.cli finetune grid --out "$OUT" --stage cells --shard any --threads 1 --quiet &
$PY -m posenc.cli finetune grid --out "$OUT" --stage cells --shard any --threads 1 --quiet &
wait
log "report"
$PY -m posenc.cli finetune grid --out "$OUT" --stage report --quiet || exit 1
SHORT="$OUT-short"
set -- --set 'factors=[8]' --set 'train_factor=4' --set 'methods=["rope-linear","rope-ntk","rope-yarn","rope-longrope"]'
mkdir -p "$SHORT"
for part in pretrain longrope-x8; do [ -e "$SHORT/$part" ] || cp -r "$OUT/$part" "$SHORT/"; done
log "train-short cells"
$PY -m posenc.cli finetune grid --out "$SHORT" "$@" --stage cells --shard any --threads 1 --quiet &
$PY -m posenc.cli finetune grid --out "$SHORT" "$@" --stage cells --shard any --threads 1 --quiet &
wait
log "train-short report"
$PY -m posenc.cli finetune grid --out "$SHORT" "$@" --stage report --quiet || exit 1
log "done"
