/* The vision tower and aligner (vision.h; semantics and citations in
 * docs/vision.md). One image at a time, one full bidirectional sequence of
 * n_h * n_w patches. */
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"

#define VISION_NORM_EPS 1e-6 /* the tower's RMSNorm default, not the text model's 1e-20 */

/* ---- binding ---- */

typedef struct binder {
    const tide_st *ck;
    tide_status *st;
    float *next; /* the next free float of v->owned */
} binder;

static int view(binder *b, const char *name, int64_t out, int64_t in, tide_weight *w) {
    const tide_tensor *t;
    int64_t shape[2] = {out, in};
    if (tide_st_expect(b->ck, name, TIDE_DT_BF16, 2, shape, &t, b->st)) return -1;
    *w = (tide_weight){.type = TIDE_W_BF16, .out = out, .in = in, .data = t->data};
    return 0;
}

/* A BF16 vector, widened into the owned block. */
static int vec(binder *b, const char *name, int64_t n, const float **out) {
    const tide_tensor *t;
    if (tide_st_expect(b->ck, name, TIDE_DT_BF16, 1, &n, &t, b->st)) return -1;
    const uint8_t *s = t->data;
    float *d = b->next;
    for (int64_t i = 0; i < n; i++) d[i] = tide_bf16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
    b->next += n;
    *out = d;
    return 0;
}

int tide_vision_bind(tide_vision *v, const tide_config *cfg, const tide_st *ck, tide_status *st) {
    memset(v, 0, sizeof *v);
    const tide_vision_config *c = &cfg->vision;
    if (c->num_hidden_layers <= 0)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "this model has no vision tower (vision_config.num_hidden_layers = 0)");
    v->cfg = *c;
    v->text_dim = cfg->text.hidden_size;
    int64_t Dv = c->hidden_size, D = v->text_dim, L = c->num_hidden_layers, p = c->patch_size;
    int64_t r = c->downsample_ratio, I = c->intermediate_size;
    size_t nfloat = (size_t)(Dv * 2 + L * (Dv * 2 + 3 * Dv + Dv) + D * 5);
    v->owned = malloc(nfloat * sizeof(float));
    v->blocks = calloc((size_t)L, sizeof *v->blocks);
    if (!v->owned || !v->blocks) {
        tide_vision_free(v);
        return tide_fail(st, TIDE_ERR_NOMEM, "vision: out of memory binding %lld blocks", (long long)L);
    }
    binder b = {.ck = ck, .st = st, .next = v->owned};
    char n[96];
    int rc = view(&b, "vision.patch_embed.proj.weight", Dv, 3 * p * p, &v->patch) ||
             vec(&b, "vision.patch_embed.proj.bias", Dv, &v->patch_b) || vec(&b, "vision.norm.weight", Dv, &v->norm);
    for (int64_t l = 0; l < L && !rc; l++) {
        tide_vision_block *k = &v->blocks[l];
#define NAME(suffix) (snprintf(n, sizeof n, "vision.blocks.%lld." suffix, (long long)l), n)
        rc = vec(&b, NAME("norm1.weight"), Dv, &k->norm1) || vec(&b, NAME("norm2.weight"), Dv, &k->norm2) ||
             view(&b, NAME("attn.wqkv.weight"), 3 * Dv, Dv, &k->wqkv) ||
             vec(&b, NAME("attn.wqkv.bias"), 3 * Dv, &k->bqkv) || view(&b, NAME("attn.wo.weight"), Dv, Dv, &k->wo) ||
             vec(&b, NAME("attn.wo.bias"), Dv, &k->bo) || view(&b, NAME("mlp.w1.weight"), 2 * I, Dv, &k->w1) ||
             view(&b, NAME("mlp.w2.weight"), Dv, I, &k->w2);
#undef NAME
    }
    rc = rc || view(&b, "aligner.w1.weight", D, Dv * r * r, &v->a1) || vec(&b, "aligner.w1.bias", D, &v->a1_b) ||
         view(&b, "aligner.w2.weight", D, D, &v->a2) || vec(&b, "aligner.w2.bias", D, &v->a2_b) ||
         vec(&b, "image_start", D, &v->image_start) || vec(&b, "image_end", D, &v->image_end) ||
         vec(&b, "image_newline", D, &v->image_newline);
    if (rc) {
        tide_vision_free(v);
        return tide_fail_ctx(st, "vision tower");
    }
    return 0;
}

