#!/bin/bash
# Expert parallelism end to end (docs/ep.md): `tide run --ep N` over the CPU
# communicator gives the tokens of the single-process `tide run` on tiny and
# small (greedy lines and a seeded sampled one; 2 and 4 ranks, with EPLB
# copies and rebalancing), and a rank process killed in the middle of the
# batch, or one that hangs (found by the heartbeat), leaves every request
# finished exactly once, with the same tokens.
# Fresh random checkpoints, prompts and kill point each run (seeds printed).
# Usage: sh_ep.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
PY=${TIDE_PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-ep-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL $1"; sed 's/^/  /' "$WORK/err" 2>/dev/null | tail -8; fails=$((fails + 1)); }
ok() { echo "ok   $1"; }
SEED=${TIDE_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) % 100000 + 1 ))}
echo "seed $SEED (TIDE_TEST_SEED=$SEED replays it)"

# requests: N lines, greedy but for one seeded sampled line
mkreq() { # N MAXTOK OUT
    "$PY" - "$1" "$2" "$SEED" >"$3" <<'EOF'
import json, random, sys
n, mt, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
for i in range(n):
    line = {"id": "q%d" % i, "prompt_ids": [r.randint(2, 3000) for _ in range(r.randint(1, 12))],
            "max_tokens": r.randint(2, mt), "temperature": 0}
    if i == n - 1:
        line.update(temperature=0.9, seed=r.randint(1, 1 << 30))
    print(json.dumps(line))
EOF
}
# same ids, tokens and finish reasons (in any order); every id once
same() { # A B
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "an id twice in %s" % p
    return sorted((r["id"], r["output_ids"], r["finish_reason"]) for r in rows)
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a == b, "differ: %s" % [x for x in zip(a, b) if x[0] != x[1]][:2]
EOF
}

for shape in tiny small; do
    M="$WORK/$shape"
    "$TIDE" synth --shape $shape -o "$M" --seed "$SEED" -q --no-tokenizer || { echo "FAIL synth $shape"; exit 1; }
    if [ $shape = tiny ]; then mkreq 8 8 "$WORK/in.jsonl"; else mkreq 3 3 "$WORK/in.jsonl"; fi
    "$TIDE" run --model "$M" --input "$WORK/in.jsonl" --output "$WORK/ref.jsonl" --ignore-eos 2>"$WORK/err" ||
        { fail "$shape: plain run"; continue; }
    for cfg in "2" "4 --ep-redundant 3 --eplb-window 2"; do
        n=${cfg%% *}
        # shellcheck disable=SC2086
        if ! "$TIDE" run --ep $cfg --model "$M" --input "$WORK/in.jsonl" --output "$WORK/ep.jsonl" --ignore-eos \
            2>"$WORK/err"; then fail "$shape: --ep $cfg"
        elif ! same "$WORK/ref.jsonl" "$WORK/ep.jsonl" 2>>"$WORK/err"; then fail "$shape: --ep $cfg tokens"
        elif ! grep -q "balancedness" "$WORK/err"; then fail "$shape: --ep $cfg reports no balancedness"
        else ok "$shape: --ep $cfg gives the single-process tokens"; fi
    done
done

