#!/usr/bin/python3
"""Independent numpy implementation of the V4.1 vision tower and aligner
(docs/vision.md), used by tests/test_vision.c to check src/vision/vision.c.

    vision_ref.py DIR N_H N_W

DIR holds a checkpoint written by tide synth --vision (config.json, the
index, the shards) and, from the C test, patches.f32 ([N][3*p*p]),
tower.f32 ([N][Dv]) and aligned.f32 ([L][D]). Exits 0 when both outputs
match this implementation within the stated bounds, 1 otherwise.

Written from the semantics in docs/vision.md, not from the C code: numpy
matmuls (pairwise / BLAS sums) where the C code sums sequentially, the
2-D RoPE built as an explicit angle grid, the aligner's unfold as a
reshape/transpose. BF16 rounding at the same tensor boundaries as the
reference (its BF16 tensors)."""
import json
import math
import os
import struct
import sys

import numpy as np


def bf16(x):
    """Round f32 to the nearest BF16 (ties to even), returned as f32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def load_checkpoint(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    out, headers = {}, {}
    for name, f in idx.items():
        if f not in headers:
            raw = open(os.path.join(d, f), "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            headers[f] = (json.loads(raw[8:8 + n]), raw, 8 + n)
        h, raw, base = headers[f]
        if not (name.startswith("vision.") or name.startswith("aligner.") or name.startswith("image_")):
            continue
        meta = h[name]
        assert meta["dtype"] == "BF16", (name, meta["dtype"])
        a, b = meta["data_offsets"]
        u = np.frombuffer(raw[base + a:base + b], dtype="<u2").astype(np.uint32) << 16
        out[name] = u.view(np.float32).reshape(meta["shape"])
    return out


def rmsnorm(x, w, eps=1e-6):
    x64 = x.astype(np.float32)
    r = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + np.float32(eps))
    return bf16(w * (x64 * r))


def linear(x, w, b=None):
    y = x.astype(np.float32) @ w.T.astype(np.float32)
    if b is not None:
        y = y + b
    return bf16(y)


def rope_angles(n_h, n_w, rope_dim, theta):
    nf = rope_dim // 2
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, rope_dim, 2, dtype=np.float32) / np.float32(rope_dim)))).astype(np.float32)
    hh, ww = np.meshgrid(np.arange(n_h), np.arange(n_w), indexing="ij")
    ang = np.concatenate([hh.reshape(-1, 1) * inv[None, :nf], ww.reshape(-1, 1) * inv[None, :nf]], axis=1)
    return ang.astype(np.float32)  # [N, rope_dim]


def rotate(x, ang, pairing="half"):
    """x [N, H, hd]; ang [N, hd/2]."""
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if pairing == "half":
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return bf16(np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1))
    x1, x2 = x[..., 0::2], x[..., 1::2]  # a wrong pairing, for the sensitivity check
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = x1 * c - x2 * s, x2 * c + x1 * s
    return bf16(y)


def attention(q, k, v):
    """q, k, v [N, H, hd]: full bidirectional softmax attention per head."""
    hd = q.shape[-1]
    s = np.einsum("nhd,mhd->hnm", q, k).astype(np.float32) / np.float32(math.sqrt(hd))
    p = np.exp(s - s.max(-1, keepdims=True))
    den = p.sum(-1, keepdims=True)
    o = np.einsum("hnm,mhd->hnd", bf16(p), v) / den
    return bf16(o.transpose(1, 0, 2))


def silu(x):
    return x / (1.0 + np.exp(-x))


def tower(W, cfg, patches, n_h, n_w, pairing="half"):
    Dv, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    I, hd = cfg["intermediate_size"], cfg["hidden_size"] // cfg["num_attention_heads"]
    N = n_h * n_w
    ang = rope_angles(n_h, n_w, hd // 2, cfg["rope_theta"])
    x = linear(patches, W["vision.patch_embed.proj.weight"], W["vision.patch_embed.proj.bias"])
    for l in range(L):
        p = f"vision.blocks.{l}."
        t = rmsnorm(x, W[p + "norm1.weight"])
        qkv = linear(t, W[p + "attn.wqkv.weight"], W[p + "attn.wqkv.bias"])
        q, k, v = (qkv[:, i * Dv:(i + 1) * Dv].reshape(N, H, hd) for i in range(3))
        o = attention(rotate(q, ang, pairing), rotate(k, ang, pairing), v)
        x = bf16(x + linear(o.reshape(N, Dv), W[p + "attn.wo.weight"], W[p + "attn.wo.bias"]))
        g = linear(rmsnorm(x, W[p + "norm2.weight"]), W[p + "mlp.w1.weight"])
        h = bf16(bf16(silu(g[:, :I])) * g[:, I:])
        x = bf16(x + linear(h, W[p + "mlp.w2.weight"]))
    return rmsnorm(x, W["vision.norm.weight"])


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))


def aligner(W, cfg, feat, n_h, n_w):
    r, Dv = cfg["downsample_ratio"], cfg["hidden_size"]
    gh, gw = -(-n_h // r), -(-n_w // r)
    grid = np.zeros((gh * r, gw * r, Dv), dtype=np.float32)
    grid[:n_h, :n_w] = feat.reshape(n_h, n_w, Dv)
    # [gh, r, gw, r, Dv] -> [gh, gw, Dv, r, r]: channel-major within each cell
    cells = grid.reshape(gh, r, gw, r, Dv).transpose(0, 2, 4, 1, 3).reshape(gh * gw, Dv * r * r)
    z = linear(cells, W["aligner.w1.weight"], W["aligner.w1.bias"])
    return linear(bf16(gelu(z)), W["aligner.w2.weight"], W["aligner.w2.bias"])


def compare(what, got, want, rel_max, rel_mean):
    scale = float(np.abs(want).max())
    err = np.abs(got.astype(np.float64) - want)
    mx, mean = float(err.max()) / scale, float(err.mean()) / float(np.abs(want).mean())
    ok = np.isfinite(got).all() and mx <= rel_max and mean <= rel_mean and scale > 0
    print(f"vision_ref: {what}: max |err| / max |ref| = {mx:.2e} (bound {rel_max:g}), "
          f"mean |err| / mean |ref| = {mean:.2e} (bound {rel_mean:g}) {'ok' if ok else 'FAIL'}")
    return ok, mean


def main():
    d, n_h, n_w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg_all = json.load(open(os.path.join(d, "config.json")))
    cfg = cfg_all["vision_config"]
    D = cfg_all["text_config"]["hidden_size"]
    W = load_checkpoint(d)
    p, N = cfg["patch_size"], n_h * n_w
    patches = np.fromfile(os.path.join(d, "patches.f32"), dtype=np.float32).reshape(N, 3 * p * p)
    got_t = np.fromfile(os.path.join(d, "tower.f32"), dtype=np.float32).reshape(N, cfg["hidden_size"])
    r = cfg["downsample_ratio"]
    got_a = np.fromfile(os.path.join(d, "aligned.f32"), dtype=np.float32).reshape(-(-n_h // r) * -(-n_w // r), D)
    want_t = tower(W, cfg, patches, n_h, n_w)
    # The aligner is checked on the C tower's output, so its bound is its own.
    want_a = aligner(W, cfg, got_t, n_h, n_w)
    ok1, mean_t = compare("tower", got_t, want_t, 5e-2, 1e-2)
    ok2, _ = compare("aligner", got_a, want_a, 3e-2, 4e-3)
    # Sensitivity: the same tower with the RoPE pairs taken adjacent (the text
    # model's convention) must be far outside the bound, or the test proves nothing.
    wrong = tower(W, cfg, patches, n_h, n_w, pairing="adjacent")
    werr = float(np.abs(wrong - want_t).mean()) / float(np.abs(want_t).mean())
    ok3 = werr > 10 * max(mean_t, 1e-4)
    print(f"vision_ref: adjacent-pair RoPE differs by {werr:.2e} (mean rel): {'ok' if ok3 else 'FAIL (test is blind)'}")
    sys.exit(0 if ok1 and ok2 and ok3 else 1)


if __name__ == "__main__":
    main()
