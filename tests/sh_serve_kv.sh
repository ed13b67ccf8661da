#!/usr/bin/env bash
# tide serve with the persistent KV store (--kv-store): the traffic class
# of each request's pages comes from its "kv_class" field, else from its
# API key's class (--api-key KEY:agent), else --kv-class; /metrics shows
# the tiers; after SIGTERM (the tiers flushed) `tide kv stat` counts the
# pages by class and `tide kv gc --at` (a fake clock) deletes the agent
# pages 4 days on (TTL 3 days) and the chat ones 8 days on (7 days); the
# server's counters are in the store for kv stat.
# Usage: sh_serve_kv.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
command -v node >/dev/null || { echo "FAIL: node is missing"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_serve_kv.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
"$tide" synth --shape tiny -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
S=$work/store
source "$src/tests/serve_start.sh"
serve_start "$tide" "$work" --model "$work/tiny" --kv-store "$S" --kv-nodes 3 --kv-ec 2+1 \
  --api-key ka:agent --api-key kc:chat --api-key kd || exit 1
# Four requests of 2 full pages (prompts of 300 token ids, distinct), one page
# class each way: ka (agent by key), kc (chat by key), kd (--kv-class default:
# chat), kc with "kv_class": "agent" (the request's field wins).
out=$(node -e '
const base = process.argv[1];
const ask = async (key, seed, extra) => {
  const prompt = Array.from({ length: 300 }, (_, i) => 100 + ((i * 7919 + seed * 104729) % 50000));
  const r = await fetch(base + "/v1/completions", { method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer " + key },
    body: JSON.stringify({ prompt, max_tokens: 1, temperature: 0, ...extra }) });
  return r.status;
};
(async () => {
  const s = [await ask("ka", 1, {}), await ask("kc", 2, {}), await ask("kd", 3, {}), await ask("kc", 4, { kv_class: "agent" }),
             await ask("kc", 5, { kv_class: "weekly" }), await ask("nope", 6, {})];
  console.log(s.join(" "));
  const m = await (await fetch(base + "/metrics")).text();
  console.log(m.split("\n").filter((l) => /^tide_kv/.test(l)).join("\n"));
})();' "http://127.0.0.1:$port" 2>&1)
echo "$out"
[ "$(head -1 <<<"$out")" = "200 200 200 200 400 401" ] || { echo "FAIL: statuses"; fail=1; }
grep -q '^tide_kv_tier_stored_total 8$' <<<"$out" || { echo "FAIL: 8 pages handed to the tiers"; fail=1; }
grep -q '^tide_kv_tier_pages_queued_total 8$' <<<"$out" || { echo "FAIL: 8 pages queued"; fail=1; }
grep -q '^tide_kv_tier_hits_total{tier="store0"} 0$' <<<"$out" || { echo "FAIL: store hits"; fail=1; }
grep -q '^tide_kvstore_encode_bytes_per_second{store="0"}' <<<"$out" || { echo "FAIL: no store metrics"; fail=1; }
kill -TERM "$pid"; wait "$pid" || { echo "FAIL: exit $? after SIGTERM"; cat "$work/serve.err"; fail=1; }
pid=
grep -q 'kv tiers: .* 8 pages written, 0 write errors, 0 dropped' "$work/serve.err" ||
  { echo "FAIL: the tiers' summary"; cat "$work/serve.err"; fail=1; }
st=$("$tide" kv stat --store "$S" --nodes 3 --ec 2+1)
echo "$st"
grep -q '^pages 8 (chat 4, agent 4)' <<<"$st" || { echo "FAIL: classes"; fail=1; }
# the server's counters, persisted in the store (kv stat is a new process)
grep -q '^counters of 1 processes: hits 0, ' <<<"$st" || { echo "FAIL: persisted counters"; fail=1; }
grep -q '^puts 8 (0 failed), ' <<<"$st" || { echo "FAIL: persisted puts"; fail=1; }
now=$(date +%s)
gc=$("$tide" kv gc --store "$S" --nodes 3 --ec 2+1 --at $((now + 4 * 86400)))
grep -q '^pages 8 deleted 4 ' <<<"$gc" || { echo "FAIL: gc 4 days on: $gc"; fail=1; }
st=$("$tide" kv stat --store "$S" --nodes 3 --ec 2+1)
grep -q '^pages 4 (chat 4, agent 0)' <<<"$st" || { echo "FAIL: after 4 days: $st"; fail=1; }
gc=$("$tide" kv gc --store "$S" --nodes 3 --ec 2+1 --at $((now + 8 * 86400)))
grep -q '^pages 4 deleted 4 ' <<<"$gc" || { echo "FAIL: gc 8 days on: $gc"; fail=1; }
# a bad key list is refused
"$tide" serve --model "$work/tiny" --api-key ':agent' --port 0 >/dev/null 2>"$work/e" && { echo "FAIL: empty key accepted"; fail=1; }
grep -q 'empty' "$work/e" || { echo "FAIL: message: $(cat "$work/e")"; fail=1; }
if grep -qE 'Sanitizer|runtime error|leak' "$work/serve.err"; then echo "FAIL: sanitizer report"; cat "$work/serve.err"; fail=1; fi
[ $fail -eq 0 ] && echo "sh_serve_kv: all passed"
exit $fail
