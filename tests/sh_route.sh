#!/usr/bin/env bash
# tide route (docs/route.md), everything on 127.0.0.1:
#  1. the command line: --help, bad configurations refused with the field named;
#  2. tide bench route on the committed Mooncake and Azure traces: the report's
#     lines, prefix-aware hit rate above round-robin's; bad traces refused with
#     the line;
#  3. a router over 2 prefill + 2 decode tide serve replicas of the tiny model
#     sharing a KV store directory, and a single tide serve: the real openai and
#     @anthropic-ai/sdk clients through the router get the single server's
#     answers (tools/npm/route_clients.mjs), then a decode replica is killed
#     mid-run (no request that had not started streaming is lost);
#  4. disaggregation: a prompt of 300 token ids is prefilled on a prefill
#     replica, whose pages go to the store; the decode replica that answers
#     fetches them and computes only the bounded replay, the tail and the
#     decode steps (its /metrics);
#  5. join and leave at run time (/router/replicas), health (a dead replica is
#     out), SIGTERM (exit 0, no sanitizer report);
#  6. a greedy stream whose decode replica is killed mid-stream is resumed on
#     another replica: one whole stream, equal to the single server's.
# Usage: sh_route.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
npm=$src/tools/npm
data=$src/tests/data/route
work=$(mktemp -d "${TMPDIR:-/tmp}/sh_route.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
[ -n "${TIDE_KEEP:-}" ] && trap "echo kept \$work" EXIT
fail=0
phase() { echo "sh_route: ${SECONDS} s: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# ---- 1. the command line ----
grep -q -- '--config' <<<"$("$tide" route --help)" || bad "--help lacks --config"
"$tide" route >/dev/null 2>&1; [ $? -eq 2 ] || bad "no --config: not exit 2"
check_cfg() { # JSON, a pattern the message must match
  printf '%s' "$1" >"$work/bad.json"
  out=$("$tide" route --config "$work/bad.json" 2>&1) && { bad "accepted: $1"; return; }
  grep -Eq "$2" <<<"$out" || bad "config $1: message '$out' lacks /$2/"
}
check_cfg '{"replicas": [{"url": "http://127.0.0.1:1", "role": "cook"}]}' 'replicas\[0\]: "role"'
check_cfg '{"replicas": [{"url": "ftp://x:1"}]}' 'must start with http://'
check_cfg '{"replicas": [{"url": "http://h:99999"}]}' 'port must be'
check_cfg '{"replicas": [{"url": "http://h:1"}, {"url": "http://h:1/"}]}' 'listed twice'
check_cfg '{"placement": {"bucket_edges": [100, 50]}}' 'bucket_edges.*\[1\]'
check_cfg '{"placement": {"bucket_shares": [1, 2]}}' 'bucket_shares.*4 numbers'
check_cfg '{"placment": {}}' 'unknown field "placment"'
check_cfg '{"health": {"interval_ms": 0}}' 'interval_ms.*out of range'
check_cfg '{"replicas": [' 'line 1'

phase "bench route"
# ---- 2. tide bench route on the traces ----
for t in mooncake_synth.jsonl azure_synth.csv; do
  out=$(timeout 120 "$tide" bench route --trace "$data/$t" 2>&1) || { bad "bench route $t: $out"; continue; }
  for p in '^trace .*: (mooncake|azure), 550 requests' '^aware:$' '^round-robin:$' 'prefill balancedness .*% of ideal' \
           'decode balancedness .*% of ideal' 'TTFT p50/p90/p99 ' 'TPOT p50/p90/p99 '; do
    grep -Eq "$p" <<<"$out" || bad "bench route $t: no /$p/ in: $out"
  done
  hits=$(echo "$out" | sed -n 's/.*hit rate *\([0-9.]*\) %.*/\1/p' | tr '\n' ' ')
  echo "bench route $t: hit rates (aware, round-robin): $hits"
  if [ "$t" = mooncake_synth.jsonl ]; then
    awk -v h="$hits" 'BEGIN { split(h, a, " "); exit !(a[1] > a[2] + 10) }' || bad "aware hit rate not above round-robin's: $hits"
  fi
done
printf '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": -5, "output_length": 1}\n' >"$work/bad.jsonl"
out=$("$tide" bench route --trace "$work/bad.jsonl" 2>&1) && bad "a bad trace accepted"
grep -q 'line 2.*input_length' <<<"$out" || bad "bad trace: message lacks the line and field: $out"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n2023-13-16 18:15:46,10,2\n' >"$work/bad.csv"
out=$("$tide" bench route --trace "$work/bad.csv" 2>&1) && bad "a bad Azure trace accepted"
grep -q 'line 3.*TIMESTAMP' <<<"$out" || bad "bad Azure trace: message lacks the line: $out"

phase "the pool"
# ---- 3. the pool ----
if [ ! -d "$npm/node_modules/openai" ] || [ ! -d "$npm/node_modules/@anthropic-ai/sdk" ]; then
  msg="$npm/node_modules lacks openai or @anthropic-ai/sdk; run scripts/oracle-deps.sh"
  [ "${CI:-}" = true ] && { echo "FAIL: $msg"; exit 1; }
  echo "SKIP (the pool part): $msg"; exit $fail
fi
command -v node >/dev/null || { echo "FAIL: node is missing"; exit 1; }
"$tide" synth --shape tiny -o "$work/tiny" >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
mkdir -p "$work/store"
# the five servers start at once (loading the tiny model takes most of it)
launch() { # NAME ARGS...: a tide serve in the background; pid_NAME
  local name=$1
  shift
  mkdir -p "$work/$name"
  "$tide" serve --model "$work/tiny" --api-key test-key --threads 1 --http-threads 1 "$@" --port 0 \
    >"$work/$name/serve.out" 2>"$work/$name/serve.err" &
  pids+=("$!")
  eval "pid_$name=$!"
}
kv=(--kv-store "$work/store" --kv-nodes 1 --kv-host-mib 1)
launch single
for n in p1 p2 d1 d2; do launch $n "${kv[@]}"; done
listening() { # COMMAND OUT_FILE: the port of its "listening" line (60 s at most)
  local port=
  for _ in $(seq 600); do
    port=$(sed -n "s/^tide $1: listening on http:.*:\\([0-9][0-9]*\\)\$/\\1/p" "$2")
    [ -n "$port" ] && break
    sleep 0.1
  done
  echo "$port"
}
for n in single p1 p2 d1 d2; do
  port=$(listening serve "$work/$n/serve.out")
  [ -n "$port" ] || { echo "FAIL: tide serve $n did not start"; cat "$work/$n/serve.err"; exit 1; }
  eval "port_$n=$port"
done
phase "servers up"
cat >"$work/route.json" <<EOF
{"replicas": [
  {"url": "http://127.0.0.1:$port_p1", "role": "prefill"}, {"url": "http://127.0.0.1:$port_p2", "role": "prefill"},
  {"url": "http://127.0.0.1:$port_d1", "role": "decode"}, {"url": "http://127.0.0.1:$port_d2", "role": "decode"}],
 "health": {"interval_ms": 1000, "timeout_ms": 2000, "fail_threshold": 2}, "retries": 3}
EOF
"$tide" route --config "$work/route.json" --port 0 >"$work/route.out" 2>"$work/route.err" &
rpid=$!
pids+=("$rpid")
rport=$(listening route "$work/route.out")
[ -n "$rport" ] || { echo "FAIL: tide route did not start"; cat "$work/route.err"; exit 1; }
R=http://127.0.0.1:$rport
up=0
for _ in $(seq 100); do
  up=$(curl -s "$R/router/replicas" | grep -o '"up":true' | wc -l)
  [ "$up" -eq 4 ] && break
  sleep 0.1
done
[ "$up" -eq 4 ] || bad "not all 4 replicas up: $(curl -s "$R/router/replicas")"
metric() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }

phase "router up"
# ---- 4. disaggregation: the decode side computes only the bounded replay ----
ids=$(awk 'BEGIN { srand(7); for (i = 0; i < 300; i++) printf "%s%d", i ? "," : "", 1000 + int(rand() * 20000) }')
declare -A before
for n in d1 d2; do
  p=port_$n
  for m in tide_kv_tier_fetched_total tide_engine_tokens_fed_total tide_prefix_replay_tokens_total tide_prefix_cache_hit_tokens_total; do
    before[$n.$m]=$(metric "http://127.0.0.1:${!p}" $m)
  done
done
out=$(curl -s "$R/v1/completions" -H 'Authorization: Bearer test-key' -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$ids], \"max_tokens\": 4, \"temperature\": 0, \"ignore_eos\": true}")
grep -q '"completion_tokens":4' <<<"$out" || bad "disaggregated request: $out"
served=
for n in d1 d2; do
  p=port_$n
  f=$(( $(metric "http://127.0.0.1:${!p}" tide_kv_tier_fetched_total) - ${before[$n.tide_kv_tier_fetched_total]} ))
  [ "$f" -gt 0 ] || continue
  served=$n
  fed=$(( $(metric "http://127.0.0.1:${!p}" tide_engine_tokens_fed_total) - ${before[$n.tide_engine_tokens_fed_total]} ))
  rep=$(( $(metric "http://127.0.0.1:${!p}" tide_prefix_replay_tokens_total) - ${before[$n.tide_prefix_replay_tokens_total]} ))
  hit=$(( $(metric "http://127.0.0.1:${!p}" tide_prefix_cache_hit_tokens_total) - ${before[$n.tide_prefix_cache_hit_tokens_total]} ))
  echo "disaggregation: $n fetched $f pages from the store, hit $hit tokens, replayed $rep, fed $fed tokens in all"
  # 300 = 2 pages of 128 + 44; fed = the replay + the 44 after the hit + 3 decode steps
  [ "$f" -eq 2 ] && [ "$hit" -eq 256 ] || bad "decode replica: $f pages, $hit hit tokens (want 2, 256)"
  [ "$rep" -gt 0 ] && [ "$rep" -le 140 ] || bad "decode replica: replay of $rep tokens (want 1..140)"
  [ "$fed" -eq $((rep + 44 + 3)) ] || bad "decode replica fed $fed tokens, want replay $rep + 44 + 3"
