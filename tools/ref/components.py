#!/usr/bin/python3
"""One reference op at a time, for the C engine's per-component tests.

    /usr/bin/python3 tools/ref/components.py OP IN OUT
    /usr/bin/python3 tools/ref/components.py --list

IN is either a .npz file or a directory of NAME.npy files (one array per
input); OUT is a .npz file when it ends in ".npz", otherwise a directory that
receives one NAME.npy per output (created if missing). Scalars are 0-d (or
1-element) arrays. Float inputs are taken as float32; bf16 quantities are
float32 arrays holding bf16 values (inputs the reference holds in bf16 are
rounded to bf16 on entry). Exit 0 on success, 2 with a message on stderr.
The ops and their inputs/outputs are listed in docs/reference.md and by --list.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram as eg  # noqa: E402
import model as mdl  # noqa: E402
import numerics as nx  # noqa: E402

F32 = np.float32


class Inputs:
    def __init__(self, d):
        self.d = d

    def arr(self, name, dtype=F32):
        if name not in self.d:
            raise ValueError(f"missing input {name!r}")
        return np.asarray(self.d[name]).astype(dtype)

    def bf(self, name):
        return nx.bf16(self.arr(name))

    def opt(self, name, default=None, dtype=F32):
        return self.arr(name, dtype) if name in self.d else default

    def num(self, name, default=None, kind=float):
        if name not in self.d:
            if default is None:
                raise ValueError(f"missing scalar input {name!r}")
            return default
        v = np.asarray(self.d[name]).reshape(-1)
        if v.size != 1:
            raise ValueError(f"input {name!r} must be a scalar")
        return kind(v[0])

    def weight(self, prefix, fmt):
        """Quantised weight from {prefix} (codes) and {prefix}_scale; fmt 8 or 4."""
        w = self.arr(prefix, np.uint8)
        s = self.arr(prefix + "_scale", np.uint8)
        if fmt == 8:
            return nx.Weight("fp8", w, s)
        if fmt == 4:
            return nx.Weight("fp4", w, s)
        raise ValueError(f"fmt must be 4 or 8, got {fmt}")


def _yarn(i):
    y = i.opt("yarn")
    if y is None:
        return None
    y = y.reshape(-1)
    if y.size != 4:
        raise ValueError("yarn must be [factor, beta_fast, beta_slow, original_seq_len]")
    return (float(y[0]), int(y[1]), int(y[2]), int(y[3]))


def op_bf16(i):
    return {"y": nx.bf16(i.arr("x"))}


def op_fp8_act_sim(i):
    return {"y": nx.fp8_act_sim(i.arr("x"), i.num("block", 32, int))}


def op_fp8_act_quant(i):
    q, s = nx.fp8_act_quant(i.arr("x"), i.num("block", 32, int))
    return {"q": nx.e4m3_encode(q), "scale": nx.e8m0_ceil_code(s).astype(np.uint8)}


def op_fp4_sim_e8m0(i):
    return {"y": nx.fp4_sim_e8m0(i.arr("x"), i.num("block", 32, int))}


def op_fp4_sim_e4m3(i):
    return {"y": nx.fp4_sim_e4m3(i.arr("x"), i.num("block", 16, int))}


def op_rmsnorm(i):
    return {"y": nx.rmsnorm(i.bf("x"), nx.bf16(i.arr("w")), i.num("eps", 1e-20))}


def op_rope_freqs(i):
    inv = mdl.rope_inv_freq(i.num("rd", kind=int), i.num("theta"), _yarn(i))
    cos, sin = mdl.rope_cos_sin(inv, i.arr("pos", np.int64))
    return {"cos": cos, "sin": sin, "inv_freq": inv}


def op_rope(i):
    x = i.bf("x")
    inv = mdl.rope_inv_freq(x.shape[-1], i.num("theta"), _yarn(i))
    pos = i.arr("pos", np.int64).reshape(-1)
    if pos.shape[0] != x.shape[0]:
        raise ValueError("pos must have one entry per row of x")
    cos, sin = mdl.rope_cos_sin(inv, pos)
    return {"y": mdl.apply_rope(x, cos, sin, inverse=bool(i.num("inverse", 0, int)))}


def op_hc_split_sinkhorn(i):
    pre, post, comb = mdl.hc_split_sinkhorn(i.arr("mixes"), i.arr("scale"), i.arr("base"),
                                            i.num("h", 4, int), i.num("iters", 20, int), i.num("eps", 1e-6))
    return {"pre": pre, "post": post, "comb": comb}


def op_hc_mixes(i):
    x = i.bf("x")
    pre, post, comb = mdl.hc_mixes(x, i.arr("fn"), i.arr("scale"), i.arr("base"), x.shape[1],
                                   i.num("iters", 20, int), i.num("hc_eps", 1e-6), i.num("norm_eps", 1e-20))
    return {"pre": pre, "post": post, "comb": comb}


def op_hc_pre(i):
    return {"y": mdl.hc_pre(i.bf("x"), i.arr("pre"))}


def op_hc_post(i):
    return {"out": mdl.hc_post(i.bf("y"), i.bf("residual"), i.arr("post"), i.arr("comb"))}


def op_sparse_attn(i):
    q, kv = i.bf("q"), i.bf("kv")
    idx = i.arr("idx", np.int64)
    if np.any(idx < -1) or np.any(idx >= kv.shape[0]):
        raise ValueError("idx entries must be -1 or a row of kv")
    scale = i.num("scale", q.shape[-1] ** -0.5)
    return {"o": mdl.sparse_attn(q, kv, i.arr("sink"), idx, scale)}


def op_indexer_score(i):
    return {"score": mdl.indexer_score(i.bf("q"), i.bf("k"), i.bf("w"), i.arr("compress_lens", np.int64))}


def op_topk(i):
    score = i.arr("score")
    return {"idx": mdl.topk_positions(score, i.num("k", kind=int), i.arr("compress_lens", np.int64),
                                      i.num("offset", 0, int)).astype(np.int32)}


def op_candidate_blocks(i):
    m = mdl.select_candidate_blocks(i.arr("score"), i.arr("compress_lens", np.int64),
                                    i.num("topk_blocks", kind=int), i.num("block_size", kind=int))
    return {"mask": m.astype(np.uint8)}


def op_indexer_topk(i):
    """Score + optional candidate mask + top-k, the whole second level."""
    score = mdl.indexer_score(i.bf("q"), i.bf("k"), i.bf("w"), i.arr("compress_lens", np.int64))
    cand = i.opt("candidates", dtype=np.uint8)
    if cand is not None:
        score = np.where(cand.astype(bool), score, F32(-np.inf))
    idx = mdl.topk_positions(score, i.num("topk", kind=int), i.arr("compress_lens", np.int64),
                             i.num("offset", 0, int))
    return {"score": score, "idx": idx.astype(np.int32)}


def op_compressor(i):
    """Compressor of a KV source over tokens at start_pos.. with the carried
    partial group; latent before RoPE, plus the updated state (ratio > 1)."""
    x = i.bf("x")
    ratio = i.num("ratio", kind=int)
    wkv = nx.bf16(i.arr("wkv"))
    D = wkv.shape[0]
    if ratio == 1:
        w1, w2, state = nx.Weight("bf16", wkv), None, None
    else:
        w1, w2 = nx.Weight("f32", wkv), nx.Weight("f32", nx.bf16(i.arr("wgate")))
        state = (i.opt("state_kv", np.zeros((ratio, D), F32)).copy(),
                 i.opt("state_score", np.full((ratio, D), -np.inf, F32)).copy())
    g0, lat = mdl.compressor_forward(x, i.num("start_pos", 0, int), ratio, w1, w2, nx.bf16(i.arr("norm_w")),
                                     i.num("eps", 1e-20), state)
    out = {"latent": lat if lat is not None else np.zeros((0, D), F32), "first_group": np.array(g0, np.int64)}
    if state is not None:
        out["state_kv"], out["state_score"] = state
    return out


def op_moe_route(i):
    funcs = {0: "sqrtsoftplus", 1: "sigmoid", 2: "softmax"}
    w, idx = mdl.moe_route(i.bf("x"), nx.bf16(i.arr("gate_w")), i.opt("bias"), i.num("topk", kind=int),
                           i.num("route_scale", 1.0), funcs[i.num("score_func", 0, int)],
                           bool(i.num("norm_topk", 1, int)))
    return {"weights": w, "indices": idx.astype(np.int32)}


def op_swiglu(i):
    return {"y": mdl.swiglu(i.arr("gate"), i.arr("up"), i.num("limit", 0.0), i.opt("weight"))}


def op_expert(i):
    fmt = i.num("fmt", kind=int)
    w1, w2, w3 = i.weight("w1", fmt), i.weight("w2", fmt), i.weight("w3", fmt)
    return {"y": mdl.expert_forward(i.bf("x"), w1, w2, w3, i.num("limit", 0.0), i.opt("weight"))}


def op_fp8_gemm(i):
    return {"y": nx.quant_gemm(i.bf("x"), i.weight("w", 8))}


def op_fp4_gemm(i):
    return {"y": nx.quant_gemm(i.bf("x"), i.weight("w", 4))}


def op_linear_bf16(i):
    return {"y": nx.linear(i.bf("x"), nx.Weight("bf16", nx.bf16(i.arr("w"))))}


def op_engram_multipliers(i):
    return {"multipliers": eg.hash_multipliers([int(v) for v in i.arr("layer_ids", np.int64).reshape(-1)],
                                               i.num("max_ngram", kind=int), i.num("compressed_vocab", kind=int))}


def op_engram_primes(i):
    p = eg.engram_primes([int(v) for v in i.arr("layer_ids", np.int64).reshape(-1)], i.num("max_ngram", kind=int),
                         i.num("n_heads", kind=int), i.num("vocab_size", kind=int))
    flat = p.reshape(p.shape[0], -1)
    off = np.concatenate([np.zeros((flat.shape[0], 1), np.int64), np.cumsum(flat, 1)[:, :-1]], 1)
    return {"primes": p, "offsets": off}


def op_engram_hash(i):
    ids = i.arr("ids", np.int64).reshape(-1)
    mult = i.arr("multipliers", np.int64)
    primes = i.arr("primes", np.int64)
    if primes.ndim == 2:
        primes = primes[None]
    flat = primes.reshape(primes.shape[0], -1)
    off = i.opt("offsets", None, np.int64)
    if off is None:
        off = np.concatenate([np.zeros((flat.shape[0], 1), np.int64), np.cumsum(flat, 1)[:, :-1]], 1)
    start = i.num("start", 0, int)
    n = len(ids) - start
    return {"hashes": eg.ngram_hashes(ids, start, n, mult, primes, off, i.num("pad", kind=int))}


def op_engram_apply(i):
    w = nx.Weight("fp8", i.arr("wkv", np.uint8), i.arr("wkv_scale", np.uint8))
    y = eg.engram_apply(i.bf("h"), i.arr("hash_ids", np.int64), i.arr("table", np.uint8),
                        i.arr("table_scale", np.uint8), w, nx.bf16(i.arr("q_weight")),
                        nx.bf16(i.arr("k_weight")), i.num("eps", 1e-20))
    return {"y": y}


OPS = {
    "bf16": (op_bf16, "x -> y"),
    "fp8_act_sim": (op_fp8_act_sim, "x, block=32 -> y"),
    "fp8_act_quant": (op_fp8_act_quant, "x, block=32 -> q (e4m3 codes u8), scale (e8m0 codes u8)"),
    "fp4_sim_e8m0": (op_fp4_sim_e8m0, "x, block=32 -> y"),
    "fp4_sim_e4m3": (op_fp4_sim_e4m3, "x, block=16 -> y"),
    "rmsnorm": (op_rmsnorm, "x [..,d], w [d], eps=1e-20 -> y"),
    "rope_freqs": (op_rope_freqs, "rd, pos [t], theta, yarn? [4] -> cos, sin [t, rd/2], inv_freq"),
    "rope": (op_rope, "x [t,..,rd], pos [t], theta, yarn? [4], inverse=0 -> y"),
    "hc_split_sinkhorn": (op_hc_split_sinkhorn, "mixes [..,(2+h)h], scale [3], base, h=4, iters=20, eps=1e-6 "
                          "-> pre, post, comb"),
    "hc_mixes": (op_hc_mixes, "x [t,h,d], fn [(2+h)h, hd], scale [3], base, iters=20, hc_eps=1e-6, "
                 "norm_eps=1e-20 -> pre, post, comb"),
    "hc_pre": (op_hc_pre, "x [t,h,d], pre [t,h] -> y [t,d]"),
    "hc_post": (op_hc_post, "y [t,d], residual [t,h,d], post [t,h], comb [t,h,h] -> out [t,h,d]"),
    "sparse_attn": (op_sparse_attn, "q [t,H,D], kv [n,D], sink [H], idx [t,K] (-1 none), scale=D^-0.5 -> o"),
    "indexer_score": (op_indexer_score, "q [t,H,d], k [n,d], w [t,H], compress_lens [t] -> score [t,n]"),
    "topk": (op_topk, "score [t,n], k, compress_lens [t], offset=0 -> idx [t,k] int32"),
    "candidate_blocks": (op_candidate_blocks, "score [t,n], compress_lens [t], topk_blocks, block_size "
                         "-> mask [t,n] u8"),
    "indexer_topk": (op_indexer_topk, "q, k, w, compress_lens, topk, candidates? [t,n] u8, offset=0 -> score, idx"),
    "compressor": (op_compressor, "x [t,dim], wkv [D,dim], wgate? [D,dim], norm_w [D], ratio, eps, "
                   "start_pos=0, state_kv? [r,D], state_score? [r,D] -> latent [g,D], first_group, "
                   "state_kv, state_score"),
    "moe_route": (op_moe_route, "x [t,dim], gate_w [E,dim], bias? [E], topk, route_scale=1, "
                  "score_func=0 (0 sqrtsoftplus 1 sigmoid 2 softmax), norm_topk=1 -> weights, indices"),
    "swiglu": (op_swiglu, "gate [t,f], up [t,f], limit=0, weight? [t] -> y"),
    "expert": (op_expert, "x [t,dim], w1 w1_scale w2 w2_scale w3 w3_scale (u8), fmt (4|8), limit=0, "
               "weight? [t] -> y"),
    "fp8_gemm": (op_fp8_gemm, "x [m,k], w [n,k] e4m3 u8, w_scale [ceil(n/32),k/32] e8m0 u8 -> y [m,n]"),
    "fp4_gemm": (op_fp4_gemm, "x [m,k], w [n,k/2] packed u8, w_scale [n,k/32] u8 -> y [m,n]"),
    "linear_bf16": (op_linear_bf16, "x [m,k], w [n,k] -> y [m,n]"),
    "engram_multipliers": (op_engram_multipliers, "layer_ids [L], max_ngram, compressed_vocab -> multipliers"),
    "engram_primes": (op_engram_primes, "layer_ids [L], max_ngram, n_heads, vocab_size -> primes, offsets"),
    "engram_hash": (op_engram_hash, "ids [T] compressed (-1 dead), multipliers [L,N], primes [L,N-1,heads], "
                    "offsets?, pad, start=0 -> hashes [T-start, L, (N-1)heads]"),
    "engram_apply": (op_engram_apply, "h [t,hc,dim], hash_ids [t,cols], table [rows,hd] u8, table_scale u8, "
                     "wkv, wkv_scale (u8), q_weight, k_weight [hc,dim], eps -> y"),
}


def read_inputs(path):
    if os.path.isdir(path):
        return {f[:-4]: np.load(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".npy")}
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def write_outputs(path, out):
    out = {k: np.ascontiguousarray(np.asarray(v)) for k, v in out.items()}
    if path.endswith(".npz"):
        np.savez(path, **out)
        return
    os.makedirs(path, exist_ok=True)
    for k, v in out.items():
        np.save(os.path.join(path, k + ".npy"), v)


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        for k, (_, doc) in OPS.items():
            print(f"{k:20s} {doc}")
        return 0
    if len(argv) != 4:
        print("usage: components.py OP IN OUT | --list", file=sys.stderr)
        return 2
    op, inp, outp = argv[1:]
    if op not in OPS:
        print(f"components.py: unknown op {op!r} (see --list)", file=sys.stderr)
        return 2
    try:
        out = OPS[op][0](Inputs(read_inputs(inp)))
        write_outputs(outp, out)
    except (ValueError, KeyError, OSError, IndexError) as e:
        print(f"components.py {op}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
