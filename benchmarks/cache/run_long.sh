#!/bin/sh
# Streams at least 16x the cache (issue 67): loss by position per cache policy over the licence texts.
#   SmolLM2-135M: 16,384 tokens through a 1,024-token cache (16x); Gemma 3 270M: 24,576 tokens through 768
#   (32x; its 15 sliding layers keep their 512-token window) and a 1,360-token shift (18x).
#   smollm2-bible: SmolLM2, 65,536 tokens of the World English Bible (Genesis to Numbers, Debian's SWORD
#   module: scripts/ensure-sword.sh) through a 1,024-token cache (64x).
# One process per (model, policy), fed 32 tokens per forward, weights dequantised to float32, 1 thread.
# Each shard writes its per-token losses and is skipped when its JSON summary exists, so an interrupted
# run resumes at the shard it was in. `full` is the reference within the trained context: windows of
# 8,192 tokens scored whole (a fresh window every 8,192 tokens).
# Run from the repository root: sh benchmarks/cache/run_long.sh [smollm2|gemma3 ...]; then
#   python benchmarks/cache/report_long.py
set -e
OUT=${OUT:-/tmp/posenc-cache/long}
mkdir -p "$OUT"
POSENC=${POSENC:-.venv/bin/posenc}
[ -f "$OUT/licenses.txt" ] || (cd /usr/share/common-licenses && cat GPL-3 GFDL-1.3 Apache-2.0 LGPL-2.1 MPL-1.1 \
    Artistic GPL-2 > "$OUT/licenses.txt")
shard() {  # model tokens policy [text]
  F="$OUT/$1-$(echo "$3" | tr ':,' '-_')"
  TEXT=${4:-licenses}
  [ -f "$F.json" ] && { echo "$1 $3: done before ($F.json)"; return; }
  if [ "$3" = full ]; then EXTRA="--window 8192 --stride 8192"; else EXTRA="--cache $3 --stride 32"; fi
  echo "$1 $3: start $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "$1 $3 %e s wall, %M KiB peak RSS" "$POSENC" perplexity "${1%-bible}" "$OUT/$TEXT.txt" $EXTRA \
    --max-tokens "$2" --threads 1 --weights dequantised --quiet --per-token "$F.jsonl.part" --json "$F.json.part"
  mv "$F.jsonl.part" "$F.jsonl" && mv "$F.json.part" "$F.json"
  echo "$1 $3: end $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for MODEL in ${*:-smollm2 gemma3}; do
  case $MODEL in
    smollm2) for P in window:1024 sink:4,window:1020 sink:1,window:1023 sink:16,window:1008 shift:4,ctx:1024 full; do
               shard smollm2 16384 "$P"; done ;;
    gemma3) for P in window:768 sink:4,window:764 shift:4,ctx:1360 full; do shard gemma3 24576 "$P"; done ;;
    smollm2-bible)
      [ -f "$OUT/bible.txt" ] || "${PYTHON:-.venv/bin/python}" -c "from posenc.extend.texts import bible_text; \
open('$OUT/bible.txt', 'w', encoding='utf-8').write(bible_text())"
      for P in window:1024 sink:4,window:1020 shift:4,ctx:1024 full; do shard smollm2-bible 65536 "$P" bible; done ;;
    *) echo "unknown model $MODEL (smollm2, gemma3, smollm2-bible)"; exit 2 ;;
  esac
done