done
[ -n "$served" ] || bad "no decode replica fetched pages from the store: $(curl -s "$R/router/replicas")"
[ "$(metric "$R" tide_route_disaggregated_total)" -ge 1 ] || bad "router: tide_route_disaggregated_total is 0"

phase "disaggregation done"
# ---- 4b. tide bench route against the real replicas: the trace's first requests ----
out=$(timeout 300 "$tide" bench route --trace "$data/mooncake_synth.jsonl" --url "$R" --model "$work/tiny" \
  --api-key test-key --requests 6 --speedup 20 --block-tokens 1 --max-output 2 --window 5 2>&1) ||
  bad "bench route --url: $out"
echo "$out"
for p in '^live: .* 4 replicas, 6 requests' 'requests +6 done, 0 failed' 'TTFT p50/p90/p99 +[0-9.]+ / ' \
         'TPOT p50/p90/p99 +[0-9.]+ / ' 'prefill balancedness +[0-9.]+ per window' 'decode +balancedness +[0-9.]+ per window'; do
  grep -Eq "$p" <<<"$out" || bad "bench route --url: no /$p/"
done
out=$("$tide" bench route --trace "$data/mooncake_synth.jsonl" --url "$R" 2>&1) && bad "bench route --url without --model accepted"
grep -q 'needs --model' <<<"$out" || bad "bench route --url without --model: $out"