void tide_vision_free(tide_vision *v) {
    if (!v) return;
    free(v->owned);
    free(v->blocks);
    memset(v, 0, sizeof *v);
}

/* ---- elementwise pieces ---- */

/* y = bf16(linear(x) + bias): the reference's BF16 nn.Linear with a bias, the
 * bias added to the f32 accumulation before the one rounding. */
static void linear_bias(const tide_ops *ops, tide_pool *pool, const tide_weight *w, const float *bias,
                        const float *x, int64_t rows, float *y) {
    ops->linear(ops, pool, w, x, rows, y, 0);
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * w->out;
        for (int64_t o = 0; o < w->out; o++) yr[o] = tide_round_bf16(yr[o] + (bias ? bias[o] : 0.0f));
    }
}

/* cos/sin of the 2-D RoPE angles: per patch (row-major), rope_dim = hd/2
 * angles, the first half driven by the patch row, the second by the column,
 * with inv_freq[j] = 1 / theta^(2j / rope_dim) in f32. cs[(n*rope_dim + i)*2]. */
static void rope_table(int64_t n_h, int64_t n_w, int64_t rope_dim, double theta, float *cs) {
    int64_t nf = rope_dim / 2;
    for (int64_t y = 0; y < n_h; y++)
        for (int64_t x = 0; x < n_w; x++) {
            float *c = cs + (y * n_w + x) * rope_dim * 2;
            for (int64_t i = 0; i < rope_dim; i++) {
                int64_t j = i < nf ? i : i - nf;
                float inv = 1.0f / powf((float)theta, (float)(2 * j) / (float)rope_dim);
                float a = (float)(i < nf ? y : x) * inv;
                c[2 * i] = cosf(a);
                c[2 * i + 1] = sinf(a);
            }
        }
}

/* Rotates each head of q (or k) in place: the two halves of the head are
 * paired (element i with i + hd/2), in f32, rounded to BF16. */
static void rope_apply(float *x, int64_t rows, int64_t stride, int64_t heads, int64_t hd, const float *cs) {
    int64_t half = hd / 2;
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cs + r * half * 2;
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + r * stride + h * hd;
            for (int64_t i = 0; i < half; i++) {
                float a = v[i], b = v[i + half], co = c[2 * i], si = c[2 * i + 1];
                v[i] = tide_round_bf16(a * co - b * si);
                v[i + half] = tide_round_bf16(b * co + a * si);
            }
        }
    }
}

/* Full attention of one head: scores and softmax in f32 with the max
 * subtracted; the probabilities rounded to BF16 for the value product (as
 * the flash kernels do), the denominator summed from the f32 ones. */
typedef struct attn_job {
    const float *qkv; /* [N][3 Dv] */
    float *out;       /* [N][Dv] */
    int64_t n, dv, hd;
    float scale;
    float *scratch;   /* per thread: n + hd floats */
} attn_job;

