#!/usr/bin/env bash
# tide serve --backend cuda over the host stand-in of the kernels
# (tests/gpu/fake_cuda.c) with a kernel failure injected
# (TIDE_FAKE_FAIL_AT): the CUDA ops table's sticky error must fail the
# requests of the pass (the engine asks ops->error after every forward
# pass) with the device's message, in each API's error shape, streaming or
# not; the server itself stays up and drains on SIGTERM.
# Usage: serve_cuda_fake.sh TIDE_CUDA_FAKE SRC_DIR
set -uo pipefail
fake=$1 src=$2
command -v node >/dev/null || { echo "FAIL: node is missing"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/serve_cuda_fake.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
"$fake" synth --shape tiny --seed 7 -o "$work/m" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
source "$src/tests/serve_start.sh"
TIDE_FAKE_FAIL_AT=40 serve_start "$fake" "$work" --model "$work/m" --backend cuda || exit 1
out=$(node -e '
const base = process.argv[1];
const post = async (path, body) => {
  const r = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return [r.status, await r.text()];
};
(async () => {
  console.log(JSON.stringify(await post("/v1/completions", { prompt: [3, 17, 99, 4], max_tokens: 4, temperature: 0 })));
  console.log(JSON.stringify(await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 4 })));
  console.log(JSON.stringify(await post("/v1/completions", { prompt: [5, 6, 7], max_tokens: 4, stream: true })));
  console.log(JSON.stringify([(await fetch(base + "/health")).status]));
})();' "http://127.0.0.1:$port" 2>&1)
echo "$out"
l1=$(sed -n 1p <<<"$out") l2=$(sed -n 2p <<<"$out") l3=$(sed -n 3p <<<"$out") l4=$(sed -n 4p <<<"$out")
for l in "$l1" "$l2"; do
  grep -q '^\[500,' <<<"$l" && grep -q 'injected failure' <<<"$l" && grep -q 'backend cuda' <<<"$l" ||
    { echo "FAIL: a request on the failed device: $l"; fail=1; }
done
grep -q '^\[200,' <<<"$l3" && grep -q 'injected failure' <<<"$l3" && grep -q 'DONE' <<<"$l3" ||
  { echo "FAIL: a streamed request on the failed device: $l3"; fail=1; }
[ "$l4" = "[200]" ] || { echo "FAIL: the server is not healthy after a device error: $l4"; fail=1; }
kill -TERM "$pid"; wait "$pid" || { echo "FAIL: exit $? after SIGTERM"; fail=1; }
pid=
grep -q 'the forward pass .* failed' "$work/serve.err" || { echo "FAIL: no log line for the failed pass"; cat "$work/serve.err"; fail=1; }
if grep -qE 'Sanitizer|runtime error|not freed|not inside' "$work/serve.err"; then echo "FAIL: sanitizer or fake-device report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "serve_cuda_fake: PASS"
exit $fail
