#!/usr/bin/env bash
# Run on the GPU machine, in one device-tool call:
#   build (scripts/gpu/build.sh), the GPU tests, compute-sanitizer (memcheck
#   on every test, racecheck on the kernels that share memory, small shapes),
#   the SASS check (tensor-core instructions present) and the benchmark.
#   Every tests/gpu/gpu_test_* program is run (the op tests: gpu_test_attn,
#   _hc, _rope_fp4, _index, _moe, _experts, _linear, _elementwise, besides
#   rmsnorm, quant_fp8 and gemm).
# Full logs go to $OUT (env.log, build.log, tests.log, sass.txt,
# sanitizer.log, bench.log); a summary table is written LAST to $OUT/summary.md and printed,
# so it ends the tool's output tail. Exit status: 0 when every step passed.
#
#   device run:  bash scripts/gpu/check.sh      (carry: [".gpu-debs"])
#
# Step "step-bench" (not in the default list): tide bench decode|prefill
# --backend cuda on flash-ep8, see section 6.
# TIDE_TEST_SEED fixes the tests' random inputs (default: a fresh seed,
# printed in the summary). TIDE_GPU_STEPS picks the steps (default
# "tests engine sass sanitizer bench"; the build always runs, and is incremental when
# the machine still has the build directory of an earlier call).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tide-gpu-out}
mkdir -p "$OUT"
B=${TIDE_GPU_BUILD:-/tmp/tide-gpu-build}
export TIDE_TEST_SEED=${TIDE_TEST_SEED:-$(( ($(date +%s) << 16) ^ $$ ))}
steps=()
overall=0
want=" ${TIDE_GPU_STEPS:-tests engine sass sanitizer bench} "
on() { case "$want" in *" $1 "*) return 0 ;; esac; return 1; }
t_start=$(date +%s)

step() { # name status seconds note
  steps+=("| $1 | $2 | $3 s | $4 |")
  [ "$2" = PASS ] || [ "$2" = SKIP ] || overall=1
  echo "=== $1: $2 ($3 s) $4"
}
timed() { # log cmd... ; sets rc and secs
  local log=$1; shift
  local t0; t0=$(date +%s)
  "$@" >>"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
}

# 0. What the machine has.
{
  date -u
  uname -a
  grep PRETTY_NAME /etc/os-release
  echo "cores: $(nproc)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  for t in nvcc cmake ninja gcc g++ make pkg-config pkgconf dpkg ar compute-sanitizer cuobjdump python3; do
    printf '%-18s %s\n' "$t" "$(command -v $t || echo MISSING)"
  done
  nvcc --version | tail -2
  cmake --version | head -1
  gcc --version | head -1
  ls -d /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null
} >"$OUT/env.log" 2>&1
export PATH=$PATH:/usr/local/cuda/bin

# 1. Build.
timed "$OUT/build.log" bash scripts/gpu/build.sh "$B"
relaxed=$(grep -c "WARNINGS-AS-ERRORS RELAXED" "$OUT/build.log")
if [ $rc -eq 0 ]; then
  step build PASS "$secs" "$( [ "$relaxed" -gt 0 ] && echo 'only with -Wno-error, see build.log' || echo 'strict (-Werror)')"
else
  step build FAIL "$secs" "see build.log"
fi
export LD_LIBRARY_PATH=${TIDE_PREFIX:-/tmp/tide-prefix}/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

tests=()
for t in "$B"/gpu_test_*; do [ -x "$t" ] && tests+=("$t"); done
tests_run=("${tests[@]}")
# TIDE_GPU_ONLY="model gemm ..." keeps the gpu_test_<name> programs named
# (tests and sanitizer steps), TIDE_GPU_SAN_ONLY the same for the sanitizer
# steps alone, to spend little device time on a re-check.
if [ -n "${TIDE_GPU_ONLY:-}" ]; then
  tests_run=()
  for n in $TIDE_GPU_ONLY; do [ -x "$B/gpu_test_$n" ] && tests_run+=("$B/gpu_test_$n"); done
  tests=("${tests_run[@]}")
