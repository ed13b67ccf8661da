#!/usr/bin/env bash
# One GPU session in one device-tool call: tide's GPU check (build, kernel and
# whole-model tests, compute-sanitizer, kernel benchmarks: scripts/gpu/check.sh)
# and then the PyTorch baseline (self-test against the numpy reference and its
# benchmarks: tools/torch_ref). Each part is time-boxed so that the whole call
# ends inside the device tool's 10-minute limit even when something hangs.
#
#   device run:  bash scripts/gpu/session.sh      (carry: [".gpu-debs"])
#
# Logs: $OUT/check/ (check.sh's files), $OUT/torch/ (baseline). The combined
# summary is written LAST to $OUT/summary.md and printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tide-gpu-out}
mkdir -p "$OUT/check" "$OUT/torch"
CHECK_S=${TIDE_CHECK_S:-300}
TORCH_S=${TIDE_TORCH_S:-170}
t0=$(date +%s)

OUT=$OUT/check timeout -k 10 "$CHECK_S" bash scripts/gpu/check.sh >"$OUT/check.log" 2>&1
check_rc=$?

torch_want=" ${TIDE_TORCH_STEPS:-selftest bench} "
torch_rc=skip
if [ -f tools/torch_ref/selftest.py ] && [ "$torch_want" != "  " ]; then
  export PYTHONUNBUFFERED=1
  t1=$(date +%s)
  self_rc=skip; bench_rc=skip
  [[ $torch_want == *" selftest "* ]] && { timeout -k 5 75 python3 tools/torch_ref/selftest.py --device cuda --quick --budget-s 60 >"$OUT/torch/selftest.log" 2>&1; self_rc=$?; }
  left=$(( TORCH_S - ($(date +%s) - t1) ))
  [ $left -lt 30 ] && left=30
  [[ $torch_want == *" bench "* ]] && { timeout -k 5 "$left" python3 tools/torch_ref/bench.py --all --out "$OUT/torch" --budget-s $((left - 15)) \
    >"$OUT/torch/bench.log" 2>&1; bench_rc=$?; }
  torch_rc="selftest $self_rc, bench $bench_rc"
fi

{
  echo "# tide GPU session"
  echo
  echo "total $(( $(date +%s) - t0 )) s; check.sh exit $check_rc (124 = timed out after ${CHECK_S} s); torch: $torch_rc"
  echo
  if [ -f "$OUT/check/summary.md" ]; then sed 's/^# tide GPU check/## tide GPU check/' "$OUT/check/summary.md"
  else echo "## check.sh wrote no summary"; tail -30 "$OUT/check.log"; fi
  echo
  echo "## PyTorch baseline"
  echo
  if ls "$OUT"/torch/*.md >/dev/null 2>&1; then cat "$OUT"/torch/*.md
  else tail -20 "$OUT/torch/selftest.log" "$OUT/torch/bench.log" 2>/dev/null; fi
  echo
  echo "selftest (last lines):"
  tail -8 "$OUT/torch/selftest.log" 2>/dev/null
} >"$OUT/summary.md"
cat "$OUT/summary.md"
