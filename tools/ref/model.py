"""The DeepSeek-V4.1-Flash text forward pass, in numpy: the oracle of tide.

Written from the semantics of the official inference/model.py (revision
dba1be0a40aa45a94ad051997016db3960a90277), not from its code. One sequence at
a time (batch 1). Every tensor the reference holds in bf16 is a float32 array
holding bf16 values here (numerics.bf16 rounds at the same points).

Usage:
    m = Model(ckpt_dir)
    st = m.new_state()
    out = m.forward(st, prompt_ids)          # prefill at position 0
    out = m.forward(st, [next_id])           # one decode step
    out["logits"]  -> float32 [L, vocab], one row per input token

forward() on a chunk of several tokens after position 0 is "chunked prefill",
which the reference itself does not implement (its non-zero start_pos path
takes exactly one token); see docs/reference.md for how it is defined here,
and for the comparison of this file with the official graph (test_golden.py).
"""
import math
import os

import numpy as np

import ckpt
import engram as eg
import numerics as nx

F32 = np.float32


# ---------------------------------------------------------------- rope


def rope_inv_freq(rd, theta, yarn):
    """Per-pair frequencies of precompute_freqs_cis; yarn = None or
    (factor, beta_fast, beta_slow, original_seq_len).

    As the official code computes them in torch float32 (docs/reference.md,
    "Transcendentals"): every step is one float32 operation in the official
    order (e = f32(k) / f32(rd); 1 / theta**e; the YaRN ramp, smooth and
    blend), and only the power is a transcendental, evaluated in float64 by
    the C library's pow (math.pow; the engine calls the same pow) and
    rounded once to float32: the correctly rounded value, which torch's
    float32 pow returns for these exponents (test_ops_ref checks the margin
    to the float32 rounding midpoints). The per-layer dumps of the official
    graph on tide-mini (docs/tide-mini-fidelity.md) match these frequencies
    on every rotation; the former rule (the whole formula in float64,
    rounded once) was one ulp off in a third of them."""
    e = [F32(F32(k) / F32(rd)) for k in range(0, rd, 2)]
    f = [F32(F32(1.0) / F32(math.pow(float(theta), float(x)))) for x in e]
    if yarn is not None and yarn[3] > 0:
        factor, beta_fast, beta_slow, orig = yarn

        def corrected(rot):
            return rd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low = max(math.floor(corrected(beta_fast)), 0)
        high = min(math.ceil(corrected(beta_slow)), rd - 1)
        span = F32(max(high - low, 1e-3))
        out = []
        for i, v in enumerate(f):
            ramp = F32(min(max(F32(F32(i) - F32(low)) / span, F32(0)), F32(1)))
            smooth = F32(F32(1) - ramp)
            out.append(F32(F32(F32(v / F32(factor)) * F32(F32(1) - smooth)) + F32(v * smooth)))
        f = out
    return np.array(f, dtype=F32)


_cos = np.frompyfunc(math.cos, 1, 1)
_sin = np.frompyfunc(math.sin, 1, 1)


def rope_cos_sin(inv_freq, pos):
    """cos/sin tables [t, rd/2]: angle = float32(pos) * freq rounded to
    float32 (as the reference's float32 outer product), then cos and sin of
    that angle in float64 by the C library (math.cos/math.sin; the engine's
    tide_rope_cs calls the same cos/sin), each rounded once to float32."""
    ang = (np.asarray(pos, dtype=F32)[:, None] * inv_freq[None, :]).astype(F32)
    a64 = ang.astype(np.float64)
    return np.asarray(_cos(a64), dtype=np.float64).astype(F32), np.asarray(_sin(a64), dtype=np.float64).astype(F32)


