#!/bin/sh
# `posenc rope DIR --engines all` on HF folders exported from the two real GGUFs (`posenc export --format hf`,
# bfloat16 safetensors + config.json): SmolLM2 as trained and with YaRN x4 (L0 2,048), Gemma 3 as trained and with
# linear x8 on its global layers (as Gemma 3 4B-27B ship). Every engine then reads an HF config, not posenc's
# translation of a GGUF. For docs/rope.md.   sh benchmarks/rope/engines_exports.sh   (repository root)
set -eu
here=$(dirname "$0")
bin=${POSENC:-.venv/bin/posenc}
work=${WORK:-/tmp/posenc-rope-exports}
mkdir -p "$work"
export_once() {  # name source [export options]
    name=$1; src=$2; shift 2
    [ -f "$work/$name/config.json" ] || $bin export "$src" "$@" --format hf --out "$work/$name" --quiet
}
export_once smollm2 smollm2 --position rope
export_once smollm2-yarn smollm2 --position rope-yarn --position-option factor=4 --position-option original_max_len=2048
export_once gemma3 gemma3 --position rope
export_once gemma3-linear gemma3 --position rope-linear --position-option factor=8 --layers global
out="$here/engines-exports.txt"
: > "$out"
for name in smollm2 smollm2-yarn gemma3 gemma3-linear; do
    echo "== $name (HF folder: $(grep -o '"rope_type": "[a-z0-9_]*"' "$work/$name/config.json" | sort -u | tr '\n' ' '))" >> "$out"
    $bin rope "$work/$name" --no-hf --lint --engines all 2>/dev/null | sed "s|$work/||g" | grep -v "^$" >> "$out" \
        || echo "exit $?" >> "$out"
done
uptime >> "$out"
