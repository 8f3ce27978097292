#!/bin/sh
# Records what README.md's examples print (the quick tour of each command), for README.md's generated blocks.
#   sh benchmarks/cli/record.sh            (from the repository root, after `make install`)
# Each file holds one command's output as printed (stdout, then stderr where the command reports there), with this
# machine's paths shortened to file names; machine.txt says where and when it ran. Cheap: about a minute or two.
set -eu
here=$(dirname "$0")
bin=${POSENC:-.venv/bin/posenc}
py=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export POSENC_MODELS_DIR=${POSENC_MODELS_DIR:-.pytest_cache/d/gemma3-270m}
mkdir -p "$POSENC_MODELS_DIR"
gpl=/usr/share/common-licenses/GPL-3
short() { sed -e "s|$PWD/||g" -e "s|/[^ ]*/site-packages/[^ ]*/\([^/ ]*\.gguf\)|…/\1|g" -e "s|$POSENC_MODELS_DIR/||g"; }
{
    echo "recorded $(date -u +%Y-%m-%d) with $(nproc) CPU(s) available: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    $bin --version | head -1
} > "$here/machine.txt"
$bin --version | sed 's/  *$//' > "$here/version.txt"
$bin models | short | sed 's/  *$//' > "$here/models.txt"
$bin schemes > "$here/schemes.txt"
$bin lab --out - --quiet > "$here/lab.txt" 2>&1
for model in smollm2 gemma3; do
    $bin generate $model --prompt "The capital of France is" --max-new-tokens 16 --threads 1 2>&1 \
        | short > "$here/generate-$model.txt"
    $bin perplexity $model $gpl --window 1024 --stride 512 --max-tokens 2048 --threads 1 --quiet 2>&1 \
        | short > "$here/perplexity-$model.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
