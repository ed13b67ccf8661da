#!/bin/bash
# Broken checkpoints: tide inspect must exit 1 (never crash on a signal) with a
# message naming the problem. Writes a tiny synthetic checkpoint, then makes
# damaged copies of it (truncated shard, bad header, wrong dtype or shape in a
# header, missing tensor, missing shard, missing config field, inconsistent
# layer list, config that is not JSON) and inspects each.
# Usage: sh_checkpoints.sh TIDE_EXE SRC_DIR BIN_DIR   (env TIDE_PYTHON)
set -u
TIDE=$1
PY=${TIDE_PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tide-shck-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0

check() { # name expected_rc needle command...
    local name=$1 want=$2 needle=$3
    shift 3
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL $name: exit $rc, expected $want"; sed 's/^/  /' "$WORK/err" | head -5; fails=$((fails + 1)); return
    fi
    if [ -n "$needle" ] && ! grep -qF -- "$needle" "$WORK/out" "$WORK/err"; then
        echo "FAIL $name: output lacks '$needle'"; sed 's/^/  /' "$WORK/err" | head -5; fails=$((fails + 1)); return
    fi
    echo "ok   $name"
}

# --- help and usage ---
check "synth --help" 0 "--shape NAME" "$TIDE" synth --help
check "inspect --help" 0 "verifies that every tensor" "$TIDE" inspect --help
check "synth unknown shape" 2 'unknown shape "huge"' "$TIDE" synth --shape huge -o "$WORK/x"
check "synth without -o" 2 "-o DIR are required" "$TIDE" synth --shape tiny
check "synth bad seed" 2 "--seed" "$TIDE" synth --shape tiny -o "$WORK/x" --seed -3
check "synth too many layers" 2 "--layers 11" "$TIDE" synth --shape tiny -o "$WORK/x" --layers 11
check "inspect no args" 2 "" "$TIDE" inspect
check "synth dry run" 0 "would write" "$TIDE" synth --shape flash --dry-run

# --- a good checkpoint ---
G="$WORK/good"
check "synth tiny" 0 "wrote" "$TIDE" synth --shape tiny -o "$G" --seed 7 -q --no-tokenizer
check "inspect good" 0 "verified: all 964 tensors" "$TIDE" inspect "$G"
check "inspect roles" 0 "masks-to-candidates" "$TIDE" inspect "$G" --config-only
check "inspect lists" 0 "layers.8.attn.indexer.wq_b.scale" "$TIDE" inspect "$G" --tensors
P="$WORK/partial"
check "synth partial" 0 "wrote" "$TIDE" synth --shape tiny -o "$P" --layers 2 -q --no-tokenizer
check "inspect partial" 0 "PARTIAL" "$TIDE" inspect "$P"

# Copies share the good shards through hard links (cheap); `own` gives a copy
# its private file before an edit. config.json and the index are always private.
copy() {
    rm -rf "$WORK/$1"; cp -al "$G" "$WORK/$1"
    own "$WORK/$1" config.json; own "$WORK/$1" model.safetensors.index.json
    echo "$WORK/$1"
}
own() { cp --remove-destination "$G/$2" "$1/$2"; }
SHARD2=model-00002-of-00002.safetensors

# Rewrites one shard's header with a Python edit (keeping its length, so the
# data offsets stay valid). $1 dir, $2 shard, $3 python code on dict `h`.
edit_header() {
    "$PY" - "$1/$2" "$3" <<'EOF'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    exec(code)
    text = json.dumps(h, separators=(",", ":")).encode()
    assert len(text) <= n, "edited header grew"
    f.seek(8)
    f.write(text + b" " * (n - len(text)))
EOF
}
# Edits config.json with Python code on dict `c`.
edit_config() {
    "$PY" - "$1/config.json" "$2" <<'EOF'
import json, sys
path, code = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(code)
json.dump(c, open(path, "w"), indent=2)
EOF
}

D=$(copy truncated); own "$D" $SHARD2; truncate -s -1000 "$D/$SHARD2"
check "truncated shard" 1 "$SHARD2" "$TIDE" inspect "$D"

D=$(copy badlen); own "$D" $SHARD2; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$D/$SHARD2" bs=1 seek=0 conv=notrunc status=none
check "bad header length" 1 "$SHARD2" "$TIDE" inspect "$D"

D=$(copy badjson); own "$D" $SHARD2; printf '[' | dd of="$D/$SHARD2" bs=1 seek=8 conv=notrunc status=none
check "header not JSON" 1 "$SHARD2" "$TIDE" inspect "$D"

D=$(copy dtype)
N=$(grep -o '"mtp.1.attn_norm.weight": *"[^"]*"' "$D/model.safetensors.index.json" | sed 's/.*: *"//; s/"$//')
own "$D" "$N"; edit_header "$D" "$N" 'h["mtp.1.attn_norm.weight"]["dtype"] = "F16"'
check "wrong dtype" 1 "mtp.1.attn_norm.weight in $N is F16 [128]; expected BF16 [128]" "$TIDE" inspect "$D"

D=$(copy shape)
N=$(grep -o '"layers.0.ffn_norm.weight": *"[^"]*"' "$D/model.safetensors.index.json" | sed 's/.*: *"//; s/"$//')
own "$D" "$N"; edit_header "$D" "$N" 'h["layers.0.ffn_norm.weight"]["shape"] = [2, 64]'
check "wrong shape" 1 "layers.0.ffn_norm.weight in $N is BF16 [2, 64]; expected BF16 [128]" "$TIDE" inspect "$D"

# A tensor renamed away (header and index both), so the files stay valid.
D=$(copy missing)
N=$(grep -o '"layers.4.engram.k_weight": *"[^"]*"' "$D/model.safetensors.index.json" | sed 's/.*: *"//; s/"$//')
own "$D" "$N"; edit_header "$D" "$N" 'h["layers.4.engram.k_wrong"] = h.pop("layers.4.engram.k_weight")'
sed -i 's/"layers.4.engram.k_weight"/"layers.4.engram.k_wrong"/' "$D/model.safetensors.index.json"
check "missing tensor" 1 "tensor layers.4.engram.k_weight is missing" "$TIDE" inspect "$D"

D=$(copy noshard); rm "$D/$SHARD2"
check "missing shard" 1 "$SHARD2" "$TIDE" inspect "$D"

D=$(copy noindex); rm "$D/model.safetensors.index.json"
check "missing index" 1 "" "$TIDE" inspect "$D"

D=$(copy field); edit_config "$D" 'del c["text_config"]["hidden_size"]'
check "missing config field" 1 "text_config.hidden_size is missing" "$TIDE" inspect "$D"

D=$(copy type); edit_config "$D" 'c["text_config"]["index_topk"] = "6"'
check "config field type" 1 "text_config.index_topk must be an integer" "$TIDE" inspect "$D"

D=$(copy layers); edit_config "$D" 'c["text_config"]["kv_source_layer_ids"] = [4, 6]'
check "inconsistent layer list" 1 "layer 2 has compress ratio 2 but no KV source at or below it" "$TIDE" inspect "$D"

# A valid config that no longer matches the tensors: layer 4 stops being a KV source.
D=$(copy extra); edit_config "$D" 'c["text_config"]["kv_source_layer_ids"] = [2, 6]'
check "unexpected tensors" 1 "layers.4.attn.compressor.norm.weight in" "$TIDE" inspect "$D"

D=$(copy ratios); edit_config "$D" 'c["text_config"]["compress_ratios"] = c["text_config"]["compress_ratios"][:-1]'
check "short compress_ratios" 1 "compress_ratios has 12 entries" "$TIDE" inspect "$D"

D=$(copy cand); edit_config "$D" 'c["text_config"]["candidate_source_layer_id"] = 7'
check "candidate not an index source" 1 "candidate_source_layer_id = 7" "$TIDE" inspect "$D"

# A config for another shape: the tensors no longer match.
D=$(copy othercfg); edit_config "$D" 'c["text_config"]["n_routed_experts"] = 16'
check "config/tensors mismatch" 1 "ffn.gate.weight" "$TIDE" inspect "$D"

D=$(copy notjson); echo '{"model_type": ' >"$D/config.json"
check "config not JSON" 1 "invalid JSON" "$TIDE" inspect "$D"

D=$(copy noconfig); rm "$D/config.json"
check "no config" 1 "config.json" "$TIDE" inspect "$D"

if [ "$fails" != 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