# --- a rank killed or hung mid-batch (tiny, 3 ranks): survivors finish everything once ---
M="$WORK/tiny"
mkreq 8 8 "$WORK/in.jsonl"
"$TIDE" run --model "$M" --input "$WORK/in.jsonl" --output "$WORK/ref.jsonl" --ignore-eos 2>"$WORK/err"
# lost_case WHAT KILL TIMEOUT_MS MUST_SAY: 3 ranks, one lost by --ep-kill KILL
lost_case() {
    "$TIDE" run --ep 3 --ep-kill "$2" --ep-timeout "$3" --model "$M" --input "$WORK/in.jsonl" \
        --output "$WORK/lost.jsonl" --ignore-eos 2>"$WORK/err"
    rc=$?
    if [ $rc -ne 0 ]; then fail "$1 ($2): exit $rc"
    elif ! grep -q "$4" "$WORK/err" || ! grep -q "1 recoveries" "$WORK/err"; then
        fail "$1 ($2): no '$4' or no recovery reported"
    elif ! grep -q "8 requests finished once each (1 ranks lost" "$WORK/err"; then fail "$1 ($2): count"
    elif ! same "$WORK/ref.jsonl" "$WORK/lost.jsonl" 2>>"$WORK/err"; then fail "$1 ($2): tokens"
    else ok "$1 (--ep-kill $2): 8 requests finished once, same tokens"; fi
}
# an exchange round inside the batch (a run takes ~130)
lost_case "rank 1 killed mid-batch" 1:$(( SEED % 60 + 15 )) 20000 "rank 1 was killed"
# stopped: found by the heartbeat, left behind by the survivors, killed by the launcher
lost_case "rank 2 hung mid-batch" 2:$(( SEED % 50 + 20 )):stop 3000 "rank 2 was left behind"
grep -q "heartbeat stopped" "$WORK/err" || fail "the hung rank was not found by the heartbeat"

# --- --prompt-ids: the greedy ids of tide run --prompt-ids ---
a=$("$TIDE" run --model "$M" --prompt-ids 5,6,7,$((SEED % 900 + 2)) --max-tokens 4 2>"$WORK/err" | tail -1)
b=$("$TIDE" run --ep 2 --model "$M" --prompt-ids 5,6,7,$((SEED % 900 + 2)) --max-tokens 4 2>>"$WORK/err")
if [ -z "$a" ] || [ "$a" != "$b" ]; then fail "--prompt-ids: '$a' vs '$b'"; else ok "--ep 2 --prompt-ids: $b"; fi

# --- bad options are refused with a message ---
for bad in "--ep 0" "--ep 65" "--ep 2 --ep-kill x" "--ep 2 --ep-kill 2:5" "--ep 2 --ep-kill 1:5:x" "--ep 2 --eplb-window -1"; do
    # shellcheck disable=SC2086
    "$TIDE" run $bad --model "$M" --input "$WORK/in.jsonl" 2>"$WORK/err" >/dev/null
    rc=$?
    if [ $rc -ne 2 ] || [ ! -s "$WORK/err" ]; then fail "'$bad' (exit $rc)"; else ok "'$bad' refused"; fi
done
"$TIDE" run --ep 2 --model "$WORK/nowhere" --input "$WORK/in.jsonl" 2>"$WORK/err" >/dev/null
if [ $? -ne 1 ]; then fail "missing model"; else ok "missing model: exit 1"; fi

# --- tide bench eplb: the table, the bound balanced, EPLB not worse than plain on a strong skew ---
if ! "$TIDE" bench eplb --experts 32 --top-k 4 --layers 3 --ranks 4 --redundant 4 --skew 150 --drift 0 \
    --tokens 400 --windows 3 --seed "$SEED" >"$WORK/bench" 2>"$WORK/err"; then fail "bench eplb"
elif ! awk '/^plain/ {p=$(NF-1)} /^EPLB from the previous/ {e=$(NF-1)} /same window/ {b=$(NF-1)}
            END {exit !(p > 0 && e >= p && b >= e - 0.02 && b <= 1)}' "$WORK/bench"; then
    cp "$WORK/bench" "$WORK/err"; fail "bench eplb figures"
else ok "bench eplb: $(grep -c . "$WORK/bench") lines, EPLB >= plain"; fi

# --- tide bench ep: widths 1 and 2 on tiny, same tokens, pairs exchanged at 2 ranks only ---
if ! "$TIDE" bench ep --model "$WORK/tiny" --ranks 1,2 --requests 3 --prompt-len 5 --max-tokens 3 \
    --seed "$SEED" >"$WORK/bench" 2>"$WORK/err"; then fail "bench ep"
elif ! awk '$1 == 1 && $4 == "0.00" {a=1} $1 == 2 && $4 > 0 && $NF == "yes" {b=1} END {exit !(a && b)}' \
    "$WORK/bench"; then cp "$WORK/bench" "$WORK/err"; fail "bench ep figures"
else ok "bench ep: 1 and 2 ranks, same tokens"; fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
