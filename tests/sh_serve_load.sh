#!/usr/bin/env bash
# Bounded load test of tide serve (loopback only, stops by itself): 1,000
# concurrent streaming requests on the tiny model, 100 disconnecting after
# their first chunk, 50 slow readers (tools/npm/serve_load.mjs checks every
# completed stream and that /health returns to idle: nothing in flight, the
# KV pool holding only idle prefix-cache pages). Then SIGTERM: a clean exit
# with no sanitizer report (this test runs in the ASan build too).
# Time on the 2-core VM: about 25 s plain, 70-140 s under ASan (most of it the
# engine's: each request is a 1-token id prompt and 2 generated tokens, the
# fewest that give a mid-stream disconnect). Env: TIDE_LOAD_N / _DROP / _SLOW override the counts.
# Usage: sh_serve_load.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
n=1000 drop=100 slow=50
npm=$src/tools/npm
command -v node >/dev/null || { [ "${CI:-}" = true ] && { echo "FAIL: node is missing"; exit 1; }; echo "SKIP: node is missing"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_serve_load.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
"$tide" synth --shape tiny -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
source "$src/tests/serve_start.sh"
# Room for every request at once: nothing is refused with 429 here.
serve_start "$tide" "$work" --model "$work/tiny" --max-seqs 1024 --max-queue 1024 --step-tokens 4096 || exit 1
timeout 600 node "$npm/serve_load.mjs" "http://127.0.0.1:$port" "${TIDE_LOAD_N:-$n}" "${TIDE_LOAD_DROP:-$drop}" \
  "${TIDE_LOAD_SLOW:-$slow}" || fail=1
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "FAIL: tide serve exited $rc after SIGTERM"; fail=1; }
if grep -qE 'Sanitizer|runtime error|leak' "$work/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "sh_serve_load: all passed"
exit $fail
