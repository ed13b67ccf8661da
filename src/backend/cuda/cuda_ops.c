/* The CUDA ops table (cuda_ops.h): each ops.h function on host arrays runs
 * as upload -> kernel(s) of cuda_kernels.h -> download, or as the CPU op
 * where no kernel covers the case (counted as a CPU fallback).
 *
 * Every op follows the same shape:
 *   cx = enter(self)             self->ctx, its mutex taken
 *   no context                   -> the CPU op (a table with ctx NULL)
 *   context failed earlier       -> defined outputs, nothing launched
 *   no kernel for this case      -> the CPU op, counted
 *   otherwise                    -> the GPU run; on failure the error is
 *                                   recorded (sticky) and outputs defined
 * Outputs are always downloaded at the end of an op (a synchronous copy on
 * the default stream), so an error raised while a kernel ran is reported
 * by the op that launched it.
 *
 * Each context holds its own table (cx->table, whose ctx points back at
 * cx) and its own mutex, so contexts are independent and there is no state
 * at file scope. The mutex serialises the ops of one context: the indexer
 * calls index_scores and topk_sorted from several pool threads at once,
 * and they share the context's arena and staging buffers. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_ops_internal.h"
#include "num/num.h"

/* The context of the table the op was called through, locked (NULL, not
 * locked, for a table without one). */
static tide_cuda_ops_ctx *enter(const tide_ops *self) {
    tide_cuda_ops_ctx *cx = self->ctx;
    if (cx) pthread_mutex_lock(&cx->mu);
    return cx;
}
static void leave(tide_cuda_ops_ctx *cx) {
    if (cx) pthread_mutex_unlock(&cx->mu);
}

static void zero_f(float *p, int64_t n) {
    if (p && n > 0) memset(p, 0, (size_t)n * sizeof(float));
}

/* ---- linear ---- */

static int linear_op(tide_wtype t) {
    switch (t) {
    case TIDE_W_FP8: return TIDE_CUDA_OP_LINEAR_FP8;
    case TIDE_W_FP4: return TIDE_CUDA_OP_LINEAR_FP4;
    case TIDE_W_F32: return TIDE_CUDA_OP_LINEAR_F32;
    default: return TIDE_CUDA_OP_LINEAR_BF16;
    }
}

/* The block-scaled GEMMs need whole 32-blocks of k (FP4's format has them
 * by construction; an FP8 weight with a partial trailing block runs on the
 * CPU). F32/BF16 weights: tide_cuda_linear_f32 (any shape). */
static int linear_supported(const tide_weight *w) {
    if (!w->data || w->in < 1) return 0;
    if (w->type == TIDE_W_F32 || w->type == TIDE_W_BF16) return 1;
    if (w->type != TIDE_W_FP8 && w->type != TIDE_W_FP4) return 0;
    return w->in >= 32 && w->in % 32 == 0 && w->scale;
}

/* F32/BF16 weights in the default (bit-exact) mode of tide_cuda_linear_f32:
 * f32 products summed in double as the CPU's dot product does. */