def apply_rope(x, cos, sin, inverse=False):
    """Rotate adjacent pairs of the last axis of x [t, ..., rd] by the angles of
    rows t; result rounded to bf16 (the reference writes it into a bf16 view)."""
    x = np.asarray(x, dtype=F32)
    shp = x.shape
    xr = x.reshape(shp[:-1] + (shp[-1] // 2, 2))
    a, b = xr[..., 0], xr[..., 1]
    extra = x.ndim - 2
    c = cos.reshape(cos.shape[:1] + (1,) * extra + cos.shape[1:])
    s = sin.reshape(sin.shape[:1] + (1,) * extra + sin.shape[1:])
    if inverse:
        s = -s
    re = a * c - b * s
    im = a * s + b * c
    return nx.bf16(np.stack([re, im], -1).reshape(shp))


# ---------------------------------------------------------------- hyper-connections


def hc_split_sinkhorn(mixes, scale, base, h, iters, eps):
    mixes = np.asarray(mixes, dtype=F32)
    scale = np.asarray(scale, dtype=F32)
    base = np.asarray(base, dtype=F32)
    eps = F32(eps)
    pre = nx.sigmoid(mixes[..., :h] * scale[0] + base[:h]) + eps
    post = F32(2) * nx.sigmoid(mixes[..., h:2 * h] * scale[1] + base[h:2 * h])
    comb = (mixes[..., 2 * h:] * scale[2] + base[2 * h:]).reshape(mixes.shape[:-1] + (h, h))
    comb = np.exp(comb - comb.max(-1, keepdims=True))
    comb = comb / comb.sum(-1, keepdims=True) + eps
    comb = comb / (comb.sum(-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdims=True) + eps)
        comb = comb / (comb.sum(-2, keepdims=True) + eps)
    return pre.astype(F32), post.astype(F32), comb.astype(F32)


def hc_mixes(x, fn, scale, base, h, iters, hc_eps, norm_eps):
    """x: [t, hc, d] -> pre [t,hc], post [t,hc], comb [t,hc,hc] (comb[k][j]: from copy k into j)."""
    xf = x.reshape(x.shape[0], -1).astype(F32)
    rs = F32(1) / np.sqrt(np.mean(xf * xf, -1, keepdims=True, dtype=F32) + F32(norm_eps))
    mixes = (xf.astype(np.float64) @ fn.astype(np.float64).T).astype(F32) * rs
    return hc_split_sinkhorn(mixes, scale, base, h, iters, hc_eps)


def hc_pre(x, pre):
    acc = pre[:, 0, None] * x[:, 0].astype(F32)
    for k in range(1, x.shape[1]):
        acc = acc + pre[:, k, None] * x[:, k].astype(F32)
    return nx.bf16(acc)


def hc_post(y, residual, post, comb):
    hc = residual.shape[1]
    mix = comb[:, 0, :, None] * residual[:, 0, None, :].astype(F32)
    for k in range(1, hc):
        mix = mix + comb[:, k, :, None] * residual[:, k, None, :].astype(F32)
    return nx.bf16(post[:, :, None] * y[:, None, :].astype(F32) + mix)


# ---------------------------------------------------------------- attention kernels


def sparse_attn(q, kv, sink, idx, scale):
    """The reference kernel: per query, entries of idx (-1 = none) in chunks of 64,
    online softmax (denominator summed in float64) with the un-normalised
    probabilities rounded to bf16 before the value product, the sink added to
    the denominator. q [t,H,D], kv [n,D], idx [t,K]."""
    q64 = np.asarray(q, dtype=np.float64)
    t, H, D = q.shape
    K = idx.shape[1]
    mx = np.full((t, H), -1e30, dtype=F32)
    den = np.zeros((t, H), dtype=F32)
    num = np.zeros((t, H, D), dtype=F32)
    scale = F32(scale)
    for b in range(0, K, 64):
        ch = idx[:, b:b + 64]
        valid = ch >= 0
        vals = kv[np.maximum(ch, 0)] * valid[..., None]  # [t, c, D]
        # q.k as torch's CPU matmul computes it: float32 multiply-adds in
        # order over d (exact product plus running sum, rounded to float32
        # at each step; the float64 sum of an exact float32 product and a
        # float32 is rounded once more only in ~2^-29 of the cases). The
        # per-layer dumps of the official graph on tide-mini
        # (docs/tide-mini-fidelity.md) match this order on every score; a
        # correctly rounded dot product does not.
        v64 = vals.astype(np.float64)
        sc = np.zeros((t, H, vals.shape[1]), dtype=F32)
        for d in range(D):
            sc = (sc + q64[:, :, None, d] * v64[:, None, :, d]).astype(F32)
        sc = np.where(valid[:, None, :], sc, F32(-np.inf)) * scale
        nxt = np.maximum(mx, sc.max(-1))
        corr = np.exp(mx - nxt)
        probs = np.exp(sc - nxt[..., None])
        # summed in float64: a float32 sum's rounding depends on where the
        # masked zeros sit (ring order, batch width), which broke the
        # prefill == decode identity on rare seeds
        den = den * corr + probs.sum(-1, dtype=np.float64).astype(F32)
        pv = np.einsum("thc,tcd->thd", nx.bf16(probs).astype(np.float64), vals.astype(np.float64)).astype(F32)
        num = num * corr[..., None] + pv
        mx = nxt
    den = den + np.exp(np.asarray(sink, dtype=F32)[None, :] - mx)
    return nx.bf16(num / den[..., None])


def select_candidate_blocks(score, compress_lens, topk_blocks, block_size):
    """Level one of the two-level top-k: the best topk_blocks blocks of block_size
    compressed positions per query (block score = its max), the query's newest,
    partly filled block pinned in; ties to the lower block. -> bool [t, n]."""
    t, n = score.shape
    nb = -(-n // block_size)
    padded = np.full((t, nb * block_size), -np.inf, dtype=F32)
    padded[:, :n] = score
    bs = padded.reshape(t, nb, block_size).max(-1)
    last = (np.asarray(compress_lens) - 1) // block_size  # floor: -1 when nothing is visible
    bs = np.where(np.arange(nb)[None, :] == last[:, None], np.inf, bs)
    k = min(topk_blocks, nb)
    top = nx.topk_lowest_ties(bs, k)
    keep = np.zeros((t, nb), dtype=bool)
    vals = np.take_along_axis(bs, top, -1)
    np.put_along_axis(keep, top, vals > -np.inf, -1)
    return np.repeat(keep, block_size, -1)[:, :n]


def topk_positions(score, k, compress_lens, offset):
    """Top-k by score (ties to the lower position), re-sorted by position;
    positions the query cannot reach become -1, the rest are shifted by offset."""
    top = np.sort(nx.topk_lowest_ties(score, k), -1)
    return np.where(top < np.asarray(compress_lens)[:, None], top + offset, -1).astype(np.int64)


def indexer_score(q, k, w, compress_lens):
    """q [t,H,d] and k [n,d] fp4-simulated bf16; w [t,H] bf16 head weights.
    Per head q.k rounded to bf16, relu, times w rounded to bf16, summed over heads
    (float32) and rounded to bf16; positions >= compress_len masked to -inf."""
    s = nx.bf16(np.einsum("thd,nd->thn", q.astype(np.float64), k.astype(np.float64)).astype(F32))
    s = np.maximum(s, F32(0))
    s = nx.bf16(s * w[:, :, None])
    tot = s[:, 0].copy()
    for hh in range(1, s.shape[1]):
        tot = tot + s[:, hh]
    tot = nx.bf16(tot)
    n = k.shape[0]
    mask = np.arange(n)[None, :] >= np.asarray(compress_lens)[:, None]
    return np.where(mask, F32(-np.inf), tot).astype(F32)


def compressor_forward(x, sp, ratio, wkv, wgate, norm_w, eps, state):
    """A KV source's compressor over tokens at positions sp.. -> (index of the first
    group completed here, latents [g, D] bf16 before RoPE, or None if none completed).
    Ratio 1: a bf16 projection and norm per token. Ratio r > 1: float32 kv and
    gate scores go into the carried group slots (slot = pos % r, state = (kv,
    score) arrays [r, D], updated in place); each completed group is pooled with
    a float32 softmax over its r tokens, rounded to bf16 and normed."""
    if ratio == 1:
        return sp, nx.rmsnorm(nx.linear(x, wkv), norm_w, eps)
    xf = x.astype(F32)
    kv = nx.linear(xf, wkv)
    sc = nx.linear(xf, wgate)
    skv, ssc = state
    out = []
    for t in range(x.shape[0]):
        pos = sp + t
        skv[pos % ratio] = kv[t]
        ssc[pos % ratio] = sc[t]
        if (pos + 1) % ratio == 0:
            e = np.exp(ssc - ssc.max(0, keepdims=True))
            p = e / e.sum(0, keepdims=True)
            pooled = skv[0] * p[0]
            for j in range(1, ratio):
                pooled = pooled + skv[j] * p[j]
            out.append(pooled)
    if not out:
        return sp // ratio, None
    return sp // ratio, nx.rmsnorm(nx.bf16(np.stack(out)), norm_w, eps)


# ---------------------------------------------------------------- MoE


def swiglu(gate, up, limit, weight=None):
    gate = np.asarray(gate, dtype=F32)
    up = np.asarray(up, dtype=F32)
    if limit > 0:
        up = np.clip(up, -limit, limit).astype(F32)
        gate = np.minimum(gate, F32(limit))
    with np.errstate(over="ignore"):
        y = (gate / (F32(1) + np.exp(-gate))).astype(F32) * up
    if weight is not None:
        y = np.asarray(weight, dtype=F32)[:, None] * y
    return y.astype(F32)


def expert_forward(x, w1, w2, w3, limit, weight=None):
    g = nx.linear(x, w1)
    u = nx.linear(x, w3)
    return nx.linear(nx.bf16(swiglu(g, u, limit, weight)), w2)


def moe_route(x, gate_w, bias, topk, route_scale, score_func="sqrtsoftplus", norm_topk=True, gate_temp=1.0):
    """-> (weights float32 [t,k], expert indices [t,k]); ties to the lower expert."""
    s = (x.astype(np.float64) @ gate_w.astype(np.float64).T).astype(F32)
    if gate_temp != 1.0:
        s = (s / F32(gate_temp)).astype(F32)
    if score_func == "softmax":
        e = np.exp(s - s.max(-1, keepdims=True))
        s = e / e.sum(-1, keepdims=True)
    elif score_func == "sigmoid":
        s = nx.sigmoid(s)
    else:
        s = np.sqrt(nx.softplus(s)).astype(F32)
    sel = s + bias[None, :] if bias is not None else s
    idx = nx.topk_lowest_ties(sel.astype(F32), topk)
    w = np.take_along_axis(s, idx, -1).astype(F32)
    if norm_topk and topk > 1:
        w = (w / (w.sum(-1, keepdims=True, dtype=F32) + F32(1e-20))).astype(F32)
    w = (w * F32(route_scale)).astype(F32)
    return w, idx


# ---------------------------------------------------------------- growing caches


class Rows:
    """A zero-initialised [capacity, width] array that grows on demand (the
    reference's caches are zero buffers of max_seq_len rows)."""

    def __init__(self, width, cap=64):
        self.a = np.zeros((cap, width), dtype=F32)

    def write(self, at, rows):
        need = at + len(rows)
        if need > len(self.a):
            cap = max(need, 2 * len(self.a))
            b = np.zeros((cap, self.a.shape[1]), dtype=F32)
            b[:len(self.a)] = self.a
            self.a = b
        self.a[at:need] = rows

    def read(self, n):
        if n > len(self.a):
            self.write(n, np.zeros((0, self.a.shape[1]), F32))
        return self.a[:n]


class State:
    """Everything the reference keeps in buffers between forwards, for one sequence."""

    def __init__(self, model):
        a = model.args
        self.pos = 0
        self.rings = {}  # layer id -> [window, head_dim] window KV ring (bf16 values)
        self.comp_kv = {}  # kv source -> Rows of compressed latents (RoPE'd, fp4 sim)
        self.kv_state = {}  # kv source (ratio > 1) -> (kv [ratio, D], score [ratio, D]) float32
        self.index_k = {}  # kv source -> Rows of index keys
        self.published = None  # kv source whose index keys were published last (quirk)
        self.history = np.zeros(0, dtype=np.int64)  # engram compressed ids so far
        self.cur_src = None  # kv source whose compressed KV the current forward reads
        self.topk = None  # top-k rows published by the last index source
        self.candidates = None  # candidate-block mask of this forward
        for i in range(model.n_total):
            self.rings[i] = np.zeros((a.window_size, a.head_dim), dtype=F32)
        for i in model.kv_sources:
            r = a.compress_ratios[i]
            self.comp_kv[i] = Rows(a.head_dim)
            self.index_k[i] = Rows(a.index_head_dim)
            if r > 1:
                self.kv_state[i] = (np.zeros((r, a.head_dim), F32), np.full((r, a.head_dim), -np.inf, F32))


# ---------------------------------------------------------------- the model


class Model:
    def __init__(self, path, intended_index_keys=False, check_engram=True):
        self.args, self.w, self.config = ckpt.load(path)
        a = self.args
        self.intended_index_keys = intended_index_keys
        self.has_dspark = bool(a.dspark_block_size) and a.n_mtp_layers > 0
        self.n_total = a.n_layers + (a.n_mtp_layers if self.has_dspark else 0)
        self.kv_sources = [i for i in a.kv_source_layers if i < a.n_layers]
        self.index_sources = [i for i in a.index_source_layers if i < a.n_layers]
        self._check_roles()
        self.embed = self.w.param("embed.weight", "bf16")
        self.head = self.w.f32("head.weight")  # bf16 stored, fp32 in use
        self.norm = self.w.param("norm.weight", "bf16")
        self.layers = [self._layer(i, f"layers.{i}") for i in range(a.n_layers)]
        self.mtp = []
        if self.has_dspark:
            for s in range(a.n_mtp_layers):
                if a.compress_ratios[a.n_layers + s]:
                    raise ValueError(f"DSpark stage {s} has a compress ratio (must be 0)")
            self.mtp = [self._layer(a.n_layers + s, f"mtp.{s}") for s in range(a.n_mtp_layers)]
            self._dspark_extra()
        self.hasher = None
        if a.engram_layer_ids:
            tok = os.path.join(path, "tokenizer.json")
            if not os.path.exists(tok):
                raise ValueError(f"{path}: engram layers need tokenizer.json")
            self.hasher = eg.EngramHasher(a, tok, check_size=check_engram)
        self.inv_freq = {}

    # ---- roles

    def _check_roles(self):
        a = self.args
        for i in self.kv_sources:
            if a.compress_ratios[i] == 0:
                raise ValueError(f"kv source layer {i} has compress ratio 0")
            if i not in self.index_sources:
                raise ValueError(f"kv source layer {i} is not an index source")
        for i in range(a.n_layers):
            if a.compress_ratios[i] and not any(s <= i for s in self.kv_sources):
                raise ValueError(f"layer {i} compresses but no kv source is at or below it")
            if a.compress_ratios[i] and not any(s <= i for s in self.index_sources):
                raise ValueError(f"layer {i} compresses but no index source is at or below it")

    # ---- weights

    def _layer(self, i, p):
        a, w = self.args, self.w
        L = {"id": i, "ratio": a.compress_ratios[i]}
        L["attn_norm"] = w.param(p + ".attn_norm.weight", "bf16")
        L["ffn_norm"] = w.param(p + ".ffn_norm.weight", "bf16")
        for s in ("attn", "ffn"):
            L[f"hc_{s}_fn"] = w.f32(p + f".hc_{s}_fn")
            L[f"hc_{s}_base"] = w.f32(p + f".hc_{s}_base")
            L[f"hc_{s}_scale"] = w.f32(p + f".hc_{s}_scale")
        q = p + ".attn."
        L["sink"] = w.f32(q + "attn_sink")
        L["wq_a"] = w.linear(q + "wq_a")
        L["q_norm"] = w.param(q + "q_norm.weight", "bf16")
        L["wq_b"] = w.linear(q + "wq_b")
        L["wkv"] = w.linear(q + "wkv")
        L["kv_norm"] = w.param(q + "kv_norm.weight", "bf16")
        L["wo_a"] = w.linear(q + "wo_a", "bf16")
        L["wo_b"] = w.linear(q + "wo_b")
        backbone = i < a.n_layers
        L["kv_source"] = backbone and i in self.kv_sources
        L["index_source"] = backbone and i in self.index_sources
        if L["kv_source"]:
            c = q + "compressor."
            if L["ratio"] > 1:
                L["c_wkv"] = w.linear(c + "wkv", "f32")
                L["c_wgate"] = w.linear(c + "wgate", "f32")
            else:
                L["c_wkv"] = w.linear(c + "wkv", "bf16")
            L["c_norm"] = w.param(c + "norm.weight", "bf16")
        if L["index_source"]:
            x = q + "indexer."
            L["i_wq_b"] = w.linear(x + "wq_b")
            L["i_weights_proj"] = w.linear(x + "weights_proj", "bf16")
            if L["kv_source"]:
                L["i_wk"] = w.linear(x + "wk", "bf16")
                L["i_k_norm"] = w.param(x + "k_norm.weight", "bf16")
        f = p + ".ffn."
        n_exp, _ = a.moe_config(i)
        L["gate_w"] = w.param(f + "gate.weight", "bf16")
        L["gate_bias"] = w.f32(f + "gate.bias") if w.has(f + "gate.bias") else None
        # image-span tokens select with their own bias (docs/vision.md)
        L["gate_bias_vl"] = w.f32(f + "gate.bias_vl") if w.has(f + "gate.bias_vl") else None
        L["experts"] = [(w.linear(f + f"experts.{e}.w1"), w.linear(f + f"experts.{e}.w2"),
                         w.linear(f + f"experts.{e}.w3")) for e in range(n_exp)]
        L["shared"] = (w.linear(f + "shared_experts.w1"), w.linear(f + "shared_experts.w2"),
                       w.linear(f + "shared_experts.w3"))
        if i < a.n_layers and i in a.engram_layer_ids:
            e = p + ".engram."
            L["engram"] = dict(
                index=list(a.engram_layer_ids).index(i),
                table=np.asarray(w.raw(e + "embed.weight").data),
                table_scale=np.asarray(w.raw(e + "embed.scale").data),
                wkv=w.linear(e + "wkv"),
                q_weight=w.param(e + "q_weight", "bf16"),
                k_weight=w.param(e + "k_weight", "bf16"))
        return L

    def _dspark_extra(self):
        a, w = self.args, self.w
        last = a.n_mtp_layers - 1
        self.main_proj = w.linear("mtp.0.main_proj")
        self.main_norm = w.param("mtp.0.main_norm.weight", "bf16")
        self.mtp_norm = w.param(f"mtp.{last}.norm.weight", "bf16")
        self.markov_embed = w.param(f"mtp.{last}.markov_head.embed.weight", "bf16")
        self.markov_head = w.f32(f"mtp.{last}.markov_head.head.weight")
        self.conf_proj = w.f32(f"mtp.{last}.confidence_head.proj.weight")

    def head_logits(self, x):
        """float32 head: x [t, dim] (bf16 values) -> logits [t, vocab]."""
        if getattr(self, "_head64", None) is None:
            self._head64 = self.head.astype(np.float64).T.copy()
        return (x.astype(np.float64) @ self._head64).astype(F32)

    # ---- rope per layer

    def rope(self, i, pos):
        a = self.args
        if i not in self.inv_freq:
            if a.compress_ratios[i]:
                yarn = (a.rope_factor, a.beta_fast, a.beta_slow, a.original_seq_len)
                self.inv_freq[i] = rope_inv_freq(a.rope_head_dim, a.compress_rope_theta, yarn)
            else:
                self.inv_freq[i] = rope_inv_freq(a.rope_head_dim, a.rope_theta, None)
        return rope_cos_sin(self.inv_freq[i], pos)

    def new_state(self):
        return State(self)

    # ---- window

    def _window(self, L, st, kv, sp):
        """Pool rows and per-query window index rows, exactly as the reference lays
        them out (prefill: chunk rows, valid first; decode: ring, oldest first);
        a chunk after position 0 uses the decode layout over [ring ; chunk]."""
        win = self.args.window_size
        n = kv.shape[0]
        ring = st.rings[L["id"]]
        if sp == 0:
            pool = kv
            end = np.arange(n)[:, None]
            idx = np.maximum(end - win + 1, 0) + np.arange(min(n, win))[None, :]
            idx = np.where(idx > end, -1, idx)
        else:
            pool = np.concatenate([ring, kv], 0)
            p = sp + np.arange(n)[:, None] - win + 1 + np.arange(win)[None, :]  # positions, ascending
            idx = np.where(p < 0, -1, np.where(p < sp, p % win, win + (p - sp)))
        for t in range(max(0, n - win), n):  # the ring keeps the last `win` tokens
            ring[(sp + t) % win] = kv[t]
        return pool, idx

    # ---- compressor and indexer

    def _compress(self, L, st, x, sp):
        return compressor_forward(x, sp, L["ratio"], L["c_wkv"], L.get("c_wgate"), L["c_norm"],
                                  self.args.norm_eps, st.kv_state.get(L["id"]))

    def _indexer(self, L, st, x, qr, latent, g0, sp, offset, cur_src, dump):
        a = self.args
        i, r = L["id"], L["ratio"]
        n = x.shape[0]
        end = sp + n
        rd = a.rope_head_dim
        if L["kv_source"] and latent is not None:
            k = nx.rmsnorm(nx.linear(latent, L["i_wk"]), L["i_k_norm"], a.norm_eps)
            cos, sin = self.rope(i, (g0 + np.arange(len(latent))) * r)
            k[:, -rd:] = apply_rope(k[:, -rd:], cos, sin)
            k = nx.fp4_sim_e8m0(k, 32)
            st.index_k[i].write(g0, k)
            st.published = i
        q = nx.linear(qr, L["i_wq_b"]).reshape(n, a.index_n_heads, a.index_head_dim)
        cos, sin = self.rope(i, sp + np.arange(n))
        q[..., -rd:] = apply_rope(q[..., -rd:], cos, sin)
        q = nx.fp4_sim_e8m0(q, 32)
        owner = cur_src if self.intended_index_keys else st.published
        keys = st.index_k[owner].read(end // r)
        w = nx.bf16(nx.linear(x, L["i_weights_proj"]) * F32(a.index_head_dim ** -0.5 * a.index_n_heads ** -0.5))
        clens = (sp + np.arange(n) + 1) // r
        score = indexer_score(q, keys, w, clens)
        if i == a.candidate_source_layer:
            st.candidates = select_candidate_blocks(score, clens, a.candidate_topk_blocks, a.candidate_block_size)
        elif 0 <= a.candidate_source_layer < i:
            if st.candidates.shape != score.shape:
                raise ValueError(f"layer {i}: candidate mask {st.candidates.shape} does not fit scores "
                                 f"{score.shape} (different compress ratios)")
            score = np.where(st.candidates, score, F32(-np.inf))
        idx = topk_positions(score, min(a.index_topk, end // r), clens, offset)
        if dump is not None:
            dump[f"L{i}.index_q"] = q
            dump[f"L{i}.index_score"] = score
            dump[f"L{i}.index_owner"] = np.array(owner)
        return idx

    # ---- attention

    def attention(self, L, st, x, sp, dump=None):
        a = self.args
        i, r = L["id"], L["ratio"]
        n = x.shape[0]
        H, D, rd = a.n_heads, a.head_dim, a.rope_head_dim
        cos, sin = self.rope(i, sp + np.arange(n))
        qr = nx.rmsnorm(nx.linear(x, L["wq_a"]), L["q_norm"], a.norm_eps)
        q = nx.linear(qr, L["wq_b"]).reshape(n, H, D)
        q[..., -rd:] = apply_rope(q[..., -rd:], cos, sin)
        kv = nx.rmsnorm(nx.linear(x, L["wkv"]), L["kv_norm"], a.norm_eps)
        kv[:, -rd:] = apply_rope(kv[:, -rd:], cos, sin)
        kv = nx.fp8_act_sim(kv, 32)
        pool, idx = self._window(L, st, kv, sp)
        if r:
            clen = (sp + n) // r
            latent, g0 = None, 0
            if L["kv_source"]:
                g0, latent = self._compress(L, st, x, sp)
                st.cur_src = i
            if L["index_source"]:
                if clen == 0:
                    cidx = np.zeros((n, 0), dtype=np.int64)
                else:
                    cidx = self._indexer(L, st, x, qr, latent, g0, sp, pool.shape[0], st.cur_src, dump)
                st.topk = cidx
            else:
                cidx = st.topk
            if latent is not None:
                cc, ss = self.rope(i, (g0 + np.arange(len(latent))) * r)
                lat = latent.copy()
                lat[:, -rd:] = apply_rope(lat[:, -rd:], cc, ss)
                lat = nx.fp4_sim_e4m3(lat, 16)
                st.comp_kv[i].write(g0, lat)
                if dump is not None:
                    dump[f"L{i}.latent"] = lat
            comp = st.comp_kv[st.cur_src].read(clen)
            pool = np.concatenate([pool, comp], 0)
            idx = np.concatenate([idx, cidx], 1)
            if dump is not None:
                dump[f"L{i}.topk"] = cidx
        o = sparse_attn(q, pool, L["sink"], idx, D ** -0.5)
        o[..., -rd:] = apply_rope(o[..., -rd:], cos, sin, inverse=True)
        G = a.o_groups
        wo_a = L["wo_a"].dequant().reshape(G, a.o_lora_rank, -1)
        o = nx.bf16(np.einsum("tgd,grd->tgr", o.reshape(n, G, -1).astype(np.float64),
                              wo_a.astype(np.float64)).astype(F32))
        out = nx.linear(o.reshape(n, -1), L["wo_b"])
        if dump is not None:
            dump[f"L{i}.q"] = q
            dump[f"L{i}.kv"] = kv
            dump[f"L{i}.attn_out"] = out
        return out

    # ---- MoE

    def moe(self, L, x, img=None):
        """img: None, or [t] bool, True for image-span rows (they select with bias_vl)."""
        a = self.args
        _, k = a.moe_config(L["id"])
        w, idx = moe_route(x, L["gate_w"], L["gate_bias"], k, a.route_scale, a.score_func,
                           a.norm_topk_prob, a.gate_temp)
        if img is not None and img.any() and L["gate_bias_vl"] is not None:
            wv, iv = moe_route(x[img], L["gate_w"], L["gate_bias_vl"], k, a.route_scale, a.score_func,
                               a.norm_topk_prob, a.gate_temp)
            w, idx = w.copy(), idx.copy()
            w[img], idx[img] = wv, iv
        y = np.zeros(x.shape, dtype=F32)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            w1, w2, w3 = L["experts"][e]
            y[rows] += expert_forward(x[rows], w1, w2, w3, a.swiglu_limit, w[rows, slot])
        w1, w2, w3 = L["shared"]
        y = y + expert_forward(x, w1, w2, w3, a.swiglu_limit)
        return nx.bf16(y)

    # ---- block

    def block(self, L, st, h, pre_mix, sp, dump=None, attn_fn=None, img=None):
        a = self.args
        hc = a.hc_mult
        i = L["id"]
        residual = h
        apre, apost, acomb = hc_mixes(h, L["hc_attn_fn"], L["hc_attn_scale"], L["hc_attn_base"], hc,
                                      a.hc_sinkhorn_iters, a.hc_eps, a.norm_eps)
        x = nx.rmsnorm(hc_pre(h, pre_mix), L["attn_norm"], a.norm_eps)
        x = attn_fn(x) if attn_fn is not None else self.attention(L, st, x, sp, dump)
        h = hc_post(x, residual, apost, acomb)
        residual = h
        fpre, fpost, fcomb = hc_mixes(h, L["hc_ffn_fn"], L["hc_ffn_scale"], L["hc_ffn_base"], hc,
                                      a.hc_sinkhorn_iters, a.hc_eps, a.norm_eps)
        x = nx.rmsnorm(hc_pre(h, apre), L["ffn_norm"], a.norm_eps)
        x = self.moe(L, x, img)
        h = hc_post(x, residual, fpost, fcomb)
        if dump is not None:
            dump[f"L{i}.ffn_out"] = x
            dump[f"L{i}.h_out"] = h
            dump[f"L{i}.attn_pre"] = apre
        return h, fpre

    # ---- top level

    def forward(self, st, ids, dump=None, all_logits=True, teacher=None, image=None):
        """Run len(ids) tokens at positions st.pos.. and advance st.pos.
        teacher: optional mapping; where it holds "L{i}.h_in" ([L, hc, dim]), that
        array replaces layer i's input (after its engram), so one layer can be
        checked on an engine's own input without earlier rounding flips.
        image: optional (types [L] int, -1 text, >= 0 image-span positions; rows [L, dim] float32):
        span positions take their row as the embedding, route with bias_vl and are dead to engram
        (in the n-grams of later tokens too). docs/vision.md.
        -> dict(logits float32 [L, vocab] (or [1, vocab]), main_hidden bf16 [L, n_targets*dim] or None)."""
        a = self.args
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        n = len(ids)
        if n == 0:
            raise ValueError("forward: no tokens")
        if np.any(ids < 0) or np.any(ids >= a.vocab_size):
            raise ValueError(f"token id out of range [0, {a.vocab_size})")
        sp = st.pos
        hashes = None
        img = None if image is None else np.asarray(image[0]).reshape(-1) >= 0
        if self.hasher is not None:
            cids = self.hasher.compress(ids)
            if img is not None:
                cids = np.where(img, -1, cids)
            st.history = np.concatenate([st.history, cids])
            hashes = self.hasher.hashes(st.history, sp, n)
        e = self.embed[ids]
        if img is not None:
            e = np.where(img[:, None], np.asarray(image[1], dtype=F32), e)
        h = np.repeat(e[:, None, :], a.hc_mult, 1)
        pre_mix = np.zeros((n, a.hc_mult), dtype=F32)
        pre_mix[:, 0] = 1
        st.cur_src = None
        targets = []
        for L in self.layers:
            i = L["id"]
            if "engram" in L:
                E = L["engram"]
                h_in = h
                h = eg.engram_apply(h, hashes[:, E["index"]], E["table"], E["table_scale"], E["wkv"],
                                    E["q_weight"], E["k_weight"], a.norm_eps)
                if img is not None:
                    h = np.where(img[:, None, None], h_in, h)  # gate 0 for image-span rows
                if dump is not None:
                    dump[f"L{i}.engram_out"] = h
                    dump[f"L{i}.engram_hash"] = hashes[:, E["index"]]
            if teacher is not None and f"L{i}.h_in" in teacher:
                h = nx.bf16(np.asarray(teacher[f"L{i}.h_in"], dtype=F32).reshape(h.shape))
            if i in a.dspark_target_layer_ids:
                targets.append(nx.bf16(h.astype(F32).sum(1, dtype=F32) / F32(a.hc_mult)))
            if dump is not None:
                dump[f"L{i}.h_in"] = h
            h, pre_mix = self.block(L, st, h, pre_mix, sp, dump, img=img)
        x = nx.rmsnorm(hc_pre(h, pre_mix), self.norm, a.norm_eps)
        rows = x if all_logits else x[-1:]
        logits = self.head_logits(rows)
        st.pos = sp + n
        if dump is not None:
            dump["final_norm"] = x
            dump["logits"] = logits
        main_hidden = np.concatenate(targets, -1) if targets else None
        return {"logits": logits, "main_hidden": main_hidden}

    # ---------------------------------------------------------------- DSpark

    def _main_x(self, main_hidden):
        a = self.args
        return nx.rmsnorm(nx.linear(main_hidden, self.main_proj), self.main_norm, a.norm_eps)

    def _main_kv(self, L, main_x, pos):
        a = self.args
        rd = a.rope_head_dim
        kv = nx.rmsnorm(nx.linear(main_x, L["wkv"]), L["kv_norm"], a.norm_eps)
        cos, sin = self.rope(L["id"], pos)
        kv[:, -rd:] = apply_rope(kv[:, -rd:], cos, sin)
        return nx.fp8_act_sim(kv, 32)

    def dspark_seed(self, st, main_hidden, start=0):
        """The prefill half of forward_spec: every stage's window ring gets the KV of
        main_x for positions start.. (the reference only does this at start 0)."""
        win = self.args.window_size
        main_x = self._main_x(main_hidden)
        n = main_x.shape[0]
        for L in self.mtp:
            kv = self._main_kv(L, main_x, start + np.arange(n))
            ring = st.rings[L["id"]]
            for t in range(max(0, n - win), n):
                ring[(start + t) % win] = kv[t]

    def dspark_step(self, st, sp, main_hidden_row, token, draft_ids=None, dump=None):
        """forward_spec at start_pos sp > 0: main_hidden_row [1, n_targets*dim] of the
        token at sp, `token` the one sampled from it (position sp+1). Draft tokens are
        chosen greedily (argmax, ties to the lower id) unless draft_ids gives them.
        -> dict(draft_ids [block+1], logits float32 [block, vocab] with the Markov bias,
        confidence float32 [block])."""
        a = self.args
        if sp <= 0:
            raise ValueError("dspark_step needs start_pos > 0")
        B, win, rd = a.dspark_block_size, a.window_size, a.rope_head_dim
        main_x = self._main_x(np.asarray(main_hidden_row, dtype=F32).reshape(1, -1))
        ids = np.full(B, a.dspark_noise_token_id, dtype=np.int64)
        ids[0] = token
        h = np.repeat(self.embed[ids][:, None, :], a.hc_mult, 1)
        pre_mix = np.zeros((B, a.hc_mult), dtype=F32)
        pre_mix[:, 0] = 1
        pos = sp + 1 + np.arange(B)

        for L in self.mtp:
            def attn(x, L=L):
                H, D = a.n_heads, a.head_dim
                cos, sin = self.rope(L["id"], pos)
                qr = nx.rmsnorm(nx.linear(x, L["wq_a"]), L["q_norm"], a.norm_eps)
                q = nx.linear(qr, L["wq_b"]).reshape(B, H, D)
                q[..., -rd:] = apply_rope(q[..., -rd:], cos, sin)
                kv = nx.rmsnorm(nx.linear(x, L["wkv"]), L["kv_norm"], a.norm_eps)
                kv[:, -rd:] = apply_rope(kv[:, -rd:], cos, sin)
                kv = nx.fp8_act_sim(kv, 32)
                ring = st.rings[L["id"]]
                ring[sp % win] = self._main_kv(L, main_x, np.array([sp]))[0]
                pool = np.concatenate([ring, kv], 0)
                row = np.concatenate([np.arange(min(win, sp + 1)), win + np.arange(B)])
                idx = np.repeat(row[None, :], B, 0)
                o = sparse_attn(q, pool, L["sink"], idx, D ** -0.5)
                o[..., -rd:] = apply_rope(o[..., -rd:], cos, sin, inverse=True)
                G = a.o_groups
                wo_a = L["wo_a"].dequant().reshape(G, a.o_lora_rank, -1)
                o = nx.bf16(np.einsum("tgd,grd->tgr", o.reshape(B, G, -1).astype(np.float64),
                                      wo_a.astype(np.float64)).astype(F32))
                return nx.linear(o.reshape(B, -1), L["wo_b"])
            h, pre_mix = self.block(L, st, h, pre_mix, sp, dump, attn_fn=attn)

        x = hc_pre(h, pre_mix)
        logits = self.head_logits(nx.rmsnorm(x, self.mtp_norm, a.norm_eps))
        out_ids = np.zeros(B + 1, dtype=np.int64)
        out_ids[0] = token
        embeds = []
        for j in range(B):
            e = self.markov_embed[out_ids[j]]
            logits[j] = logits[j] + (e.astype(np.float64) @ self.markov_head.astype(np.float64).T).astype(F32)
            embeds.append(e)
            out_ids[j + 1] = draft_ids[j] if draft_ids is not None else int(np.argmax(logits[j]))
        cat = np.concatenate([x, np.stack(embeds)], -1).astype(np.float64)
        conf = (cat @ self.conf_proj.astype(np.float64).T).astype(F32)[:, 0]
        return {"draft_ids": out_ids, "logits": logits, "confidence": conf}
