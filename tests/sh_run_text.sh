#!/bin/bash
# tide run with text (src/cli/run_text.c) on a tiny synthetic checkpoint with
# the stand-in tokenizer: --prompt prints the text the JSONL batch reports
# for the same request, --chat through a pipe keeps the conversation (turn 2
# equals the batch request with turn 1's reply in its history), text JSONL
# (messages, prompt, prompt ids, a bad line), and the usage errors.
# Usage: sh_run_text.sh TIDE_EXE SRC_DIR BIN_DIR   (env TIDE_PYTHON)
set -u
TIDE=$1
SRC=$2
PY=${TIDE_PYTHON:-/usr/bin/python3}
TOK=${TIDE_TOKENIZER:-$SRC/.deps/tokenizer/deepseek-v41-standin.json}
if [ ! -s "$TOK" ]; then
    echo "no stand-in tokenizer at $TOK (scripts/oracle-deps.sh)"
    if [ -n "${CI:-}" ]; then echo "FAIL: required under CI"; exit 1; fi
    echo "skipping"; exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-runtext-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
ok() { echo "ok   $1"; }

SEED=$(( ($(date +%s) % 100000) + 1 ))
echo "seed $SEED"
M="$WORK/m"
"$TIDE" synth --shape tiny --seed "$SEED" -o "$M" --tokenizer "$TOK" >/dev/null 2>&1 || { echo "FAIL synth"; exit 1; }

# --- --prompt: the text of the batch's result for the same request ---
"$TIDE" run --model "$M" --prompt "Hello there" --max-tokens 12 --ignore-eos >"$WORK/p.out" 2>"$WORK/p.err"
rc=$?
[ $rc = 0 ] && grep -q "12 generated tokens" "$WORK/p.err" && ok "--prompt" || { fail "--prompt: exit $rc"; cat "$WORK/p.err"; }
echo '{"id": 1, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12, "ignore_eos": true}' >"$WORK/one.jsonl"
"$TIDE" run --model "$M" --input "$WORK/one.jsonl" --output "$WORK/one.out" 2>/dev/null || fail "batch of one"
"$PY" - "$WORK/p.out" "$WORK/one.out" <<'PYEOF' && ok "--prompt text == batch text" || fail "--prompt text != batch text"
import json, sys
printed = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
r = json.loads(open(sys.argv[2]).readline())
assert r["finish_reason"] == "length" and len(r["output_ids"]) == 12 == r["completion_tokens"], r
assert printed == r["text"] + "\n", (printed, r["text"])
PYEOF

# --- --chat through a pipe: the conversation is kept ---
printf 'First question\nSecond one\n' | "$TIDE" run --model "$M" --chat --max-tokens 6 --ignore-eos >"$WORK/c.out" 2>"$WORK/c.err" \
    && ok "--chat" || { fail "--chat"; cat "$WORK/c.err"; }
"$PY" - "$TIDE" "$M" "$WORK" <<'PYEOF' && ok "--chat turns == batch requests" || fail "--chat turns differ from the batch"
import json, subprocess, sys
tide, m, work = sys.argv[1:4]
def batch(messages):
    line = json.dumps({"messages": messages, "max_tokens": 6, "ignore_eos": True})
    out = subprocess.run([tide, "run", "--model", m, "--input", "-", "--text"], input=line.encode(),
                         capture_output=True, check=True).stdout
    return json.loads(out)["text"]
t1 = batch([{"role": "user", "content": "First question"}])
t2 = batch([{"role": "user", "content": "First question"}, {"role": "assistant", "content": t1},
            {"role": "user", "content": "Second one"}])
printed = open(work + "/c.out", encoding="utf-8", errors="surrogateescape").read()
assert printed == t1 + "\n" + t2 + "\n", (printed, t1, t2)
PYEOF

# --- text JSONL: messages, prompt (text and ids), prompt_ids, a bad line ---
cat >"$WORK/in.jsonl" <<'JEOF'
{"id": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": true}
{"id": "text", "prompt": "Once upon a time", "max_tokens": 3, "ignore_eos": true}
{"id": "ids", "prompt": [0, 100, 200], "max_tokens": 2, "ignore_eos": true}
{"id": "old", "prompt_ids": [0, 5, 6], "max_tokens": 2, "ignore_eos": true}
{"id": "two", "messages": [{"role": "user", "content": "Hi"}], "n": 2, "seed": 3, "temperature": 1, "max_tokens": 3, "ignore_eos": true}
{"id": "bad", "messages": [{"role": "robot", "content": "Hi"}]}
JEOF
"$TIDE" run --model "$M" --input "$WORK/in.jsonl" --output "$WORK/out.jsonl" 2>"$WORK/b.err"
rc=$?
[ $rc = 1 ] && ok "batch with a bad line exits 1" || fail "batch exit $rc, expected 1"
"$PY" - "$WORK/out.jsonl" "$TIDE" <<'PYEOF' && ok "text JSONL results" || fail "text JSONL results"
import json, subprocess, sys
rows = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert set(rows) == {"chat", "text", "ids", "old", "two", "bad"}, rows.keys()
want = {"chat": 4, "text": 3, "ids": 2, "old": 2, "two": 6}
for k, n in want.items():
    r = rows[k]
    assert r["finish_reason"] == "length" and r["completion_tokens"] == n and "error" not in r, r
    assert isinstance(r["text"], str) and r["tool_calls"] == [], r
assert len(rows["chat"]["output_ids"]) == 4 and rows["chat"]["prompt_tokens"] == 5, rows["chat"]
assert rows["ids"]["prompt_tokens"] == 3 and rows["text"]["prompt_tokens"] >= 2, rows
assert "role" in rows["bad"]["error"] and rows["bad"]["finish_reason"] == "error", rows["bad"]
PYEOF

# --- usage errors ---
"$TIDE" run --model "$M" --prompt x --chat >/dev/null 2>"$WORK/u.err"; rc=$?
[ $rc = 2 ] && ok "--prompt with --chat is a usage error" || fail "--prompt --chat: exit $rc"
"$TIDE" run --model "$M" --prompt x --temperature 5 >/dev/null 2>"$WORK/u.err"; rc=$?
[ $rc = 2 ] && grep -q temperature "$WORK/u.err" && ok "bad --temperature" || fail "bad --temperature: exit $rc"
"$TIDE" run --model "$M" --prompt x --effort bogus >/dev/null 2>"$WORK/u.err"; rc=$?
[ $rc = 2 ] && ok "bad --effort" || fail "bad --effort: exit $rc"
"$TIDE" run --model "$M" --prompt "x" --raw --max-tokens 3 >/dev/null 2>"$WORK/r.err" && ok "--raw" || fail "--raw"
"$TIDE" run --model "$WORK/none" --prompt x >/dev/null 2>"$WORK/n.err"; rc=$?
[ $rc = 1 ] && ok "missing model" || fail "missing model: exit $rc"

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