static int linear_plain_gpu(tide_cuda_ops_ctx *cx, const tide_weight *w, const float *x, int64_t rows, float *y,
                            int flags, tide_status *st) {
    int bf16 = w->type == TIDE_W_BF16;
    size_t wb = cxo_bytes(w->out, w->in, bf16 ? 2 : 4);
    const void *dw;
    if (cxo_weight(cx, w->data, wb, &dw, st) != 0) return -1;
    size_t xb = cxo_bytes(rows, w->in, 4), yb = cxo_bytes(rows, w->out, 4);
    if (cxo_arena_begin(cx, cxo_al(xb) + cxo_al(yb), st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st), *dy = cxo_take(cx, yb, st);
    if (!dx || !dy) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0) return -1;
    int kf = (flags & TIDE_LIN_BF16_OUT) ? TIDE_CUDA_LIN_BF16_OUT : 0;
    int rc = tide_cuda_linear_f32(dw, bf16, w->out, w->in, dx, rows, dy, kf, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    return cxo_down(cx, y, dy, yb, st);
}

/* Activation quantised on the GPU (bit-identical to the CPU's), then, in
 * the exact mode (the default), the CUDA-core GEMM with the CPU's exactly
 * rounded block sums: bit-identical. The tensor-core GEMMs are not: the
 * mma.sync path agrees with the CPU on all but a few outputs in a million,
 * and one bf16 step on one output is enough to flip a greedy token many
 * steps later (gpu_test_model small/ref, seed 117712416801206); the fast
 * mode uses the mma.sync one (the wgmma path differs by a bf16 step on 1-4%
 * of outputs, docs/gpu.md). (The GEMM picks its own tile: the skinny one
 * for <= 16 rows.) */
static int linear_gpu(tide_cuda_ops_ctx *cx, const tide_weight *w, const float *x, int64_t rows, float *y,
                      tide_status *st) {
    int64_t in = w->in, out = w->out, nbk = in / 32;
    int fp8 = w->type == TIDE_W_FP8;
    size_t wb = fp8 ? cxo_bytes(out, in, 1) : cxo_bytes(out, in / 2, 1);
    size_t sb = fp8 ? cxo_bytes((out + 31) / 32, nbk, 1) : cxo_bytes(out, nbk, 1);
    const void *dw, *ds;
    if (cxo_weight(cx, w->data, wb, &dw, st) != 0 || cxo_weight(cx, w->scale, sb, &ds, st) != 0) return -1;
    size_t xb = cxo_bytes(rows, in, sizeof(float)), qb = cxo_bytes(rows, in, 1);
    size_t xsb = cxo_bytes(rows, nbk, 1), yb = cxo_bytes(rows, out, sizeof(uint16_t));
    if (cxo_arena_begin(cx, cxo_al(xb) + cxo_al(qb) + cxo_al(xsb) + cxo_al(yb), st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st);
    uint8_t *dq = cxo_take(cx, qb, st), *dxs = cxo_take(cx, xsb, st);
    uint16_t *dy = cxo_take(cx, yb, st);
    uint16_t *hy = cxo_host(cx, HB_STAGE, yb, st);
    if (!dx || !dq || !dxs || !dy || !hy) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_quant_fp8_act(dx, rows, in, dq, dxs, NULL, st)) != 0) return -1;
    if (cx->kernels == TIDE_CUDA_KERNELS_FAST) {
        int rc = fp8 ? tide_cuda_gemm_fp8(dq, dxs, rows, dw, ds, out, in, dy, NULL, st)
                     : tide_cuda_gemm_fp4(dq, dxs, rows, dw, ds, out, in, dy, NULL, st);
        if (cxo_launched(cx, rc) != 0) return -1;
    } else {
        for (int64_t r0 = 0; r0 < rows; r0 += 65535) { /* the kernel's grid.y limit */
            int64_t n = rows - r0 < 65535 ? rows - r0 : 65535;
            int rc = tide_cuda_gemm_exact(dq + r0 * in, dxs + r0 * nbk, n, dw, ds, out, in, !fp8, dy + r0 * out, NULL,
                                          st);
            if (cxo_launched(cx, rc) != 0) return -1;
        }
    }
    if (cxo_down(cx, hy, dy, yb, st) != 0) return -1;
    tide_bf16_to_f32_row(hy, y, (size_t)(rows * out)); /* bf16 -> f32 is exact */
    return 0;
}

static void cu_linear(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows,
                      float *y, int flags) {
    if (rows <= 0 || w->out <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int op = linear_op(w->type);
    if (cx && cx->failed) {
        zero_f(y, rows * w->out);
    } else if (!cx || !linear_supported(w)) {
        if (cx) cx->stats.cpu_fallbacks[op]++;
        leave(cx);
        tide_cpu_ops()->linear(tide_cpu_ops(), pool, w, x, rows, y, flags);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[op]++;
        int rc = w->type == TIDE_W_FP8 || w->type == TIDE_W_FP4 ? linear_gpu(cx, w, x, rows, y, &st)
                                                                : linear_plain_gpu(cx, w, x, rows, y, flags, &st);
        if (rc != 0) {
            cxo_fail(cx, "linear", &st);
            zero_f(y, rows * w->out);
        }
    }
    leave(cx);
}

/* ---- rmsnorm ---- */

static int rmsnorm_gpu(tide_cuda_ops_ctx *cx, const float *x, int64_t rows, int64_t dim, const float *w, double eps,
                       float *y, tide_status *st) {
    size_t xb = cxo_bytes(rows, dim, sizeof(float)), wb = cxo_bytes(dim, 1, sizeof(float));
    if (cxo_arena_begin(cx, cxo_al(xb) + cxo_al(wb), st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st), *dw = cxo_take(cx, wb, st);
    if (!dx || !dw) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0 || cxo_up(cx, dw, w, wb, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_rmsnorm_f32(dx, rows, dim, dw, eps, dx, NULL, st)) != 0) return -1;
    return cxo_down(cx, y, dx, xb, st);
}

static void cu_rmsnorm(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim, const float *w,
                       double eps, float *y) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    if (cx && cx->failed) {
        zero_f(y, rows * dim);
    } else if (!cx || dim < 1 || dim > TIDE_CUDA_RMSNORM_MAX_DIM) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_RMSNORM]++;
        leave(cx);
        tide_cpu_ops()->rmsnorm(tide_cpu_ops(), pool, x, rows, dim, w, eps, y);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_RMSNORM]++;
        if (rmsnorm_gpu(cx, x, rows, dim, w, eps, y, &st) != 0) {
            cxo_fail(cx, "rmsnorm", &st);
            zero_f(y, rows * dim);
        }
    }
    leave(cx);
}