# ---- 3. (cont.) the clients, then a decode replica killed mid-run ----
timeout 600 node "$npm/route_clients.mjs" "$R" "http://127.0.0.1:$port_single" test-key "$pid_d1" || fail=1
for _ in $(seq 50); do
  grep -q "\"url\":\"http://127.0.0.1:$port_d1\",\"role\":\"decode\",\"up\":false" <<<"$(curl -s "$R/router/replicas")" && break
  sleep 0.1
done
grep -q "\"url\":\"http://127.0.0.1:$port_d1\",\"role\":\"decode\",\"up\":false" <<<"$(curl -s "$R/router/replicas")" ||
  bad "the killed replica is not out: $(curl -s "$R/router/replicas")"
grep -q "http://127.0.0.1:$port_d1 (decode) is out" "$work/route.err" || bad "no 'is out' line for the killed replica"
retries=$(metric "$R" tide_route_retries_total)
broken=$(metric "$R" tide_route_broken_streams_total)
resumed=$(metric "$R" tide_route_resumed_streams_total)
echo "router after the kill: $retries retries, $broken broken streams, $resumed resumed"
# the kill must have hit requests on the dead replica: a request not yet
# streaming retried elsewhere, or a stream broken or resumed (whose dropped
# connection takes the replica out before any other request is sent there)
[ $((${retries:-0} + ${broken:-0} + ${resumed:-0})) -ge 1 ] ||
  bad "the kill hit no request: no retry, no broken or resumed stream"

phase "clients done"
# ---- 5. leave and join at run time ----
out=$(curl -s -X DELETE "$R/router/replicas" -d "{\"url\": \"http://127.0.0.1:$port_d1\"}")
grep -q "$port_d1" <<<"$out" && bad "left replica still listed: $out"
out=$(curl -s -X POST "$R/router/replicas" -d "{\"url\": \"http://127.0.0.1:$port_single\", \"role\": \"mixed\"}")
grep -q "\"url\":\"http://127.0.0.1:$port_single\",\"role\":\"mixed\"" <<<"$out" || bad "join: $out"
out=$(curl -s -X POST "$R/router/replicas" -d '{"url": "nope"}')
grep -q 'must start with http://' <<<"$out" || bad "join of a bad url: $out"
for _ in $(seq 50); do
  [ "$(curl -s "$R/router/replicas" | grep -o '"up":true' | wc -l)" -eq 4 ] && break
  sleep 0.1
