#!/usr/bin/env bash
# Install posenc as a user does and run it: build the wheel, install it into a fresh venv with torch pinned
# and no extras, then, from outside the checkout (so the installed package is what runs):
#   posenc --version, posenc schemes, posenc lab (the whole lab, its report written)
# Fails on the first step that fails. .ci/run runs it before the test suite; about a minute or two.
#
#   scripts/check-install.sh            # in a fresh temporary folder, removed afterwards
#   WORK=/tmp/posenc-wheel KEEP=1 scripts/check-install.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH="${TORCH:-torch==2.13.0}"
WORK="${WORK:-$(mktemp -d /tmp/posenc-install.XXXXXX)}"
mkdir -p "$WORK"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
say() { echo "check-install: $*" >&2; }
start=$SECONDS

rm -rf "$WORK/env" "$WORK/dist" "$WORK/lab-report" "$WORK/source"
"$PYTHON" -m venv "$WORK/env"
PIP=("$WORK/env/bin/python" -m pip -q)
# built from a copy of the checkout's top-level files and src/ (git's tracked and untracked-not-ignored ones): a
# build/ folder left in the checkout by an earlier build could otherwise put stale modules into the wheel
source="$ROOT"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    source="$WORK/source"
    rm -rf "$source" && mkdir -p "$source"
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
        | "$PYTHON" -c 'import os, sys; sys.stdout.write("".join(p + "\0" for p in sys.stdin.read().split("\0") if p and os.path.isfile(p) and (p.startswith("src/") or "/" not in p)))' \
        | tar --null -T - -cf -) | tar -xf - -C "$source"
fi
say "building the wheel"
"${PIP[@]}" wheel --no-deps -w "$WORK/dist" "$source"
wheel=$(ls "$WORK"/dist/posenc-*.whl)
say "$(basename "$wheel")"

# the package data and every package must be in the wheel, not only in the checkout
"$WORK/env/bin/python" - "$wheel" "$source/src" <<'PY'
import sys, zipfile
from pathlib import Path
wheel, src = sys.argv[1], Path(sys.argv[2])  # the source files the wheel was built from
names = set(zipfile.ZipFile(wheel).namelist())
want = [p.relative_to(src).as_posix() for p in (src / "posenc").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
missing = sorted(set(want) - names)
if missing:
    sys.exit(f"check-install: the wheel lacks {len(missing)} file(s) of src/posenc: " + ", ".join(missing[:20]))
print(f"check-install: the wheel holds all {len(want)} files of src/posenc", file=sys.stderr)
PY

say "installing $TORCH, then the wheel (no extras)"
"${PIP[@]}" install "$TORCH"
"${PIP[@]}" install "$wheel"

cd "$WORK"  # not the checkout: `import posenc` must find the installed package
POSENC="$WORK/env/bin/posenc"
installed=$("$WORK/env/bin/python" -c "import posenc; print(posenc.__file__)")
case "$installed" in
    "$WORK/env/"*) ;;
    *) say "posenc was imported from $installed, not from the venv"; exit 1 ;;
esac
say "posenc --version"
"$POSENC" --version | tee "$WORK/version.txt"
grep -q "absent.*pip install 'posenc\[" "$WORK/version.txt" \
    || { say "--version names no extra for an absent part (is every extra installed?)"; exit 1; }
say "posenc schemes"
"$POSENC" schemes >"$WORK/schemes.txt"
say "$(wc -l <"$WORK/schemes.txt") lines"
say "posenc lab"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$POSENC" lab --quiet --out "$WORK/lab-report" >"$WORK/lab.txt"
tail -n 1 "$WORK/lab.txt" >&2
[ -s "$WORK/lab-report/index.html" ] || { say "the lab wrote no lab-report/index.html"; exit 1; }
say "ok in $((SECONDS - start)) s"
