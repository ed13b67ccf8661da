"""Independent numpy reference of tide's sampler (src/engine/sampler.c).

Written from the documented semantics (docs/engine.md), not from the C code,
and with a different algorithm: a full lexicographic sort instead of heaps and
threshold partitions. The C test (tests/test_sampler_ref.c) writes cases and
the Exp(1) draws its RNG gives each token; this script writes back the
distribution each case samples from and the token the exponential race picks.

Usage: sampler_ref.py DIR N
  reads  DIR/case_I.txt   parameters, one "key value..." line each
         DIR/case_I.bin   int32 V, float32 logits[V], float64 exp_draws[V]
  writes DIR/probs_I.bin  float64 probs[V]
         DIR/logprobs_I.txt "TOKEN LOGPROB" of the chosen token, then one line
                          per top_logprobs token (raw log softmax)
  prints "I TOKEN" per case on stdout.
"""
import sys

import numpy as np

F32 = np.float32


def read_case(d, i):
    params = {}
    with open(f"{d}/case_{i}.txt") as f:
        for line in f:
            parts = line.split()
            if parts:
                params[parts[0]] = parts[1:]
    raw = open(f"{d}/case_{i}.bin", "rb").read()
    v = int(np.frombuffer(raw, np.int32, 1)[0])
    logits = np.frombuffer(raw, np.float32, v, 4).copy()
    draws = np.frombuffer(raw, np.float64, v, 4 + 4 * v).copy()
    return params, logits, draws


def floats(p, k):
    return [F32(float(x)) for x in p.get(k, [])]


def ints(p, k):
    return np.array([int(x) for x in p.get(k, [])], dtype=np.int64)


def process(p, logits):
    """Mask, penalties (repetition, frequency, presence), bias: float32 math."""
    l = logits.astype(F32).copy()
    l[np.isnan(l)] = -np.inf
    banned = ints(p, "banned")
    l[banned] = -np.inf
    rep = floats(p, "repetition")[0]
    prompt, output = ints(p, "prompt"), ints(p, "output")
    if rep != F32(1):
        seen = np.unique(np.concatenate([prompt, output]))
        x = l[seen]
        l[seen] = np.where(x > 0, x / rep, x * rep).astype(F32)
    freq, pres = floats(p, "frequency")[0], floats(p, "presence")[0]
    if freq != 0 or pres != 0:
        toks, counts = np.unique(output, return_counts=True)
        l[toks] = (l[toks] - freq * counts.astype(F32)).astype(F32)
        l[toks] = (l[toks] - pres).astype(F32)
    bias_tok, bias_val = ints(p, "bias_tokens"), floats(p, "bias_values")
    for t, b in zip(bias_tok, bias_val):
        l[t] = F32(l[t] + b)
    return l


def distribution(p, logits):
    """Returns (probs over the vocab, kept ids in order) of the processed row."""
    l = process(p, logits)
    v = l.shape[0]
    temp = floats(p, "temperature")[0]
    top_k = int(p["top_k"][0])
    top_p = floats(p, "top_p")[0]
    min_p = floats(p, "min_p")[0]
    probs = np.zeros(v)
    if temp < F32(1e-5) or top_k == 1:
        probs[int(np.argmax(l))] = 1.0  # first maximum
        return probs, None
    s = l.astype(np.float64) * (1.0 / np.float64(temp))
    ids = np.arange(v)
    finite = np.isfinite(s)
    order = np.lexsort((ids[finite], -s[finite]))  # s descending, id ascending
    keep = ids[finite][order]
    if 0 < top_k < v:
        keep = keep[:top_k]
    m = s[keep[0]]
    if top_p < F32(1):
        w = np.exp(s[keep] - m)
        cum = np.cumsum(w)
        target = np.float64(top_p) * w.sum()
        hit = np.nonzero(cum >= target)[0]
        keep = keep[: (hit[0] + 1 if hit.size else keep.size)]
    if min_p > 0:
        keep = keep[s[keep] >= m + np.log(np.float64(min_p))]
    w = np.exp(s[keep] - m)
    probs[keep] = w / w.sum()
    return probs, keep


def raw_logprobs(p, logits, token):
    """Log softmax of the RAW logits (NaN = -inf), in float64: the chosen
    token's and the best top_logprobs tokens' (value descending, id
    ascending on ties), as OpenAI's logprobs report them."""
    x = np.where(np.isnan(logits), -np.inf, logits.astype(np.float64))
    m = x.max()
    logz = np.log(np.exp(x[np.isfinite(x)] - m).sum())
    lp = x - m - logz
    k = int(p.get("top_logprobs", ["0"])[0])
    order = sorted(range(len(x)), key=lambda t: (-x[t], t))[:k]
    return lp[token], [(t, lp[t]) for t in order]


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        p, logits, draws = read_case(d, i)
        probs, keep = distribution(p, logits)
        if keep is None:
            token = int(np.argmax(probs))
        else:
            q = probs[keep] / draws[keep]
            best = q.max()
            token = int(keep[q == best].min())
        probs.tofile(f"{d}/probs_{i}.bin")
        chosen, top = raw_logprobs(p, logits, token)
        with open(f"{d}/logprobs_{i}.txt", "w") as f:
            f.write(f"{token} {float(chosen)!r}\n")
            for t, v in top:
                f.write(f"{t} {float(v)!r}\n")
        print(i, token)


if __name__ == "__main__":
    main()
