"""Export a trained tide-mini (model.Model) in the release's layout and dtypes.

    dir/model-0000K-of-0000N.safetensors   size-balanced shards
    dir/model.safetensors.index.json
    dir/config.json                        HF form (text_config nested)
    dir/inference/config.json              the reference's flat ModelArgs names
    dir/generation_config.json
    dir/tokenizer.json

Dtypes as the release (docs/checkpoint-io.md, spec section 2): FP8 e4m3 32x32
blocks with E8M0 scales for dense linears and the shared experts, FP4 e2m1 1x32
for routed experts, FP8 rows (1x32) for engram tables, BF16 for norms, wo_a,
compressor, indexer weights_proj/wk, gate weight, embeddings, head and the
DSpark heads, F32 for hc_* tensors, attention sinks and gate biases. The
quantisers are tools/ref/numerics.py's (via synth_tiny.Writer), so what is
written is exactly what tide and the oracle read.
"""
import json
import os
import shutil
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "ref"))
import ckpt  # noqa: E402
import numerics as nx  # noqa: E402
import synth_tiny  # noqa: E402

import tide_mini as mm  # noqa: E402

MAX_SHARD = 15 * 1024 * 1024


def flat_config(text):
    """inference/config.json: the reference's own field names (ckpt._KEYS)."""
    a = ckpt.parse_config({"text_config": text})
    out = {}
    for field in ckpt._KEYS:
        v = getattr(a, field)
        out[field] = list(v) if isinstance(v, tuple) else v
    for k in ("original_seq_len", "rope_factor", "beta_fast", "beta_slow"):
        out[k] = getattr(a, k)
    out["max_seq_len"] = text.get("max_position_embeddings", 4096)
    out.update(dtype="fp8", scale_fmt="ue8m0", expert_dtype="fp4")
    return out


def _engram_table(W, name, tab):
    """FP8 e4m3 rows with one E8M0 scale per 32 values (as synth_tiny writes them)."""
    rows, hd = tab.shape
    b = tab.reshape(rows, hd // 32, 32)
    amax = np.maximum(np.abs(b).max(-1), 1e-4)
    sc, code = nx.ue8m0_scale(amax, 1 / 448)
    q = nx.e4m3_encode(nx.e4m3(np.clip(b / sc[..., None], -448, 448)))
    W.t[name + ".weight"] = ("F8_E4M3", [rows, hd], q.reshape(rows, hd).tobytes())
    W.t[name + ".scale"] = ("F8_E8M0", [rows, hd // 32], code.astype(np.uint8).tobytes())


def tensors(model):
    """-> synth_tiny.Writer holding every tensor of the checkpoint."""
    W = synth_tiny.Writer(None)
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    done = set()
    for name, mod in model.named_modules():
        if isinstance(mod, mm.Lin):
            k = name + ".weight"
            w = sd[k]
            if mod.kind == "fp8":
                W.fp8(name, w)
            elif mod.kind == "fp4":
                W.fp4(name, w)
            else:  # bf16, and the compressor's f32-in-use weights (BF16 stored)
                W.bf16(k, w)
            done.add(k)
        elif isinstance(mod, mm.Experts):
            for e in range(mod.w1.shape[0]):
                for j in ("w1", "w2", "w3"):
                    W.fp4(f"{name}.{e}.{j}", sd[f"{name}.{j}"][e])
            done.update(f"{name}.{j}" for j in ("w1", "w2", "w3"))
        elif isinstance(mod, mm.HC):
            side = name.rsplit(".", 1)[1]  # hc_attn | hc_ffn
            base = name.rsplit(".", 1)[0]
            for j in ("fn", "base", "scale"):
                W.f32(f"{base}.{side}_{j}", sd[f"{name}.{j}"])
                done.add(f"{name}.{j}")
    for k, v in sd.items():
        if k in done:
            continue
        if k.endswith("engram.embed.weight"):
            _engram_table(W, k[:-len(".weight")], v)
        elif k.endswith("attn_sink") or k.endswith("gate.bias"):
            W.f32(k, v)
        else:
            W.bf16(k, v)
    return W


def export(model, tokenizer_path, out_dir, gen_extra=None):
    """Write the checkpoint; -> list of file paths written."""
    os.makedirs(os.path.join(out_dir, "inference"), exist_ok=True)
    W = tensors(model)
    total = sum(len(v[2]) for v in W.t.values())
    n = max(1, -(-total // MAX_SHARD))
    while True:
        W.save(out_dir, n_shards=n, balance=True)
        sizes = [os.path.getsize(os.path.join(out_dir, f"model-{k + 1:05d}-of-{n:05d}.safetensors"))
                 for k in range(n)]
        if max(sizes) < 16 * 1024 * 1024:
            break
        for k in range(n):
            os.remove(os.path.join(out_dir, f"model-{k + 1:05d}-of-{n:05d}.safetensors"))
        n += 1
    text = model.cfg
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(mm.full_config(text), f, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "inference", "config.json"), "w") as f:
        json.dump(flat_config(text), f, indent=1)
        f.write("\n")
    gen = {"bos_token_id": text["bos_token_id"], "eos_token_id": text["eos_token_id"], "do_sample": False}
    gen.update(gen_extra or {})
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)
        f.write("\n")
    if os.path.abspath(tokenizer_path) != os.path.abspath(os.path.join(out_dir, "tokenizer.json")):
        shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.json"))
    return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(out_dir) for f in fs)
