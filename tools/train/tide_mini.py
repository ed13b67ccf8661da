"""tide-mini: a trainable PyTorch model of the DeepSeek-V4.1-Flash text
architecture at small widths.

The function is the one tide computes (src/model/*.c, the numpy oracle
tools/ref/model.py, the GPU baseline tools/torch_ref/baseline.py), written for
training: a whole sequence at once from position 0, dense masked attention
over (window entries + the compressed entries the indexer selects), float32
master weights, bf16 autocast for the products. Parameter names are the
checkpoint's tensor names (export.py writes them in the release's dtypes).

Layer roles follow the config exactly as the oracle derives them:
  window-only layers (compress ratio 0);
  compressed layers (ratio 2 or 1): a KV source compresses its input into
    latents (softmax-gated pooling of `ratio` tokens, RMSNorm, RoPE at the
    group's first position); every compressed layer reads the latents of the
    most recent KV source at or below it (cur_src);
  index sources score the compressed positions (relu(q.k) weighted per head)
    with keys of the last KV source that published some, and choose the top-k;
    the candidate source also keeps the best blocks, to which later index
    sources restrict their scores; other compressed layers reuse the last
    top-k;
  engram layers add the gated n-gram memory before the block;
  every block is single-pass mHC (Sinkhorn-normalised mixing of hc copies,
    the shifted pre mixes of the oracle's block()) around attention and an
    MoE (shared expert + routed experts, sqrtsoftplus scores, top-k on score
    + selection bias, noaux_tc; the bias is updated for balance outside the
    gradient);
  the DSpark drafter: num_nextn_predict_layers window-only stages over
    [token, noise...] blocks that attend to the main model's KV of
    main_proj(target-layer inputs), with the Markov bias and the confidence
    head (dspark_forward).

Quantisation-aware training (set_qat(True)): FP8 32x32 and FP4 1x32 weight
fake-quantisation and the in-graph activation simulations of the oracle
(fp8 activations before FP8/FP4 GEMMs, fp8 window KV, fp4 latents and index
keys/queries), with straight-through gradients. The numerics helpers are
tools/torch_ref/xp.py's TorchXP (the baseline's own).
"""
import math
import os
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "ref"))
sys.path.insert(0, os.path.join(_HERE, "..", "torch_ref"))
import ckpt  # noqa: E402
import model as refmodel  # noqa: E402
import numerics as nx  # noqa: E402
import xp as xpmod  # noqa: E402


# ---------------------------------------------------------------- config

def mini_text_config(vocab, compressed_vocab, noise_id, image_id, **over):
    """The tide-mini text_config (HF key names). The layer layout is `tide synth
    --shape small`'s (src/model/config_preset.c toy_layout); widths are chosen
    for ~30M parameters and a <= 40 MB checkpoint."""
    c = dict(
        model_type="deepseek_v41_text", vocab_size=vocab, hidden_size=256, moe_intermediate_size=128,
        num_hidden_layers=10, num_nextn_predict_layers=3, num_attention_heads=8, num_key_value_heads=1,
        head_dim=128, qk_rope_head_dim=64, q_lora_rank=128, o_groups=4, o_lora_rank=64,
        hidden_act="silu", swiglu_limit=10.0, rms_norm_eps=1e-20, max_position_embeddings=4096,
        rope_theta=10000.0, compress_rope_theta=40000.0,
        rope_scaling={"rope_type": "yarn", "factor": 8.0, "beta_fast": 32, "beta_slow": 1,
                      "original_max_position_embeddings": 512},
        n_routed_experts=10, n_shared_experts=1, num_experts_per_tok=3, scoring_func="sqrtsoftplus",
        topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=1.5, gate_temp=1.0,
        sliding_window=64,
        compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0],
        kv_source_layer_ids=[2, 4, 6], index_source_layer_ids=[2, 4, 6, 8],
        index_n_heads=4, index_head_dim=128, index_topk=16,
        candidate_source_layer_id=6, candidate_topk_blocks=8, candidate_block_size=8,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        engram_layer_ids=[1, 4], engram_num_embeddings=[0, 0], engram_max_ngram_size=3,
        engram_vocab_size=1009, engram_n_heads=4, engram_head_dim=64, engram_pad_token_id=2,
        engram_compressed_vocab_size=compressed_vocab,
        dspark_block_size=4, dspark_noise_token_id=noise_id, dspark_target_layer_ids=[7, 8, 9],
        dspark_markov_rank=32, dspark_n_routed_experts=6, dspark_num_experts_per_tok=2,
        image_token_id=image_id, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )
    c.update(over)
    primes = _engram_primes(c)
    c["engram_num_embeddings"] = [int(p.sum()) for p in primes]
    return c


def _engram_primes(c):
    import engram as eg
    return eg.engram_primes(c["engram_layer_ids"], c["engram_max_ngram_size"], c["engram_n_heads"],
                            c["engram_vocab_size"])


def full_config(text):
    """config.json of a checkpoint around a text_config (the release's HF form)."""
    return {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
            "image_token_id": text["image_token_id"], "bos_token_id": text["bos_token_id"],
            "eos_token_id": text["eos_token_id"],
            "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                    "weight_block_size": [32, 32], "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
            "text_config": text}


# ---------------------------------------------------------------- fake quantisation (straight-through)

