#!/bin/bash
# Broken checkpoints: tide inspect must exit 1 (never crash on a signal) with a
# message naming the problem. Writes a tiny synthetic checkpoint, then makes
# damaged copies of it (truncated shard, bad header, wrong dtype or shape in a
# header, missing tensor, missing shard, missing config field, inconsistent
# layer list, config that is not JSON) and inspects each; tide run must refuse
# each the same way (one validation), FIFOs in place of files are refused at
# once, and the reference's text-only layout (synth --no-vision) loads and runs.
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

# --- tide run refuses every broken copy above, as inspect does ---
# (one validation: model/checkpoint.h; tide run loads through tide_model_load)
# with the message inspect gives (its first line, less inspect's own prefixes)
for d in truncated badlen badjson dtype shape missing noshard noindex field type layers extra ratios cand \
         othercfg notjson noconfig; do
    msg=$("$TIDE" inspect "$WORK/$d" 2>&1 >/dev/null | head -1 | sed "s|^tide inspect: ||; s|^$WORK/$d: ||")
    check "run refuses $d as inspect does" 1 "$msg" "$TIDE" run --model "$WORK/$d" --prompt-ids 1,2 --max-tokens 1
done
check "run partial" 1 "cannot run" "$TIDE" run --model "$P" --prompt-ids 1,2 --max-tokens 1

# A ratio the forward pass cannot hold: both refuse it naming the field.
D=$(copy bigratio); edit_config "$D" 'c["text_config"]["compress_ratios"] = [1024 if r == 2 else r for r in c["text_config"]["compress_ratios"]]'
check "inspect ratio 1024" 1 "text_config.compress_ratios[2] = 1024 must be in 0..64" "$TIDE" inspect "$D"
check "run ratio 1024" 1 "text_config.compress_ratios[2] = 1024 must be in 0..64" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1

