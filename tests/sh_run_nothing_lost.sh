#!/bin/bash
# tide run loses nothing (src/cli/out_file.c, docs/engine.md "tide run"):
# the output may not be the input, a failed run leaves an existing output
# as it was, SIGTERM mid-batch keeps one complete line per finished request
# and says how many were not run, and a full device is an error.
# Usage: sh_run_nothing_lost.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
PY=${TIDE_PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-runlost-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL $1"; sed 's/^/  /' "$WORK/err" 2>/dev/null | head -5; fails=$((fails + 1)); }
ok() { echo "ok   $1"; }

M="$WORK/m"
"$TIDE" synth --shape tiny -o "$M" --seed 5 -q --no-tokenizer || { echo "FAIL synth"; exit 1; }
for i in 1 2 3; do echo "{\"prompt_ids\":[5,6,7,$i],\"max_tokens\":3}"; done >"$WORK/in.jsonl"

# --- the output is the input: refused, the input intact ---
cp "$WORK/in.jsonl" "$WORK/same.jsonl"
ln -s same.jsonl "$WORK/link.jsonl"
for out in same.jsonl link.jsonl; do
    "$TIDE" run --model "$M" --input "$WORK/same.jsonl" --output "$WORK/$out" 2>"$WORK/err"
    rc=$?
    if [ $rc -ne 1 ] || ! cmp -s "$WORK/in.jsonl" "$WORK/same.jsonl" || ! grep -q "is the input file" "$WORK/err"; then
        fail "output $out = input (exit $rc)"
    else ok "output $out = input refused, input intact"; fi
done

# --- a failed run leaves an existing output as it was ---
printf 'precious\n' >"$WORK/out.jsonl"
"$TIDE" run --model "$WORK/nowhere" --input "$WORK/in.jsonl" --output "$WORK/out.jsonl" 2>"$WORK/err"
rc=$?
if [ $rc -ne 1 ] || [ "$(cat "$WORK/out.jsonl")" != precious ]; then fail "failed load keeps the output (exit $rc)"
else ok "failed load keeps the output"; fi
"$TIDE" run --model "$M" --input "$WORK/missing.jsonl" --output "$WORK/out.jsonl" 2>"$WORK/err"
rc=$?
if [ $rc -ne 1 ] || [ "$(cat "$WORK/out.jsonl")" != precious ]; then fail "missing input keeps the output (exit $rc)"
else ok "missing input keeps the output"; fi
if ls -a "$WORK" | grep -q '^\.out\.jsonl\.'; then fail "a temporary file was left behind"; else ok "no temporary file left"; fi

# --- a good run replaces it, with the usual mode ---
"$TIDE" run --model "$M" --input "$WORK/in.jsonl" --output "$WORK/out.jsonl" 2>"$WORK/err"
rc=$?
if [ $rc -ne 0 ] || [ "$(grep -c '"finish_reason"' "$WORK/out.jsonl")" != 3 ]; then fail "good run (exit $rc)"
else ok "good run writes 3 lines"; fi
if [ "$(stat -c %a "$WORK/out.jsonl")" != "$(printf "%o" $((0666 & ~$(umask))))" ]; then
    fail "output mode $(stat -c %a "$WORK/out.jsonl")"
else ok "output mode follows the umask"; fi

# --- a full device is an error with a message ---
"$TIDE" run --model "$M" --prompt-ids 5,6,7 --max-tokens 2 >/dev/full 2>"$WORK/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "No space left" "$WORK/err"; then fail "--prompt-ids > /dev/full (exit $rc)"
else ok "--prompt-ids > /dev/full is an error"; fi
"$TIDE" run --model "$M" --input "$WORK/in.jsonl" >/dev/full 2>"$WORK/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "No space left" "$WORK/err"; then fail "--input > /dev/full (exit $rc)"
else ok "--input > /dev/full is an error"; fi

# --- SIGTERM mid-batch: every finished request has one complete line ---
N=40
for i in $(seq 1 $N); do echo "{\"id\":$i,\"prompt_ids\":[9,$i],\"max_tokens\":12,\"ignore_eos\":true}"; done >"$WORK/many.jsonl"
printf 'old\n' >"$WORK/part.jsonl"
"$TIDE" run --model "$M" --input "$WORK/many.jsonl" --output "$WORK/part.jsonl" --max-seqs 1 2>"$WORK/err" &
pid=$!
# wait (bounded) until the temporary file holds two lines, then stop the run
for _ in $(seq 1 600); do
    tmp=$(ls -a "$WORK" | grep '^\.part\.jsonl\.' | head -1)
    [ -n "$tmp" ] && [ "$(wc -l <"$WORK/$tmp" 2>/dev/null || echo 0)" -ge 2 ] && break
    sleep 0.05
done
kill -TERM $pid
wait $pid
rc=$?
lines=$(wc -l <"$WORK/part.jsonl")
if [ $rc -ne 143 ]; then fail "SIGTERM: exit $rc, expected 143"
elif ! "$PY" -c '
import json, sys
n = 0
for line in open(sys.argv[1], "rb"):
    assert line.endswith(b"\n"), "a truncated last line"
    r = json.loads(line)
    assert r["finish_reason"] == "length" and len(r["output_ids"]) == 12, r
    n += 1
assert n >= 2, n
' "$WORK/part.jsonl"; then fail "SIGTERM: the kept lines are not complete results"
elif [ "$lines" -ge $N ]; then fail "SIGTERM: the run was not stopped ($lines lines)"
elif ! grep -q "stopped by SIGTERM: $lines of $N requests finished .* $((N - lines)) not run" "$WORK/err"; then
    fail "SIGTERM: stderr does not say what was not run"
else ok "SIGTERM keeps $lines complete lines, says $((N - lines)) not run"; fi

[ $fails -eq 0 ] && echo "all ok" || echo "$fails failed"
[ $fails -eq 0 ]