fi

# 2. Tests (full shapes).
on tests || tests_run=()
for t in "${tests_run[@]}"; do
  n=$(basename "$t")
  timed "$OUT/tests.log" timeout 180 "$t"
  case $rc in
    0) step "$n" PASS "$secs" "" ;;
    77) step "$n" SKIP "$secs" "no GPU" ;;
    *) step "$n" FAIL "$secs" "exit $rc, see tests.log" ;;
  esac
done

# 3. SASS: which tensor-core instructions the kernels use (QMMA/QGMMA: fp8
#    native; HMMA: f16, which is how Hopper runs an fp8 mma.sync).
if ! on sass; then :
elif [ -x "$B/gpu_test_gemm" ] && command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump --dump-sass "$B/gpu_test_gemm" >"$OUT/sass.txt" 2>&1
  q=$(grep -c "QMMA" "$OUT/sass.txt"); h=$(grep -c "HMMA" "$OUT/sass.txt")
  ldl=$(grep -cE "\bLDL\b|\bSTL\b" "$OUT/sass.txt")
  qg=$(grep -c "QGMMA" "$OUT/sass.txt")
  step sass "$([ $((q + h + qg)) -gt 0 ] && echo PASS || echo FAIL)" 0 "QGMMA $qg, QMMA $q, HMMA $h lines; LDL/STL $ldl lines"
  grep -E "Function : |QMMA|HMMA" "$OUT/sass.txt" | awk '/Function/{f=$0} /MMA/{c[f]++} END{for(k in c) print k, c[k]}' >"$OUT/sass.txt.tmp"
  mv "$OUT/sass.txt.tmp" "$OUT/sass.txt"
else
  step sass SKIP 0 "no cuobjdump or no library"
fi

# 4. compute-sanitizer on small shapes.
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if ! on sanitizer; then :
elif [ -n "$cs" ]; then
  san_only=" ${TIDE_GPU_SAN_ONLY:-} "
  keep() { [ "$san_only" = "  " ] || [[ $san_only == *" ${1#gpu_test_} "* ]]; }
  for t in "${tests[@]}"; do
    n=$(basename "$t")
    keep "$n" || continue
    echo "### memcheck $n" >>"$OUT/sanitizer.log"
    TIDE_GPU_SMALL=1 timed "$OUT/sanitizer.log" timeout 60 "$cs" --tool memcheck --error-exitcode 99 "$t"
    step "memcheck $n" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$secs" "$([ $rc -eq 0 ] || echo "exit $rc")"
  done
  # racecheck: the kernels that share memory between threads (GEMM tiles,
  # RMSNorm, and the op kernels: attention, hc mixes, indexer top-k, routing,
  # the grouped expert GEMMs and their bucketing, the f32 linear's tiles,
  # engram_mix and argmax)
  for t in "$B/gpu_test_gemm" "$B/gpu_test_rmsnorm" "$B/gpu_test_attn" "$B/gpu_test_hc" \
           "$B/gpu_test_index" "$B/gpu_test_moe" "$B/gpu_test_experts" "$B/gpu_test_linear" \
           "$B/gpu_test_elementwise"; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    keep "$n" || continue
    echo "### racecheck $n" >>"$OUT/sanitizer.log"
    TIDE_GPU_SMALL=1 timed "$OUT/sanitizer.log" timeout 90 "$cs" --tool racecheck --error-exitcode 99 "$t"
    step "racecheck $n" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$secs" "$([ $rc -eq 0 ] || echo "exit $rc")"
  done
else
  step compute-sanitizer SKIP 0 "not found"
fi

# 5. Benchmark.
if on bench && [ -x "$B/gpu_bench_kernels" ]; then
  timed "$OUT/bench.log" timeout 120 "$B/gpu_bench_kernels"
  case $rc in
    0) step bench PASS "$secs" "" ;;
    77) step bench SKIP "$secs" "no GPU" ;;
    *) step bench FAIL "$secs" "exit $rc, see bench.log" ;;
  esac
fi