/* ---- rope ---- */

/* The vectors lie at x + v*stride inside one span; the span is uploaded
 * whole, and only the vectors are copied back (the gaps between them are
 * not ours to write). */
static int rope_gpu(tide_cuda_ops_ctx *cx, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                    int inverse, tide_status *st) {
    int64_t vlen = 2 * n_freq, span = (n_vec - 1) * stride + vlen;
    size_t xb = cxo_bytes(span, 1, sizeof(float)), cb = cxo_bytes(vlen, 1, sizeof(float));
    if (cxo_arena_begin(cx, cxo_al(xb) + cxo_al(cb), st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st), *dcs = cxo_take(cx, cb, st);
    float *hx = cxo_host(cx, HB_STAGE, xb, st);
    if (!dx || !dcs || !hx) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0 || cxo_up(cx, dcs, cs, cb, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_rope(dx, 1, n_vec, 0, stride, n_freq, dcs, inverse, NULL, st)) != 0) return -1;
    if (cxo_down(cx, hx, dx, xb, st) != 0) return -1;
    for (int64_t v = 0; v < n_vec; v++)
        memcpy(x + v * stride, hx + v * stride, (size_t)vlen * sizeof(float));
    return 0;
}

static void cu_rope(const tide_ops *self, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                    int inverse) {
    if (n_vec <= 0 || n_freq <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    /* overlapping vectors (stride < 2*n_freq) would be rotated in an order
     * the kernel does not keep: CPU */
    int ok = n_vec == 1 || stride >= 2 * n_freq;
    if (cx && cx->failed) {
        /* in place: x stays as it was */
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_ROPE]++;
        leave(cx);
        tide_cpu_ops()->rope(tide_cpu_ops(), x, n_vec, stride, n_freq, cs, inverse);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ROPE]++;
        if (rope_gpu(cx, x, n_vec, n_vec == 1 ? 0 : stride, n_freq, cs, inverse, &st) != 0)
            cxo_fail(cx, "rope", &st);
    }
    leave(cx);
}

/* ---- hyper-connections ---- */

static int hc_ok(int hc, int64_t dim) { return hc >= 1 && hc <= TIDE_CUDA_HC_MAX && dim >= 1; }

