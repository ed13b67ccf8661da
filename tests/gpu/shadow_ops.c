/* shadow_ops.h: every op on two tables, compared bit for bit. */
#include "shadow_ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_LINEAR, OP_RMSNORM, OP_ROPE, OP_HC_MIXES, OP_HC_PRE, OP_HC_POST, OP_ATTN, OP_INDEX, OP_TOPK, OP_SWIGLU,
       OP_ENGRAM, OP_ROUTE, OP_POOL, OP_N };
static const char *const op_names[OP_N] = {"linear", "rmsnorm", "rope", "hc_mixes", "hc_pre", "hc_post",
                                           "sparse_attn", "index_scores", "topk_sorted", "swiglu", "engram_mix",
                                           "moe_route", "compress_pool"};
#define SHOW_PER_OP 4

struct shadow_ops {
    tide_ops table;
    const tide_ops *p, *r;
    char label[64];
    pthread_mutex_t mu;
    int64_t calls[OP_N], bad[OP_N];
};

static shadow_ops *me(const tide_ops *self) { return (shadow_ops *)self->ctx; }

static void *xalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "shadow_ops: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

/* Counts differing 4-byte words of a and b; *first = the first one. */
static int64_t ndiff(const void *a, const void *b, int64_t n, int64_t *first) {
    const uint32_t *x = a, *y = b;
    int64_t c = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            if (c++ == 0) *first = i;
        }
    return c;
}

/* Records one call; prints it when it differs (the first few per op).
 * Returns 1 when this mismatch should be described further by the caller. */
static int note(shadow_ops *s, int op, int64_t nd, int64_t n, int64_t first, const float *pv, const float *rv,
                const char *shape) {
    pthread_mutex_lock(&s->mu);
    s->calls[op]++;
    int show = 0;
    if (nd > 0) {
        show = s->bad[op]++ < SHOW_PER_OP;
        if (show)
            fprintf(stderr,
                    "SHADOW|%s|%s call %lld|%s|%lld of %lld outputs differ; first [%lld] primary %.9g ref %.9g\n",
                    s->label, op_names[op], (long long)s->calls[op], shape, (long long)nd, (long long)n,
                    (long long)first, pv ? (double)pv[first] : 0.0, rv ? (double)rv[first] : 0.0);
    }
    pthread_mutex_unlock(&s->mu);
    return show;
}

static void sh_linear(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows,
                      float *y, int flags) {
    shadow_ops *s = me(self);
    int64_t n = rows * w->out, f;
    float *yr = xalloc((size_t)n * 4);
    s->r->linear(s->r, pool, w, x, rows, yr, flags);
    s->p->linear(s->p, pool, w, x, rows, y, flags);
    char sh[96];
    snprintf(sh, sizeof sh, "type %d %lldx%lld rows %lld flags %d", (int)w->type, (long long)w->out,
             (long long)w->in, (long long)rows, flags);
    int64_t nd = ndiff(y, yr, n, &f);
    note(s, OP_LINEAR, nd, n, f, y, yr, sh);
    free(yr);
}

static void sh_rmsnorm(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim,
                       const float *w, double eps, float *y) {
    shadow_ops *s = me(self);
    int64_t n = rows * dim, f;
    float *yr = xalloc((size_t)n * 4);
    s->r->rmsnorm(s->r, pool, x, rows, dim, w, eps, yr);
    s->p->rmsnorm(s->p, pool, x, rows, dim, w, eps, y);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld dim %lld", (long long)rows, (long long)dim);
    { int64_t nd_ = ndiff(y, yr, n, &f);
        note(s, OP_RMSNORM, nd_, n, f, y, yr, sh);
    }
    free(yr);
}

static void sh_rope(const tide_ops *self, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                    int inverse) {
    shadow_ops *s = me(self);
    if (n_vec <= 0) {
        s->p->rope(s->p, x, n_vec, stride, n_freq, cs, inverse);
        return;
    }
    int64_t span = (n_vec - 1) * stride + 2 * n_freq;
    float *xr = xalloc((size_t)span * 4);
    memcpy(xr, x, (size_t)span * 4);
    s->r->rope(s->r, xr, n_vec, stride, n_freq, cs, inverse);
    s->p->rope(s->p, x, n_vec, stride, n_freq, cs, inverse);
    int64_t nd = 0, first = -1, f = 0;
    for (int64_t v = 0; v < n_vec; v++) {
        int64_t d = ndiff(x + v * stride, xr + v * stride, 2 * n_freq, &f);
        if (d && first < 0) first = v * stride + f;
        nd += d;
    }
    char sh[80];
    snprintf(sh, sizeof sh, "n_vec %lld stride %lld n_freq %lld inv %d", (long long)n_vec, (long long)stride,
             (long long)n_freq, inverse);
    note(s, OP_ROPE, nd, n_vec * 2 * n_freq, first < 0 ? 0 : first, x, xr, sh);
    free(xr);
}

