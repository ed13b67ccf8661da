"""Parameters of the baseline model (baseline.py), from a checkpoint or drawn
at random directly in the backend's memory.

Layout (every array a backend array):
  embed bf16 [V, dim]; head f32 [V, dim]; norm bf16 [dim]
  layers[i]: id, ratio, kv_source, index_source flags and
    attn_norm ffn_norm q_norm kv_norm (bf16); hc_{attn,ffn}_{fn,base,scale}, sink (f32);
    wq_a wq_b wkv wo_b (FP8 in the checkpoint: bf16 here, exact); wo_a (bf16);
    c_wkv c_wgate (f32 at ratio > 1, else c_wkv bf16), c_norm; i_wq_b i_wproj i_wk i_k_norm;
    gate_w (f32), gate_bias (f32); shared {w1, w2, w3} (bf16);
    experts {w1, w2, w3: packed FP4 u8 [E, out, in/2]; w1_s, w2_s, w3_s: e8m0 u8 [E, out, in/32]};
    engram {index, table (e4m3 u8), scale (e8m0 u8), wkv (bf16), q_weight, k_weight (bf16)}.

synth() draws every tensor from the distribution `tide synth` uses for it
(src/model/manifest.c: uniform of the given mean and std per tensor; norms
1 +- 0.05; hc bases 0.3, scales 0.5 +- 0.1, ...). Weights that tide stores as
FP8 are drawn as bf16 without the FP8 rounding (same distribution, no effect
on timing); routed experts and engram tables are quantised exactly as stored
(FP4 / e4m3 codes with e8m0 scales), because the baseline keeps them packed.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import ckpt  # noqa: E402

F32 = np.float32


def _roles(a, i):
    kv = [s for s in a.kv_source_layers if s < a.n_layers]
    ix = [s for s in a.index_source_layers if s < a.n_layers]
    return {"id": i, "ratio": a.compress_ratios[i], "kv_source": i in kv, "index_source": i in ix}


# ---------------------------------------------------------------- from a checkpoint


def from_checkpoint(path, xp):
    """-> (Args, params) of a checkpoint directory (read on the host with tools/ref/ckpt.py)."""
    a, w, _ = ckpt.load(path)

    def bf(name):
        return xp.from_np(w.param(name, "bf16"), "bf16")

    def f32(name):
        return xp.from_np(w.f32(name), "f32")

    def lin(prefix, want=None, kind="bf16"):
        return xp.from_np(w.linear(prefix, want).dequant(), kind)

    P = {"embed": bf("embed.weight"), "head": f32("head.weight"), "norm": bf("norm.weight"), "layers": []}
    for i in range(a.n_layers):
        p = f"layers.{i}."
        L = _roles(a, i)
        L.update(attn_norm=bf(p + "attn_norm.weight"), ffn_norm=bf(p + "ffn_norm.weight"))
        for s in ("attn", "ffn"):
            for k in ("fn", "base", "scale"):
                L[f"hc_{s}_{k}"] = f32(p + f"hc_{s}_{k}")
        q = p + "attn."
        L.update(sink=f32(q + "attn_sink"), wq_a=lin(q + "wq_a"), q_norm=bf(q + "q_norm.weight"),
                 wq_b=lin(q + "wq_b"), wkv=lin(q + "wkv"), kv_norm=bf(q + "kv_norm.weight"),
                 wo_a=lin(q + "wo_a", "bf16"), wo_b=lin(q + "wo_b"))
        if L["kv_source"]:
            c = q + "compressor."
            if L["ratio"] > 1:
                L.update(c_wkv=lin(c + "wkv", "f32", "f32"), c_wgate=lin(c + "wgate", "f32", "f32"))
            else:
                L["c_wkv"] = lin(c + "wkv", "bf16")
            L["c_norm"] = bf(c + "norm.weight")
        if L["index_source"]:
            x = q + "indexer."
            L.update(i_wq_b=lin(x + "wq_b"), i_wproj=lin(x + "weights_proj", "bf16"))
            if L["kv_source"]:
                L.update(i_wk=lin(x + "wk", "bf16"), i_k_norm=bf(x + "k_norm.weight"))
        f = p + "ffn."
        n_exp, _ = a.moe_config(i)
        L["gate_w"] = xp.from_np(w.param(f + "gate.weight", "bf16"), "f32")
        L["gate_bias"] = f32(f + "gate.bias") if w.has(f + "gate.bias") else xp.zeros((n_exp,))
        ex = {}
        for m in ("w1", "w2", "w3"):
            qq = np.stack([np.asarray(w.raw(f"{f}experts.{e}.{m}.weight").data) for e in range(n_exp)])
            ss = np.stack([np.asarray(w.raw(f"{f}experts.{e}.{m}.scale").data) for e in range(n_exp)])
            ex[m], ex[m + "_s"] = xp.from_np(qq, "u8"), xp.from_np(ss, "u8")
        L["experts"] = ex
        L["shared"] = {m: lin(f + f"shared_experts.{m}") for m in ("w1", "w2", "w3")}
        if i in a.engram_layer_ids:
            e = p + "engram."
            L["engram"] = dict(index=list(a.engram_layer_ids).index(i),
                               table=xp.from_np(np.asarray(w.raw(e + "embed.weight").data), "u8"),
                               scale=xp.from_np(np.asarray(w.raw(e + "embed.scale").data), "u8"),
                               wkv=lin(e + "wkv"), q_weight=bf(e + "q_weight"), k_weight=bf(e + "k_weight"))
        P["layers"].append(L)
    return a, P


# ---------------------------------------------------------------- synthetic


class Drawer:
    """Uniform draws of a given mean and std (tide synth's distribution), in xp memory."""

    def __init__(self, xp, seed):
        self.xp = xp
        if xp.name == "torch":
            self.gen = xp.t.Generator(device=xp.dev)
            self.gen.manual_seed(seed)
        else:
            self.rng = np.random.default_rng(seed)

    def uniform(self, shape, mean, std, kind):
        """kind bf16 | f32; values mean + sqrt(12) std (u - 1/2)."""
        xp, k = self.xp, math.sqrt(12.0) * std
        if xp.name == "torch":
            t = xp.t
            u = t.rand(shape, generator=self.gen, device=xp.dev, dtype=t.float32 if kind == "f32" else t.bfloat16)
            return u.sub_(0.5).mul_(k).add_(mean)
        u = self.rng.random(shape, dtype=F32)
        return xp.from_np(mean + k * (u - F32(0.5)), kind)

    def fp4_weight(self, shape, std):
        """[n, out, in] drawn with mean 0 and quantised as stored: (packed, scale codes)."""
        xp = self.xp
        return xp.quant_fp4(self.uniform(shape, 0.0, std, "f32"))

    def fp8_rows(self, shape, std):
        return self.xp.quant_fp8_rows(self.uniform(shape, 0.0, std, "f32"))


def synth(a, xp, seed=1, expert_chunk=8, table_chunk_rows=1 << 20, progress=None):
    """-> params of Args `a` with random weights drawn in xp memory."""
    d = Drawer(xp, seed)
    D, H, hd = a.dim, a.n_heads, a.head_dim
    QR, G, OR = a.q_lora_rank, a.o_groups, a.o_lora_rank
    I, hc = a.moe_inter_dim, a.hc_mult
    mix = (2 + hc) * hc

    def lin(out, inn, kind="bf16"):
        return d.uniform((out, inn), 0.0, 1.0 / math.sqrt(inn), kind)

    def norm(n):
        return d.uniform((n,), 1.0, 0.05, "bf16")

    P = {"embed": d.uniform((a.vocab_size, D), 0.0, 1.0, "bf16"), "norm": norm(D),
         "head": lin(a.vocab_size, D, "f32"), "layers": []}
    for i in range(a.n_layers):
        if progress:
            progress(i)
        L = _roles(a, i)
        L.update(attn_norm=norm(D), ffn_norm=norm(D))
        fn_std = 0.5 / math.sqrt(hc * D)
        for s in ("attn", "ffn"):
            L[f"hc_{s}_fn"] = d.uniform((mix, hc * D), 0.0, fn_std, "f32")
            L[f"hc_{s}_base"] = d.uniform((mix,), 0.0, 0.3, "f32")
            L[f"hc_{s}_scale"] = d.uniform((3,), 0.5, 0.1, "f32")
        L.update(sink=d.uniform((H,), 0.0, 0.1, "f32"), wq_a=lin(QR, D), q_norm=norm(QR), wq_b=lin(H * hd, QR),
                 wkv=lin(hd, D), kv_norm=norm(hd), wo_a=lin(G * OR, H * hd // G), wo_b=lin(D, G * OR))
        if L["kv_source"]:
            if L["ratio"] > 1:
                L.update(c_wkv=lin(hd, D, "f32"), c_wgate=lin(hd, D, "f32"))
            else:
                L["c_wkv"] = lin(hd, D)
            L["c_norm"] = norm(hd)
        if L["index_source"]:
            L.update(i_wq_b=lin(a.index_n_heads * a.index_head_dim, QR), i_wproj=lin(a.index_n_heads, D))
            if L["kv_source"]:
                L.update(i_wk=lin(a.index_head_dim, hd), i_k_norm=norm(a.index_head_dim))
        E, _ = a.moe_config(i)
        L["gate_w"] = lin(E, D, "f32")
        L["gate_bias"] = d.uniform((E,), 0.0, 0.01, "f32")
        ex = {}
        for m, (out, inn) in (("w1", (I, D)), ("w2", (D, I)), ("w3", (I, D))):
            parts = [d.fp4_weight((min(expert_chunk, E - e0), out, inn), 1.0 / math.sqrt(inn))
                     for e0 in range(0, E, expert_chunk)]
            ex[m] = xp.cat([q for q, _ in parts], 0)
            ex[m + "_s"] = xp.cat([s for _, s in parts], 0)
            del parts
        L["experts"] = ex
        L["shared"] = {"w1": lin(I, D), "w2": lin(D, I), "w3": lin(I, D)}
        if i in a.engram_layer_ids:
            j = list(a.engram_layer_ids).index(i)
            rows, ehd = a.engram_num_embeddings[j], a.engram_head_dim
            cols = (a.engram_max_ngram_size - 1) * a.engram_n_heads
            parts = [d.fp8_rows((min(table_chunk_rows, rows - r0), ehd), 1.0)
                     for r0 in range(0, rows, table_chunk_rows)]
            L["engram"] = dict(index=j, table=xp.cat([q for q, _ in parts], 0),
                               scale=xp.cat([s for _, s in parts], 0),
                               wkv=lin(D * (hc + 1), cols * ehd),
                               q_weight=d.uniform((hc, D), 1.0, 0.05, "bf16"),
                               k_weight=d.uniform((hc, D), 1.0, 0.05, "bf16"))
            del parts
        P["layers"].append(L)
    return P


def nbytes(a, n_layers=None):
    """Bytes synth() allocates for Args `a` (bf16 dense, packed experts), for planning."""
    D, H, hd = a.dim, a.n_heads, a.head_dim
    QR, G, OR, I, hc = a.q_lora_rank, a.o_groups, a.o_lora_rank, a.moe_inter_dim, a.hc_mult
    mix = (2 + hc) * hc
    b = a.vocab_size * D * (2 + 4) + D * 2
    for i in range(a.n_layers if n_layers is None else n_layers):
        r = _roles(a, i)
        dense = QR * D + H * hd * QR + hd * D + G * OR * (H * hd // G) + D * G * OR + 3 * I * D
        dense += QR + hd + 2 * D
        if r["kv_source"]:
            dense += hd * D * (4 if r["ratio"] > 1 else 1) + hd
        if r["index_source"]:
            dense += a.index_n_heads * a.index_head_dim * QR + a.index_n_heads * D
            if r["kv_source"]:
                dense += a.index_head_dim * hd + a.index_head_dim
        E, _ = a.moe_config(i)
        b += dense * 2 + (2 * mix * hc * D + 2 * mix + 6 + H + E * D + E) * 4
        b += E * 3 * I * D * (1 / 2 + 1 / 32)
        if i in a.engram_layer_ids:
            j = list(a.engram_layer_ids).index(i)
            cols = (a.engram_max_ngram_size - 1) * a.engram_n_heads
            b += a.engram_num_embeddings[j] * a.engram_head_dim * (1 + 1 / 32)
            b += (D * (hc + 1) * cols * a.engram_head_dim + 2 * hc * D) * 2
    return int(b)