static int hc_mixes_gpu(tide_cuda_ops_ctx *cx, const float *x, int64_t rows, int hc, int64_t dim, const float *fn,
                        const float *scale, const float *base, double norm_eps, int iters, double hc_eps, float *pre,
                        float *post, float *comb, tide_status *st) {
    int64_t n = hc * dim, nm = (2 + hc) * hc;
    size_t xb = cxo_bytes(rows, n, 4), fb = cxo_bytes(nm, n, 4), scb = 3 * 4, bb = cxo_bytes(nm, 1, 4);
    size_t pb = cxo_bytes(rows, hc, 4), cb = cxo_bytes(rows, (int64_t)hc * hc, 4);
    int fast = cx->kernels == TIDE_CUDA_KERNELS_FAST;
    size_t wsb = fast ? tide_cuda_hc_mixes_fast_workspace(rows, hc, dim) : 0;
    size_t need = cxo_al(xb) + cxo_al(fb) + cxo_al(scb) + cxo_al(bb) + 2 * cxo_al(pb) + cxo_al(cb) + cxo_al(wsb);
    if (cxo_arena_begin(cx, need, st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st), *dfn = cxo_take(cx, fb, st), *dsc = cxo_take(cx, scb, st);
    float *dbase = cxo_take(cx, bb, st), *dpre = cxo_take(cx, pb, st), *dpost = cxo_take(cx, pb, st);
    float *dcomb = cxo_take(cx, cb, st);
    void *dws = fast ? cxo_take(cx, wsb, st) : NULL;
    if (!dx || !dfn || !dsc || !dbase || !dpre || !dpost || !dcomb || (fast && !dws)) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0 || cxo_up(cx, dfn, fn, fb, st) != 0 || cxo_up(cx, dsc, scale, scb, st) != 0 ||
        cxo_up(cx, dbase, base, bb, st) != 0)
        return -1;
    int rc = fast ? tide_cuda_hc_mixes_fast(dx, rows, hc, dim, dfn, dsc, dbase, norm_eps, iters, hc_eps, dpre, dpost,
                                            dcomb, dws, wsb, NULL, st)
                  : tide_cuda_hc_mixes(dx, rows, hc, dim, dfn, dsc, dbase, norm_eps, iters, hc_eps, dpre, dpost,
                                       dcomb, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    if (cxo_down(cx, pre, dpre, pb, st) != 0 || cxo_down(cx, post, dpost, pb, st) != 0) return -1;
    return cxo_down(cx, comb, dcomb, cb, st);
}

static void cu_hc_mixes(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                        const float *fn, const float *scale, const float *base, double norm_eps, int iters,
                        double hc_eps, float *pre, float *post, float *comb) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = hc_ok(hc, dim) && (int64_t)hc * dim <= TIDE_CUDA_HC_MAX_N && iters >= 0;
    if (cx && cx->failed) {
        zero_f(pre, rows * hc);
        zero_f(post, rows * hc);
        zero_f(comb, rows * hc * hc);
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_HC_MIXES]++;
        leave(cx);
        tide_cpu_ops()->hc_mixes(tide_cpu_ops(), pool, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, pre,
                                 post, comb);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_MIXES]++;
        if (hc_mixes_gpu(cx, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, pre, post, comb, &st) != 0) {
            cxo_fail(cx, "hc_mixes", &st);
            zero_f(pre, rows * hc);
            zero_f(post, rows * hc);
            zero_f(comb, rows * hc * hc);
        }
    }
    leave(cx);
}

static int hc_pre_gpu(tide_cuda_ops_ctx *cx, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                      float *y, tide_status *st) {
    size_t xb = cxo_bytes(rows, hc * dim, 4), pb = cxo_bytes(rows, hc, 4), yb = cxo_bytes(rows, dim, 4);
    if (cxo_arena_begin(cx, cxo_al(xb) + cxo_al(pb) + cxo_al(yb), st) != 0) return -1;
    float *dx = cxo_take(cx, xb, st), *dpre = cxo_take(cx, pb, st), *dy = cxo_take(cx, yb, st);
    if (!dx || !dpre || !dy) return -1;
    if (cxo_up(cx, dx, x, xb, st) != 0 || cxo_up(cx, dpre, pre, pb, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_hc_pre(dx, rows, hc, dim, dpre, dy, NULL, st)) != 0) return -1;
    return cxo_down(cx, y, dy, yb, st);
}

static void cu_hc_pre(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                      float *y) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    if (cx && cx->failed) {
        zero_f(y, rows * dim);
    } else if (!cx || !hc_ok(hc, dim)) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_HC_PRE]++;
        leave(cx);
        tide_cpu_ops()->hc_pre(tide_cpu_ops(), x, rows, hc, dim, pre, y);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_PRE]++;
        if (hc_pre_gpu(cx, x, rows, hc, dim, pre, y, &st) != 0) {
            cxo_fail(cx, "hc_pre", &st);
            zero_f(y, rows * dim);
        }
    }
    leave(cx);
}

