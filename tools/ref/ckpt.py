"""Checkpoint access for the numpy reference: config.json and safetensors.

The config is read from the HF form (`text_config` nested, HF key names) and
mapped onto the reference's own field names (ModelArgs of inference/model.py);
the flat form with the reference's names is accepted too. Every key has its
reference default when absent.

Safetensors are read with tools/ref/safetensors_np.py (the io engineer's numpy
reader, itself independent of the C io layer), or with the small private reader
below when that module is missing or TIDE_REF_PRIVATE_ST=1. Stored dtypes: F8_E4M3 and
F8_E8M0 and F4 as raw uint8 codes (F4 packed two per byte, the header shape
counting 4-bit values), BF16 as uint16 bits, F32/F64/I*/U* natively.
"""
import json
import os

import numpy as np

import numerics as nx

# reference field -> HF keys tried in order (first present wins)
_KEYS = {
    "vocab_size": ["vocab_size"],
    "dim": ["hidden_size", "dim"],
    "moe_inter_dim": ["moe_intermediate_size", "moe_inter_dim"],
    "n_layers": ["num_hidden_layers", "n_layers"],
    "n_mtp_layers": ["num_nextn_predict_layers", "n_mtp_layers"],
    "n_heads": ["num_attention_heads", "n_heads"],
    "n_routed_experts": ["n_routed_experts"],
    "n_shared_experts": ["n_shared_experts"],
    "n_activated_experts": ["num_experts_per_tok", "n_activated_experts"],
    "score_func": ["scoring_func", "score_func"],
    "gate_temp": ["gate_temp"],
    "norm_topk_prob": ["norm_topk_prob"],
    "route_scale": ["routed_scaling_factor", "route_scale"],
    "swiglu_limit": ["swiglu_limit"],
    "q_lora_rank": ["q_lora_rank"],
    "head_dim": ["head_dim"],
    "rope_head_dim": ["qk_rope_head_dim", "rope_head_dim"],
    "norm_eps": ["rms_norm_eps", "norm_eps"],
    "o_groups": ["o_groups"],
    "o_lora_rank": ["o_lora_rank"],
    "window_size": ["sliding_window", "window_size"],
    "compress_ratios": ["compress_ratios"],
    "kv_source_layers": ["kv_source_layer_ids", "kv_source_layers"],
    "index_source_layers": ["index_source_layer_ids", "index_source_layers"],
    "compress_rope_theta": ["compress_rope_theta"],
    "rope_theta": ["rope_theta"],
    "index_n_heads": ["index_n_heads"],
    "index_head_dim": ["index_head_dim"],
    "index_topk": ["index_topk"],
    "candidate_source_layer": ["candidate_source_layer_id", "candidate_source_layer"],
    "candidate_topk_blocks": ["candidate_topk_blocks", "topk_blocks"],
    "candidate_block_size": ["candidate_block_size", "block_size"],
    "hc_mult": ["hc_mult"],
    "hc_sinkhorn_iters": ["hc_sinkhorn_iters"],
    "hc_eps": ["hc_eps"],
    "engram_layer_ids": ["engram_layer_ids"],
    "engram_num_embeddings": ["engram_num_embeddings"],
    "engram_max_ngram_size": ["engram_max_ngram_size"],
    "engram_vocab_size": ["engram_vocab_size"],
    "engram_n_heads": ["engram_n_heads"],
    "engram_head_dim": ["engram_head_dim"],
    "engram_pad_id": ["engram_pad_id", "engram_pad_token_id"],
    "engram_compressed_vocab_size": ["engram_compressed_vocab_size"],
    "image_token_id": ["image_token_id"],
    "dspark_block_size": ["dspark_block_size"],
    "dspark_noise_token_id": ["dspark_noise_token_id"],
    "dspark_target_layer_ids": ["dspark_target_layer_ids"],
    "dspark_markov_rank": ["dspark_markov_rank"],
    "dspark_n_routed_experts": ["dspark_n_routed_experts"],
    "dspark_n_activated_experts": ["dspark_num_experts_per_tok", "dspark_n_activated_experts"],
}

