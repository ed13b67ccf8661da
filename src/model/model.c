/* Weight binding: every tensor the forward pass reads, found by name in the
 * checkpoint and checked for dtype and shape (see model.h). */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/checkpoint.h"
#include "model/manifest.h"
#include "num/num.h"

/* snprintf without the truncation warning: names are short and a truncated
 * one simply fails to bind, with a message. */
static void name_of(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void name_of(char *dst, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

static void *own(tide_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *q = calloc(1, bytes ? bytes : 1);
    if (q) m->owned[m->n_owned++] = q;
    return q;
}

/* A vector or matrix of F32 or BF16 values copied into an owned f32 array. */
static int bind_f32(tide_model *m, const char *name, int64_t n0, int64_t n1, float **out,
                    tide_status *st) {
    const tide_tensor *t = tide_st_find(m->ck, name);
    if (!t) return tide_fail(st, TIDE_ERR_MISSING, "tensor %s is missing from the checkpoint", name);
    int64_t want = n1 > 0 ? n0 * n1 : n0;
    int64_t shape[2] = {n0, n1};
    int ndim = n1 > 0 ? 2 : 1;
    if ((t->dtype != TIDE_DT_F32 && t->dtype != TIDE_DT_BF16) || t->ndim != ndim || t->shape[0] != n0 ||
        (ndim == 2 && t->shape[1] != n1)) {
        char a[64], b[64];
        return tide_fail(st, TIDE_ERR_FORMAT, "tensor %s in %s: expected F32 or BF16 %s, found %s %s", name,
                         t->file, tide_shape_str(ndim, shape, a, sizeof a), tide_dtype_name(t->dtype),
                         tide_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    float *f = own(m, (size_t)want * sizeof(float));
    if (!f) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory binding %s", name);
    const uint8_t *d = t->data;
    for (int64_t i = 0; i < want; i++) {
        if (t->dtype == TIDE_DT_F32) {
            memcpy(&f[i], d + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, d + 2 * i, 2);
            f[i] = tide_bf16_to_f32(h);
        }
    }
    *out = f;
    return 0;
}

/* A linear layer "<prefix>.weight" (+ ".scale" when quantised) of logical
 * shape [out][in]; `allow` is a bit set of tide_wtype values accepted. */
static int bind_lin(tide_model *m, const char *prefix, int64_t out, int64_t in, unsigned allow,
                    tide_weight *w, tide_status *st) {
    char name[256], sname[256];
    name_of(name, sizeof name, "%s.weight", prefix);
    name_of(sname, sizeof sname, "%s.scale", prefix);
    const tide_tensor *t = tide_st_find(m->ck, name);
    if (!t) return tide_fail(st, TIDE_ERR_MISSING, "tensor %s is missing from the checkpoint", name);
    int64_t shape[2] = {out, in};
    memset(w, 0, sizeof *w);
    w->out = out;
    w->in = in;
    switch (t->dtype) {
    case TIDE_DT_F32: w->type = TIDE_W_F32; break;
    case TIDE_DT_BF16: w->type = TIDE_W_BF16; break;
    case TIDE_DT_F8_E4M3: w->type = TIDE_W_FP8; break;
    case TIDE_DT_F4: w->type = TIDE_W_FP4; break;
    default:
        return tide_fail(st, TIDE_ERR_FORMAT, "tensor %s: dtype %s is not a linear weight", name,
                         tide_dtype_name(t->dtype));
    }
    if (!(allow & (1u << w->type)))
        return tide_fail(st, TIDE_ERR_FORMAT, "tensor %s: dtype %s not expected here", name,
                         tide_dtype_name(t->dtype));
    if (tide_st_expect(m->ck, name, t->dtype, 2, shape, &t, st) != 0) return -1;
    w->data = t->data;
    if (w->type == TIDE_W_FP8 || w->type == TIDE_W_FP4) {
        if (in % 32 != 0)
            return tide_fail(st, TIDE_ERR_FORMAT, "tensor %s: in features %lld not a multiple of 32",
                             name, (long long)in);
        int64_t sshape[2] = {w->type == TIDE_W_FP8 ? (out + 31) / 32 : out, in / 32};
        const tide_tensor *s;
        if (tide_st_expect(m->ck, sname, TIDE_DT_F8_E8M0, 2, sshape, &s, st) != 0) return -1;
        w->scale = s->data;
    }
    return 0;
}

#define A_F32 (1u << TIDE_W_F32)
#define A_BF16 (1u << TIDE_W_BF16)
#define A_FP8 (1u << TIDE_W_FP8)
#define A_FP4 (1u << TIDE_W_FP4)
#define A_DENSE (A_F32 | A_BF16)
#define A_QUANT (A_FP8 | A_BF16 | A_F32)

/* RoPE frequencies exactly as the reference's precompute_freqs_cis computes
 * them in torch float32 (docs/model.md, "RoPE"): every step of the formula is
 * one f32 operation, in the reference's order --
 *   e = f32(2i) / f32(dim); p = base ** e; freq = 1 / p;
 *   YaRN: ramp = clamp((f32(i) - low) / f32(max(high - low, 1e-3)), 0, 1),
 *         smooth = 1 - ramp, freq = (freq / factor) * (1 - smooth) + freq * smooth
 * -- and only the power is a transcendental: it is evaluated in double by
 * the C library's pow and rounded once to f32 (the correctly rounded value,
 * which is what torch's f32 pow returns for these exponents; test_ops_ref
 * checks the margin to the f32 rounding midpoints). An earlier rule
 * evaluated the whole formula in double and rounded once: that differs from
 * the reference by one f32 ulp in a third of the frequencies, and on a
 * trained model one ulp of a rotation flips bf16 roundings that fp8
 * quantisation then amplifies. tools/ref/model.py rope_inv_freq computes the
 * same steps. */
void tide_rope_freqs(int dim, int64_t original_len, double base, double factor, double beta_fast,
                     double beta_slow, float *freq) {
    int nf = dim / 2;
    float low = 0, span = 1;
    if (original_len > 0) {
        double lo_d = dim * log((double)original_len / (beta_fast * 2 * M_PI)) / (2 * log(base));
        double hi_d = dim * log((double)original_len / (beta_slow * 2 * M_PI)) / (2 * log(base));
        double lo = floor(lo_d) > 0 ? floor(lo_d) : 0;
        double high = ceil(hi_d) < dim - 1 ? ceil(hi_d) : dim - 1;
        low = (float)lo;
        span = (float)(high - lo > 1e-3 ? high - lo : 1e-3);
    }
    for (int i = 0; i < nf; i++) {
        float e = (float)(2 * i) / (float)dim;
        float p = (float)pow(base, (double)e);
        float f = 1.0f / p;
        if (original_len > 0) {
            float ramp = ((float)i - low) / span;
            ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
            float smooth = 1.0f - ramp;
            float a = f / (float)factor, b = 1.0f - smooth;
            float t1 = a * b, t2 = f * smooth;
            f = t1 + t2;
        }
        freq[i] = f;
    }
}

/* angle = f32(pos) * freq in f32 (the reference's f32 outer product); cos
 * and sin of that angle in double by the C library, rounded once to f32
 * (the oracle's rope_cos_sin calls the same cos/sin). torch.polar takes the
 * f32 cos/sin of the angle; on the positions of the tide-mini dumps both
 * give the same rotations. */
void tide_rope_cs(const float *freq, int n_freq, int64_t pos, float *cs) {
    for (int f = 0; f < n_freq; f++) {
        float a = (float)pos * freq[f];
        cs[2 * f] = (float)cos((double)a);
        cs[2 * f + 1] = (float)sin((double)a);
    }
}

static int bind_attn(tide_model *m, const char *p, const tide_layer_role *r, tide_attn_weights *a,
                     tide_status *st) {
    const tide_text_config *c = &m->cfg.text;
    int64_t D = c->hidden_size, H = c->num_attention_heads, Dh = c->head_dim;
    int64_t G = c->o_groups, R = c->o_lora_rank, QL = c->q_lora_rank;
    char n[256];
#define LIN(suffix, o, i, allow, w)                                   \
    do {                                                              \
        name_of(n, sizeof n, "%s.%s", p, suffix);                    \
        if (bind_lin(m, n, o, i, allow, w, st) != 0) return -1;       \
    } while (0)
#define VEC(suffix, len, dst)                                         \
    do {                                                              \
        name_of(n, sizeof n, "%s.%s", p, suffix);                    \
        if (bind_f32(m, n, len, 0, dst, st) != 0) return -1;          \
    } while (0)
    LIN("wq_a", QL, D, A_QUANT, &a->wq_a);
    VEC("q_norm.weight", QL, &a->q_norm);
    LIN("wq_b", H * Dh, QL, A_QUANT, &a->wq_b);
    LIN("wkv", Dh, D, A_QUANT, &a->wkv);
    VEC("kv_norm.weight", Dh, &a->kv_norm);
    LIN("wo_a", G * R, H * Dh / G, A_DENSE, &a->wo_a);
    LIN("wo_b", D, G * R, A_QUANT, &a->wo_b);
    VEC("attn_sink", H, &a->sink);
    if (r->is_kv_source) {
        a->has_compressor = 1;
        LIN("compressor.wkv", Dh, D, A_DENSE, &a->cmp_wkv);
        if (r->compress_ratio > 1) LIN("compressor.wgate", Dh, D, A_DENSE, &a->cmp_wgate);
        VEC("compressor.norm.weight", Dh, &a->cmp_norm);
    }
    if (r->is_index_source) {
        int64_t IH = c->index_n_heads, ID = c->index_head_dim;
        a->has_indexer = 1;
        LIN("indexer.wq_b", IH * ID, QL, A_QUANT, &a->idx_wq_b);
        LIN("indexer.weights_proj", IH, D, A_DENSE, &a->idx_wproj);
        if (r->indexer_owns_keys) {
            LIN("indexer.wk", ID, Dh, A_DENSE, &a->idx_wk);
            VEC("indexer.k_norm.weight", ID, &a->idx_k_norm);
        }
    }
#undef LIN
#undef VEC
    return 0;
}

static int bind_ffn(tide_model *m, const char *p, const tide_layer_role *r, tide_ffn_weights *f,
                    tide_status *st) {
    const tide_text_config *c = &m->cfg.text;
    int64_t D = c->hidden_size, I = c->moe_intermediate_size;
    char n[256];
    f->n_experts = r->n_routed_experts;
    f->top_k = r->num_experts_per_tok;
    name_of(n, sizeof n, "%s.gate", p);
    if (bind_lin(m, n, f->n_experts, D, A_DENSE, &f->gate, st) != 0) return -1;
    name_of(n, sizeof n, "%s.gate.bias", p);
    if (bind_f32(m, n, f->n_experts, 0, &f->bias, st) != 0) return -1;
    if (m->cfg.vision.num_hidden_layers > 0) {
        name_of(n, sizeof n, "%s.gate.bias_vl", p);
        if (bind_f32(m, n, f->n_experts, 0, &f->bias_vl, st) != 0) return -1;
    }
    f->w1 = own(m, (size_t)f->n_experts * sizeof(tide_weight));
    f->w2 = own(m, (size_t)f->n_experts * sizeof(tide_weight));
    f->w3 = own(m, (size_t)f->n_experts * sizeof(tide_weight));
    if (!f->w1 || !f->w2 || !f->w3) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory binding %s", p);
    for (int e = 0; e < f->n_experts; e++) {
        name_of(n, sizeof n, "%s.experts.%d.w1", p, e);
        if (bind_lin(m, n, I, D, A_FP4 | A_QUANT, &f->w1[e], st) != 0) return -1;
        name_of(n, sizeof n, "%s.experts.%d.w2", p, e);
        if (bind_lin(m, n, D, I, A_FP4 | A_QUANT, &f->w2[e], st) != 0) return -1;
        name_of(n, sizeof n, "%s.experts.%d.w3", p, e);
        if (bind_lin(m, n, I, D, A_FP4 | A_QUANT, &f->w3[e], st) != 0) return -1;
    }
    name_of(n, sizeof n, "%s.shared_experts.w1", p);
    if (bind_lin(m, n, I, D, A_QUANT, &f->sw1, st) != 0) return -1;
    name_of(n, sizeof n, "%s.shared_experts.w2", p);
    if (bind_lin(m, n, D, I, A_QUANT, &f->sw2, st) != 0) return -1;
    name_of(n, sizeof n, "%s.shared_experts.w3", p);
    if (bind_lin(m, n, I, D, A_QUANT, &f->sw3, st) != 0) return -1;
    return 0;
}

static int bind_engram(tide_model *m, const char *p, const tide_layer_role *r, tide_layer *L,
                       tide_status *st) {
    const tide_text_config *c = &m->cfg.text;
    const tide_engram_dims *d = &m->engram_dims;
    int64_t rows = c->engram_num_embeddings[r->engram_index];
    char n[256];
    const tide_tensor *t;
    int64_t s1[2] = {rows, d->head_dim}, s2[2] = {rows, d->head_dim / 32};
    name_of(n, sizeof n, "%s.engram.embed.weight", p);
    if (tide_st_expect(m->ck, n, TIDE_DT_F8_E4M3, 2, s1, &t, st) != 0) return -1;
    L->engram.embed = t->data;
    name_of(n, sizeof n, "%s.engram.embed.scale", p);
    if (tide_st_expect(m->ck, n, TIDE_DT_F8_E8M0, 2, s2, &t, st) != 0) return -1;
    L->engram.embed_scale = t->data;
    L->engram.num_embeddings = rows;
    tide_weight w;
    name_of(n, sizeof n, "%s.engram.wkv", p);
    if (bind_lin(m, n, (int64_t)(d->hc_mult + 1) * d->dim, (int64_t)d->n_cols * d->head_dim, A_FP8,
                 &w, st) != 0)
        return -1;
    L->engram.wkv = w.data;
    L->engram.wkv_scale = w.scale;
    float *q, *k;
    name_of(n, sizeof n, "%s.engram.q_weight", p);
    if (bind_f32(m, n, d->hc_mult, d->dim, &q, st) != 0) return -1;
    name_of(n, sizeof n, "%s.engram.k_weight", p);
    if (bind_f32(m, n, d->hc_mult, d->dim, &k, st) != 0) return -1;
    L->engram.q_weight = q;
    L->engram.k_weight = k;
    L->engram_qk = own(m, (size_t)d->hc_mult * (size_t)d->dim * sizeof(float));
    if (!L->engram_qk) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < (int64_t)d->hc_mult * d->dim; i++) L->engram_qk[i] = q[i] * k[i];
    L->has_engram = 1;
    return 0;
}

static int bind_layer(tide_model *m, int i, tide_status *st) {
    const tide_text_config *c = &m->cfg.text;
    tide_layer *L = &m->layers[i];
    const tide_layer_role *r = tide_config_role(&m->cfg, i);
    L->role = r;
    char p[64], n[256];
    if (r->is_dspark) name_of(p, sizeof p, "mtp.%d", r->dspark_stage);
    else name_of(p, sizeof p, "layers.%d", i);
    int64_t D = c->hidden_size, hc = c->hc_mult, nm = (2 + hc) * hc;
    name_of(n, sizeof n, "%s.attn", p);
    if (bind_attn(m, n, r, &L->attn, st) != 0) return -1;
    name_of(n, sizeof n, "%s.ffn", p);
    if (bind_ffn(m, n, r, &L->ffn, st) != 0) return -1;
#define VEC(suffix, n0, n1, dst)                                      \
    do {                                                              \
        name_of(n, sizeof n, "%s.%s", p, suffix);                    \
        if (bind_f32(m, n, n0, n1, dst, st) != 0) return -1;          \
    } while (0)
    VEC("attn_norm.weight", D, 0, &L->attn_norm);
    VEC("ffn_norm.weight", D, 0, &L->ffn_norm);
    VEC("hc_attn_fn", nm, hc * D, &L->hc_attn_fn);
    VEC("hc_attn_base", nm, 0, &L->hc_attn_base);
    VEC("hc_attn_scale", 3, 0, &L->hc_attn_scale);
    VEC("hc_ffn_fn", nm, hc * D, &L->hc_ffn_fn);
    VEC("hc_ffn_base", nm, 0, &L->hc_ffn_base);
    VEC("hc_ffn_scale", 3, 0, &L->hc_ffn_scale);
    if (r->is_dspark && r->dspark_stage == 0) {
        name_of(n, sizeof n, "%s.main_proj", p);
        if (bind_lin(m, n, D, D * c->n_dspark_target_layer_ids, A_QUANT, &L->main_proj, st) != 0)
            return -1;
        VEC("main_norm.weight", D, 0, &L->main_norm);
    }
    if (r->is_dspark && r->dspark_stage == c->num_nextn_predict_layers - 1) {
        int64_t MR = c->dspark_markov_rank;
        VEC("norm.weight", D, 0, &L->final_norm);
        name_of(n, sizeof n, "%s.markov_head.embed", p);
        if (bind_lin(m, n, c->vocab_size, MR, A_DENSE, &L->markov_embed, st) != 0) return -1;
        name_of(n, sizeof n, "%s.markov_head.head", p);
        if (bind_lin(m, n, c->vocab_size, MR, A_DENSE, &L->markov_head, st) != 0) return -1;
        name_of(n, sizeof n, "%s.confidence_head.proj", p);
        if (bind_lin(m, n, 1, D + MR, A_DENSE, &L->conf_proj, st) != 0) return -1;
    }
#undef VEC
    if (r->has_engram && bind_engram(m, p, r, L, st) != 0) return -1;
    int rd = (int)c->qk_rope_head_dim;
    L->rope_freq = own(m, (size_t)(rd / 2) * sizeof(float));
    if (!L->rope_freq) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    tide_rope_freqs(rd, r->yarn ? c->rope_scaling.original_max_position_embeddings : 0,
                    r->rope_theta, c->rope_scaling.factor, c->rope_scaling.beta_fast,
                    c->rope_scaling.beta_slow, L->rope_freq);
    return 0;
}

static int build_engram(tide_model *m, const char *dir, tide_status *st) {
    if (tide_ckpt_engram(dir, &m->cfg, &m->engram, &m->has_engram, NULL, st) != 0) return -1;
    m->engram_dims = tide_engram_dims_of(&m->cfg);
    return 0;
}

/* Steps 1-4 of model/checkpoint.h, as tide inspect runs them. */
static int open_checked(tide_model *m, const char *dir, tide_status *st) {
    if (tide_ckpt_check_dir(dir, st) != 0 || tide_config_load(dir, &m->cfg, st) != 0) return -1;
    const tide_text_config *c = &m->cfg.text;
    if (m->cfg.present_layers < c->num_hidden_layers)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                         "%s holds only %d of %lld layers (written with --layers): it cannot run", dir,
                         m->cfg.present_layers, (long long)c->num_hidden_layers);
    if (tide_st_open(dir, &m->ck, st) != 0) return -1;
    tide_manifest man;
    if (tide_manifest_build(&m->cfg, &man, st) != 0) return -1;
    int rc = tide_manifest_verify(&man, m->ck, NULL, NULL, NULL, st);
    tide_manifest_free(&man);
    return rc;
}

int tide_model_load(const char *dir, tide_model **out, tide_status *st) {
    *out = NULL;
    tide_model *m = calloc(1, sizeof *m);
    if (!m) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    if (open_checked(m, dir, st) != 0) goto fail;
    const tide_text_config *c = &m->cfg.text;
    m->n_backbone = (int)c->num_hidden_layers;
    m->n_layers = m->cfg.n_layers;
    m->has_dspark = c->num_nextn_predict_layers > 0 && c->dspark_block_size > 0;
    if (!m->has_dspark) m->n_layers = m->n_backbone;
    for (int i = 0; i < TIDE_MAX_LAYERS; i++) m->kv_src_slot[i] = -1;
    for (int i = 0; i < m->n_backbone; i++)
        if (m->cfg.roles[i].is_kv_source) {
            m->kv_src_slot[i] = m->n_kv_src;
            m->kv_src_layer[m->n_kv_src++] = i;
        }
    if (c->n_engram_layer_ids > 0 && build_engram(m, dir, st) != 0) goto fail;
    const tide_tensor *t;
    int64_t es[2] = {c->vocab_size, c->hidden_size};
    if (bind_lin(m, "embed", es[0], es[1], A_DENSE, &m->embed, st) != 0) goto fail;
    if (bind_lin(m, "head", es[0], es[1], A_DENSE, &m->head, st) != 0) goto fail;
    (void)t;
    if (bind_f32(m, "norm.weight", c->hidden_size, 0, &m->norm, st) != 0) goto fail;
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers) {
        tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < m->n_layers; i++)
        if (bind_layer(m, i, st) != 0) goto fail;
    *out = m;
    return 0;
fail:
    tide_fail_ctx(st, "loading model %s", dir);
    tide_model_free(m);
    return -1;
}

void tide_model_free(tide_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    if (m->has_engram) tide_engram_tables_free(&m->engram);
    tide_st_close(m->ck);
    free(m);
}