static int hc_post_gpu(tide_cuda_ops_ctx *cx, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                       const float *post, const float *comb, float *out, tide_status *st) {
    size_t yb = cxo_bytes(rows, dim, 4), rb = cxo_bytes(rows, hc * dim, 4), pb = cxo_bytes(rows, hc, 4);
    size_t cb = cxo_bytes(rows, (int64_t)hc * hc, 4);
    size_t need = cxo_al(yb) + 2 * cxo_al(rb) + cxo_al(pb) + cxo_al(cb);
    if (cxo_arena_begin(cx, need, st) != 0) return -1;
    float *dy = cxo_take(cx, yb, st), *dres = cxo_take(cx, rb, st), *dpost = cxo_take(cx, pb, st);
    float *dcomb = cxo_take(cx, cb, st), *dout = cxo_take(cx, rb, st);
    if (!dy || !dres || !dpost || !dcomb || !dout) return -1;
    if (cxo_up(cx, dy, y, yb, st) != 0 || cxo_up(cx, dres, res, rb, st) != 0 || cxo_up(cx, dpost, post, pb, st) != 0 ||
        cxo_up(cx, dcomb, comb, cb, st) != 0)
        return -1;
    int rc = tide_cuda_hc_post(dy, dres, rows, hc, dim, dpost, dcomb, dout, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    return cxo_down(cx, out, dout, rb, st);
}

static void cu_hc_post(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                       const float *post, const float *comb, float *out) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    if (cx && cx->failed) {
        zero_f(out, rows * hc * dim);
    } else if (!cx || !hc_ok(hc, dim)) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_HC_POST]++;
        leave(cx);
        tide_cpu_ops()->hc_post(tide_cpu_ops(), y, res, rows, hc, dim, post, comb, out);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_POST]++;
        if (hc_post_gpu(cx, y, res, rows, hc, dim, post, comb, out, &st) != 0) {
            cxo_fail(cx, "hc_post", &st);
            zero_f(out, rows * hc * dim);
        }
    }
    leave(cx);
}

/* ---- sparse attention (the gather: cuda_ops_attn.c) ---- */

static void cu_sparse_attn(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                           const tide_attn_row *idx, const float *sink, float scale, float *out) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    if (cx && cx->failed) {
        zero_f(out, rows * heads * dim);
    } else if (!cx || !cxo_attn_supported(rows, heads, dim, idx)) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_SPARSE_ATTN]++;
        leave(cx);
        tide_cpu_ops()->sparse_attn(tide_cpu_ops(), pool, q, rows, heads, dim, idx, sink, scale, out);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_SPARSE_ATTN]++;
        if (cxo_attn_run(cx, q, rows, heads, dim, idx, sink, scale, out, &st) != 0) {
            cxo_fail(cx, "sparse_attn", &st);
            zero_f(out, rows * heads * dim);
        }
    }
    leave(cx);
}

/* ---- indexer ---- */

static int index_scores_gpu(tide_cuda_ops_ctx *cx, const float *q, int heads, int64_t d, const float *w,
                            const float *keys, int64_t n, float *score, tide_status *st) {
    size_t qb = cxo_bytes(heads, d, 4), wb = cxo_bytes(heads, 1, 4), kb = cxo_bytes(n, d, 4);
    size_t sb = cxo_bytes(n, 1, 4);
    if (cxo_arena_begin(cx, cxo_al(qb) + cxo_al(wb) + cxo_al(kb) + cxo_al(sb), st) != 0) return -1;
    float *dq = cxo_take(cx, qb, st), *dw = cxo_take(cx, wb, st), *dk = cxo_take(cx, kb, st);
    float *ds = cxo_take(cx, sb, st);
    if (!dq || !dw || !dk || !ds) return -1;
    if (cxo_up(cx, dq, q, qb, st) != 0 || cxo_up(cx, dw, w, wb, st) != 0 || cxo_up(cx, dk, keys, kb, st) != 0)
        return -1;
    int rc = cx->kernels == TIDE_CUDA_KERNELS_FAST
                 ? tide_cuda_index_scores_fast(dq, 1, heads, d, dw, dk, n, 1, 0, ds, NULL, st)
                 : tide_cuda_index_scores(dq, 1, heads, d, dw, dk, n, ds, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    return cxo_down(cx, score, ds, sb, st);
}

static void cu_index_scores(const tide_ops *self, const float *q, int heads, int64_t d, const float *w,
                            const float *keys, int64_t n, float *score) {
    if (n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = heads >= 1 && heads <= 4096 && d >= 1 && n <= INT32_MAX;
    if (cx && cx->failed) {
        zero_f(score, n);
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_INDEX_SCORES]++;
        leave(cx);
        tide_cpu_ops()->index_scores(tide_cpu_ops(), q, heads, d, w, keys, n, score);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_INDEX_SCORES]++;
        if (index_scores_gpu(cx, q, heads, d, w, keys, n, score, &st) != 0) {
            cxo_fail(cx, "index_scores", &st);
            zero_f(score, n);
        }
    }
    leave(cx);
}