# defaults of ModelArgs (the reference's small demo model), used when a key is absent
_DEFAULTS = dict(
    vocab_size=129280, dim=1024, moe_inter_dim=1024, n_layers=5, n_mtp_layers=1, n_heads=16,
    n_routed_experts=8, n_shared_experts=1, n_activated_experts=2, score_func="sqrtsoftplus",
    gate_temp=1.0, norm_topk_prob=True, route_scale=1.0, swiglu_limit=0.0, q_lora_rank=256,
    head_dim=128, rope_head_dim=32, norm_eps=1e-20, o_groups=8, o_lora_rank=256, window_size=128,
    compress_ratios=(0, 2, 2, 1, 1, 0), kv_source_layers=(1, 3), index_source_layers=(1, 3),
    compress_rope_theta=40000.0, rope_theta=10000.0, index_n_heads=16, index_head_dim=64,
    index_topk=64, candidate_source_layer=-1, candidate_topk_blocks=0, candidate_block_size=0,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=(), engram_num_embeddings=(),
    engram_max_ngram_size=1, engram_vocab_size=0, engram_n_heads=0, engram_head_dim=0,
    engram_pad_id=2, engram_compressed_vocab_size=0, image_token_id=129264,
    dspark_block_size=0, dspark_noise_token_id=0, dspark_target_layer_ids=(),
    dspark_markov_rank=256, dspark_n_routed_experts=0, dspark_n_activated_experts=0,
)


class Args:
    """The reference's ModelArgs fields, plus YaRN values from rope_scaling."""

    def __init__(self, d):
        for k, v in d.items():
            setattr(self, k, tuple(v) if isinstance(v, list) else v)

    def moe_config(self, layer_id):
        if layer_id < self.n_layers:
            return self.n_routed_experts, self.n_activated_experts
        return (self.dspark_n_routed_experts or self.n_routed_experts,
                self.dspark_n_activated_experts or self.n_activated_experts)


def parse_config(cfg):
    """dict of config.json -> Args."""
    text = cfg.get("text_config", cfg)
    out = dict(_DEFAULTS)
    for field, keys in _KEYS.items():
        for k in keys:
            if k in text and text[k] is not None:
                out[field] = text[k]
                break
    if out["candidate_source_layer"] is None:
        out["candidate_source_layer"] = -1
    if "image_token_id" not in text and "image_token_id" in cfg:
        out["image_token_id"] = cfg["image_token_id"]
    rs = text.get("rope_scaling") or {}
    out["original_seq_len"] = int(text.get("original_seq_len", 0))
    out["rope_factor"] = float(text.get("rope_factor", 40))
    out["beta_fast"] = int(text.get("beta_fast", 32))
    out["beta_slow"] = int(text.get("beta_slow", 1))
    if rs:
        kind = rs.get("rope_type", rs.get("type", "yarn"))
        if kind != "yarn":
            raise ValueError(f"rope_scaling type {kind!r} is not supported (yarn only)")
        out["original_seq_len"] = int(rs.get("original_max_position_embeddings", out["original_seq_len"]))
        out["rope_factor"] = float(rs.get("factor", out["rope_factor"]))
        out["beta_fast"] = int(rs.get("beta_fast", out["beta_fast"]))
        out["beta_slow"] = int(rs.get("beta_slow", out["beta_slow"]))
    if text.get("topk_method", "noaux_tc") not in ("noaux_tc",):
        raise ValueError(f"topk_method {text.get('topk_method')!r} is not supported")
    a = Args(out)
    syn = cfg.get("tide_synthetic") or {}
    if "written_layers" in syn and int(syn["written_layers"]) < a.n_layers:
        raise ValueError(f"checkpoint holds only {syn['written_layers']} of {a.n_layers} backbone layers "
                         "(tide synth --layers): it can be inspected, not run")
    n_total = a.n_layers + (a.n_mtp_layers if a.dspark_block_size else 0)
    if len(a.compress_ratios) < n_total:
        raise ValueError(f"compress_ratios has {len(a.compress_ratios)} entries, need {n_total}")
    return a


