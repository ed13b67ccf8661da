# tide bench: every mode briefly on synth:tiny (the output has its fields,
# the synthetic checkpoint's temporary directory is gone afterwards), and
# bad usage exits 2 with a message that names the problem.
# Usage: bash sh_bench.sh TIDE_EXE SRC_DIR BIN_DIR
set -u
TIDE=$1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sh_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/tmp"
export TMPDIR=$WORK/tmp # where synth:tiny is written (and must be removed)
FAIL=0

fail() {
    echo "FAIL: $*"
    FAIL=1
}

# run NAME ARGS...: must exit 0; output in $WORK/NAME.out
run() {
    local name=$1
    shift
    "$TIDE" bench "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    [ $rc -eq 0 ] || { fail "$name: exit $rc"; cat "$WORK/$name.err"; }
}

# has NAME PATTERN...: each extended regex must match a line of NAME's output
has() {
    local name=$1
    shift
    for p in "$@"; do
        grep -Eq -- "$p" "$WORK/$name.out" || { fail "$name: no line matches '$p'"; cat "$WORK/$name.out"; }
    done
}

# usage NAME PATTERN ARGS...: must exit 2 with PATTERN on stderr
usage() {
    local name=$1 pat=$2
    shift 2
    "$TIDE" bench "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2 (usage)"
    grep -Eq -- "$pat" "$WORK/$name.err" || { fail "$name: stderr lacks '$pat'"; cat "$WORK/$name.err"; }
}

NUM='[0-9]+(\.[0-9]+)?'

run offline offline --model synth:tiny --requests 6 --prompt-len 4-12 --gen 3 --seed 7
has offline "^tide bench offline: model synth:tiny, 6 requests" "requests/s +$NUM" "prompt tok/s +$NUM" \
    "generated tok/s +$NUM \(18 tokens\)" "TTFT +p50 $NUM p90 $NUM p99 $NUM +\(ms, 6 samples\)" \
    "inter-token +p50 $NUM p99 $NUM +\(ms, 12 samples\)" "steps +[0-9]+, mean batch $NUM sequences"

# --input: the workload of a JSONL file ('tide run --input' format); every
# line ignores EOS, so the token count is exact (3 + --gen 4 + 2)
printf '%s\n' '{"id": "a", "prompt_ids": [5, 6, 7, 8], "max_tokens": 3, "ignore_eos": true}' '' \
    '{"prompt_ids": [9, 10], "temperature": 0.7, "seed": 3, "ignore_eos": true}' \
    '{"prompt_ids": [11, 12, 13], "max_tokens": 2, "top_k": 5, "ignore_eos": true}' >"$WORK/in.jsonl"
# the pool's KV bytes per token are the roofline's packed figure
kvt=$(sed -nE 's/^  KV bytes\/token +([0-9.]+) in the pool \(roofline packed ([0-9.]+)\).*/\1 \2/p' "$WORK/offline.out")
[ -n "$kvt" ] || fail "offline: no 'KV bytes/token' line"
[ "${kvt% *}" = "${kvt#* }" ] || fail "offline: pool KV bytes/token ${kvt% *} != roofline ${kvt#* }"

run offline_input offline --model synth:tiny --input "$WORK/in.jsonl" --gen 4 --seed 7
has offline_input "^tide bench offline: model synth:tiny, 3 requests from .*in\.jsonl, prompt 2-4 tokens \(9 in all\), seed 7" \
    "requests/s +$NUM" "generated tok/s +$NUM \(9 tokens\)" "TTFT +p50 $NUM p90 $NUM p99 $NUM +\(ms, 3 samples\)" \
    "inter-token +p50 $NUM p99 $NUM +\(ms, 6 samples\)" "steps +[0-9]+, mean batch $NUM sequences"

# failure NAME PATTERN ARGS...: must exit 1 (a runtime failure) with PATTERN on stderr
failure() {
    local name=$1 pat=$2
    shift 2
    "$TIDE" bench "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    [ $rc -eq 1 ] || fail "$name: exit $rc, expected 1 (failure)"
    grep -Eq -- "$pat" "$WORK/$name.err" || { fail "$name: stderr lacks '$pat'"; cat "$WORK/$name.err"; }
}
printf '%s\n' '{"prompt_ids": [5]}' '' '{"prompt_ids": [5], "top_k": "x"}' >"$WORK/bad.jsonl"
failure badline '^tide bench offline: line 3: "top_k": expected an integer, got a string$' \
    offline --model synth:tiny --input "$WORK/bad.jsonl"
printf '{"prompt_ids": [5, 6' >"$WORK/trunc.jsonl"
failure notjson '^tide bench offline: line 1: not JSON' offline --model synth:tiny --input "$WORK/trunc.jsonl"
printf '{"prompt_ids": []}\n' >"$WORK/rejected.jsonl"
failure rejected '^tide bench offline: line 1: request: the prompt is empty' \
    offline --model synth:tiny --input "$WORK/rejected.jsonl"
