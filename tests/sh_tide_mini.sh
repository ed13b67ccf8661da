#!/usr/bin/env bash
# The bundled trained model, models/tide-mini (docs/tide-mini.md):
#   - every file in its sha256sums is present and has that sha256, and every
#     file of the model is listed;
#   - tide eval on its committed held-out slice, as its eval.json says (the
#     file, the windows, the figures), gives a perplexity within 1 % of the
#     figure docs/tide-mini.md reports for the quantised model in tide (CPU),
#     ppl_tide_cpu, and within 1 % of the trainer's own figure for the same
#     exported checkpoint, ppl_trainer_quant;
#   - tide run --prompt prints words.
# TIDE_MINI=DIR checks another model of the same layout.
# Usage: sh_tide_mini.sh TIDE_EXE SRC_DIR BIN_DIR
set -uo pipefail
tide=$1 src=$2
py=${TIDE_PYTHON:-/usr/bin/python3}
m=${TIDE_MINI:-$src/models/tide-mini}
figures=$m/eval.json
if [ ! -f "$m/config.json" ] || [ ! -f "$figures" ]; then
  if [ "${CI:-}" = true ]; then echo "FAIL: no $m/config.json or no $figures (the bundled model is missing)"; exit 1; fi
  echo "SKIP: no $m/config.json or no $figures"; exit 0
fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. Checksums: every listed file matches, and every file of the model is listed.
sums=$m/sha256sums
if [ ! -s "$sums" ]; then
  fail "no $sums"
else
  (cd "$m" && sha256sum --check --strict --quiet sha256sums) || fail "$sums does not match"
  (cd "$m" && find . -type f ! -name sha256sums | sed 's#^\./##' | sort) > "${TMPDIR:-/tmp}/mini-files.$$"
  sed -E 's|^[0-9a-f]{64}  (\./)?||' "$sums" | sort | comm -23 "${TMPDIR:-/tmp}/mini-files.$$" - > "${TMPDIR:-/tmp}/mini-unlisted.$$"
  [ -s "${TMPDIR:-/tmp}/mini-unlisted.$$" ] && fail "not in sha256sums: $(tr '\n' ' ' < "${TMPDIR:-/tmp}/mini-unlisted.$$")"
  grep -q '\.safetensors$' "$sums" || fail "no safetensors file in $sums"
  rm -f "${TMPDIR:-/tmp}/mini-files.$$" "${TMPDIR:-/tmp}/mini-unlisted.$$"
fi

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
