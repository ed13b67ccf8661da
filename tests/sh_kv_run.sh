# tide run with the persistent KV store: a first process answers turn 1
# and writes its pages; a second process, given turn 1 + its output + new
# tokens, reads them from the store (cached_tokens, "store hits" on stderr)
# and, with the whole-prefix replay in the chunking-invariant mode, answers
# exactly as a cold run without any cache. A store of another model is not
# used. Bad flags exit 2.
# Usage: bash sh_kv_run.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
W=$(mktemp -d "${TMPDIR:-/tmp}/sh_kv_run.XXXXXX")
trap 'rm -rf "$W"' EXIT
FAIL=0
fail() {
    echo "FAIL: $*"
    FAIL=1
}
SEED=$((RANDOM % 1000 + 1))
echo "seed $SEED"
"$TIDE" synth --shape tiny --seed $SEED -o "$W/m" >/dev/null || { echo "FAIL: synth"; exit 1; }
"$TIDE" synth --shape tiny --seed $((SEED + 1)) -o "$W/m2" >/dev/null || { echo "FAIL: synth"; exit 1; }
FLAGS="--kv-block 2 --page-tokens 8 --canonical-layout --no-index-quirk --prefix-replay full --max-tokens 5 --ignore-eos"
P1=""
for i in $(seq 1 21); do P1="$P1${P1:+,}$(((RANDOM * 7 + i) % 120000 + 10))"; done
out1=$("$TIDE" run --model "$W/m" --prompt-ids "$P1" $FLAGS --kv-store "$W/kv" --kv-ssd "$W/ssd" 2>"$W/e1") ||
    { fail "turn 1"; cat "$W/e1"; }
grep -q '3 pages written' "$W/e1" || { fail "turn 1 wrote no pages"; cat "$W/e1"; }
P2="$P1,$out1,77,78,79"
out2=$("$TIDE" run --model "$W/m" --prompt-ids "$P2" $FLAGS --kv-store "$W/kv" 2>"$W/e2") || { fail "turn 2"; cat "$W/e2"; }
grep -qE '0 host hits, 3 \+ 0 store hits' "$W/e2" || { fail "turn 2 did not read 3 pages from the store"; cat "$W/e2"; }
cold=$("$TIDE" run --model "$W/m" --prompt-ids "$P2" $FLAGS --no-prefix-cache 2>/dev/null)
[ -n "$out2" ] && [ "$out2" = "$cold" ] || fail "turn 2 from the store: '$out2', cold: '$cold'"
out3=$("$TIDE" run --model "$W/m" --prompt-ids "$P2" $FLAGS --kv-ssd "$W/ssd" 2>"$W/e3") || fail "turn 2 (ssd)"
grep -qE ' 3 \+ 0 store hits' "$W/e3" || { fail "turn 2 did not read 3 pages from the SSD tier"; cat "$W/e3"; }
[ "$out3" = "$cold" ] || fail "turn 2 from the SSD tier differs"
"$TIDE" run --model "$W/m2" --prompt-ids "$P2" $FLAGS --kv-store "$W/kv" >/dev/null 2>"$W/e4" || fail "other model"
grep -qE ' 0 \+ 0 store hits, [1-9]' "$W/e4" || { fail "another model hit the store"; cat "$W/e4"; }
"$TIDE" run --model "$W/m" --prompt-ids 1,2 --kv-class bulk >/dev/null 2>"$W/e5" && fail "bad --kv-class accepted"
grep -q "use chat or agent" "$W/e5" || fail "bad --kv-class message"
"$TIDE" run --model "$W/m" --prompt-ids 1,2 --kv-store "$W/kv" --kv-ec 10+3 >/dev/null 2>"$W/e6" && fail "bad --kv-ec accepted"
grep -q "needs 13 node directories" "$W/e6" || { fail "bad --kv-ec message"; cat "$W/e6"; }
[ $FAIL = 0 ] && echo "sh_kv_run: all passed"
exit $FAIL