static int topk_gpu(tide_cuda_ops_ctx *cx, const float *score, int64_t n, int k, int32_t *out, tide_status *st) {
    size_t sb = cxo_bytes(n, 1, 4), ob = cxo_bytes(k, 1, 4);
    if (cxo_arena_begin(cx, cxo_al(sb) + cxo_al(ob), st) != 0) return -1;
    float *ds = cxo_take(cx, sb, st);
    int32_t *dout = cxo_take(cx, ob, st);
    if (!ds || !dout) return -1;
    if (cxo_up(cx, ds, score, sb, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_topk_sorted(ds, 1, n, k, dout, NULL, st)) != 0) return -1;
    return cxo_down(cx, out, dout, ob, st);
}

static int has_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}

static int cu_topk_sorted(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch) {
    if (k > n) k = (int)n;
    if (k <= 0) return 0;
    tide_cuda_ops_ctx *cx = enter(self);
    int got = k;
    /* the kernel's order keys assume no NaN; the CPU's comparison rule
     * decides NaN cases */
    if (cx && cx->failed) {
        got = 0;
    } else if (!cx || n > INT32_MAX || has_nan(score, n)) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_TOPK]++;
        leave(cx);
        return tide_cpu_ops()->topk_sorted(tide_cpu_ops(), score, n, k, out, scratch);
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_TOPK]++;
        if (topk_gpu(cx, score, n, k, out, &st) != 0) {
            cxo_fail(cx, "topk_sorted", &st);
            got = 0;
        }
    }
    leave(cx);
    return got;
}

/* ---- MoE routing ---- */

static int moe_gpu(tide_cuda_ops_ctx *cx, const float *logits, int64_t rows, int n_experts, int k, int func,
                   const float *bias, int norm, float route_scale, int32_t *idx, float *w, tide_status *st) {
    size_t lb = cxo_bytes(rows, n_experts, 4), bb = bias ? cxo_bytes(n_experts, 1, 4) : 0;
    size_t ob = cxo_bytes(rows, k, 4);
    if (cxo_arena_begin(cx, cxo_al(lb) + cxo_al(bb) + 2 * cxo_al(ob), st) != 0) return -1;
    float *dl = cxo_take(cx, lb, st), *db = cxo_take(cx, bb, st), *dw = cxo_take(cx, ob, st);
    int32_t *di = cxo_take(cx, ob, st);
    if (!dl || !db || !dw || !di) return -1;
    if (cxo_up(cx, dl, logits, lb, st) != 0 || (bias && cxo_up(cx, db, bias, bb, st) != 0)) return -1;
    int rc = tide_cuda_moe_route(dl, rows, n_experts, k, func, bias ? db : NULL, norm, route_scale, di, dw, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    if (cxo_down(cx, idx, di, ob, st) != 0) return -1;
    return cxo_down(cx, w, dw, ob, st);
}

/* After a failure: distinct valid experts, no weight. */
static void moe_defined(int64_t rows, int n_experts, int k, int32_t *idx, float *w) {
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < k; i++) {
            idx[r * k + i] = n_experts > 0 ? i % n_experts : 0;
            w[r * k + i] = 0.0f;
        }
}

static void cu_moe_route(const tide_ops *self, const float *logits, int64_t rows, int n_experts, int k, int func,
                         const float *bias, int norm, float route_scale, int32_t *idx, float *w) {
    if (rows <= 0 || k <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = k <= 64 && k <= n_experts && n_experts <= TIDE_CUDA_MOE_MAX_EXPERTS && func >= 0 && func <= 2;
    if (cx && cx->failed) {
        moe_defined(rows, n_experts, k, idx, w);
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_MOE_ROUTE]++;
        leave(cx);
        tide_cpu_ops()->moe_route(tide_cpu_ops(), logits, rows, n_experts, k, func, bias, norm, route_scale, idx, w);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_MOE_ROUTE]++;
        if (moe_gpu(cx, logits, rows, n_experts, k, func, bias, norm, route_scale, idx, w, &st) != 0) {
            cxo_fail(cx, "moe_route", &st);
            moe_defined(rows, n_experts, k, idx, w);
        }
    }
    leave(cx);
}

/* ---- elementwise: swiglu, engram_mix, compress_pool ---- */

