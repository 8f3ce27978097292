#!/bin/sh
# Make a headless Chromium available for the lab report's rendering test
# (tests/lab/test_report.py). Debian's package is `chromium`.
# Exit 0 when a browser is (now) on PATH; 1 with a reason when it cannot be installed.
set -eu
for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then
        echo "ensure-chromium: found $(command -v "$b")"
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: no chromium and no apt-get: install Chromium by hand to run the report test" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "ensure-chromium: not root and no sudo: run 'apt-get install -y chromium' as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium
command -v chromium >/dev/null 2>&1 && echo "ensure-chromium: installed $(command -v chromium)"
