#!/usr/bin/env bash
# tide serve --spec (docs/spec.md): the flag in --help, a bad value refused
# with its name, then a server on the tiny model with --spec fixed:3
# answers a greedy completion of exactly max_tokens tokens and /metrics
# reports the drafts verified (global counters and the per-request
# acceptance histogram); SIGTERM: exit 0. HTTP through bash's /dev/tcp.
# Usage: sh_serve_spec.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_serve_spec.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0

# http METHOD PATH [BODY]: the response (headers and body) on stdout
http() {
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  if [ $# -ge 3 ]; then
    printf '%s %s HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' "$1" "$2" "${#3}" "$3" >&3
  else
    printf '%s %s HTTP/1.0\r\n\r\n' "$1" "$2" >&3
  fi
  timeout 120 cat <&3
  exec 3<&-
}

"$tide" serve --help | grep -q -- '--spec MODE' || { echo "FAIL: --help lacks --spec"; fail=1; }
out=$("$tide" serve --model "$work" --spec fixed:0 2>&1) && { echo "FAIL: --spec fixed:0 accepted"; fail=1; }
echo "$out" | grep -q -- '--spec fixed:0' || { echo "FAIL: --spec fixed:0: no reason given: $out"; fail=1; }

"$tide" synth --shape tiny -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
if [ ! -f "$work/tiny/tokenizer.json" ]; then
  msg="no stand-in tokenizer for the synthetic model; run scripts/oracle-deps.sh"
  [ "${CI:-}" = true ] && { echo "FAIL: $msg"; exit 1; }
  echo "SKIP: $msg"; exit 0
fi
source "$src/tests/serve_start.sh"
serve_start "$tide" "$work" --model "$work/tiny" --spec fixed:3 || exit 1

r=$(http POST /v1/completions '{"model":"m","prompt":[11,12,13,14],"max_tokens":8,"temperature":0}')
echo "$r" | head -1 | grep -q ' 200 ' || { echo "FAIL: completion: $r"; fail=1; }
echo "$r" | grep -q '"completion_tokens":8' || { echo "FAIL: not 8 tokens: $r"; fail=1; }
m=$(http GET /metrics)
v=$(echo "$m" | sed -n 's/^tide_spec_drafts_verified_total \([0-9][0-9]*\).*/\1/p')
[ -n "$v" ] && [ "$v" -gt 0 ] || { echo "FAIL: no drafts verified in /metrics"; echo "$m" | grep spec; fail=1; }
echo "$m" | grep -q '^tide_spec_acceptance_ratio ' || { echo "FAIL: no tide_spec_acceptance_ratio"; fail=1; }
echo "$m" | grep -q '^tide_spec_request_acceptance_ratio_count 1$' || { echo "FAIL: per-request histogram"; echo "$m" | grep spec; fail=1; }

kill -TERM "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || { echo "FAIL: no exit within 30 s of SIGTERM"; fail=1; }
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "FAIL: tide serve exited $rc after SIGTERM"; cat "$work/serve.err"; fail=1; }
if grep -qE 'Sanitizer|runtime error|leak' "$work/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "sh_serve_spec: all passed"
exit $fail