done
[ "$(curl -s "$R/router/replicas" | grep -o '"up":true' | wc -l)" -eq 4 ] || bad "the joined replica is not up"

phase "join done"
# ---- 6. stream resumption: the last decode replica killed mid-stream ----
# A greedy stream (reproducible) is resumed on the mixed replica: the client
# gets one whole stream, equal to the single server's, and no error event.
sse_text() { # SSE on stdin -> {"t": the content, "chunks": N, "err": 0|1, "done": 0|1}
  node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    const r = { t: "", chunks: 0, err: 0, done: 0 };
    for (const l of s.split("\n")) {
      if (!l.startsWith("data: ")) continue;
      if (l === "data: [DONE]") { r.done = 1; continue; }
      const o = JSON.parse(l.slice(6)), c = o.choices && o.choices[0];
      if (o.error) r.err = 1;
      if (c && c.delta && c.delta.content) r.t += c.delta.content, r.chunks++;
    }
    process.stdout.write(JSON.stringify(r));
  });'
}
body='{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24, "temperature": 0, "ignore_eos": true, "stream": true}'
want=$(curl -sN "http://127.0.0.1:$port_single/v1/chat/completions" -H 'x-api-key: test-key' \
  -H 'Content-Type: application/json' -d "$body" | sse_text)
resumed0=$(metric "$R" tide_route_resumed_streams_total)
curl -sN "$R/v1/chat/completions" -H 'x-api-key: test-key' -H 'Content-Type: application/json' -d "$body" \
  >"$work/resume.sse" &
cpid=$!
for _ in $(seq 600); do
  [ "$(grep -c '"content":"[^"]' "$work/resume.sse")" -ge 3 ] && break
  sleep 0.05
done
at_kill=$(grep -c '"content":"[^"]' "$work/resume.sse")
kill -KILL "$pid_d2"
timeout 300 tail --pid="$cpid" -f /dev/null || bad "the resumed stream did not end within 300 s"
got=$(sse_text <"$work/resume.sse")
total=$(node -e "process.stdout.write(String(JSON.parse(process.argv[1]).chunks))" "$want")
echo "resumption: killed at chunk $at_kill of $total; equal to the single server's: $([ "$got" = "$want" ] && echo yes || echo "no: $got vs $want")"
[ "$at_kill" -ge 1 ] && [ "$at_kill" -lt "$total" ] || bad "resumption: the kill did not come mid-stream ($at_kill of $total chunks)"
[ "$got" = "$want" ] || bad "resumption: the resumed stream differs from the single server's"
[ "$(metric "$R" tide_route_resumed_streams_total)" -eq $((resumed0 + 1)) ] || bad "resumption: tide_route_resumed_streams_total did not count it"
grep -q "resumed on http://127.0.0.1:$port_single" "$work/route.err" || bad "resumption: no 'resumed on' line"

kill -KILL "$pid_d2"
out=$(curl -s "$R/v1/chat/completions" -H 'x-api-key: test-key' -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}')
grep -q '"completion_tokens":3' <<<"$out" || bad "request after the last decode replica died: $out"
# no decode replica left: whole requests go to the mixed one
for _ in $(seq 50); do
  grep -q "\"url\":\"http://127.0.0.1:$port_d2\",\"role\":\"decode\",\"up\":false" <<<"$(curl -s "$R/router/replicas")" && break
  sleep 0.1
done
before_single=$(metric "http://127.0.0.1:$port_single" tide_generation_tokens_total)
out=$(curl -s "$R/v1/messages" -H 'x-api-key: test-key' -H 'Content-Type: application/json' \
  -d '{"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}')
grep -q '"type":"message"' <<<"$out" || bad "request with no decode replica: $out"
[ "$(metric "http://127.0.0.1:$port_single" tide_generation_tokens_total)" -gt "$before_single" ] ||
  bad "the mixed replica did not answer the request"

phase "join/leave done"
kill -TERM "$rpid"
rc=0
timeout 30 tail --pid="$rpid" -f /dev/null || bad "tide route: no exit within 30 s of SIGTERM"
wait "$rpid" || rc=$?
[ $rc -eq 0 ] || { bad "tide route exited $rc after SIGTERM"; cat "$work/route.err"; }
grep -q 'stopped' "$work/route.err" || bad "no 'stopped' line"
if grep -qE 'Sanitizer|runtime error|leak' "$work/route.err"; then bad "sanitizer report"; cat "$work/route.err"; fi
[ $fail -eq 0 ] && echo "sh_route: all passed"
exit $fail
