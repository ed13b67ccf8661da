#!/usr/bin/env bash
# The bundled trained model, models/tide-mini (docs/tide-mini.md):
#   - every file in its SHA256SUMS is present and has that sha256;
#   - tide eval on its committed held-out slice, as tests/data/tide-mini-eval.json
#     says (the file, the windows, the figures), gives a perplexity within 1 %
#     of the figure docs/tide-mini.md reports for the quantised model in tide
#     (CPU) and within 1 % of the trainer's own figure for the same checkpoint;
#   - tide run --prompt prints words.
# TIDE_MINI=DIR and TIDE_MINI_FIGURES=FILE check another model.
# Usage: sh_tide_mini.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
py=${TIDE_PYTHON:-/usr/bin/python3}
m=${TIDE_MINI:-$src/models/tide-mini}
figures=${TIDE_MINI_FIGURES:-$src/tests/data/tide-mini-eval.json}
if [ ! -f "$m/config.json" ] || [ ! -f "$figures" ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL: no $m/config.json or no $figures (the bundled model is missing)"; exit 1; fi
  echo "SKIP: no $m/config.json or no $figures"; exit 0
fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. Checksums: every listed file, and the files that make the model are listed.
sums=$m/SHA256SUMS
[ -s "$sums" ] || sums=$m/sha256sums
if [ ! -s "$sums" ]; then
  fail "no $m/SHA256SUMS"
else
  (cd "$m" && sha256sum --check --strict --quiet "$(basename "$sums")") || fail "$sums does not match"
  for f in config.json tokenizer.json generation_config.json heldout.txt; do
    grep -qE "^[0-9a-f]{64}  (\./)?$f\$" "$sums" || fail "$f is not in $sums"
  done
  n=$(cd "$m" && ls *.safetensors 2>/dev/null | wc -l)
  listed=$(grep -cE '\.safetensors$' "$sums")
  [ "$n" -ge 1 ] && [ "$n" = "$listed" ] || fail "$n safetensors files, $listed listed in $sums"
fi

# The figures are of this very model (a retrained model needs them re-measured).
"$py" - "$figures" "$m" <<'PY' || fail "$figures holds the figures of another model: re-measure them (docs/tide-mini.md)"
import hashlib, json, sys
want = json.load(open(sys.argv[1]))["model_sha256"]
bad = [f for f, h in want.items() if hashlib.sha256(open(f"{sys.argv[2]}/{f}", "rb").read()).hexdigest() != h]
for f in bad: print(f"  {f}: sha256 differs from the one the figures were measured on")
sys.exit(1 if bad else 0)
PY

# 2. The held-out perplexity, as the figures file says to measure it.
eval "$("$py" - "$figures" <<'PY'
import json, shlex, sys
e = json.load(open(sys.argv[1]))["heldout"]
args = ["--text", e["text"], "--ctx", str(e["ctx"]), "--stride", str(e["stride"])]
if not e.get("bos", True): args.append("--no-bos")
if e.get("max_tokens"): args += ["--max-tokens", str(e["max_tokens"])]
print("args=(" + " ".join(shlex.quote(a) for a in args) + ")")
print(f"want_tide={e['ppl_tide_cpu']} want_trainer={e['ppl_trainer_quant']} want_tokens={e['tokens']}")
PY
)" || { echo "FAIL: reading $figures"; exit 1; }
args[1]=$m/${args[1]}
t0=$(date +%s)
res=$("$tide" eval --model "$m" "${args[@]}" --json -q --threads "$(nproc)") || fail "tide eval: $res"
echo "sh_tide_mini: tide eval ${args[*]}: $res ($(( $(date +%s) - t0 )) s)"
"$py" - "$res" "$want_tide" "$want_trainer" "$want_tokens" <<'PY' || fail "held-out perplexity"
import json, sys
r = json.loads(sys.argv[1]); tide, trainer, tokens = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
bad = []
if r["tokens"] != tokens: bad.append(f"{r['tokens']} tokens scored, the figures file says {tokens}")
for what, want in (("docs/tide-mini.md's tide figure", tide), ("the trainer's", trainer)):
    if abs(r["ppl"] - want) > 0.01 * want: bad.append(f"ppl {r['ppl']:.4f} is not within 1 % of {what}, {want}")
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY

# 3. Text out.
out=$("$tide" run --model "$m" --prompt "Define the word \"river\"." --max-tokens 24 2>"${TMPDIR:-/tmp}/mini.$$")
grep -q "[A-Za-z][A-Za-z]" <<<"$out" || fail "tide run --prompt printed '$out': $(cat "${TMPDIR:-/tmp}/mini.$$")"
rm -f "${TMPDIR:-/tmp}/mini.$$"
echo "sh_tide_mini: tide run: $out"

[ "$fails" = 0 ] && echo "sh_tide_mini: all passed" || echo "sh_tide_mini: $fails failure(s)"
[ "$fails" = 0 ]