static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *j = arg;
    int64_t h = task % (j->dv / j->hd), q0 = task / (j->dv / j->hd) * 64, q1 = q0 + 64 < j->n ? q0 + 64 : j->n;
    float *p = j->scratch + (size_t)thread * (size_t)(j->n + j->hd), *acc = p + j->n;
    int64_t st = 3 * j->dv;
    for (int64_t i = q0; i < q1; i++) {
        const float *q = j->qkv + i * st + h * j->hd;
        float mx = -INFINITY;
        for (int64_t t = 0; t < j->n; t++) {
            const float *k = j->qkv + t * st + j->dv + h * j->hd;
            float s = 0.0f;
            for (int64_t d = 0; d < j->hd; d++) s += q[d] * k[d];
            p[t] = s * j->scale;
            if (p[t] > mx) mx = p[t];
        }
        float sum = 0.0f;
        memset(acc, 0, (size_t)j->hd * sizeof(float));
        for (int64_t t = 0; t < j->n; t++) {
            float e = expf(p[t] - mx);
            sum += e;
            float eb = tide_round_bf16(e);
            const float *vv = j->qkv + t * st + 2 * j->dv + h * j->hd;
            for (int64_t d = 0; d < j->hd; d++) acc[d] += eb * vv[d];
        }
        float *o = j->out + i * j->dv + h * j->hd;
        for (int64_t d = 0; d < j->hd; d++) o[d] = tide_round_bf16(acc[d] / sum);
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* ---- the tower ---- */

static int check_grid(const tide_vision *v, int64_t n_h, int64_t n_w, tide_status *st) {
    if (v->cfg.num_hidden_layers <= 0)
        return tide_fail(st, TIDE_ERR_INVALID, "vision: the tower is not bound");
    if (n_h < 1 || n_w < 1 || n_h > 4096 || n_w > 4096 || n_h * n_w > (1 << 20))
        return tide_fail(st, TIDE_ERR_INVALID, "vision: a %lld x %lld patch grid is outside 1..4096 per side and 2^20 patches",
                         (long long)n_h, (long long)n_w);
    return 0;
}

int tide_vision_tower(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                      int64_t n_h, int64_t n_w, float *out, tide_status *st) {
    if (check_grid(v, n_h, n_w, st)) return -1;
    const tide_vision_config *c = &v->cfg;
    int64_t N = n_h * n_w, Dv = c->hidden_size, H = c->num_attention_heads, hd = Dv / H, I = c->intermediate_size;
    int nth = tide_pool_size(pool);
    size_t wide = (size_t)(3 * Dv > 2 * I ? 3 * Dv : 2 * I);
    float *t = malloc((size_t)N * (size_t)Dv * sizeof(float));
    float *big = malloc((size_t)N * wide * sizeof(float));
    float *o = malloc((size_t)N * (size_t)(Dv > I ? Dv : I) * sizeof(float));
    float *cs = malloc((size_t)N * (size_t)hd * sizeof(float));
    float *scratch = malloc((size_t)nth * (size_t)(N + hd) * sizeof(float));
    if (!t || !big || !o || !cs || !scratch) {
        free(t), free(big), free(o), free(cs), free(scratch);
        return tide_fail(st, TIDE_ERR_NOMEM, "vision: out of memory for %lld patches", (long long)N);
    }
    float *x = out; /* the residual stream lives in the output */
    linear_bias(ops, pool, &v->patch, v->patch_b, patches, N, x);
    rope_table(n_h, n_w, hd / 2, c->rope_theta, cs);
    attn_job job = {.qkv = big, .out = o, .n = N, .dv = Dv, .hd = hd, .scale = 1.0f / sqrtf((float)hd),
                    .scratch = scratch};
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const tide_vision_block *k = &v->blocks[l];
        /* x = x + wo(attn(rope(wqkv(norm1(x))))) */
        ops->rmsnorm(ops, pool, x, N, Dv, k->norm1, VISION_NORM_EPS, t);
        linear_bias(ops, pool, &k->wqkv, k->bqkv, t, N, big);
        rope_apply(big, N, 3 * Dv, H, hd, cs);
        rope_apply(big + Dv, N, 3 * Dv, H, hd, cs);
        tide_pool_for(pool, H * ((N + 63) / 64), attn_task, &job);
        linear_bias(ops, pool, &k->wo, k->bo, o, N, t);
        for (int64_t i = 0; i < N * Dv; i++) x[i] = tide_round_bf16(x[i] + t[i]);
        /* x = x + w2(silu(gate) * up), [gate | up] = w1(norm2(x)) */
        ops->rmsnorm(ops, pool, x, N, Dv, k->norm2, VISION_NORM_EPS, t);
        ops->linear(ops, pool, &k->w1, t, N, big, TIDE_LIN_BF16_OUT);
        for (int64_t r = 0; r < N; r++) {
            const float *g = big + r * 2 * I, *u = g + I;
            float *h = o + r * I;
            for (int64_t i = 0; i < I; i++) h[i] = tide_round_bf16(tide_round_bf16(silu(g[i])) * u[i]);
        }
        ops->linear(ops, pool, &k->w2, o, N, t, TIDE_LIN_BF16_OUT);
        for (int64_t i = 0; i < N * Dv; i++) x[i] = tide_round_bf16(x[i] + t[i]);
    }
    ops->rmsnorm(ops, pool, x, N, Dv, v->norm, VISION_NORM_EPS, x);
    free(t), free(big), free(o), free(cs), free(scratch);
    return 0;
}