# 6. The device-resident step on flash-ep8 (tide bench decode|prefill
#    --backend cuda): TIDE_STEP_BENCH lists "decode:B:C" / "prefill:L" runs
#    (default: the issue's grid); --gemm-tflops TIDE_GEMM_TFLOPS when set.
if on step-bench && [ -x "$B/tide" ]; then
  runs=${TIDE_STEP_BENCH:-"decode:1:4096 decode:32:4096 decode:256:4096 decode:1:131072 decode:32:131072 decode:256:131072 prefill:8192"}
  gt=()
  [ -n "${TIDE_GEMM_TFLOPS:-}" ] && gt=(--gemm-tflops "$TIDE_GEMM_TFLOPS")
  for r in $runs; do
    IFS=: read -r kind a c <<<"$r"
    if [ "$kind" = decode ]; then
      args=(decode --backend cuda --model synth:flash-ep8 --batch "$a" --context "$c" --steps 5 --warmup 1 "${gt[@]}" ${TIDE_STEP_BENCH_ARGS:-})
    else
      args=(prefill --backend cuda --model synth:flash-ep8 --len "$a" --steps "${TIDE_PREFILL_STEPS:-1}" --warmup 1 "${gt[@]}" ${TIDE_STEP_BENCH_ARGS:-})
    fi
    echo "### tide bench ${args[*]}" >>"$OUT/step-bench.log"
    lim=${TIDE_STEP_BENCH_S:-30}
    [ "$kind" = prefill ] && lim=${TIDE_PREFILL_BENCH_S:-60}
    timed "$OUT/step-bench.log" timeout "$lim" "$B/tide" bench "${args[@]}"
    step "tide bench $r" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$secs" "$([ $rc -eq 0 ] || echo "exit $rc")"
  done
fi

# 6b. The engine on the GPU (step "engine", in the default list): tide run
#     --backend cuda against the CPU engine on one 32-request workload with
#     chunked prefills, prefix-cache hits with bounded replay and
#     preemptions, tiny and small (tests/gpu/engine_equiv.sh).
if on engine && [ -x "$B/tide" ]; then
  timed "$OUT/engine.log" timeout 400 bash tests/gpu/engine_equiv.sh "$B/tide" /tmp/tide-engine-equiv
  grep -h '^RESULT|' "$OUT/engine.log" >>"$OUT/tests.log"
  step "engine (cpu vs cuda)" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$secs" "$([ $rc -eq 0 ] || echo "exit $rc, see engine.log")"
fi

# 7. Summary, last.
{
  echo "# tide GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'device ' "$OUT/tests.log" 2>/dev/null | sed 's/^[^:]*: device //')"
  echo "seed $TIDE_TEST_SEED, total $(( $(date +%s) - t_start )) s"
  echo
  echo "| step | status | time | note |"
  echo "| --- | --- | --- | --- |"
  printf '%s\n' "${steps[@]}"
  echo
  echo "| program | case | result | measured |"
  echo "| --- | --- | --- | --- |"
  grep -h '^RESULT|' "$OUT/tests.log" 2>/dev/null | sed -e 's/^RESULT|/| /' -e 's/$/ |/' -e 's/|/ | /g' -e 's/  */ /g' -e 's/^ //'
  echo
  echo "| kernel | shape | median | rate |"
  echo "| --- | --- | --- | --- |"
  grep -h '^BENCH|' "$OUT/bench.log" 2>/dev/null | sed -e 's/^BENCH|/| /' -e 's/$/ |/' -e 's/|/ | /g' -e 's/  */ /g' -e 's/^ //'
  if [ -f "$OUT/step-bench.log" ]; then
    echo
    echo "## tide bench --backend cuda (flash-ep8, device-resident step)"
    echo
    echo '```'
    grep -E "^### |^tide bench|step time|throughput|roofline time|roofline/measured|memory|launches|output|ceilings|failed|error|profile|^    [a-z]" \
      "$OUT/step-bench.log"
    echo '```'
  fi
  echo
  echo "overall: $([ $overall -eq 0 ] && echo PASS || echo FAIL)"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $overall
