#!/usr/bin/env bash
# tide run --backend cuda through the engine on the CUDA ops table, with the
# host stand-in of the kernels (tests/gpu/fake_cuda.c: the CPU ops behind
# bounds-checked fake device memory), against the plain CPU run: the tokens
# must be identical (one greedy request and a sampled JSONL batch with
# several requests at once); --kernels fast is accepted; the plain tide on
# this GPU-less machine says why --backend cuda cannot run; bad names are
# usage errors.   usage: run_cuda_fake.sh TIDE TIDE_CUDA_FAKE
set -euo pipefail
tide=$1 fake=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$tide" synth --shape tiny --seed 7 -o "$d/m" >/dev/null 2>&1
ids=3,17,99,4,250,6,7,8,1000,31
cpu=$("$tide" run --model "$d/m" --prompt-ids "$ids" --max-tokens 12 2>/dev/null)
gpu=$(TIDE_LOG=info "$fake" run --model "$d/m" --prompt-ids "$ids" --max-tokens 12 --backend cuda 2>"$d/err") || {
  cat "$d/err"; fail "tide run --backend cuda (fake) failed"; }
[ -n "$cpu" ] && [ "$cpu" = "$gpu" ] || fail "greedy tokens differ: cpu '$cpu' cuda '$gpu'"
# the weights are bound at load (one progress line) and no step uploads any
grep -qE "^tide: weights on the GPU: [0-9.]+ GB in" "$d/err" || fail "no load progress line: $(cat "$d/err")"
grep -qE "cuda ops: [1-9][0-9]* weight bytes bound at load, 0 weight uploads after it" "$d/err" ||
  fail "weights not bound at load, or uploaded during the steps: $(grep 'cuda ops:' "$d/err")"
# a device too small for the weights: refused before anything runs, with the sizes and the advice
set +e
TIDE_FAKE_DEVICE_MEM=100000000 "$fake" run --model "$d/m" --prompt-ids "$ids" --max-tokens 2 --backend cuda \
  >"$d/small.out" 2>"$d/small.err"; rc=$?
set -e
[ $rc != 0 ] || fail "a model larger than the device was accepted"
[ ! -s "$d/small.out" ] || fail "tokens printed although the model does not fit"
grep -qE "does not fit on this GPU: its weights need [0-9.]+ GiB.*free of 0.09 GiB.*expert-parallel" "$d/small.err" ||
  fail "unclear does-not-fit message: $(cat "$d/small.err")"
grep -qE "not freed|not inside" "$d/small.err" && fail "fake device memory misuse after refusal: $(cat "$d/small.err")"
grep -qE "not freed|not inside" "$d/err" && fail "fake device memory misuse: $(cat "$d/err")"
fast=$("$fake" run --model "$d/m" --prompt-ids "$ids" --max-tokens 12 --backend cuda --kernels fast 2>/dev/null)
[ "$fast" = "$cpu" ] || fail "--kernels fast on the fake (CPU kernels) differs"
# a batch: sampled and greedy requests together, sharing steps
for i in $(seq 1 8); do
  printf '{"id":"r%d","prompt_ids":[%d,%d,%d,5,6,7,8,9,10,11,12,13],"max_tokens":%d,"seed":%d,"temperature":0.8}\n' \
    "$i" "$i" "$((i * 7))" "$((i * 131))" "$((3 + i))" "$i"
done >"$d/in.jsonl"
"$tide" run --model "$d/m" --input "$d/in.jsonl" --output "$d/cpu.jsonl" --max-seqs 4 2>/dev/null
"$fake" run --model "$d/m" --input "$d/in.jsonl" --output "$d/gpu.jsonl" --max-seqs 4 --backend cuda 2>"$d/err" || {
  cat "$d/err"; fail "JSONL batch on the fake failed"; }
[ "$(sort "$d/cpu.jsonl")" = "$(sort "$d/gpu.jsonl")" ] || fail "JSONL results differ: $(diff <(sort "$d/cpu.jsonl") <(sort "$d/gpu.jsonl"))"
[ "$(wc -l <"$d/gpu.jsonl")" = 8 ] || fail "expected 8 results"
# tide eval through the CUDA table: the CPU's perplexity, bit for bit
printf 'The quick brown fox jumps over the lazy dog, and then it rests in the sun. %.0s' 1 2 3 4 >"$d/t.txt"
e1=$("$tide" eval --model "$d/m" --text "$d/t.txt" 2>/dev/null)
e2=$("$fake" eval --model "$d/m" --text "$d/t.txt" --backend cuda 2>"$d/err") || { cat "$d/err"; fail "tide eval --backend cuda (fake) failed"; }
[ -n "$e1" ] && [ "$e1" = "$e2" ] || fail "tide eval differs: cpu '$e1' cuda '$e2'"
# the real tide here has no GPU (and may be built without CUDA): a clear error
if "$tide" run --model "$d/m" --prompt-ids 1,2 --backend cuda >/dev/null 2>"$d/e2"; then
  fail "tide run --backend cuda succeeded on a machine without a GPU"
fi
grep -qE -- "--backend cuda: .*(no CUDA device|built without the CUDA backend|CUDA)" "$d/e2" || fail "unclear message: $(cat "$d/e2")"
set +e
"$tide" run --model "$d/m" --prompt-ids 1,2 --backend tpu 2>"$d/e3"; rc=$?
"$tide" run --model "$d/m" --prompt-ids 1,2 --kernels fast 2>"$d/e4"; rc2=$?
set -e
[ $rc = 2 ] && grep -q "expected cpu or cuda" "$d/e3" || fail "bad --backend: rc $rc, $(cat "$d/e3")"
[ $rc2 = 2 ] && grep -q "cuda only" "$d/e4" || fail "--kernels without cuda: rc $rc2, $(cat "$d/e4")"
echo "run_cuda_fake: PASS (greedy $cpu; 8-request batch identical)"