static void sh_hc_mixes(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                        const float *fn, const float *scale, const float *base, double norm_eps, int iters,
                        double hc_eps, float *pre, float *post, float *comb) {
    shadow_ops *s = me(self);
    int64_t n1 = rows * hc, n2 = rows * hc * hc, f;
    float *b = xalloc((size_t)(2 * n1 + n2) * 4);
    s->r->hc_mixes(s->r, pool, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, b, b + n1, b + 2 * n1);
    s->p->hc_mixes(s->p, pool, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, pre, post, comb);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld hc %d dim %lld", (long long)rows, hc, (long long)dim);
    int64_t nd = ndiff(pre, b, n1, &f);
    int64_t f2, nd2 = ndiff(post, b + n1, n1, &f2), f3, nd3 = ndiff(comb, b + 2 * n1, n2, &f3);
    if (nd) note(s, OP_HC_MIXES, nd, n1, f, pre, b, "pre");
    else if (nd2) note(s, OP_HC_MIXES, nd2, n1, f2, post, b + n1, "post");
    else note(s, OP_HC_MIXES, nd3, n2, f3, comb, b + 2 * n1, sh);
    free(b);
}

static void sh_hc_pre(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                      float *y) {
    shadow_ops *s = me(self);
    int64_t n = rows * dim, f;
    float *yr = xalloc((size_t)n * 4);
    s->r->hc_pre(s->r, x, rows, hc, dim, pre, yr);
    s->p->hc_pre(s->p, x, rows, hc, dim, pre, y);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld hc %d dim %lld", (long long)rows, hc, (long long)dim);
    { int64_t nd_ = ndiff(y, yr, n, &f);
        note(s, OP_HC_PRE, nd_, n, f, y, yr, sh);
    }
    free(yr);
}

static void sh_hc_post(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                       const float *post, const float *comb, float *out) {
    shadow_ops *s = me(self);
    int64_t n = rows * hc * dim, f;
    float *o = xalloc((size_t)n * 4);
    s->r->hc_post(s->r, y, res, rows, hc, dim, post, comb, o);
    s->p->hc_post(s->p, y, res, rows, hc, dim, post, comb, out);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld hc %d dim %lld", (long long)rows, hc, (long long)dim);
    { int64_t nd_ = ndiff(out, o, n, &f);
        note(s, OP_HC_POST, nd_, n, f, out, o, sh);
    }
    free(o);
}

static void sh_attn(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                    const tide_attn_row *idx, const float *sink, float scale, float *out) {
    shadow_ops *s = me(self);
    int64_t n = rows * heads * dim, f;
    float *o = xalloc((size_t)n * 4);
    s->r->sparse_attn(s->r, pool, q, rows, heads, dim, idx, sink, scale, o);
    s->p->sparse_attn(s->p, pool, q, rows, heads, dim, idx, sink, scale, out);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld heads %d dim %lld", (long long)rows, heads, (long long)dim);
    int64_t nd = ndiff(out, o, n, &f);
    if (note(s, OP_ATTN, nd, n, f, out, o, sh)) {
        /* describe the first differing row's entry list: where the empties sit */
        int64_t r = f / (heads * dim);
        const tide_attn_row *ir = &idx[r];
        char pat[200];
        int k = 0;
        for (int i = 0; i < ir->n_idx && k < (int)sizeof pat - 2; i++) pat[k++] = ir->kv[i] ? 'x' : '.';
        pat[k] = 0;
        int dup = 0;
        for (int i = 0; i < ir->n_idx; i++)
            for (int j = 0; j < i; j++)
                if (ir->kv[i] && ir->kv[i] == ir->kv[j]) dup++;
        int64_t rd = 0, rf;
        rd = ndiff(out + r * heads * dim, o + r * heads * dim, heads * dim, &rf);
        fprintf(stderr, "SHADOW|%s|sparse_attn row %lld: n_idx %d, %lld of %lld outputs differ, dup ptrs %d, entries %s\n",
                s->label, (long long)r, ir->n_idx, (long long)rd, (long long)(heads * dim), dup, pat);
    }
    free(o);
}

static void sh_index(const tide_ops *self, const float *q, int heads, int64_t d, const float *w, const float *keys,
                     int64_t n, float *score) {
    shadow_ops *s = me(self);
    int64_t f;
    float *sr = xalloc((size_t)(n > 0 ? n : 1) * 4);
    s->r->index_scores(s->r, q, heads, d, w, keys, n, sr);
    s->p->index_scores(s->p, q, heads, d, w, keys, n, score);
    char sh[64];
    snprintf(sh, sizeof sh, "heads %d d %lld n %lld", heads, (long long)d, (long long)n);
    { int64_t nd_ = ndiff(score, sr, n, &f);
        note(s, OP_INDEX, nd_, n, f, score, sr, sh);
    }
    free(sr);
}

