#!/bin/bash
# Structured outputs end to end (docs/structured.md): `tide run` with text
# JSONL requests on the tiny synthetic checkpoint with the stand-in
# tokenizer, each constrained by a JSON Schema (response_format json_schema)
# a regex (guided_regex) or a GBNF grammar (guided_grammar) from
# tests/data/structured/corpus.jsonl; the
# outputs are checked by independent validators (ajv, JavaScript RegExp, for
# grammars on an equivalent regex:
# tools/npm/structured_check.mjs): every one is valid, or cut at max_tokens
# with finish_reason "length"; and 4 requests forcing a tool call (tool_choice
# naming it) end "tool_calls" with arguments ajv accepts against the tool's
# parameters. The same requests then go through `tide serve` (Chat
# Completions over HTTP) with the same checks, and a schema with an
# unsupported keyword gets a 400 naming it. Then an unsupported keyword and a bad regex
# are refused with messages naming them.
# Usage: sh_structured.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
SRC=$2
TOK=${TIDE_TOKENIZER:-$SRC/.deps/tokenizer/deepseek-v41-standin.json}
NM=$SRC/tools/npm/node_modules
missing=""
[ -s "$TOK" ] || missing="the stand-in tokenizer ($TOK)"
[ -d "$NM/ajv" ] && [ -d "$NM/ajv-formats" ] || missing="$missing the npm packages ajv, ajv-formats"
command -v node >/dev/null || missing="$missing node"
if [ -n "$missing" ]; then
    echo "missing: $missing (scripts/oracle-deps.sh)"
    if [ -n "${CI:-}" ]; then echo "FAIL: required under CI"; exit 1; fi
    echo "skipping"; exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-structured-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
ok() { echo "ok   $1"; }

SEED=$(( ($(date +%s) % 100000) + 1 ))
echo "seed $SEED"
M="$WORK/m"
"$TIDE" synth --shape tiny --seed "$SEED" -o "$M" --tokenizer "$TOK" >/dev/null 2>&1 || { echo "FAIL synth"; exit 1; }
CORPUS=$SRC/tests/data/structured/corpus.jsonl
N=${TIDE_STRUCTURED_N:-18}
node "$SRC/tools/npm/structured_check.mjs" make "$CORPUS" "$N" 32 4 6 >"$WORK/req.jsonl" || { echo "FAIL make"; exit 1; }
"$TIDE" run --model "$M" --input "$WORK/req.jsonl" --output "$WORK/out.jsonl" --seed "$SEED" 2>"$WORK/err" \
    || { fail "tide run"; tail -5 "$WORK/err"; }
node "$SRC/tools/npm/structured_check.mjs" check "$CORPUS" "$WORK/req.jsonl" "$WORK/out.jsonl" \
    && ok "$N constrained generations, 4 forced tool calls and 6 with strict tools under tool_choice auto valid (ajv / RegExp)" || fail "constrained generations"

# the same requests through tide serve (Chat Completions over HTTP), and a
# 400 naming an unsupported keyword
source "$SRC/tests/serve_start.sh"
if serve_start "$TIDE" "$WORK" --model "$M" --seed "$SEED"; then
    node "$SRC/tools/npm/structured_check.mjs" serve "$CORPUS" "http://127.0.0.1:$port" "$WORK/req.jsonl" >"$WORK/srv.jsonl" \
        && node "$SRC/tools/npm/structured_check.mjs" check "$CORPUS" "$WORK/req.jsonl" "$WORK/srv.jsonl" \
        && ok "the same through tide serve (the strict-tools ones over Chat Completions, Responses and Messages), valid; unsupported keyword: 400 naming it" || fail "through tide serve"
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
else
    fail "tide serve did not start"
fi

# refusals: the line's error names the keyword / the regex problem
cat >"$WORK/bad.jsonl" <<'JEOF'
{"id": 1, "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}}
{"id": 2, "messages": [{"role": "user", "content": "x"}], "guided_regex": "(?<=a)b"}
{"id": 3, "messages": [{"role": "user", "content": "x"}], "guided_regex": "a", "guided_json": {"type": "string"}}
JEOF
"$TIDE" run --model "$M" --input "$WORK/bad.jsonl" --output "$WORK/bad.out" 2>/dev/null
grep -q 'properties/a: keyword \\"not\\" is not supported' "$WORK/bad.out" && ok "unsupported keyword named" || { fail "unsupported keyword"; cat "$WORK/bad.out"; }
grep -q 'lookaround' "$WORK/bad.out" && ok "unsupported regex named" || fail "unsupported regex"
grep -q 'only one output constraint' "$WORK/bad.out" && ok "two constraints refused" || fail "two constraints"

[ $fails = 0 ] && echo "all ok" || { echo "$fails failed"; exit 1; }
