# Sourced by the tide serve tests: serve_start TIDE WORKDIR ARGS... starts
# `tide serve ARGS --port 0` in the background, waits (at most 60 s) for its
# "listening" line, and sets $pid and $port. Output in WORKDIR/serve.out|err.
serve_start() {
  local tide=$1 work=$2
  shift 2
  "$tide" serve "$@" --port 0 >"$work/serve.out" 2>"$work/serve.err" &
  pid=$!
  port=
  for _ in $(seq 600); do
    port=$(sed -n 's/^tide serve: listening on http:.*:\([0-9][0-9]*\)$/\1/p' "$work/serve.out")
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: tide serve did not start"; cat "$work/serve.err"
  return 1
}
