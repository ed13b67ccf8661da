#!/bin/bash
# `tide run --prompt-ids` (the engine, on the CPU) against the OFFICIAL
# reference's greedy tokens on tide-mini: for every case of
# tools/golden/tide-mini.golden (tools/golden/README.md), the 64 greedy
# tokens tide run prints equal the ones the release's inference/model.py
# generated. The prompt goes in as one prefill chunk, as the official code
# ran it (tests/test_golden_official.c checks the forward pass row by row).
# Not a registered test: tide does not meet this on tide-mini today
# (docs/tide-mini-fidelity.md); run it by hand. Exit 1 when a case differs.
# TIDE_GOLDEN / TIDE_GOLDEN_MODEL override the golden and the model dir.
# Usage: tools/golden/check_run.sh TIDE_EXE SRC_DIR
set -u
TIDE=$1
SRC=$2
G=${TIDE_GOLDEN:-$SRC/tools/golden/tide-mini.golden}
missing() {
    echo "missing: $1"
    if [ -n "${CI:-}" ] && [ "${CI}" != 0 ] && [ "${CI}" != false ]; then echo "FAIL: required under CI"; exit 1; fi
    echo "skipping"; exit 0
}
[ -s "$G" ] || missing "golden $G (tools/golden/README.md)"
M=${TIDE_GOLDEN_MODEL:-}
if [ -z "$M" ]; then
    M=$(sed -n 's/^# model: //p' "$G")
    case $M in /*) ;; *) M=$SRC/$M ;; esac
fi
[ -s "$M/config.json" ] || missing "model $M"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-golden-run-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
# one "NAME N_PROMPT N_GREEDY<TAB>prompt ids<TAB>greedy ids" line per case
awk '/^case /{n=$2; np=$3; ng=$4} /^prompt /{p=$0; sub(/^prompt /,"",p)}
     /^greedy /{g=$0; sub(/^greedy /,"",g); print n" "np" "ng"\t"p"\t"g}' "$G" >"$WORK/cases"
[ -s "$WORK/cases" ] || { echo "FAIL no cases in $G"; exit 1; }
while IFS=$'\t' read -r head prompt greedy; do
    read -r name np ng <<<"$head"
    ids=$(tr ' ' ',' <<<"$prompt")
    chunk=$((np > 512 ? np : 512))
    "$TIDE" run --model "$M" --prompt-ids "$ids" --max-tokens "$ng" --ignore-eos --chunk "$chunk" \
        --step-tokens "$chunk" --max-seqs 1 >"$WORK/out" 2>"$WORK/err"
    rc=$?
    got=$(tr ',' ' ' <"$WORK/out" | xargs)
    want=$(xargs <<<"$greedy")
    if [ $rc = 0 ] && [ "$got" = "$want" ]; then
        echo "ok   $name: prompt $np, $ng greedy tokens equal the official ones"
    else
        fails=$((fails + 1))
        echo "FAIL $name: prompt $np (exit $rc)"
        echo "  official: $want"
        echo "  tide:     $got"
        tail -3 "$WORK/err"
    fi
done <"$WORK/cases"
[ $fails = 0 ] || { echo "$fails case(s) differ"; exit 1; }
