#!/usr/bin/env bash
# Images through tide serve and the real clients: `tide synth --shape tiny
# --vision`, `tide serve` with --max-images 2 --max-image-pixels 20000, then
# tools/npm/serve_vision.mjs (openai and @anthropic-ai/sdk: image_url,
# input_image and base64 image blocks give completions; remote URLs,
# truncated, hostile, too many, too large and non-base64 images get 400s in
# each API's error shape); SIGTERM must drain and exit 0.
# Usage: sh_serve_vision.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
npm=$src/tools/npm
if [ ! -d "$npm/node_modules/openai" ] || [ ! -d "$npm/node_modules/@anthropic-ai/sdk" ]; then
  msg="$npm/node_modules lacks openai or @anthropic-ai/sdk; run scripts/oracle-deps.sh"
  [ "${CI:-}" = true ] && { echo "FAIL: $msg"; exit 1; }
  echo "SKIP: $msg"; exit 0
fi
command -v node >/dev/null || { echo "FAIL: node is missing"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_serve_vision.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
seed=$(( ${TIDE_TEST_SEED:-$(date +%s%N)} % 1000000 + 1 ))
echo "seed $seed (TIDE_TEST_SEED)"
"$tide" synth --shape tiny --vision --seed "$seed" -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
"$tide" serve --help | grep -q -- '--max-images' || { echo "FAIL: --help lacks --max-images"; fail=1; }
source "$src/tests/serve_start.sh"
serve_start "$tide" "$work" --model "$work/tiny" --api-key test-key --max-images 2 --max-image-pixels 20000 || exit 1
timeout 120 node "$npm/serve_vision.mjs" "http://127.0.0.1:$port" test-key "$seed" || fail=1
kill -TERM "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || { echo "FAIL: no exit within 30 s of SIGTERM"; fail=1; }
wait "$pid" || rc=$?
pid=
[ $rc -eq 0 ] || { echo "FAIL: tide serve exited $rc after SIGTERM"; cat "$work/serve.err"; fail=1; }
if grep -qE 'Sanitizer|runtime error|leak' "$work/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "sh_serve_vision: all passed"
exit $fail