# ---------------------------------------------------------------- safetensors

_NP = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16,
       "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
       "BOOL": np.bool_, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "F4": np.uint8}


class Tensor:
    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, tuple(shape), data


def read_safetensors(path):
    """-> {name: Tensor} with data as a numpy view of the file (memory-mapped)."""
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    n = int(mm[:8].view(np.uint64)[0])
    header = json.loads(bytes(mm[8:8 + n]).decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], info["shape"]
        lo, hi = info["data_offsets"]
        if dt not in _NP:
            raise ValueError(f"{path}: tensor {name}: dtype {dt} not supported")
        raw = mm[base + lo:base + hi]
        if dt == "F4":
            if not shape or shape[-1] % 2:
                raise ValueError(f"{path}: F4 tensor {name} has an odd last dim")
            store = list(shape[:-1]) + [shape[-1] // 2]
            data = raw.reshape(store)
        else:
            data = raw.view(_NP[dt]).reshape(shape)
        out[name] = Tensor(dt, shape, data)
    return out


def read_checkpoint_tensors(d):
    """All tensors of a checkpoint directory (index + shards, or one file).
    Uses the project's safetensors_np.load() (io engineer) when present, else the
    private reader above."""
    try:
        import safetensors_np as stn
    except ImportError:
        stn = None
    if stn is not None and os.environ.get("TIDE_REF_PRIVATE_ST") != "1":
        return {k: Tensor(dt, shape, arr) for k, (dt, shape, arr) in stn.load(d).items()}
    idx = os.path.join(d, "model.safetensors.index.json")
    files = []
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(d, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{d}: no safetensors files")
    out = {}
    for fn in files:
        out.update(read_safetensors(os.path.join(d, fn)))
    return out


class Weights:
    """Decoded access to a checkpoint's tensors by reference name."""

    def __init__(self, tensors):
        self.t = tensors

    def has(self, name):
        return name in self.t

    def raw(self, name):
        if name not in self.t:
            raise KeyError(f"tensor {name} missing from checkpoint")
        return self.t[name]

    def f32(self, name):
        """Values as float32, whatever the stored float dtype."""
        t = self.raw(name)
        if t.dtype == "BF16":
            return nx.bf16_from_bits(t.data)
        if t.dtype in ("F32", "F64", "F16"):
            return np.asarray(t.data, dtype=np.float32)
        if t.dtype == "F8_E4M3":
            return nx.e4m3_decode(t.data)
        raise ValueError(f"tensor {name}: dtype {t.dtype} is not a plain float")

    def param(self, name, dtype):
        """A parameter as the reference module holds it: 'bf16' rounds, 'f32' keeps."""
        v = self.f32(name)
        return nx.bf16(v) if dtype == "bf16" else v

    def linear(self, prefix, want=None):
        """A Linear's weight as numerics.Weight. The stored dtype decides the
        GEMM (F8_E4M3 / F4 with `.scale`); `want` ('bf16' or 'f32') forces a
        module whose reference dtype is fixed (the value is cast to it)."""
        t = self.raw(prefix + ".weight")
        if t.dtype == "F8_E4M3" and want is None:
            return nx.Weight("fp8", np.asarray(t.data), np.asarray(self.raw(prefix + ".scale").data))
        if t.dtype == "F4" and want is None:
            return nx.Weight("fp4", np.asarray(t.data), np.asarray(self.raw(prefix + ".scale").data),
                             shape=t.shape)
        if t.dtype in ("F8_E4M3", "F4"):
            raise ValueError(f"{prefix}: stored {t.dtype} but the reference holds it as {want}")
        v = self.f32(prefix + ".weight")
        fmt = want or ("bf16" if t.dtype == "BF16" else "f32")
        return nx.Weight(fmt, nx.bf16(v) if fmt == "bf16" else v)


def load(d):
    """-> (Args, Weights, config dict)."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return parse_config(cfg), Weights(read_checkpoint_tensors(d)), cfg
