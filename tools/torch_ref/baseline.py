"""A straightforward DeepSeek-V4.1-Flash backbone forward pass over B sequences,
written once against the array namespace of xp.py (numpy or torch).

It follows the structure of the numpy oracle (tools/ref/model.py) but is the
implementation a competent engineer writes for a GPU in an afternoon:
  - weights are bf16 tensors dequantised at load, except the routed experts,
    which stay packed FP4 (+ e8m0 scales) and are dequantised to bf16 per
    layer for the experts the batch routes to (flash-ep8 in bf16 would not
    fit one H200: see docs/torch-baseline.md);
  - GEMMs are plain bf16 matmuls (fp32 accumulation); norms, hyper-connection
    mixes, router, compressor pooling and the head in fp32, as the model says;
  - window KV, compressed latents and index keys live in plain bf16 tensors
    [B, positions, width]; attention gathers the selected rows and runs an
    fp32 softmax with the sink;
  - B sequences advance in lockstep (same position), which is what a batched
    benchmark of equal contexts needs; prefill takes [B, n] tokens at once.
With `sim=True` it also applies the model's in-graph quantisation
simulations (fp8 activations before FP8/FP4 GEMMs, fp8 window KV, fp4 latents,
index keys and queries): then it computes the oracle's function up to float32
rounding. With `sim=False` (the bench default) those steps are skipped.

Not here: DSpark, images, CUDA graphs, fused kernels, paged KV. Engram hashes
are an input of forward() (tools/ref/engram.py computes them from token ids;
the bench draws them at random).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import model as refmodel  # noqa: E402  (rope_inv_freq: host-side constants only)

F32 = np.float32


def f32c(v):
    """A constant rounded to float32 as a Python float (a scalar both backends take)."""
    return float(np.float32(v))


def chunks(B, n, per_row_bytes, budget):
    """Rectangles (b0, b1, t0, t1) covering [B, n] query rows with about
    `budget` bytes of temporaries each (per_row_bytes per query row)."""
    rows = max(1, int(budget // max(1, per_row_bytes)))
    if rows >= n:
        bc, tc = max(1, rows // n), n
    else:
        bc, tc = 1, rows
    return [(b0, min(B, b0 + bc), t0, min(n, t0 + tc)) for b0 in range(0, B, bc) for t0 in range(0, n, tc)]


class State:
    """Per-batch caches, preallocated for max_len positions (lockstep: one pos)."""

    def __init__(self, model, B, max_len):
        a, xp = model.args, model.xp
        self.B, self.max_len, self.pos = B, max_len, 0
        self.rings = {L["id"]: xp.zeros((B, a.window_size, a.head_dim), "bf16") for L in model.layers}
        self.comp_kv, self.index_k, self.kv_state, self.cap = {}, {}, {}, {}
        for i in model.kv_sources:
            r = a.compress_ratios[i]
            self.cap[i] = max_len // r + 1
            self.comp_kv[i] = xp.zeros((B, self.cap[i], a.head_dim), "bf16")
            self.index_k[i] = xp.zeros((B, self.cap[i], a.index_head_dim), "bf16")
            if r > 1:
                self.kv_state[i] = [xp.zeros((B, r, a.head_dim)), xp.full((B, r, a.head_dim), -math.inf)]
        self.published = None  # kv source whose index keys were written last (the reference's quirk)
        self.cur_src = self.topk = self.candidates = None

    @staticmethod
    def nbytes(args, B, max_len, n_layers=None):
        """Bytes of a State (bf16 caches), for memory planning before allocating."""
        a = args
        L = a.n_layers if n_layers is None else n_layers
        b = L * a.window_size * a.head_dim * 2
        for i in a.kv_source_layers:
            if i < a.n_layers:
                b += (max_len // a.compress_ratios[i] + 1) * (a.head_dim + a.index_head_dim) * 2
        return B * b


class Model:
    def __init__(self, args, params, xp, sim=False, intended_index_keys=False, work_bytes=1 << 30):
        """args: tools/ref/ckpt.Args; params: see weights.py; xp: an xp backend."""
        self.args, self.P, self.xp = args, params, xp
        self.sim = sim
        self.intended_index_keys = intended_index_keys
        self.work_bytes = work_bytes  # temporaries per attention / indexer chunk
        a = args
        self.kv_sources = [i for i in a.kv_source_layers if i < a.n_layers]
        self.index_sources = [i for i in a.index_source_layers if i < a.n_layers]
        self.layers = params["layers"]
        self._inv = {}
        self.trace = None  # a dict to collect per-layer values (debugging, self-test)

    # ---------------------------------------------------------------- small ops

    def qlin(self, x, w):
        """A GEMM whose weight the checkpoint stores as FP8/FP4 (fp8 activations under sim)."""
        xp = self.xp
        return xp.qlinear(xp.fp8_sim(x) if self.sim else x, w)

    def rmsnorm(self, x, w):
        xp = self.xp
        xf = xp.f32(x)
        y = xf * xp.rsqrt(xp.mean(xf * xf, -1, keepdims=True) + f32c(self.args.norm_eps))
        return xp.bf(xp.f32(w) * y)

    def rope_tables(self, layer_id, pos):
        a = self.args
        if layer_id not in self._inv:
            if a.compress_ratios[layer_id]:
                yarn = (a.rope_factor, a.beta_fast, a.beta_slow, a.original_seq_len)
                self._inv[layer_id] = refmodel.rope_inv_freq(a.rope_head_dim, a.compress_rope_theta, yarn)
            else:
                self._inv[layer_id] = refmodel.rope_inv_freq(a.rope_head_dim, a.rope_theta, None)
        return self.xp.rope_cs(self._inv[layer_id], pos)

    def rope(self, x, cos, sin, inverse=False):
        """Rotate adjacent pairs of x's last axis (rd); cos/sin broadcast to x[..., rd/2]."""
        xp = self.xp
        shp = x.shape
        xf = xp.f32(x).reshape(tuple(shp[:-1]) + (shp[-1] // 2, 2))
        a, b = xf[..., 0], xf[..., 1]
        if inverse:
            sin = -sin
        return xp.bf(xp.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(shp))

    # ---------------------------------------------------------------- hyper-connections

    def hc_mixes(self, h, fn, scale, base):
        """h [B, n, hc, dim] -> pre [B,n,hc], post [B,n,hc], comb [B,n,hc(from),hc(to)]."""
        xp, a = self.xp, self.args
        hc = a.hc_mult
        xf = xp.f32(h).reshape(tuple(h.shape[:2]) + (-1,))
        rs = xp.rsqrt(xp.mean(xf * xf, -1, keepdims=True) + f32c(a.norm_eps))
        m = xp.linear_f32(xf, fn) * rs
        eps = f32c(a.hc_eps)
        pre = xp.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + eps
        post = 2 * xp.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).reshape(tuple(m.shape[:2]) + (hc, hc))
        comb = xp.exp(comb - xp.amax(comb, -1, keepdims=True))
        comb = comb / xp.sum(comb, -1, keepdims=True) + eps
        comb = comb / (xp.sum(comb, -2, keepdims=True) + eps)
        for _ in range(a.hc_sinkhorn_iters - 1):
            comb = comb / (xp.sum(comb, -1, keepdims=True) + eps)
            comb = comb / (xp.sum(comb, -2, keepdims=True) + eps)
        return pre, post, comb

    def hc_pre(self, h, pre):
        xp = self.xp
        acc = pre[..., 0:1] * xp.f32(h[:, :, 0])
        for k in range(1, h.shape[2]):
            acc = acc + pre[..., k:k + 1] * xp.f32(h[:, :, k])
        return xp.bf(acc)

    def hc_post(self, y, res, post, comb):
        xp = self.xp
        mix = comb[..., 0, :, None] * xp.f32(res[:, :, 0:1, :])
        for k in range(1, res.shape[2]):
            mix = mix + comb[..., k, :, None] * xp.f32(res[:, :, k:k + 1, :])
        return xp.bf(post[..., None] * xp.f32(y)[:, :, None, :] + mix)

    # ---------------------------------------------------------------- attention pieces

    def window(self, L, st, kv, sp):
        """-> (pool [B, P, D], idx [n, K] shared by the batch, -1 = none); updates the ring."""
        xp = self.xp
        win = self.args.window_size
        n = kv.shape[1]
        ring = st.rings[L["id"]]
        t = np.arange(n)[:, None]
        if sp == 0:
            pool = kv
            idx = np.maximum(t - win + 1, 0) + np.arange(min(n, win))[None, :]
            idx = np.where(idx > t, -1, idx)
        else:
            pool = xp.cat([ring, kv], 1)
            p = sp + t - win + 1 + np.arange(win)[None, :]
            idx = np.where(p < 0, -1, np.where(p < sp, p % win, win + (p - sp)))
        t0 = max(0, n - win)
        ring[:, [(sp + k) % win for k in range(t0, n)]] = kv[:, t0:]
        return pool, idx

    def compress(self, L, st, x, sp):
        """KV source: -> (first group index, latents [B, g, D] bf16 before RoPE or None)."""
        xp = self.xp
        r, P = L["ratio"], L
        if r == 1:
            return sp, self.rmsnorm(xp.linear(x, P["c_wkv"]), P["c_norm"])
        xf = xp.f32(x)
        kv = xp.linear_f32(xf, P["c_wkv"])
        sc = xp.linear_f32(xf, P["c_wgate"])
        skv, ssc = st.kv_state[L["id"]]
        c = sp % r  # slots of the current group already filled by earlier forwards
        seq_kv = xp.cat([skv[:, :c], kv], 1)
        seq_sc = xp.cat([ssc[:, :c], sc], 1)
        ng, rem = (c + x.shape[1]) // r, (c + x.shape[1]) % r
        if rem:
            skv[:, :rem] = seq_kv[:, ng * r:]
            ssc[:, :rem] = seq_sc[:, ng * r:]
        if ng == 0:
            return sp // r, None
        B, D = x.shape[0], kv.shape[-1]
        gk = seq_kv[:, :ng * r].reshape(B, ng, r, D)
        gs = seq_sc[:, :ng * r].reshape(B, ng, r, D)
        e = xp.exp(gs - xp.amax(gs, 2, keepdims=True))
        p = e / xp.sum(e, 2, keepdims=True)
        pooled = gk[:, :, 0] * p[:, :, 0]
        for j in range(1, r):
            pooled = pooled + gk[:, :, j] * p[:, :, j]
        return sp // r, self.rmsnorm(xp.bf(pooled), P["c_norm"])

    def indexer_score(self, q, keys, w, clens):
        """q [b,t,IH,d], keys [b,nk,d], w [b,t,IH] (bf16), clens [t] host -> score [b,t,nk] f32."""
        xp = self.xp
        b, t, ih, d = q.shape
        s = xp.bf(xp.matmul(q.reshape(b, t * ih, d), xp.swap_last(keys))).reshape(b, t, ih, -1)
        s = xp.bf(xp.maximum(s, 0) * w[..., None])
        tot = xp.f32(xp.sum_bf(s, 2))
        nk = keys.shape[1]
        mask = xp.from_np(np.arange(nk)[None, :] >= np.asarray(clens)[:, None], "bool")
        return xp.where(mask[None], -math.inf, tot)

    def candidate_blocks(self, score, clens):
        """Two-level top-k, level one: bool [b, t, nk] of the kept blocks."""
        xp, a = self.xp, self.args
        bsz = a.candidate_block_size
        b, t, nk = score.shape
        nb = -(-nk // bsz)
        if nb * bsz > nk:
            score = xp.cat([score, xp.full((b, t, nb * bsz - nk), -math.inf)], -1)
        bs = xp.amax(score.reshape(b, t, nb, bsz), -1)
        last = (np.asarray(clens) - 1) // bsz
        pin = xp.from_np(np.arange(nb)[None, :] == last[:, None], "bool")
        bs = xp.where(pin[None], math.inf, bs)
        top = xp.topk_idx(bs, min(a.candidate_topk_blocks, nb))
        keep = xp.scatter_last(xp.zeros((b, t, nb), "bool"), top, xp.take_along(bs, top, -1) > -math.inf)
        return xp.repeat(keep, bsz, -1)[..., :nk]

    def indexer(self, L, st, x, qr, latent, g0, sp):
        """Index source: -> top-k compressed positions [B, n, k] (sorted, -1 unreachable)."""
        xp, a, P = self.xp, self.args, L
        i, r = L["id"], L["ratio"]
        B, n = x.shape[0], x.shape[1]
        end, rd = sp + n, a.rope_head_dim
        if L["kv_source"] and latent is not None:
            k = self.rmsnorm(xp.linear(latent, P["i_wk"]), P["i_k_norm"])
            cos, sin = self.rope_tables(i, (g0 + np.arange(latent.shape[1])) * r)
            k[..., -rd:] = self.rope(k[..., -rd:], cos[None], sin[None])
            if self.sim:
                k = xp.fp4_sim_e8m0(k, 32)
            st.index_k[i][:, g0:g0 + latent.shape[1]] = k
            st.published = i
        q = self.qlin(qr, P["i_wq_b"]).reshape(B, n, a.index_n_heads, a.index_head_dim)
        cos, sin = self.rope_tables(i, sp + np.arange(n))
        q[..., -rd:] = self.rope(q[..., -rd:], cos[None, :, None], sin[None, :, None])
        if self.sim:
            q = xp.fp4_sim_e8m0(q, 32)
        owner = st.cur_src if self.intended_index_keys else st.published
        nk = end // r
        if nk > st.cap[owner]:
            raise ValueError(f"layer {i}: {nk} index keys wanted from layer {owner}, capacity {st.cap[owner]}")
        keys = st.index_k[owner][:, :nk]
        w = xp.bf(xp.f32(xp.linear(x, P["i_wproj"])) * f32c(a.index_head_dim ** -0.5 * a.index_n_heads ** -0.5))
        clens = (sp + np.arange(n) + 1) // r
        k_top = min(a.index_topk, nk)
        cand_layer = a.candidate_source_layer
        out = []
        per_row = nk * (a.index_n_heads * 6 + 16)
        if i == cand_layer:
            st.candidates = []
        for (b0, b1, t0, t1) in chunks(B, n, per_row, self.work_bytes):
            score = self.indexer_score(q[b0:b1, t0:t1], keys[b0:b1], w[b0:b1, t0:t1], clens[t0:t1])
            if i == cand_layer:
                st.candidates.append(((b0, b1, t0, t1), self.candidate_blocks(score, clens[t0:t1])))
            elif 0 <= cand_layer < i:
                score = xp.where(self._cand(st, b0, b1, t0, t1, nk), score, -math.inf)
            top = xp.sort(xp.topk_idx(score, k_top))
            cl = xp.from_np(clens[t0:t1], "i64")[None, :, None]
            out.append(((b0, b1, t0, t1), xp.where(top < cl, top, -1)))
        return self._assemble(out, B, n)

    def _cand(self, st, b0, b1, t0, t1, nk):
        """The candidate mask of rows [b0:b1, t0:t1] (the candidate source's chunks may differ)."""
        if isinstance(st.candidates, list):  # stitch the candidate source's chunks once
            st.candidates = self._assemble(st.candidates, st.B, None)
        if st.candidates.shape[-1] != nk:
            raise ValueError(f"candidate mask width {st.candidates.shape[-1]} does not fit {nk} keys "
                             "(different compress ratios)")
        return st.candidates[b0:b1, t0:t1]

    def _assemble(self, parts, B, n):
        """Stitch chunk results ((b0,b1,t0,t1), array [b, t, k]) back into [B, n, k]."""
        xp = self.xp
        if len(parts) == 1:
            return parts[0][1]
        rows = {}
        for (b0, b1, t0, t1), v in parts:
            rows.setdefault((b0, b1), []).append((t0, v))
        blocks = [xp.cat([v for _, v in sorted(ts, key=lambda z: z[0])], 1) for _, ts in sorted(rows.items())]
        return xp.cat(blocks, 0)

    def sparse_attn(self, q, win_pool, widx, comp, b0, cidx, sink):
        """q [b,t,H,D] (rows b0.. of the batch); win_pool [b,P,D] with widx [t,Kw] (host,
        shared); comp: a whole compressed cache [B, cap, D] or None, with cidx [b,t,Kc]
        (backend, -1 none). Only the selected rows are gathered. fp32 softmax with the
        per-head sink; un-normalised probabilities rounded to bf16 before the value product."""
        xp = self.xp
        kv = win_pool[:, xp.from_np(np.maximum(widx, 0), "i64")]  # [b, t, Kw, D]
        vw = xp.from_np(np.broadcast_to(widx >= 0, (q.shape[0],) + widx.shape).copy(), "bool")
        if comp is not None and cidx.shape[-1]:
            b, cap, D = q.shape[0], comp.shape[1], comp.shape[-1]
            off = (xp.arange(b) + b0).reshape(b, 1, 1) * cap
            flat = comp.reshape(-1, D)  # a view: the cache is contiguous
            kc = flat[(xp.maximum(cidx, 0) + off).reshape(-1)].reshape(tuple(cidx.shape) + (D,))
            kv = xp.cat([kv, kc], 2)
            valid = xp.cat([vw, cidx >= 0], 2)
        else:
            valid = vw
        kvf = xp.f32(kv)
        s = xp.matmul(xp.f32(q), xp.swap_last(kvf)) * f32c(q.shape[-1] ** -0.5)  # [b, t, H, K]
        s = xp.where(valid[:, :, None, :], s, -math.inf)
        m = xp.maximum(xp.amax(s, -1), f32c(-1e30))
        p = xp.exp(s - m[..., None])
        # summed wide as the oracle (tools/ref/model.py sparse_attn): an f32 sum's
        # rounding depends on where the masked zeros sit
        den = xp.sum_wide(p, -1) + xp.exp(sink - m)
        num = xp.matmul(xp.f32(xp.bf(p)), kvf)  # [b, t, H, D]
        return xp.bf(num / den[..., None])

    def attention(self, L, st, x, sp):
        xp, a, P = self.xp, self.args, L
        i, r = L["id"], L["ratio"]
        B, n = x.shape[0], x.shape[1]
        H, D, rd = a.n_heads, a.head_dim, a.rope_head_dim
        cos, sin = self.rope_tables(i, sp + np.arange(n))
        qr = self.rmsnorm(self.qlin(x, P["wq_a"]), P["q_norm"])
        q = self.qlin(qr, P["wq_b"]).reshape(B, n, H, D)
        q[..., -rd:] = self.rope(q[..., -rd:], cos[None, :, None], sin[None, :, None])
        kv = self.rmsnorm(self.qlin(x, P["wkv"]), P["kv_norm"])
        kv[..., -rd:] = self.rope(kv[..., -rd:], cos[None], sin[None])
        if self.sim:
            kv = xp.fp8_sim(kv, 32)
        pool, widx = self.window(L, st, kv, sp)
        comp, cidx = None, None
        if r:
            clen = (sp + n) // r
            latent, g0 = None, 0
            if L["kv_source"]:
                g0, latent = self.compress(L, st, x, sp)
                st.cur_src = i
            if L["index_source"]:
                cidx = self.indexer(L, st, x, qr, latent, g0, sp) if clen else xp.zeros((B, n, 0), "i64")
                st.topk = cidx
            else:
                cidx = st.topk
            if latent is not None:
                cc, ss = self.rope_tables(i, (g0 + np.arange(latent.shape[1])) * r)
                latent[..., -rd:] = self.rope(latent[..., -rd:], cc[None], ss[None])
                if self.sim:
                    latent = xp.fp4_sim_e4m3(latent, 16)
                st.comp_kv[i][:, g0:g0 + latent.shape[1]] = latent
            comp = st.comp_kv[st.cur_src]  # rows >= clen are never selected (cidx is -1 there)
        K = widx.shape[1] + (cidx.shape[-1] if cidx is not None else 0)
        per_row = K * (D * 6 + H * 12)
        outs = []
        for (b0, b1, t0, t1) in chunks(B, n, per_row, self.work_bytes):
            outs.append(((b0, b1, t0, t1), self.sparse_attn(
                q[b0:b1, t0:t1], pool[b0:b1], widx[t0:t1], comp, b0,
                None if cidx is None else cidx[b0:b1, t0:t1], L["sink"])))
        o = self._assemble(outs, B, n)
        o[..., -rd:] = self.rope(o[..., -rd:], cos[None, :, None], sin[None, :, None], inverse=True)
        G = a.o_groups
        o = xp.bf(xp.einsum("btgd,grd->btgr", o.reshape(B, n, G, -1), P["wo_a"].reshape(G, a.o_lora_rank, -1)))
        return self.qlin(o.reshape(B, n, -1), P["wo_b"])

    # ---------------------------------------------------------------- MoE

    def moe(self, L, x):
        xp, a, P = self.xp, self.args, L
        B, n, dim = x.shape
        T = B * n
        xt = x.reshape(T, dim)
        n_exp, k = a.moe_config(L["id"])
        s = xp.sqrt(xp.softplus(xp.linear_f32(xp.f32(xt), P["gate_w"])))
        idx = xp.topk_idx(s + P["gate_bias"], k)
        w = xp.take_along(s, idx, -1)
        if a.norm_topk_prob and k > 1:
            w = w / (xp.sum(w, -1, keepdims=True) + f32c(1e-20))
        w = w * f32c(a.route_scale)
        flat = idx.reshape(-1)
        order = xp.argsort_stable(flat)
        counts = xp.bincount(flat, n_exp)  # one host sync per layer
        used = [e for e in range(n_exp) if counts[e]]
        sel = xp.from_np(np.array(used, np.int64), "i64")
        ex = P["experts"]
        W1 = xp.fp4_dequant(ex["w1"][sel], ex["w1_s"][sel])
        W3 = xp.fp4_dequant(ex["w3"][sel], ex["w3_s"][sel])
        W2 = xp.fp4_dequant(ex["w2"][sel], ex["w2_s"][sel])
        lim = f32c(a.swiglu_limit)
        y = xp.zeros((T, dim))
        wf = w.reshape(-1)
        start = 0
        for j, e in enumerate(used):
            picks = order[start:start + counts[e]]
            start += counts[e]
            tok = picks // k
            xe = xt[tok]
            g = xp.f32(self.qlin(xe, W1[j]))
            u = xp.f32(self.qlin(xe, W3[j]))
            if a.swiglu_limit > 0:
                u, g = xp.clip(u, -lim, lim), xp.minimum(g, lim)
            hmid = xp.bf(wf[picks][:, None] * (xp.silu(g) * u))
            y = xp.index_add(y, tok, xp.f32(self.qlin(hmid, W2[j])))
        sh = P["shared"]
        g = xp.f32(self.qlin(xt, sh["w1"]))
        u = xp.f32(self.qlin(xt, sh["w3"]))
        if a.swiglu_limit > 0:
            u, g = xp.clip(u, -lim, lim), xp.minimum(g, lim)
        y = y + xp.f32(self.qlin(xp.bf(xp.silu(g) * u), sh["w2"]))
        return xp.bf(y).reshape(B, n, dim)

    # ---------------------------------------------------------------- engram

    def engram(self, L, h, rows):
        """rows [B, n, cols] table rows of this layer's hashes."""
        xp, a = self.xp, self.args
        E = L["engram"]
        B, n, hc, dim = h.shape
        hd = E["table"].shape[-1]
        vals = xp.e4m3_decode(E["table"][rows])  # [B, n, cols, hd]
        sc = xp.e8m0_decode(E["scale"][rows])
        emb = xp.bf((vals.reshape(tuple(vals.shape[:-1]) + (hd // 32, 32)) * sc[..., None]).reshape(B, n, -1))
        kv = self.qlin(emb, E["wkv"])
        key = xp.f32(kv[..., :hc * dim]).reshape(B, n, hc, dim)
        value = xp.f32(kv[..., hc * dim:])
        weight = xp.f32(E["q_weight"]) * xp.f32(E["k_weight"])
        hf = xp.f32(h)
        eps = f32c(a.norm_eps)
        rstd = xp.rsqrt(xp.mean(hf * hf, -1) + eps) * xp.rsqrt(xp.mean(key * key, -1) + eps)
        dot = xp.sum(hf * weight * key, -1) * rstd * f32c(dim ** -0.5)
        gate = xp.sigmoid(xp.copysign(xp.sqrt(xp.maximum(abs(dot), f32c(1e-6))), dot))
        return xp.bf(hf + gate[..., None] * value[:, :, None, :])

    # ---------------------------------------------------------------- top level

    def block(self, L, st, h, pre_mix, sp):
        res = h
        apre, apost, acomb = self.hc_mixes(h, L["hc_attn_fn"], L["hc_attn_scale"], L["hc_attn_base"])
        x = self.rmsnorm(self.hc_pre(h, pre_mix), L["attn_norm"])
        h = self.hc_post(self.attention(L, st, x, sp), res, apost, acomb)
        res = h
        fpre, fpost, fcomb = self.hc_mixes(h, L["hc_ffn_fn"], L["hc_ffn_scale"], L["hc_ffn_base"])
        x = self.rmsnorm(self.hc_pre(h, apre), L["ffn_norm"])
        h = self.hc_post(self.moe(L, x), res, fpost, fcomb)
        return h, fpre

    def forward(self, st, ids, hashes=None, all_logits=True):
        """ids: backend int64 [B, n] at positions st.pos..; hashes: backend int64
        [B, n, n_engram_layers, cols] (needed when the model has engram layers).
        -> logits f32 [B, n or 1, vocab]; advances st.pos."""
        xp, a = self.xp, self.args
        B, n = ids.shape
        sp = st.pos
        if sp + n > st.max_len:
            raise ValueError(f"positions {sp}..{sp + n - 1} exceed the state's max_len {st.max_len}")
        h = xp.repeat(self.P["embed"][ids][:, :, None, :], a.hc_mult, 2)
        pre_mix = xp.from_np(np.eye(a.hc_mult, dtype=F32)[0], "f32") * xp.full((B, n, a.hc_mult), 1.0)
        st.cur_src = st.topk = st.candidates = None
        for L in self.layers:
            if "engram" in L:
                if hashes is None:
                    raise ValueError("this model has engram layers: forward() needs hashes")
                if self.trace is not None:
                    self.trace[f"L{L['id']}.pre_engram"] = xp.to_np(xp.f32(h))
                h = self.engram(L, h, hashes[:, :, L["engram"]["index"]])
            if self.trace is not None:
                self.trace[f"L{L['id']}.h_in"] = xp.to_np(xp.f32(h))
            h, pre_mix = self.block(L, st, h, pre_mix, sp)
            if self.trace is not None and st.topk is not None and L["ratio"]:
                self.trace[f"L{L['id']}.topk"] = xp.to_np(st.topk)
        x = self.rmsnorm(self.hc_pre(h, pre_mix), self.P["norm"])
        rows = x if all_logits else x[:, -1:]
        st.pos = sp + n
        return xp.linear_f32(xp.f32(rows), self.P["head"])