# A tensor the config does not call for, in a shard and in the index: both refuse it.
D=$(copy added); own "$D" $SHARD2
"$PY" - "$D" $SHARD2 <<'EOF2'
import json, struct, sys
d, name = sys.argv[1], sys.argv[2]
path = f"{d}/{name}"
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
data = raw[8 + n:]
h["layers.0.ffn.extra_bias"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
text = json.dumps(h, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data + b"\0\0\0\0")
ix = json.load(open(f"{d}/model.safetensors.index.json"))
ix["weight_map"]["layers.0.ffn.extra_bias"] = name
json.dump(ix, open(f"{d}/model.safetensors.index.json", "w"))
EOF2
check "inspect added tensor" 1 "tensor layers.0.ffn.extra_bias in $SHARD2 is not part of the model" "$TIDE" inspect "$D"
check "run added tensor" 1 "tensor layers.0.ffn.extra_bias in $SHARD2 is not part of the model" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1

# --- the reference's text-only layout (tide synth --no-vision) ---
V="$WORK/novision"
check "synth --no-vision" 0 "wrote" "$TIDE" synth --shape tiny -o "$V" --seed 7 -q --no-tokenizer --no-vision
check "no vision_config written" 0 "" "$PY" -c "import json,sys; c=json.load(open('$V/config.json')); \
sys.exit(any(k in c for k in ('vision_config','image_token_id','model_type')) or 'model_type' in c['text_config'])"
check "no bias_vl written" 1 "" grep -q bias_vl "$V/model.safetensors.index.json"
check "inspect text-only" 0 "verified: all 964 tensors" "$TIDE" inspect "$V"
check "run text-only" 0 "generated" "$TIDE" run --model "$V" --prompt-ids 1,2,3 --max-tokens 3
# the same weights as the checkpoint with a (disabled) vision_config: the same tokens
"$TIDE" run --model "$G" --prompt-ids 1,2,3 --max-tokens 3 >"$WORK/ids.g" 2>/dev/null
"$TIDE" run --model "$V" --prompt-ids 1,2,3 --max-tokens 3 >"$WORK/ids.v" 2>/dev/null
check "text-only generates as vision-disabled" 0 "" cmp "$WORK/ids.g" "$WORK/ids.v"
# with a vision tower the config must name the image token (and bias_vl is required)
D=$(copy vision); edit_config "$D" 'c["vision_config"]["num_hidden_layers"] = 2; del c["image_token_id"]'
check "vision needs image_token_id" 1 "image_token_id is missing (required with a vision tower" "$TIDE" inspect "$D"
D=$(copy visionvl); edit_config "$D" 'c["vision_config"]["num_hidden_layers"] = 2'
check "vision needs bias_vl" 1 "tensor layers.0.ffn.gate.bias_vl is missing" "$TIDE" inspect "$D"
check "run: vision needs bias_vl" 1 "tensor layers.0.ffn.gate.bias_vl is missing" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1

# --- messages that say what is wrong ---
check "run on config.json" 1 "config.json is not a directory" \
    "$TIDE" run --model "$G/config.json" --prompt-ids 1,2 --max-tokens 1
check "inspect on config.json" 1 "give $G)" "$TIDE" inspect "$G/config.json"
check "inspect config file --config-only" 0 "layer roles" "$TIDE" inspect "$G/config.json" --config-only
D=$(copy shape22)
N=$(grep -o '"layers.0.attn.attn_sink": *"[^"]*"' "$D/model.safetensors.index.json" | sed 's/.*: *"//; s/"$//')
own "$D" "$N"; edit_header "$D" "$N" 'h["layers.0.attn.attn_sink"]["shape"] = [2, 2]'
check "shape [2, 2] for [4]" 1 "layers.0.attn.attn_sink in $N is F32 [2, 2]; expected F32 [4]" "$TIDE" inspect "$D"
check "run: shape [2, 2] for [4]" 1 "layers.0.attn.attn_sink in $N is F32 [2, 2]; expected F32 [4]" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1

# --- a FIFO in place of a file is refused at once, never waited on ---
# (timeout only guards against the old hang; the check is the message)
D=$(copy fifocfg); rm "$D/config.json"; mkfifo "$D/config.json"
check "inspect FIFO config" 1 "config.json is a FIFO, not a regular file" timeout 20 "$TIDE" inspect "$D"
check "run FIFO config" 1 "config.json is a FIFO, not a regular file" \
    timeout 20 "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1
D=$(copy fifoshard); rm "$D/$SHARD2"; mkfifo "$D/$SHARD2"
check "inspect FIFO shard" 1 "$SHARD2 is a FIFO, not a regular file" timeout 20 "$TIDE" inspect "$D"
check "run FIFO shard" 1 "$SHARD2 is a FIFO, not a regular file" \
    timeout 20 "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1
D=$(copy fifoindex); rm "$D/model.safetensors.index.json"; mkfifo "$D/model.safetensors.index.json"
check "inspect FIFO index" 1 "index.json is a FIFO, not a regular file" timeout 20 "$TIDE" inspect "$D"

# --- the engram token map: never silently the synthetic stand-in ---
check "inspect: synthetic map recorded" 0 "engram token map: tide's synthetic stand-in" "$TIDE" inspect "$G"
D=$(copy tokgone); edit_config "$D" 'c["tide_synthetic"]["engram_token_map"] = "tokenizer"'
check "inspect: tokenizer.json required" 1 "tokenizer.json is missing: the engram layers" "$TIDE" inspect "$D"
check "run: tokenizer.json required" 1 "tokenizer.json is missing: the engram layers" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1
D=$(copy tokold); edit_config "$D" 'del c["tide_synthetic"]["engram_token_map"]'
check "run: no record, no tokenizer" 1 "tokenizer.json is missing" \
    "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1
D=$(copy tokfifo); edit_config "$D" 'c["tide_synthetic"]["engram_token_map"] = "tokenizer"'; mkfifo "$D/tokenizer.json"
check "run FIFO tokenizer" 1 "tokenizer.json is a FIFO, not a regular file" \
    timeout 20 "$TIDE" run --model "$D" --prompt-ids 1,2 --max-tokens 1

if [ "$fails" != 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