static int sh_topk(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch) {
    shadow_ops *s = me(self);
    int32_t *o = xalloc((size_t)(k > 0 ? k : 1) * 4);
    int kr = s->r->topk_sorted(s->r, score, n, k, o, NULL);
    int kp = s->p->topk_sorted(s->p, score, n, k, out, scratch);
    char sh[64];
    snprintf(sh, sizeof sh, "n %lld k %d (returned %d vs %d)", (long long)n, k, kp, kr);
    int64_t f = 0, nd = kp != kr ? 1 : ndiff(out, o, kp, &f);
    note(s, OP_TOPK, nd, kp, f < 0 ? 0 : f, NULL, NULL, sh);
    free(o);
    return kp;
}

static void sh_swiglu(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                      const float *weight, float *h) {
    shadow_ops *s = me(self);
    int64_t m = rows * n, f;
    float *hr = xalloc((size_t)m * 4);
    s->r->swiglu(s->r, g, u, rows, n, limit, weight, hr);
    s->p->swiglu(s->p, g, u, rows, n, limit, weight, h);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld n %lld", (long long)rows, (long long)n);
    { int64_t nd_ = ndiff(h, hr, m, &f);
        note(s, OP_SWIGLU, nd_, m, f, h, hr, sh);
    }
    free(hr);
}

static void sh_engram(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                      double eps, float *x) {
    shadow_ops *s = me(self);
    int64_t n = rows * hc * dim, f;
    float *xr = xalloc((size_t)n * 4);
    memcpy(xr, x, (size_t)n * 4);
    s->r->engram_mix(s->r, kv, w, rows, hc, dim, eps, xr);
    s->p->engram_mix(s->p, kv, w, rows, hc, dim, eps, x);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld hc %d dim %lld", (long long)rows, hc, (long long)dim);
    { int64_t nd_ = ndiff(x, xr, n, &f);
        note(s, OP_ENGRAM, nd_, n, f, x, xr, sh);
    }
    free(xr);
}

static void sh_route(const tide_ops *self, const float *logits, int64_t rows, int n_experts, int k, int func,
                     const float *bias, int norm, float route_scale, int32_t *idx, float *w) {
    shadow_ops *s = me(self);
    int64_t n = rows * k, f, f2;
    int32_t *ir = xalloc((size_t)n * 4);
    float *wr = xalloc((size_t)n * 4);
    s->r->moe_route(s->r, logits, rows, n_experts, k, func, bias, norm, route_scale, ir, wr);
    s->p->moe_route(s->p, logits, rows, n_experts, k, func, bias, norm, route_scale, idx, w);
    char sh[64];
    snprintf(sh, sizeof sh, "rows %lld experts %d k %d func %d", (long long)rows, n_experts, k, func);
    int64_t nd = ndiff(idx, ir, n, &f);
    if (nd) note(s, OP_ROUTE, nd, n, f, NULL, NULL, sh);
    else { int64_t nd_ = ndiff(w, wr, n, &f2);
        note(s, OP_ROUTE, nd_, n, f2, w, wr, sh);
    }
    free(ir);
    free(wr);
}

static void sh_pool(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim, float *out) {
    shadow_ops *s = me(self);
    int64_t f;
    float *o = xalloc((size_t)dim * 4);
    s->r->compress_pool(s->r, kv, score, r, dim, o);
    s->p->compress_pool(s->p, kv, score, r, dim, out);
    char sh[64];
    snprintf(sh, sizeof sh, "r %d dim %lld", r, (long long)dim);
    { int64_t nd_ = ndiff(out, o, dim, &f);
        note(s, OP_POOL, nd_, dim, f, out, o, sh);
    }
    free(o);
}

shadow_ops *shadow_ops_create(const tide_ops *primary, const tide_ops *ref, const char *label) {
    shadow_ops *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = primary;
    s->r = ref;
    snprintf(s->label, sizeof s->label, "%s", label);
    pthread_mutex_init(&s->mu, NULL);
    tide_ops *t = &s->table;
    t->name = "shadow";
    t->ctx = s;
    t->linear = sh_linear;
    t->rmsnorm = sh_rmsnorm;
    t->rope = sh_rope;
    t->hc_mixes = sh_hc_mixes;
    t->hc_pre = sh_hc_pre;
    t->hc_post = sh_hc_post;
    t->sparse_attn = sh_attn;
    t->index_scores = sh_index;
    t->topk_sorted = sh_topk;
    t->swiglu = sh_swiglu;
    t->engram_mix = sh_engram;
    t->moe_route = sh_route;
    t->compress_pool = sh_pool;
    return s;
}

const tide_ops *shadow_ops_table(shadow_ops *s) { return &s->table; }

int64_t shadow_ops_report(const shadow_ops *s) {
    int64_t total = 0;
    for (int i = 0; i < OP_N; i++) {
        if (s->calls[i])
            fprintf(stderr, "SHADOW|%s|summary %s: %lld of %lld calls differ\n", s->label, op_names[i],
                    (long long)s->bad[i], (long long)s->calls[i]);
        total += s->bad[i];
    }
    return total;
}

void shadow_ops_destroy(shadow_ops *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}
