#!/bin/bash
# The King James Bible WITH verse numbers (the corpus's kjv.txt strips them),
# from Debian's bible-kjv package, downloaded and unpacked, not installed.
# Usage: fetch_kjv.sh OUT.txt      Needs: apt-get, dpkg.
set -euo pipefail
OUT=$1; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$W"
apt-get download bible-kjv bible-kjv-text >/dev/null
for d in *.deb; do dpkg -x "$d" x; done
x/usr/bin/bible -p x/usr/lib -d bible.data "Gen1:1-Rev22:21" > "$OUT"