static int swiglu_gpu(tide_cuda_ops_ctx *cx, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                      const float *weight, float *h, tide_status *st) {
    size_t xb = cxo_bytes(rows, n, 4), wb = weight ? cxo_bytes(rows, 1, 4) : 0;
    if (cxo_arena_begin(cx, 2 * cxo_al(xb) + cxo_al(wb), st) != 0) return -1;
    float *dg = cxo_take(cx, xb, st), *du = cxo_take(cx, xb, st), *dw = cxo_take(cx, wb, st);
    if (!dg || !du || !dw) return -1;
    if (cxo_up(cx, dg, g, xb, st) != 0 || cxo_up(cx, du, u, xb, st) != 0 ||
        (weight && cxo_up(cx, dw, weight, wb, st) != 0))
        return -1;
    int rc = tide_cuda_swiglu(dg, du, rows, n, limit, weight ? dw : NULL, dg, NULL, st); /* h over g */
    if (cxo_launched(cx, rc) != 0) return -1;
    return cxo_down(cx, h, dg, xb, st);
}

static void cu_swiglu(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                      const float *weight, float *h) {
    if (rows <= 0 || n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    if (cx && cx->failed) {
        zero_f(h, rows * n);
    } else if (!cx) {
        leave(cx);
        tide_cpu_ops()->swiglu(tide_cpu_ops(), g, u, rows, n, limit, weight, h);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_SWIGLU]++;
        if (swiglu_gpu(cx, g, u, rows, n, limit, weight, h, &st) != 0) {
            cxo_fail(cx, "swiglu", &st);
            zero_f(h, rows * n);
        }
    }
    leave(cx);
}

static int engram_gpu(tide_cuda_ops_ctx *cx, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                      double eps, float *x, tide_status *st) {
    size_t kb = cxo_bytes(rows, (hc + 1) * dim, 4), wb = cxo_bytes(hc, dim, 4), xb = cxo_bytes(rows, hc * dim, 4);
    if (cxo_arena_begin(cx, cxo_al(kb) + cxo_al(wb) + cxo_al(xb), st) != 0) return -1;
    float *dkv = cxo_take(cx, kb, st), *dw = cxo_take(cx, wb, st), *dx = cxo_take(cx, xb, st);
    if (!dkv || !dw || !dx) return -1;
    if (cxo_up(cx, dkv, kv, kb, st) != 0 || cxo_up(cx, dw, w, wb, st) != 0 || cxo_up(cx, dx, x, xb, st) != 0)
        return -1;
    if (cxo_launched(cx, tide_cuda_engram_mix(dkv, dw, rows, hc, dim, eps, dx, NULL, st)) != 0) return -1;
    return cxo_down(cx, x, dx, xb, st);
}

static void cu_engram_mix(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                          double eps, float *x) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = hc >= 1 && dim >= 1 && dim <= TIDE_CUDA_ENGRAM_MAX_DIM && rows * hc <= INT32_MAX;
    if (cx && cx->failed) {
        /* in place: x stays as it was */
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_ENGRAM_MIX]++;
        leave(cx);
        tide_cpu_ops()->engram_mix(tide_cpu_ops(), kv, w, rows, hc, dim, eps, x);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ENGRAM_MIX]++;
        if (engram_gpu(cx, kv, w, rows, hc, dim, eps, x, &st) != 0) cxo_fail(cx, "engram_mix", &st);
    }
    leave(cx);
}

static int pool_gpu(tide_cuda_ops_ctx *cx, const float *kv, const float *score, int r, int64_t dim, float *out,
                    tide_status *st) {
    size_t ib = cxo_bytes(r, dim, 4), ob = cxo_bytes(dim, 1, 4);
    if (cxo_arena_begin(cx, 2 * cxo_al(ib) + cxo_al(ob), st) != 0) return -1;
    float *dkv = cxo_take(cx, ib, st), *dsc = cxo_take(cx, ib, st), *dout = cxo_take(cx, ob, st);
    if (!dkv || !dsc || !dout) return -1;
    if (cxo_up(cx, dkv, kv, ib, st) != 0 || cxo_up(cx, dsc, score, ib, st) != 0) return -1;
    if (cxo_launched(cx, tide_cuda_compress_pool(dkv, dsc, 1, r, dim, dout, NULL, st)) != 0) return -1;
    return cxo_down(cx, out, dout, ob, st);
}

static void cu_compress_pool(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim,
                             float *out) {
    if (dim <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = r >= 1 && r <= 64; /* the kernel's range; the CPU decides the rest */
    if (cx && cx->failed) {
        zero_f(out, dim);
    } else if (!cx || !ok) {
        if (cx) cx->stats.cpu_fallbacks[TIDE_CUDA_OP_COMPRESS_POOL]++;
        leave(cx);
        tide_cpu_ops()->compress_pool(tide_cpu_ops(), kv, score, r, dim, out);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_COMPRESS_POOL]++;
        if (pool_gpu(cx, kv, score, r, dim, out, &st) != 0) {
            cxo_fail(cx, "compress_pool", &st);
            zero_f(out, dim);
        }
    }
    leave(cx);
}