failure noinput "^tide bench offline: cannot open $WORK/none.jsonl" offline --model synth:tiny --input "$WORK/none.jsonl"

run prefix prefix --model synth:tiny --requests 3 --shared 128 --suffix 4 --gen 2
has prefix "^tide bench prefix: model synth:tiny, 3 requests of 128 shared \+ 4 own tokens" \
    "^ +off +0\.000 +0 +0 +$NUM +$NUM +$NUM +$NUM" "^ +on +$NUM +2 +256 +$NUM" \
    "speed-up \(off / on\): TTFT mean ${NUM}x, p50 ${NUM}x, p99 ${NUM}x, wall ${NUM}x"

run decode decode --model synth:tiny --batch 2 --context 40 --steps 2 --warmup 1 --copy-mib 8
has decode "^tide bench decode: model synth:tiny, batch 2, context 40" "ceilings +copy $NUM [kMG]?B/s.*FP8 GEMM $NUM [kMGT]?FLOP/s" \
    "step +median $NUM ms \(min $NUM, max $NUM; 2 timed after 1 warm-up\)" "throughput +$NUM tokens/s" \
    "roofline bytes +$NUM [kMG]?B = weights" "KV $NUM [kMG]?B \(packed: window" "roofline flops +$NUM [kMGT]?FLOP = GEMM" \
    "roofline time +$NUM ms = max\(bytes/BW $NUM ms, flops/rate $NUM ms\): (memory|compute) bound" \
    "roofline/measured $NUM"

run prefill prefill --model synth:tiny --len 24 --steps 1 --warmup 0 --kv packed --copy-mib 8
has prefill "^tide bench prefill: model synth:tiny, prompt 24 tokens" "step +median $NUM ms" "throughput +$NUM tokens/s" \
    "KV $NUM [kMG]?B \(packed: window" "roofline/measured $NUM"

run roofline roofline --shape flash-ep8 --batch 1,32 --context 4096 --len 8192
has roofline "^tide bench roofline: flash-ep8, KV packed, ceilings 4800 GB/s and 1979 TFLOP/s" \
    "^KV bytes/token $NUM \(the paged pool's latents and index keys\), window rings $NUM MiB per sequence" \
    "^decode B=1 C=4096 +$NUM GB" "^decode B=32 C=4096 " "^prefill L=8192 .* compute +$NUM$"

run help --help
has help "offline" "prefix" "decode" "prefill" "roofline" "replay"
for m in offline prefix decode prefill roofline; do
    run "help_$m" "$m" --help
    has "help_$m" "^usage: tide bench $m"
done
has help_offline "^ +--input FILE +JSONL requests"
# replay is another module's: it must be reached (whatever it says)
"$TIDE" bench replay --help >"$WORK/replay.out" 2>&1
grep -q "replay" "$WORK/replay.out" || fail "replay: not dispatched"

# the synthetic checkpoints are gone
[ -z "$(ls -A "$TMPDIR")" ] || fail "temporary files left behind: $(ls -A "$TMPDIR")"

usage nomode "usage: tide bench MODE"
usage badmode "unknown mode 'fast'" fast
usage unknown "offline: unknown option '--bogus'" offline --model synth:tiny --bogus
usage nomodel "decode: --model is required" decode --batch 2
usage badint "decode: --batch: 'x' is not an integer in 1..4096" decode --model synth:tiny --batch x
usage zero "decode: --batch: '0' is not an integer" decode --model synth:tiny --batch 0
usage novalue "prefill: --len needs a value" prefill --model synth:tiny --len
usage badrange "offline: --prompt-len: '9-3' is not N or A-B" offline --model synth:tiny --prompt-len 9-3
usage badkv "decode: --kv: 'fp16' is neither f32 nor packed" decode --model synth:tiny --kv fp16
usage badlist "roofline: --batch: '1,,2' is not a list" roofline --shape tiny --batch 1,,2
usage badshape "unknown shape \"huge\"" roofline --shape huge
usage both "roofline: give one of --shape and --model" roofline --shape tiny --model synth:tiny
usage inputreq "offline: --input replaces --requests and --prompt-len" offline --model synth:tiny --input x --requests 2
usage onereq "prefix: --requests: '1' is not an integer in 2..100000" prefix --model synth:tiny --requests 1

# a model that does not exist is a failure (1), not a usage error
"$TIDE" bench decode --model "$WORK/none" >/dev/null 2>"$WORK/none.err"
rc=$?
[ $rc -eq 1 ] || fail "missing model: exit $rc, expected 1"
grep -q "tide bench decode: " "$WORK/none.err" || fail "missing model: no message"

[ $FAIL -eq 0 ] && echo "sh_bench: all checks passed"
exit $FAIL