int tide_vision_align(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *feat,
                      int64_t n_h, int64_t n_w, float *out, tide_status *st) {
    if (check_grid(v, n_h, n_w, st)) return -1;
    int64_t r = v->cfg.downsample_ratio, Dv = v->cfg.hidden_size, D = v->text_dim;
    int64_t gh = (n_h + r - 1) / r, gw = (n_w + r - 1) / r, L = gh * gw, in = Dv * r * r;
    float *cell = calloc((size_t)L * (size_t)in, sizeof(float));
    float *mid = malloc((size_t)L * (size_t)D * sizeof(float));
    if (!cell || !mid) {
        free(cell), free(mid);
        return tide_fail(st, TIDE_ERR_NOMEM, "vision: out of memory for %lld aligner rows", (long long)L);
    }
    /* unfold: cell (by, bx) holds feature c of patch (by*r + kh, bx*r + kw) at
     * c*r*r + kh*r + kw; patches past the grid stay zero (the padding) */
    for (int64_t y = 0; y < n_h; y++)
        for (int64_t x = 0; x < n_w; x++) {
            float *dst = cell + ((y / r) * gw + x / r) * in + (y % r) * r + (x % r);
            const float *src = feat + (y * n_w + x) * Dv;
            for (int64_t c = 0; c < Dv; c++) dst[c * r * r] = src[c];
        }
    linear_bias(ops, pool, &v->a1, v->a1_b, cell, L, mid);
    for (int64_t i = 0; i < L * D; i++)
        mid[i] = tide_round_bf16((float)(0.5 * mid[i] * (1.0 + erf(mid[i] / sqrt(2.0)))));
    linear_bias(ops, pool, &v->a2, v->a2_b, mid, L, out);
    free(cell), free(mid);
    return 0;
}

int tide_vision_encode(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                       int64_t n_h, int64_t n_w, float *out, tide_status *st) {
    if (check_grid(v, n_h, n_w, st)) return -1;
    float *feat = malloc((size_t)(n_h * n_w) * (size_t)v->cfg.hidden_size * sizeof(float));
    if (!feat) return tide_fail(st, TIDE_ERR_NOMEM, "vision: out of memory for %lld patches", (long long)(n_h * n_w));
    int rc = tide_vision_tower(v, ops, pool, patches, n_h, n_w, feat, st) ||
             tide_vision_align(v, ops, pool, feat, n_h, n_w, out, st);
    free(feat);
    return rc ? -1 : 0;
}

int tide_vision_span_embeds(const tide_vision *v, const tide_ops *ops, tide_pool *pool, const float *patches,
                            const tide_image_plan *p, float *out, tide_status *st) {
    int64_t r = v->cfg.downsample_ratio, D = v->text_dim;
    if (p->n_llm_h != (p->n_vit_h + r - 1) / r || p->n_llm_w != (p->n_vit_w + r - 1) / r)
        return tide_fail(st, TIDE_ERR_INVALID, "vision: the plan's token grid %lld x %lld is not its patch grid's",
                         (long long)p->n_llm_h, (long long)p->n_llm_w);
    float *rows = malloc((size_t)(p->n_llm_h * p->n_llm_w) * (size_t)D * sizeof(float));
    if (!rows) return tide_fail(st, TIDE_ERR_NOMEM, "vision: out of memory for the image's rows");
    if (tide_vision_encode(v, ops, pool, patches, p->n_vit_h, p->n_vit_w, rows, st)) {
        free(rows);
        return -1;
    }
    size_t row = (size_t)D * sizeof(float);
    float *o = out;
    memcpy(o, v->image_start, row), o += D;
    for (int64_t y = 0; y < p->n_llm_h; y++) {
        memcpy(o, rows + y * p->n_llm_w * D, row * (size_t)p->n_llm_w), o += p->n_llm_w * D;
        memcpy(o, v->image_newline, row), o += D;
    }
    memcpy(o, v->image_end, row);
    free(rows);
    return 0;
}
