#!/usr/bin/env bash
# tide serve against the real clients: starts `tide serve` on the tiny
# model (stand-in tokenizer) on a free loopback port with an API key, runs
# tools/npm/serve_clients.mjs (the openai and @anthropic-ai/sdk npm
# packages: chat, completions, responses, messages, streaming and not,
# tools, thinking, logprobs, errors, auth, metrics), and a queued request
# cancelled when its client leaves (tools/npm/serve_cancel_queued.mjs, on a
# second server with --max-seqs 1), then SIGTERM: the server must
# drain and exit 0. Also: --help, --backend cuda refused with a reason, and
# tide bench serve against the same server.
# Usage: sh_serve_clients.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
npm=$src/tools/npm
if [ ! -d "$npm/node_modules/openai" ] || [ ! -d "$npm/node_modules/@anthropic-ai/sdk" ]; then
  msg="$npm/node_modules lacks openai or @anthropic-ai/sdk; run scripts/oracle-deps.sh"
  [ "${CI:-}" = true ] && { echo "FAIL: $msg"; exit 1; }
  echo "SKIP: $msg"; exit 0
fi
command -v node >/dev/null || { echo "FAIL: node is missing"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_serve_clients.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
[ -n "${TIDE_KEEP:-}" ] && trap "echo kept \$work" EXIT
fail=0

"$tide" serve --help | grep -q -- '--api-key' || { echo "FAIL: --help lacks --api-key"; fail=1; }
out=$("$tide" serve --model "$work" --backend cuda 2>&1) && { echo "FAIL: --backend cuda accepted"; fail=1; }
grep -q 'backend cuda' <<<"$out" || { echo "FAIL: --backend cuda: no reason given: $out"; fail=1; }

"$tide" synth --shape tiny -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
source "$src/tests/serve_start.sh"
serve_start "$tide" "$work" --model "$work/tiny" --api-key test-key || exit 1

timeout 120 node "$npm/serve_clients.mjs" "http://127.0.0.1:$port" test-key || fail=1

# tide bench serve against it: every request streamed to [DONE], the report's lines.
out=$(timeout 120 "$tide" bench serve --url "http://127.0.0.1:$port" --model "$work/tiny" --api-key test-key \
  --requests 3 --prompt-len 4-8 --gen 3 2>&1) || { echo "FAIL: bench serve: $out"; fail=1; }
for p in '^  generated tok/s  .* \(9 tokens\)$' '^  TTFT  .*\(ms, 3 samples\)$' '^  end-to-end' '^  errors           0$'; do
  grep -Eq "$p" <<<"$out" || { echo "FAIL: bench serve output lacks '$p'"; echo "$out"; fail=1; }
done

# A client that leaves while its request is queued cancels it at once: a
# second server with one running sequence (tools/npm/serve_cancel_queued.mjs).
pid1=$pid port1=$port
mkdir -p "$work/q"
if serve_start "$tide" "$work/q" --model "$work/tiny" --api-key test-key --max-seqs 1; then
  timeout 120 node "$npm/serve_cancel_queued.mjs" "http://127.0.0.1:$port" test-key || fail=1
  kill -TERM "$pid"; wait "$pid" || { echo "FAIL: the --max-seqs 1 server exited $?"; cat "$work/q/serve.err"; fail=1; }
  if grep -qE 'Sanitizer|runtime error|leak' "$work/q/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/q/serve.err"; fail=1; fi
else
  fail=1
fi
pid=$pid1 port=$port1

kill -TERM "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || { echo "FAIL: no exit within 30 s of SIGTERM"; fail=1; }
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "FAIL: tide serve exited $rc after SIGTERM"; cat "$work/serve.err"; fail=1; }
grep -q 'stopped' "$work/serve.err" || { echo "FAIL: no 'stopped' line"; cat "$work/serve.err"; fail=1; }
if grep -qE 'Sanitizer|runtime error|leak' "$work/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "sh_serve_clients: all passed"
exit $fail