_XP = {}


def _xp(dev):
    k = str(dev)
    if k not in _XP:
        _XP[k] = xpmod.TorchXP(dev)
    return _XP[k]


def ste(x, q):
    """Forward q (a function of x, no gradient), backward identity."""
    return x + (q.to(x.dtype) - x).detach()


_HAS_F8 = hasattr(torch, "float8_e4m3fn")


def _np_apply(x, fn):
    """Fallback for torch without float8 (the CPU test's torch 1.13): the same
    rounding by tools/ref/numerics.py on the host."""
    y = fn(x.detach().float().cpu().numpy())
    return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(x.device)


def fq_fp8_weight(w):
    """FP8 e4m3 with one power-of-two scale per 32x32 block (nx.quant_fp8_weight's rule)."""
    if not _HAS_F8:
        return ste(w, _np_apply(w, lambda a: nx.Weight("fp8", *nx.quant_fp8_weight(a)).dequant()))
    X = _xp(w.device)
    o, i = w.shape
    po, pi = (-o) % 32, (-i) % 32
    wf = F.pad(w.detach().float(), (0, pi, 0, po))
    b = wf.reshape((o + po) // 32, 32, (i + pi) // 32, 32)
    amax = b.abs().amax((1, 3), keepdim=True).clamp_min(1e-4)
    s = X._pow2_ceil(amax * (1.0 / 448.0))
    q = ((b / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(o + po, i + pi)[:o, :i]
    return ste(w, q)


def _np_fp4_weight(a):
    sh = a.shape
    a2 = a.reshape(-1, sh[-1])
    q, sc = nx.quant_fp4_weight(a2)
    return nx.Weight("fp4", q, sc, shape=a2.shape).dequant().reshape(sh)


def fq_fp4_weight(w):
    """FP4 e2m1 with a power-of-two scale per 1x32 block (nx.quant_fp4_weight's rule)."""
    if not _HAS_F8:
        return ste(w, _np_apply(w, _np_fp4_weight))
    X = _xp(w.device)
    sh = w.shape
    b = w.detach().float().reshape(sh[:-1] + (sh[-1] // 32, 32))
    amax = b.abs().amax(-1, keepdim=True).clamp_min(6 * 2.0 ** -126)
    s = X._pow2_ceil(amax * (1.0 / 6.0))
    q = (X._e2m1_round((b / s).clamp(-6, 6)) * s).reshape(sh)
    return ste(w, q)


_NP_ACT = {"fp8": lambda a: nx.fp8_act_sim(a, 32), "fp4_e8m0": lambda a: nx.fp4_sim_e8m0(a, 32),
           "fp4_e4m3": lambda a: nx.fp4_sim_e4m3(a, 16)}


def fq_act(x, kind):
    if not _HAS_F8:
        return ste(x, _np_apply(x, _NP_ACT[kind]))
    X = _xp(x.device)
    if kind == "fp8":
        return ste(x, X.fp8_sim(x.detach(), 32))
    if kind == "fp4_e8m0":
        return ste(x, X.fp4_sim_e8m0(x.detach(), 32))
    if kind == "fp4_e4m3":
        return ste(x, X.fp4_sim_e4m3(x.detach(), 16))
    raise ValueError(kind)


def fq_bf16(w):
    return ste(w, w.detach().to(torch.bfloat16).float())


# ---------------------------------------------------------------- small pieces

def bfr(x, on):
    """x rounded to bf16 (kept in float32) when on: the oracle's rounding points,
    followed in the trainer only in exact mode (tests), where the FP8/FP4
    requantisation of slightly different inputs would otherwise flip roundings."""
    return x.to(torch.bfloat16).float() if on else x


def rmsnorm(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


class RopeTables:
    """cos/sin [max_len, rd/2] per layer kind, from the oracle's exact tables."""

    def __init__(self, a, max_len, dev):
        self.t = {}
        pos = np.arange(max_len)
        for kind in ("plain", "compress"):
            if kind == "compress":
                inv = refmodel.rope_inv_freq(a.rope_head_dim, a.compress_rope_theta,
                                             (a.rope_factor, a.beta_fast, a.beta_slow, a.original_seq_len))
            else:
                inv = refmodel.rope_inv_freq(a.rope_head_dim, a.rope_theta, None)
            c, s = refmodel.rope_cos_sin(inv, pos)
            self.t[kind] = (torch.from_numpy(c).to(dev), torch.from_numpy(s).to(dev))

    def get(self, ratio, pos):
        """pos: LongTensor of positions (any shape) -> cos, sin [..., rd/2]."""
        c, s = self.t["compress" if ratio else "plain"]
        return c[pos], s[pos]


def rope(x, cos, sin, inverse=False):
    """Rotate adjacent pairs of the last axis; cos/sin broadcastable to x[..., rd/2]."""
    shp = x.shape
    xr = x.float().reshape(shp[:-1] + (shp[-1] // 2, 2))
    a, b = xr[..., 0], xr[..., 1]
    if inverse:
        sin = -sin
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(shp)


def rope_tail(x, rd, cos, sin, inverse=False):
    return torch.cat([x[..., :-rd], rope(x[..., -rd:], cos, sin, inverse).to(x.dtype)], -1)


# ---------------------------------------------------------------- modules

class Lin(nn.Module):
    """A Linear with the checkpoint's storage kind: 'fp8' | 'fp4' | 'bf16' | 'f32'."""

    def __init__(self, out, inn, kind, std=None):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.randn(out, inn) * (std if std is not None else inn ** -0.5))
        self.qat = False
        self.exact = False

    def w(self):
        if not self.qat:
            return self.weight
        if self.kind == "fp8":
            return fq_fp8_weight(self.weight)
        if self.kind == "fp4":
            return fq_fp4_weight(self.weight)
        # bf16, and f32-in-use weights the checkpoint stores as BF16 (the compressor's)
        return fq_bf16(self.weight)

    def forward(self, x):
        if self.qat and self.kind in ("fp8", "fp4"):
            x = fq_act(x, "fp8")
        if self.kind == "f32":
            with torch.autocast(x.device.type, enabled=False):
                return F.linear(x.float(), self.w().float())
        return bfr(F.linear(x, self.w()), self.exact)


def norm_param(n):
    return nn.Parameter(torch.ones(n))


class Experts(nn.Module):
    """n routed experts as stacked [E, out, in] FP4 weights (exported one by one)."""

    def __init__(self, E, dim, inter):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(E, inter, dim) * dim ** -0.5)
        self.w3 = nn.Parameter(torch.randn(E, inter, dim) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(E, dim, inter) * inter ** -0.5)
        self.qat = False

    def ws(self):
        if self.qat:
            return fq_fp4_weight(self.w1), fq_fp4_weight(self.w2), fq_fp4_weight(self.w3)
        return self.w1, self.w2, self.w3


def swiglu(g, u, limit):
    g, u = g.float(), u.float()
    if limit > 0:
        u = u.clamp(-limit, limit)
        g = g.clamp(max=limit)
    return F.silu(g) * u


class MoE(nn.Module):
    def __init__(self, a, n_exp, k):
        super().__init__()
        dim, inter = a.dim, a.moe_inter_dim
        self.a, self.k, self.E = a, k, n_exp
        self.gate = nn.Module()
        self.gate.weight = nn.Parameter(torch.randn(n_exp, dim) * dim ** -0.5)
        self.gate.register_buffer("bias", torch.zeros(n_exp))
        self.experts = Experts(n_exp, dim, inter)
        self.shared_experts = nn.Module()
        for n, (o, i) in (("w1", (inter, dim)), ("w2", (dim, inter)), ("w3", (inter, dim))):
            setattr(self.shared_experts, n, Lin(o, i, "fp8"))
        self.load = None  # tokens per expert of the last forward (for the bias update)
        self.exact = False

    def route(self, x):
        a = self.a
        with torch.autocast(x.device.type, enabled=False):
            gw = fq_bf16(self.gate.weight) if self.experts.qat else self.gate.weight
            if self.exact:  # the oracle's float64 product
                s = torch.sqrt(F.softplus(F.linear(x.double(), gw.double()).float()))
            else:
                s = torch.sqrt(F.softplus(F.linear(x.float(), gw.float())))
        idx = torch.topk(s.detach() + self.gate.bias, self.k, -1).indices
        w = torch.gather(s, -1, idx)
        if a.norm_topk_prob and self.k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * a.route_scale, idx

    def forward(self, x):
        a = self.a
        shp = x.shape
        xt = x.reshape(-1, shp[-1])
        w, idx = self.route(xt)
        dense = torch.zeros(xt.shape[0], self.E, device=x.device, dtype=torch.float32)
        dense.scatter_(1, idx, w)
        self.load = torch.bincount(idx.reshape(-1), minlength=self.E).detach()
        w1, w2, w3 = self.experts.ws()
        xq = fq_act(xt, "fp8") if self.experts.qat else xt
        e = self.exact
        g = bfr(torch.einsum("td,efd->tef", xq, w1), e)
        u = bfr(torch.einsum("td,efd->tef", xq, w3), e)
        hmid = bfr(dense[..., None] * swiglu(g, u, a.swiglu_limit), e)
        if self.experts.qat:
            hmid = fq_act(hmid, "fp8")
        if e:  # each expert's output rounded before the sum, as the oracle adds them
            y = bfr(torch.einsum("tef,edf->ted", hmid, w2), e).sum(1)
        else:
            y = torch.einsum("tef,edf->td", hmid, w2)
        sh = self.shared_experts
        y = y.float() + sh.w2(bfr(swiglu(sh.w1(xt), sh.w3(xt), a.swiglu_limit), e)).float()
        return bfr(y, e).reshape(shp)

    @torch.no_grad()
    def update_bias(self, rate):
        """DeepSeek's auxiliary-loss-free balancing: raise the bias of experts that
        got fewer tokens than the mean, lower it for those that got more."""
        if self.load is None:
            return
        load = self.load.float()
        self.gate.bias += rate * torch.sign(load.mean() - load)


class HC(nn.Module):
    """Parameters of one hyper-connection mix (hc_{attn,ffn}_{fn,base,scale})."""

    def __init__(self, a):
        super().__init__()
        hc, dim = a.hc_mult, a.dim
        mix = (2 + hc) * hc
        self.fn = nn.Parameter(torch.randn(mix, hc * dim) * 0.1 / math.sqrt(hc * dim))
        base = torch.zeros(mix)
        base[:hc] = 0.0
        # comb starts near the identity (each copy keeps itself)
        base[2 * hc:] = (torch.eye(hc) * 4.0).reshape(-1)
        self.base = nn.Parameter(base)
        self.scale = nn.Parameter(torch.full((3,), 0.5))


def hc_mixes(a, h, P, exact=False):
    """pre [.., hc], post [.., hc], comb [.., hc(from), hc(to)] of h [.., hc, dim]
    (exact: the mixing product in float64, as the oracle)."""
    hc = a.hc_mult
    with torch.autocast(h.device.type, enabled=False):
        xf = h.float().reshape(h.shape[:-2] + (-1,))
        rs = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + a.norm_eps)
        if exact:
            m = F.linear(xf.double(), P.fn.double()).float() * rs
        else:
            m = F.linear(xf, P.fn) * rs
        eps = a.hc_eps
        pre = torch.sigmoid(m[..., :hc] * P.scale[0] + P.base[:hc]) + eps
        post = 2 * torch.sigmoid(m[..., hc:2 * hc] * P.scale[1] + P.base[hc:2 * hc])
        comb = (m[..., 2 * hc:] * P.scale[2] + P.base[2 * hc:]).reshape(m.shape[:-1] + (hc, hc))
        comb = torch.softmax(comb, -1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(a.hc_sinkhorn_iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


def hc_pre(h, pre):
    return (pre[..., None] * h.float()).sum(-2)


def hc_post(y, res, post, comb):
    # comb[..., k, j]: from copy k into copy j
    mix = torch.einsum("...kj,...kd->...jd", comb, res.float())
    return post[..., None] * y.float()[..., None, :] + mix


class Block(nn.Module):
    """One layer (backbone or DSpark stage) with the checkpoint's module tree."""

    def __init__(self, a, i, backbone):
        super().__init__()
        dim, H, D = a.dim, a.n_heads, a.head_dim
        self.a, self.i = a, i
        self.ratio = a.compress_ratios[i]
        self.attn_norm = nn.Module()
        self.attn_norm.weight = norm_param(dim)
        self.ffn_norm = nn.Module()
        self.ffn_norm.weight = norm_param(dim)
        self.hc_attn = HC(a)
        self.hc_ffn = HC(a)
        at = self.attn = nn.Module()
        at.attn_sink = nn.Parameter(torch.zeros(H))
        at.wq_a = Lin(a.q_lora_rank, dim, "fp8")
        at.q_norm = nn.Module()
        at.q_norm.weight = norm_param(a.q_lora_rank)
        at.wq_b = Lin(H * D, a.q_lora_rank, "fp8")
        at.wkv = Lin(D, dim, "fp8")
        at.kv_norm = nn.Module()
        at.kv_norm.weight = norm_param(D)
        G = a.o_groups
        at.wo_a = Lin(G * a.o_lora_rank, H * D // G, "bf16")
        at.wo_b = Lin(dim, G * a.o_lora_rank, "fp8", std=(G * a.o_lora_rank) ** -0.5 / math.sqrt(2 * a.n_layers))
        kvs = [s for s in a.kv_source_layers if s < a.n_layers]
        ixs = [s for s in a.index_source_layers if s < a.n_layers]
        self.kv_source = backbone and i in kvs
        self.index_source = backbone and i in ixs
        if self.kv_source:
            c = at.compressor = nn.Module()
            c.wkv = Lin(D, dim, "f32" if self.ratio > 1 else "bf16")
            if self.ratio > 1:
                c.wgate = Lin(D, dim, "f32", std=0.1 * dim ** -0.5)
            c.norm = nn.Module()
            c.norm.weight = norm_param(D)
        if self.index_source:
            ix = at.indexer = nn.Module()
            ix.wq_b = Lin(a.index_n_heads * a.index_head_dim, a.q_lora_rank, "fp8")
            ix.weights_proj = Lin(a.index_n_heads, dim, "bf16")
            if self.kv_source:
                ix.wk = Lin(a.index_head_dim, D, "bf16")
                ix.k_norm = nn.Module()
                ix.k_norm.weight = norm_param(a.index_head_dim)
        n_exp, k = a.moe_config(i)
        self.ffn = MoE(a, n_exp, k)
        self.engram = None
        if backbone and i in a.engram_layer_ids:
            e = self.engram = nn.Module()
            eidx = list(a.engram_layer_ids).index(i)
            rows = a.engram_num_embeddings[eidx]
            cols = (a.engram_max_ngram_size - 1) * a.engram_n_heads
            e.index = eidx
            e.embed = nn.Module()
            e.embed.weight = nn.Parameter(torch.randn(rows, a.engram_head_dim) * 0.5)
            e.wkv = Lin(dim * (a.hc_mult + 1), cols * a.engram_head_dim, "fp8")
            e.q_weight = nn.Parameter(torch.ones(a.hc_mult, dim))
            e.k_weight = nn.Parameter(torch.ones(a.hc_mult, dim))


class Model(nn.Module):
    """The backbone and the DSpark stages of one config (tools/ref/ckpt.Args)."""

    def __init__(self, text_config, max_len, dev="cpu"):
        super().__init__()
        self.cfg = text_config
        a = self.a = ckpt.parse_config({"text_config": text_config})
        self.embed = nn.Module()
        self.embed.weight = nn.Parameter(torch.randn(a.vocab_size, a.dim))
        self.head = nn.Module()
        self.head.weight = nn.Parameter(torch.randn(a.vocab_size, a.dim) * a.dim ** -0.5)
        self.norm = nn.Module()
        self.norm.weight = norm_param(a.dim)
        self.layers = nn.ModuleList([Block(a, i, True) for i in range(a.n_layers)])
        self.mtp = nn.ModuleList([Block(a, a.n_layers + s, False) for s in range(a.n_mtp_layers)])
        m0 = self.mtp[0]
        nt = len(a.dspark_target_layer_ids)
        m0.main_proj = Lin(a.dim, nt * a.dim, "fp8")
        m0.main_norm = nn.Module()
        m0.main_norm.weight = norm_param(a.dim)
        last = self.mtp[-1]
        last.norm = nn.Module()
        last.norm.weight = norm_param(a.dim)
        last.markov_head = nn.Module()
        last.markov_head.embed = nn.Module()
        last.markov_head.embed.weight = nn.Parameter(torch.randn(a.vocab_size, a.dspark_markov_rank) * 0.1)
        last.markov_head.head = nn.Module()
        last.markov_head.head.weight = nn.Parameter(torch.zeros(a.vocab_size, a.dspark_markov_rank))
        last.confidence_head = nn.Module()
        last.confidence_head.proj = Lin(1, a.dim + a.dspark_markov_rank, "bf16")
        self.rt = RopeTables(a, max_len, dev)
        self.qat = False
        self.exact = False
        self.index_mode = "topk"  # "topk" | "dense" | "random"
        self.trace = None  # a dict to collect per-layer inputs (tests)
        self.to(dev)

    def set_exact(self, on):
        """Round to bf16 where the oracle does (tests; off in training)."""
        self.exact = on
        for m in self.modules():
            if isinstance(m, (Lin, MoE)):
                m.exact = on

    def rms(self, x, w):
        return bfr(rmsnorm(x, self.emb(w), self.a.norm_eps), self.exact)

    def rope_t(self, x, cos, sin, inverse=False):
        return bfr(rope_tail(x, self.a.rope_head_dim, cos, sin, inverse), self.exact)

    def set_qat(self, on):
        self.qat = on
        for m in self.modules():
            if isinstance(m, (Lin, Experts)):
                m.qat = on

    def backbone_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("mtp.")]

    def dspark_parameters(self):
        return [p for n, p in self.named_parameters() if n.startswith("mtp.")]

    def indexer_parameters(self):
        return [p for n, p in self.named_parameters() if ".indexer." in n]

    # ---- embeddings and engram

    def emb(self, W):
        return fq_bf16(W) if self.qat else W

    def engram(self, L, h, hashes):
        """hashes [B, T, cols] rows of this layer's table."""
        a, E = self.a, L.engram
        B, T, hc, dim = h.shape
        tab = E.embed.weight
        if self.qat:
            tab = ste(tab, _fp8_rows(tab.detach()))
        emb = tab[hashes].reshape(B, T, -1)
        kv = E.wkv(emb)
        key = kv[..., :hc * dim].float().reshape(B, T, hc, dim)
        value = kv[..., hc * dim:].float()
        weight = self.emb(E.q_weight) * self.emb(E.k_weight)
        hf = h.float()
        eps = a.norm_eps
        rstd = torch.rsqrt(hf.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
        dot = (hf * weight * key).sum(-1) * rstd * dim ** -0.5
        gate = torch.sigmoid(torch.sign(dot) * torch.sqrt(dot.abs().clamp_min(1e-6)))
        return bfr(hf + gate[..., None] * value[:, :, None, :], self.exact)

    # ---- attention

    def qkv(self, L, x, pos):
        a, at = self.a, L.attn
        H, D, rd = a.n_heads, a.head_dim, a.rope_head_dim
        cos, sin = self.rt.get(L.ratio, pos)
        qr = self.rms(at.wq_a(x), at.q_norm.weight)
        q = at.wq_b(qr).reshape(x.shape[:-1] + (H, D))
        q = self.rope_t(q, cos[..., None, :], sin[..., None, :])
        kv = self.rms(at.wkv(x), at.kv_norm.weight)
        kv = self.rope_t(kv, cos, sin)
        if self.qat:
            kv = fq_act(kv, "fp8")
        return qr, q, kv

    def out_proj(self, L, o, pos):
        a, at = self.a, L.attn
        rd, G = a.rope_head_dim, a.o_groups
        cos, sin = self.rt.get(L.ratio, pos)
        o = self.rope_t(o, cos[..., None, :], sin[..., None, :], inverse=True)
        sh = o.shape[:-2]
        wo_a = at.wo_a.w().reshape(G, a.o_lora_rank, -1)
        o = bfr(torch.einsum("...gd,grd->...gr", o.reshape(sh + (G, -1)), wo_a.to(o.dtype)), self.exact)
        return at.wo_b(o.reshape(sh + (-1,)))

    def attend(self, L, q, keys, mask):
        """q [B, T, H, D]; keys [B, K, D] (MQA: keys = values); mask bool [B, T, K] or
        [T, K]; softmax with the per-head sink. -> o [B, T, H, D]."""
        D = q.shape[-1]
        s = torch.einsum("bthd,bkd->bhtk", q, keys).float() * D ** -0.5
        m = mask[:, None] if mask.dim() == 3 else mask[None, None]
        s = s.masked_fill(~m, float("-inf"))
        p, den = sink_softmax(s, L.attn.attn_sink.float()[:, None], self.exact)
        o = torch.einsum("bhtk,bkd->bthd", p, keys) / den.permute(0, 2, 1)[..., None]
        return bfr(o, self.exact)

    def compress(self, L, x):
        """latents [B, G, D] (normed, before RoPE) of the groups of a KV source."""
        a, c = self.a, L.attn.compressor
        r = L.ratio
        B, T, _ = x.shape
        if r == 1:
            return self.rms(c.wkv(x), c.norm.weight)
        G = T // r
        xf = x[:, :G * r].float()
        kv = c.wkv(xf).reshape(B, G, r, -1)
        sc = c.wgate(xf).reshape(B, G, r, -1)
        p = torch.softmax(sc, 2)
        pooled = (kv * p).sum(2)
        if self.qat:
            pooled = fq_bf16(pooled)
        return self.rms(pooled, c.norm.weight)

    def index_scores(self, L, x, qr, keys, T):
        a, ix = self.a, L.attn.indexer
        rd = a.rope_head_dim
        B = x.shape[0]
        pos = torch.arange(T, device=x.device)
        cos, sin = self.rt.get(L.ratio, pos)
        q = ix.wq_b(qr).reshape(B, T, a.index_n_heads, a.index_head_dim)
        q = self.rope_t(q, cos[:, None], sin[:, None])
        if self.qat:
            q = fq_act(q, "fp4_e8m0")
        e = self.exact
        w = bfr(ix.weights_proj(x).float() * (a.index_head_dim ** -0.5 * a.index_n_heads ** -0.5), e)
        s = torch.relu(bfr(torch.einsum("bthd,bnd->bthn", q.float(), keys.float()), e))
        return bfr(bfr(s * w[..., None], e).sum(2), e)  # [B, T, n]

    def block(self, L, h, pre_mix, attn):
        """One layer around its attention attn(x) (the oracle's block(): the
        attention input mixes with the previous layer's ffn pre weights, the ffn
        input with this layer's attention pre weights). -> (h, pre_mix)."""
        a = self.a
        res = h
        apre, apost, acomb = hc_mixes(a, h, L.hc_attn, self.exact)
        e = self.exact
        x = self.rms(bfr(hc_pre(h, pre_mix), e), L.attn_norm.weight)
        h = bfr(hc_post(attn(x), res, apost, acomb), e)
        res = h
        fpre, fpost, fcomb = hc_mixes(a, h, L.hc_ffn, self.exact)
        x = self.rms(bfr(hc_pre(h, apre), e), L.ffn_norm.weight)
        return bfr(hc_post(L.ffn(x), res, fpost, fcomb), e), fpre

    def attention(self, L, st, x):
        """A backbone layer's attention over the whole sequence; st carries what
        the layers share within one forward (latents, index keys, the sources,
        the last selection and the candidates) and the indexer's loss."""
        a = self.a
        B, T = x.shape[:2]
        pos = st.pos
        qr, q, kv = self.qkv(L, x, pos)
        keys, mask = kv, st.win_mask[None].expand(B, T, T)
        r = L.ratio
        if r:
            G = T // r
            clen = (pos + 1) // r  # [T]
            gpos = torch.arange(G, device=x.device)
            valid = gpos[None, :] < clen[:, None]  # [T, G]
            if L.kv_source:
                lat = self.compress(L, x)
                cos, sin = self.rt.get(r, gpos * r)
                c = self.rope_t(lat, cos, sin)
                st.comp[L.i] = fq_act(c, "fp4_e4m3") if self.qat else c
                st.cur_src = L.i
            masked = 0 <= a.candidate_source_layer < L.i
            if L.index_source:
                if L.kv_source:
                    ix = L.attn.indexer
                    k = self.rms(ix.wk(lat.detach()), ix.k_norm.weight)
                    cos, sin = self.rt.get(r, gpos * r)
                    k = self.rope_t(k, cos, sin)
                    st.ikeys[L.i] = fq_act(k, "fp4_e8m0") if self.qat else k
                    st.published = L.i
                score = self.index_scores(L, x.detach(), qr.detach(), st.ikeys[st.published], T)
                score = score.masked_fill(~valid[None], float("-inf"))
                if L.i == a.candidate_source_layer:
                    st.cand = candidate_mask(score.detach(), clen, a.candidate_topk_blocks, a.candidate_block_size)
                elif masked:
                    score = score.masked_fill(~st.cand, float("-inf"))
                st.sel = self.select(score.detach(), valid, a.index_topk)
            ck = st.comp[st.cur_src]
            keys = torch.cat([kv, ck.to(kv.dtype)], 1)
            mask = torch.cat([mask, st.sel], -1)
        o = self.attend(L, q, keys, mask)
        if r and L.index_source:
            st.index_loss = st.index_loss + self.index_kl(q, ck, valid, st.cand if masked else None, score)
            st.n_index += 1
        return self.out_proj(L, o, pos)

    def forward(self, ids, hashes, targets=None, need_hidden=False):
        """ids [B, T] from position 0; hashes [B, T, n_engram, cols] (or None).
        -> dict(logits [B, T, V] f32 (or nll [B, T] of targets), index_loss,
        main_hidden [B, T, nt*dim] if asked)."""
        a = self.a
        B, T = ids.shape
        dev = ids.device
        pos = torch.arange(T, device=dev)
        st = types.SimpleNamespace(pos=pos, comp={}, ikeys={}, published=None, cur_src=None, sel=None,
                                   cand=None, index_loss=torch.zeros((), device=dev), n_index=0)
        st.win_mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - a.window_size)  # [T, T]
        W = self.emb(self.embed.weight)
        h = W[ids][:, :, None, :].expand(B, T, a.hc_mult, a.dim).float()
        pre_mix = torch.zeros(B, T, a.hc_mult, device=dev)
        pre_mix[..., 0] = 1
        hidden = []
        for L in self.layers:
            if L.engram is not None:
                h = self.engram(L, h, hashes[:, :, L.engram.index])
            if self.trace is not None:
                self.trace[f"L{L.i}.h_in"] = h.detach().float().cpu().numpy()
            if L.i in a.dspark_target_layer_ids:
                hidden.append(bfr(h.float().mean(2), self.exact))
            h, pre_mix = self.block(L, h, pre_mix, lambda x, L=L: self.attention(L, st, x))
        x = self.rms(bfr(hc_pre(h, pre_mix), self.exact), self.norm.weight)
        out = {"index_loss": st.index_loss / max(st.n_index, 1)}
        if targets is not None:
            out["nll"] = self.nll(x, targets)
        else:
            out["logits"] = F.linear(x.float(), self.emb(self.head.weight).float())
        if need_hidden:
            out["main_hidden"] = torch.cat(hidden, -1)
        return out

    def nll(self, x, targets, chunk=4096):
        """Per-token negative log-likelihood [B, T] of targets (-1 = ignore), head in chunks."""
        B, T, dim = x.shape
        xf = x.reshape(-1, dim)
        tf = targets.reshape(-1)
        Wh = self.emb(self.head.weight)
        outs = []
        for s in range(0, xf.shape[0], chunk):
            lg = F.linear(xf[s:s + chunk], Wh).float()
            outs.append(F.cross_entropy(lg, tf[s:s + chunk].clamp_min(0), reduction="none"))
        nll = torch.cat(outs).reshape(B, T)
        return nll * (targets >= 0)

    def select(self, score, valid, k):
        """Selection mask [B, T, G] of the index source's choice."""
        B, T, G = score.shape
        k = min(k, G)
        if self.index_mode == "dense" or k == 0:
            return valid[None].expand(B, T, G) & torch.isfinite(score)
        if self.index_mode == "random":
            g = torch.Generator(device=score.device)
            g.manual_seed(1234)
            noise = torch.rand(score.shape, generator=g, device=score.device)
            score = torch.where(valid[None], noise, torch.full_like(noise, float("-inf")))
        vals, ind = topk_lowest_ties(score, k)
        m = torch.zeros(B, T, G, dtype=torch.bool, device=score.device)
        m.scatter_(-1, ind, torch.isfinite(vals))
        return m

    def index_kl(self, q, ck, valid, cand, score):
        """KL(attention mass on the compressed entries || softmax(index score)): the
        target is the layer's own dense attention over every visible compressed
        entry, heads summed, detached."""
        with torch.no_grad():
            D = q.shape[-1]
            s = torch.einsum("bthd,bgd->bhtg", q.float(), ck.float()) * D ** -0.5
            m = valid[None, None]
            if cand is not None:
                m = m & cand[:, None]
            s = s.masked_fill(~m, float("-inf"))
            p = torch.softmax(s, -1).nan_to_num(0.0).sum(1)  # [B, T, G]
            tgt = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
            rows = (tgt.sum(-1) > 0)
        logq = torch.log_softmax(score.float().masked_fill(~torch.isfinite(score), -1e9), -1)
        kl = (tgt * (torch.log(tgt.clamp_min(1e-9)) - logq)).sum(-1)
        return (kl * rows).sum() / rows.sum().clamp_min(1)

    # ---- DSpark

    def draft_attention(self, L, x, mx, qpos, ctx):
        """A DSpark stage's attention: the block's queries [B, N, blk] see the
        main model's KV of main_x at their anchor's window (ctx [B, N, T]) and
        every entry of their own block."""
        a, at = self.a, L.attn
        B, N, blk = qpos.shape
        T = mx.shape[1]
        _, q, kv = self.qkv(L, x, qpos)  # q [B,N,blk,H,D], kv [B,N,blk,D]
        mkv = self.rms(at.wkv(mx), at.kv_norm.weight)
        cos, sin = self.rt.get(0, torch.arange(T, device=mx.device))
        mkv = self.rope_t(mkv, cos, sin)
        if self.qat:
            mkv = fq_act(mkv, "fp8")
        D = q.shape[-1]
        s_m = torch.einsum("bnjhd,btd->bnhjt", q, mkv).float() * D ** -0.5
        s_m = s_m.masked_fill(~ctx[:, :, None, None, :], float("-inf"))
        s_b = torch.einsum("bnjhd,bnkd->bnhjk", q, kv).float() * D ** -0.5
        p, den = sink_softmax(torch.cat([s_m, s_b], -1), at.attn_sink.float()[:, None], self.exact)
        pm, pb = p[..., :T], p[..., T:]
        o = torch.einsum("bnhjt,btd->bnjhd", pm, mkv) + torch.einsum("bnhjk,bnkd->bnjhd", pb, kv)
        o = bfr(o / den.permute(0, 1, 3, 2)[..., None], self.exact)
        return self.out_proj(L, o, qpos)

    def main_x(self, main_hidden):
        m0, a = self.mtp[0], self.a
        return self.rms(m0.main_proj(main_hidden), m0.main_norm.weight)

    def dspark_forward(self, main_hidden, ids, anchors, draft_prev):
        """Drafts for anchors (positions sp > 0) of each sequence, in parallel.
        main_hidden [B, T, nt*dim] of the frozen backbone; ids [B, T];
        anchors [B, N] positions sp (sp + 1 < T is the sampled token's position);
        draft_prev [B, N, blk] the Markov inputs: out_ids[0..blk-1] (token, drafts...).
        -> logits [B, N, blk, V] (with the Markov bias), confidence [B, N, blk]."""
        a = self.a
        blk, win = a.dspark_block_size, a.window_size
        B, T = ids.shape
        N = anchors.shape[1]
        dev = ids.device
        mx = self.main_x(main_hidden)  # [B, T, dim]
        tpos = torch.arange(T, device=dev)
        bid = torch.full((B, N, blk), a.dspark_noise_token_id, dtype=torch.long, device=dev)
        bid[..., 0] = torch.gather(ids, 1, anchors + 1)
        W = self.emb(self.embed.weight)
        h = W[bid][..., None, :].expand(B, N, blk, a.hc_mult, a.dim).float()
        pre_mix = torch.zeros(B, N, blk, a.hc_mult, device=dev)
        pre_mix[..., 0] = 1
        qpos = anchors[..., None] + 1 + torch.arange(blk, device=dev)  # [B, N, blk]
        # main keys visible to anchor sp: positions sp-win+1..sp
        ctx = (tpos[None, None, :] <= anchors[..., None]) & (tpos[None, None, :] > anchors[..., None] - win)
        for L in self.mtp:
            h, pre_mix = self.block(L, h, pre_mix, lambda x, L=L: self.draft_attention(L, x, mx, qpos, ctx))
        last = self.mtp[-1]
        xr = hc_pre(h, pre_mix)
        if self.qat:
            xr = fq_bf16(xr)
        logits = F.linear(self.rms(xr, last.norm.weight), self.emb(self.head.weight).float())
        e = self.emb(last.markov_head.embed.weight)[draft_prev]  # [B, N, blk, r]
        logits = logits.float() + F.linear(e.float(), last.markov_head.head.weight.float())
        conf = F.linear(torch.cat([xr.float(), e.float()], -1), last.confidence_head.proj.w().float())[..., 0]
        return logits, conf


def _fp8_rows(t):
    """FP8 e4m3 with a power-of-two scale per 1x32 block (the engram table's storage)."""
    if not _HAS_F8:
        return _np_apply(t, lambda a: nx.fp8_act_sim(a, 32))
    X = _xp(t.device)
    b = t.float().reshape(t.shape[0], -1, 32)
    amax = b.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    s = X._pow2_ceil(amax * (1.0 / 448.0))
    return ((b / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(t.shape)


def topk_lowest_ties(x, k):
    """The k largest of the last axis, ties to the lower index (the oracle's rule;
    a stable descending sort). -> (values, indices)."""
    v, i = torch.sort(x, dim=-1, descending=True, stable=True)
    return v[..., :k], i[..., :k]


def sink_softmax(s, sink, exact):
    """Softmax over the last axis of scores s [..., H, q, K] (-inf = masked) with
    the per-head sink [H, 1] in the denominator, as the reference kernel: ->
    (un-normalised probabilities exp(s - max), rounded to bf16 in exact mode,
    and the denominator [..., H, q]); o = (p @ values) / den."""
    m = s.amax(-1).clamp_min(-1e30)
    p = torch.exp(s - m[..., None])
    den = p.sum(-1) + torch.exp(sink - m)
    return bfr(p, exact), den


def candidate_mask(score, clen, topk_blocks, bsz):
    """The candidate source's kept blocks (select_candidate_blocks of the oracle):
    the best topk_blocks blocks by max score, the query's newest block pinned in."""
    B, T, G = score.shape
    nb = -(-G // bsz)
    pad = nb * bsz - G
    sp = F.pad(score, (0, pad), value=float("-inf")) if pad else score
    bs = sp.reshape(B, T, nb, bsz).amax(-1)
    last = (clen - 1).div(bsz, rounding_mode="floor")
    pin = torch.arange(nb, device=score.device)[None, :] == last[:, None]
    bs = torch.where(pin[None], torch.full_like(bs, float("inf")), bs)
    k = min(topk_blocks, nb)
    vals, ind = topk_lowest_ties(bs, k)
    keep = torch.zeros(B, T, nb, dtype=torch.bool, device=score.device)
    keep.scatter_(-1, ind, vals > float("-inf"))
    return keep.repeat_interleave(bsz, -1)[..., :G]
