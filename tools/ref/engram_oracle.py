#!/usr/bin/python3
"""Independent numpy oracle for tide's engram hashing and engram layer.

Written from docs/engram.md (the rules of inference/engram.py and the Engram
module of inference/model.py), sharing no code with tide. Used by
tests/test_engram.c.

  layout JSON   stdin JSON {layer_ids, vocab_size, max_ngram, n_heads,
                compressed_vocab}; prints one line per engram layer:
                "multipliers m0 m1 ...", then "primes p0 p1 ...".
  hash          stdin JSON {layout fields, pad_id, seqs: [[cid or -1, ...]]};
                prints, per sequence, per position, per layer, the row ids.
  forward DIR   reads DIR/meta.json and the raw arrays the test wrote, writes
                DIR/kv.f32 and DIR/out.f32 (the reference's computation in
                float32 / bfloat16 simulated with numpy).
"""
import json
import sys

import numpy as np


def isprime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def layout(cfg):
    mults, primes, taken = [], [], set()
    V = cfg["compressed_vocab"]
    bound = max(1, (np.iinfo(np.int64).max // V) // 2)
    for layer in cfg["layer_ids"]:
        rng = np.random.default_rng(10007 * layer)
        vals = rng.integers(low=0, high=bound, size=(cfg["max_ngram"],), dtype=np.int64)
        mults.append([int(v) * 2 + 1 for v in vals])
        row = []
        for _ in range(cfg["max_ngram"] - 1):
            cur = cfg["vocab_size"] - 1
            for _ in range(cfg["n_heads"]):
                cand = cur + 1
                while not isprime(cand) or cand in taken:
                    cand += 1
                taken.add(cand)
                row.append(cand)
                cur = cand
        primes.append(row)
    return mults, primes


def hash_seq(cfg, mults, primes, pad, seq):
    """Rows of every position of one whole sequence (Python ints: exact)."""
    G, H = cfg["max_ngram"], cfg["n_heads"]
    out = []
    for pos in range(len(seq)):
        toks, stop = [], False
        for s in range(G):
            stop = stop or pos - s < 0 or seq[pos - s] == -1
            toks.append(pad if stop else seq[pos - s])
        per_layer = []
        for k in range(len(mults)):
            offs = [0]
            for p in primes[k][:-1]:
                offs.append(offs[-1] + p)
            h = toks[0] * mults[k][0]
            cols = []
            for i in range(1, G):
                h ^= toks[i] * mults[k][i]
                for hd in range(H):
                    c = (i - 1) * H + hd
                    cols.append(offs[c] + h % primes[k][c])
            per_layer.append(cols)
        out.append(per_layer)
    return out


# ---- number formats -------------------------------------------------------


def e4m3_values():
    v = np.zeros(256, dtype=np.float64)
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            v[code] = np.nan
        elif e == 0:
            v[code] = m / 8 * 2.0**-6
        else:
            v[code] = (1 + m / 8) * 2.0 ** (e - 7)
        if s:
            v[code] = -v[code]
    return v.astype(np.float32)


E4M3 = e4m3_values()
POS = E4M3[:127].astype(np.float64)  # codes 0..126: the finite non-negative values, increasing


def to_e4m3(x):
    """float32 already within [-448, 448] -> codes, round to nearest, ties to even code."""
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(POS, a), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo, dhi = a - POS[lo], POS[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (pick | (np.signbit(x).astype(np.int64) << 7)).astype(np.uint8)


def e8m0(code):
    return np.ldexp(np.float32(1), code.astype(np.int32) - 127).astype(np.float32)


def bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def act_quant(x):
    """fp8 activation quantisation in blocks of 32 with UE8M0 scales."""
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.maximum(np.abs(b).max(-1), np.float32(1e-4)).astype(np.float32)
    ratio = (amax * np.float32(1 / 448)).astype(np.float32)
    bits = ratio.view(np.uint32)
    code = ((bits >> 23) & 255) + ((bits & 0x7FFFFF) != 0)
    scale = e8m0(code)
    q = to_e4m3(np.clip(b / scale[..., None], -448, 448))
    return q.reshape(x.shape), scale


def forward(d):
    meta = json.load(open(f"{d}/meta.json"))
    n, D, HC, C, HD, R = meta["n"], meta["dim"], meta["hc"], meta["n_cols"], meta["head_dim"], meta["rows"]
    eps = np.float32(meta["eps"])
    K, N = C * HD, (HC + 1) * D
    rd = lambda name, dt: np.fromfile(f"{d}/{name}", dtype=dt)
    embed = rd("embed.u8", np.uint8).reshape(R, HD)
    escale = rd("embed_scale.u8", np.uint8).reshape(R, HD // 32)
    wkv = rd("wkv.u8", np.uint8).reshape(N, K)
    wscale = rd("wkv_scale.u8", np.uint8).reshape((N + 31) // 32, K // 32)
    qw = rd("q_weight.f32", np.float32).reshape(HC, D)
    kw = rd("k_weight.f32", np.float32).reshape(HC, D)
    x = rd("x.f32", np.float32).reshape(n, HC, D)
    rows = rd("rows.i64", np.int64).reshape(n, C)
    dead = rd("dead.u8", np.uint8).astype(bool)

    # gather + dequantise, rounded to bf16
    vals = E4M3[embed[rows]].reshape(n, C, HD // 32, 32) * e8m0(escale[rows])[..., None]
    emb = bf16(vals.reshape(n, K))
    emb.tofile(f"{d}/emb.f32")
    # wkv: fp8 x fp8 with per-block f32 accumulation
    qa, sa = act_quant(emb)
    A, W = E4M3[qa], E4M3[wkv]
    sb = e8m0(wscale)
    acc = np.zeros((n, N), dtype=np.float32)
    for b in range(K // 32):
        part = (A[:, b * 32:(b + 1) * 32] @ W[:, b * 32:(b + 1) * 32].T).astype(np.float32)
        acc += (part * sa[:, b, None]) * np.repeat(sb[:, b], 32)[:N][None]
    kv = bf16(acc)
    kv.tofile(f"{d}/kv.f32")
    key, value = kv[:, : HC * D].reshape(n, HC, D), kv[:, HC * D:]
    w = qw * kw
    h = x
    rstd = (1 / np.sqrt((h * h).mean(-1) + eps)) * (1 / np.sqrt((key * key).mean(-1) + eps))
    dot = (h * w * key).sum(-1) * rstd * np.float32(D ** -0.5)
    gate = 1 / (1 + np.exp(-np.copysign(np.sqrt(np.maximum(np.abs(dot), np.float32(1e-6))), dot)))
    gate = np.where(dead[:, None], np.float32(0), gate).astype(np.float32)
    out = bf16(h + gate[..., None] * value[:, None, :])
    out.astype(np.float32).tofile(f"{d}/out.f32")


def main():
    cmd = sys.argv[1]
    if cmd == "layout":
        cfg = json.load(sys.stdin)
        mults, primes = layout(cfg)
        for m in mults:
            print("multipliers", *m)
        for p in primes:
            print("primes", *p)
    elif cmd == "hash":
        cfg = json.load(sys.stdin)
        mults, primes = layout(cfg)
        out = []
        for seq in cfg["seqs"]:
            for per_pos in hash_seq(cfg, mults, primes, cfg["pad_id"], seq):
                for cols in per_pos:
                    out.append(" ".join(map(str, cols)))
        sys.stdout.write("\n".join(out) + "\n")
    elif cmd == "forward":
        with np.errstate(over="ignore", invalid="ignore"):
            forward(sys.argv[2])
    else:
        raise SystemExit("usage: engram_oracle.py layout|hash|forward DIR")


if __name__ == "__main__":
    main()
