#!/bin/sh
# Make a headless Chromium, its WebDriver and a Korean font available for the browser tests:
# tests/lab/test_report.py (rendering the lab report) and tests/explore/ (the `posenc explore` page, driven with
# Selenium). Debian's packages: `chromium`, `chromium-driver` (/usr/bin/chromedriver, the same version as the
# browser) and `fonts-nanum` (Korean text renders as boxes without a CJK font).
# Exit 0 when browser and driver are (now) on PATH; 1 with a reason when they cannot be installed.
set -eu
have_browser() {
    for b in chromium chromium-browser google-chrome; do
        command -v "$b" >/dev/null 2>&1 && return 0
    done
    return 1
}
have_korean_font() {
    command -v fc-list >/dev/null 2>&1 && fc-list :lang=ko 2>/dev/null | grep -q .
}
if have_browser && command -v chromedriver >/dev/null 2>&1 && have_korean_font; then
    echo "ensure-chromium: found $(command -v chromium || command -v chromium-browser || command -v google-chrome)," \
         "$(command -v chromedriver) and a Korean font"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: no chromium/chromedriver and no apt-get: install Chromium and its WebDriver by hand" \
         "to run the browser tests" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
        echo "ensure-chromium: not root and no sudo: run 'apt-get install -y chromium chromium-driver fonts-nanum'" \
             "as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-nanum
if have_browser && command -v chromedriver >/dev/null 2>&1; then
    echo "ensure-chromium: installed $(command -v chromium) and $(command -v chromedriver)"
else
    echo "ensure-chromium: apt-get ran but chromium or chromedriver is still missing" >&2
    exit 1
fi