static int cu_error(const tide_ops *self, tide_status *st) {
    return tide_cuda_ops_error(self->ctx, st) != 0 ? tide_fail_ctx(st, "--backend cuda") : 0;
}

/* The template of every context's table (ctx filled in by create). */
static const tide_ops cuda_table = {
    .name = "cuda",
    .ctx = NULL,
    .linear = cu_linear,
    .rmsnorm = cu_rmsnorm,
    .rope = cu_rope,
    .hc_mixes = cu_hc_mixes,
    .hc_pre = cu_hc_pre,
    .hc_post = cu_hc_post,
    .sparse_attn = cu_sparse_attn,
    .index_scores = cu_index_scores,
    .topk_sorted = cu_topk_sorted,
    .swiglu = cu_swiglu,
    .engram_mix = cu_engram_mix,
    .moe_route = cu_moe_route,
    .compress_pool = cu_compress_pool,
    .bind_weights = cxo_bind_weights,
    .error = cu_error,
};

/* ---- the context ---- */

int tide_cuda_ops_create(tide_cuda_ops_ctx **out, tide_status *st) {
    *out = NULL;
    int n = 0;
    if (tide_cuda_device_count(&n, st) != 0) return tide_fail_ctx(st, "cuda ops");
    if (n == 0) return tide_fail(st, TIDE_ERR_UNSUPPORTED, "cuda ops: no CUDA device");
    tide_cuda_ops_ctx *cx = calloc(1, sizeof *cx);
    if (!cx) return tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: out of memory");
    if (pthread_mutex_init(&cx->mu, NULL) != 0) {
        free(cx);
        return tide_fail(st, TIDE_ERR_NOMEM, "cuda ops: cannot create the context's mutex");
    }
    cx->table = cuda_table;
    cx->table.ctx = cx;
    *out = cx;
    return 0;
}

const tide_ops *tide_cuda_ops_table(tide_cuda_ops_ctx *cx) { return cx ? &cx->table : NULL; }

void tide_cuda_ops_set_kernels(tide_cuda_ops_ctx *cx, int mode) {
    if (!cx) return;
    pthread_mutex_lock(&cx->mu);
    cx->kernels = mode == TIDE_CUDA_KERNELS_FAST ? TIDE_CUDA_KERNELS_FAST : TIDE_CUDA_KERNELS_EXACT;
    pthread_mutex_unlock(&cx->mu);
}

void tide_cuda_ops_destroy(tide_cuda_ops_ctx *cx) {
    if (!cx) return;
    cxo_release_all(cx);
    pthread_mutex_destroy(&cx->mu);
    free(cx);
}

int tide_cuda_ops_error(tide_cuda_ops_ctx *cx, tide_status *st) {
    if (!cx) return tide_fail(st, TIDE_ERR_INVALID, "cuda ops: no context");
    pthread_mutex_lock(&cx->mu);
    int failed = cx->failed;
    tide_status err = cx->err;
    pthread_mutex_unlock(&cx->mu);
    if (!failed) return 0;
    if (st) *st = err;
    return -1;
}

void tide_cuda_ops_get_stats(tide_cuda_ops_ctx *cx, tide_cuda_ops_stats *out) {
    memset(out, 0, sizeof *out);
    if (!cx) return;
    pthread_mutex_lock(&cx->mu);
    *out = cx->stats;
    pthread_mutex_unlock(&cx->mu);
}

void tide_cuda_ops_drop_weights(tide_cuda_ops_ctx *cx) {
    if (!cx) return;
    pthread_mutex_lock(&cx->mu);
    cxo_weights_free(cx);
    pthread_mutex_unlock(&cx->mu);
}

const char *tide_cuda_op_name(int op) {
    static const char *const names[TIDE_CUDA_OP_COUNT] = {
        "linear_fp8", "linear_fp4", "linear_f32", "linear_bf16", "rmsnorm",    "rope",      "hc_mixes",      "hc_pre",
        "hc_post",    "sparse_attn", "index_scores", "topk_sorted", "swiglu", "engram_mix", "moe_route", "compress_pool",
    };
    return op >= 0 && op < TIDE_CUDA_OP_COUNT ? names[op] : "?";
}
