#!/bin/sh
# Records the engines posenc rope --engines compares with (install outcome and seconds), and the comparison on
# the two real models and on tiny configs, for docs/rope.md.   sh benchmarks/rope/engines.sh   (repo root)
set -eu
here=$(dirname "$0")
bin=${POSENC:-.venv/bin/posenc}
py=${PYTHON:-.venv/bin/python}
rm -rf .engines
$bin engines install all --json "$here/engines-install.json" > "$here/engines-install.txt" 2>/dev/null || true
$bin engines > "$here/engines-list.txt"
for name in smollm2 gemma3; do
    $bin rope $name --no-hf --lint --engines all > "$here/engines-$name.txt" 2>/dev/null || echo "exit $?" >> "$here/engines-$name.txt"
done
$py "$here/engines_tiny.py" > "$here/engines-tiny.txt"
