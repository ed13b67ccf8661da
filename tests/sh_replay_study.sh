#!/usr/bin/env bash
# `tide bench replay` on a tiny synthetic checkpoint, small: the study runs,
# prints every variant in both layouts, and the `full` replay / decoder rows
# (which are exact by construction) show zero error and full agreement.
# Usage: bash sh_replay_study.sh TIDE_EXE SRC_DIR BIN_DIR
set -euo pipefail
TIDE=$1
out=$("$TIDE" bench replay --model synth:tiny --prompts 2 --len 18:26 --gen 3 \
      --replay 4,full --decoder 4,full --threads 2 --seed "${RANDOM}")
echo "$out"
rows=$(echo "$out" | awk '$2 == "replay" || $2 == "decoder"' | wc -l)
[ "$rows" -eq 8 ] || { echo "expected 8 result rows, got $rows"; exit 1; }
echo "$out" | awk '
  ($2 == "replay" || $2 == "decoder") && $3 == "full" {
    if ($4 != 0 || $5 != 0 || $6 != 0 || $7 != 0 || $8 != "1.00") { print "not exact: " $0; bad = 1 }
  }
  END { exit bad }'
"$TIDE" bench replay --help | grep -q -- "--replay" || { echo "no usage"; exit 1; }
if "$TIDE" bench replay --model synth:tiny --replay 8,x 2>/dev/null; then echo "bad list accepted"; exit 1; fi
if "$TIDE" bench replay 2>/dev/null; then echo "missing --model accepted"; exit 1; fi
echo ok
