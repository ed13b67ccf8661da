#!/usr/bin/env bash
# Issue 11's server benchmark in one go, for a quiet machine (the GPU
# machine's CPUs, in one device-tool call): what `tide serve` adds to the
# time to first token and to throughput against `tide bench offline` on the
# same workload (docs/perf.md, "tide bench serve").
#
#   bash tools/bench/serve_quiet.sh
#
# Builds the CPU-only tide with scripts/gpu/build.sh (the libraries from
# .gpu-debs, see there) unless TIDE_BIN names a tide already built; needs
# the stand-in tokenizer at .deps/tokenizer/deepseek-v41-standin.json.
# Then, on synth tiny seed 7, engine threads 2 on both sides:
#   1. TTFT: a server with --max-seqs 1 --http-threads 1, TIDE_LOG=debug;
#      SEEDS (default 21-30) x 20 sequential requests of 8 tokens, each
#      seed's workload also through offline (--offline, --concurrency 1);
#      the files for tools/bench/serve_overhead.py and ttft_pair.py.
#   2. Throughput, sequential: 32 requests of 16 tokens, --concurrency 1,
#      the same server, REPS (default 3) times.
#   3. Throughput, all at once: a server with the defaults (--max-seqs 64),
#      16 requests of 16 tokens sent together, REPS times.
# Everything goes to $OUT (env.log, build.log, serve1.err, serve2.err,
# ttft.tar.gz, bench.log); the figures are read off bench.log and with the
# two python tools afterwards. Exit status 0 when every step ran.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tide-serve-quiet}
W=${TIDE_WORK:-/tmp/tide-serve-quiet-work}
SEEDS=${SEEDS:-"21 22 23 24 25 26 27 28 29 30"}
REPS=${REPS:-3}
mkdir -p "$OUT" "$W"
t0=$(date +%s)
# No new seed of step 1 starts after T1_S seconds, no new run of the other
# steps after BUDGET_S (the device call's limit is 240 s).
T1_S=${T1_S:-100} BUDGET_S=${BUDGET_S:-175}
left() { [ $(($(date +%s) - t0)) -lt "${1:-$BUDGET_S}" ]; }
say() { echo "=== $(($(date +%s) - t0)) s: $*" | tee -a "$OUT/bench.log"; }
{
  date -u
  uname -a
  grep PRETTY_NAME /etc/os-release
  echo "cores: $(nproc)"
  grep -m1 "model name" /proc/cpuinfo
  echo "loadavg: $(cat /proc/loadavg)"
} >"$OUT/env.log" 2>&1

if [ -z "${TIDE_BIN:-}" ]; then
  say build
  if ! TIDE_GPU_TARGETS=tide_cli bash scripts/gpu/build.sh "$W/build" -DTIDE_CUDA=OFF -DTIDE_GPU_TESTS=OFF \
    >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    exit 1
  fi
  export LD_LIBRARY_PATH=${TIDE_PREFIX:-/tmp/tide-prefix}/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  TIDE_BIN=$W/build/tide
fi
tide=$TIDE_BIN
M=$W/tiny
say synth
"$tide" synth --shape tiny --seed 7 -o "$M" --tokenizer .deps/tokenizer/deepseek-v41-standin.json \
  >>"$OUT/bench.log" 2>&1 || exit 1

srv_pid=
port=
health_ok() { # GET /health answers 200 (bash's /dev/tcp: the image need not have curl)
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf 'GET /health HTTP/1.0\r\nHost: x\r\n\r\n' >&3
  read -r -t 2 line <&3
  exec 3<&-
  [[ $line == *" 200 "* ]]
}
start_server() { # log args...
  local log=$1; shift
  port=$((18700 + RANDOM % 1000))
  TIDE_LOG=debug "$tide" serve --model "$M" --port "$port" "$@" 2>"$log" &
  srv_pid=$!
  for _ in $(seq 200); do
    health_ok && return 0
    sleep 0.1
  done
  echo "the server did not become ready" | tee -a "$OUT/bench.log"
  return 1
}
stop_server() { kill -TERM "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; }
bench() { "$tide" bench serve --url "http://127.0.0.1:$port" --model "$M" "$@" >>"$OUT/bench.log" 2>&1; }

say "1. TTFT (server --max-seqs 1 --http-threads 1; loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
start_server "$OUT/serve1.err" --max-seqs 1 --http-threads 1 || exit 1
mkdir -p "$W/ttft"
for s in $SEEDS; do
  left "$T1_S" || break
  echo "--- seed $s" >>"$OUT/bench.log"
  bench --requests 20 --gen 8 --concurrency 1 --seed "$s" --offline --max-seqs 1 --ttft-out "$W/ttft/ttft.$s"
  tar -czf "$OUT/ttft.tar.gz" -C "$W" ttft
done
py=${PY:-python3}
files=$(ls "$W"/ttft/ttft.* | grep -v offline)
# shellcheck disable=SC2086
{ $py tools/bench/serve_overhead.py "$OUT/serve1.err" $files; $py tools/bench/ttft_pair.py $files; } >>"$OUT/bench.log" 2>&1

say "2. throughput, sequential (the same server)"
for r in $(seq "$REPS"); do
  left || break
  echo "--- rep $r" >>"$OUT/bench.log"
  bench --requests 32 --gen 16 --concurrency 1 --offline --max-seqs 1
done
stop_server

say "3. throughput, all at once (server defaults; loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
start_server "$OUT/serve2.err" || exit 1
for r in $(seq "$REPS"); do
  [ "$r" = 1 ] || left || break
  echo "--- rep $r" >>"$OUT/bench.log"
  bench --requests 16 --gen 16 --offline
done
stop_server
grep -v "serve: timing\|http: " "$OUT/serve2.err" | tail -5 >>"$OUT/bench.log"
say "done (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
