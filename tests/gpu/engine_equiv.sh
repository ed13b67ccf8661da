#!/usr/bin/env bash
# The engine on the GPU (tide run --backend cuda, exact kernels) against the
# engine on the CPU, on the GPU machine (scripts/gpu/check.sh step
# "engine"): for the tiny and small synthetic shapes, one workload of 32
# requests that mixes chunked prefills (--chunk 64), decode, greedy and
# sampled requests, a shared 300-token prefix (prefix-cache hits longer than
# the bounded replay of 140 tokens) and a KV pool small enough to force
# preemptions. Asserted: every request's tokens identical on both backends
# (sampled tokens too, so the logits agree to the sampler's resolution at
# every step), and that the workload really had hits and preemptions.
# Prints RESULT|engine_equiv|SHAPE|PASS/FAIL|... lines; exit 0 when all pass.
#   usage: engine_equiv.sh TIDE [OUTDIR]
set -uo pipefail
tide=$1
tide_gpu=${TIDE_GPU_EXE:-$tide} # the binary that runs --backend cuda (the host stand-in in CI tests)
out=${2:-$(mktemp -d)}
mkdir -p "$out"
py=$(command -v python3)
rc_all=0
for shape in ${TIDE_EQUIV_SHAPES:-tiny small}; do
  d="$out/$shape"
  mkdir -p "$d"
  "$tide" synth --shape "$shape" --seed 3 -o "$d/m" >"$d/synth.log" 2>&1 || { echo "RESULT|engine_equiv|$shape|FAIL|synth failed"; rc_all=1; continue; }
  "$py" - "$d/in.jsonl" <<'PY'
import json, random, sys
r = random.Random(1)
pre = [r.randrange(0, 120000) for _ in range(300)]
with open(sys.argv[1], "w") as f:
    for i in range(32):
        if i % 3 == 0:
            p = pre + [r.randrange(0, 120000) for _ in range(r.randrange(5, 60))]
        else:
            p = [r.randrange(0, 120000) for _ in range(r.randrange(3, 200))]
        f.write(json.dumps({"id": f"r{i}", "prompt_ids": p, "max_tokens": r.randrange(4, 24), "seed": i,
                            "temperature": 0.9 if i % 2 else 0}) + "\n")
PY
  args=(--model "$d/m" --input "$d/in.jsonl" --chunk 64 --max-seqs 8 --kv-blocks 40 --threads 8)
  t0=$(date +%s)
  "$tide" run "${args[@]}" --output "$d/cpu.jsonl" 2>"$d/cpu.log"; rc1=$?
  t1=$(date +%s)
  "$tide_gpu" run "${args[@]}" --backend cuda --output "$d/cuda.jsonl" 2>"$d/cuda.log"; rc2=$?
  t2=$(date +%s)
  last=$(grep "(end)" "$d/cuda.log" | tail -1)
  pre=$(echo "$last" | grep -Eo '[0-9]+ preemptions' | grep -Eo '^[0-9]+')
  hits=$(echo "$last" | grep -Eo 'prefix hits [0-9]+' | grep -Eo '[0-9]+$')
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
    echo "RESULT|engine_equiv|$shape|FAIL|exit cpu $rc1 cuda $rc2: $(tail -1 "$d/cuda.log")"; rc_all=1
  elif [ "$(sort "$d/cpu.jsonl")" != "$(sort "$d/cuda.jsonl")" ]; then
    n=$(diff <(sort "$d/cpu.jsonl") <(sort "$d/cuda.jsonl") | grep -c '^<')
    echo "RESULT|engine_equiv|$shape|FAIL|$n of 32 requests' results differ"; rc_all=1
  elif [ "${pre:-0}" -lt 1 ] || [ "${hits:-0}" -lt 1 ]; then
    echo "RESULT|engine_equiv|$shape|FAIL|workload had ${pre:-0} preemptions, ${hits:-0} prefix-hit tokens"; rc_all=1
  else
    echo "RESULT|engine_equiv|$shape|PASS|32 of 32 requests' tokens identical ($(grep -o "\"completion_tokens\":[0-9]*" "$d/cuda.jsonl" | cut -d: -f2 | awk "{s+=\$1} END{print s}") tokens); ${pre} preemptions, ${hits} prefix-hit tokens; cpu $((t1 - t0)) s, cuda $((t2 - t1)) s"
  fi
done
exit $rc_all
