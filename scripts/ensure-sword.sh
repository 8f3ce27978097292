#!/bin/sh
# Install the two public-domain SWORD Bible modules posenc's translation task reads
# (World English Bible, Reina-Valera 1909) when they are missing. Debian/Ubuntu only;
# elsewhere it says so and exits 0, and the translation tests skip with that reason.
set -eu
MODS=/usr/share/sword/mods.d
if [ -f "$MODS/engWEB2015eb.conf" ] && [ -f "$MODS/spaRV1909eb.conf" ]; then
    echo "ensure-sword: modules already installed"; exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-sword: apt-get not found; install sword-text-web and sword-text-sparv by hand" >&2; exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
for attempt in 1 2 3 4 5; do  # apt may be locked by another install for a while
    if $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q sword-text-web sword-text-sparv; then
        echo "ensure-sword: installed"; exit 0
    fi
    echo "ensure-sword: apt-get failed (attempt $attempt), retrying in 15 s" >&2; sleep 15
done
echo "ensure-sword: could not install the modules; translation tests will skip" >&2
exit 0
