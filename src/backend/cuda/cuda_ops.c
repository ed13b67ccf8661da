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

/* The context of the table the op was called through, locked, the host
 * stand-in's guard open (NULL, not locked, for a table without one). */
static tide_cuda_ops_ctx *enter(const tide_ops *self) {
    tide_cuda_ops_ctx *cx = self->ctx;
    if (cx) {
        pthread_mutex_lock(&cx->mu);
        tide_cuda_host_guard(cx->res, cx->n_res, 1);
    }
    return cx;
}
static void leave(tide_cuda_ops_ctx *cx) {
    if (cx) {
        tide_cuda_host_guard(cx->res, cx->n_res, 0);
        pthread_mutex_unlock(&cx->mu);
    }
}

#define F4(n) cxo_bytes((n), 1, sizeof(float))

/* An op with no kernel for its case runs the CPU op, which needs host
 * arrays: with device-resident arguments that is a bug in the caller's
 * shapes (the forward's are all covered), reported as an error. Returns 1
 * when the CPU op may run (the context unlocked), 0 after recording the
 * error. */
static int fallback(tide_cuda_ops_ctx *cx, int op, const cxo_arg *a, int n) {
    if (!cx) return 1;
    if (cxo_any_resident(cx, a, n)) {
        tide_status st = {0};
        tide_fail(&st, TIDE_ERR_UNSUPPORTED, "no kernel for this shape, and its arrays are on the device");
        cxo_fail(cx, tide_cuda_op_name(op), &st);
        return 0;
    }
    cx->stats.cpu_fallbacks[op]++;
    leave(cx);
    return 1;
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
    cxo_arg a[] = {{w->data, cxo_bytes(w->out, w->in, bf16 ? 2 : 4), CXO_W, 0},
                   {x, cxo_bytes(rows, w->in, 4), CXO_IN, 0},
                   {y, cxo_bytes(rows, w->out, 4), CXO_OUT, 0}};
    if (cxo_dev(cx, a, 3, 0, NULL, st) != 0) return -1;
    int kf = (flags & TIDE_LIN_BF16_OUT) ? TIDE_CUDA_LIN_BF16_OUT : 0;
    int rc = tide_cuda_linear_f32(a[0].d, bf16, w->out, w->in, a[1].d, rows, a[2].d, kf, NULL, st);
    if (cxo_launched(cx, rc) != 0) return -1;
    return cxo_dev_done(cx, a, 3, st);
}

/* Activation quantised on the GPU (bit-identical to the CPU's), then, in
 * the exact mode (the default), the CUDA-core GEMM with the CPU's exactly
 * rounded block sums: bit-identical. The tensor-core GEMMs are not: the
 * mma.sync path agrees with the CPU on all but a few outputs in a million,
 * and one bf16 step on one output is enough to flip a greedy token many
 * steps later (gpu_test_model small/ref, seed 117712416801206); the fast
 * mode uses the mma.sync one (the wgmma path differs by a bf16 step on 1-4%
 * of outputs, docs/gpu.md). (The GEMM picks its own tile: the skinny one
 * for <= 16 rows.) The bf16 result is widened to f32 on the device. */
static int linear_gpu(tide_cuda_ops_ctx *cx, const tide_weight *w, const float *x, int64_t rows, float *y,
                      tide_status *st) {
    int64_t in = w->in, out = w->out, nbk = in / 32;
    int fp8 = w->type == TIDE_W_FP8;
    size_t wb = fp8 ? cxo_bytes(out, in, 1) : cxo_bytes(out, in / 2, 1);
    size_t sb = fp8 ? cxo_bytes((out + 31) / 32, nbk, 1) : cxo_bytes(out, nbk, 1);
    size_t qb = cxo_bytes(rows, in, 1), xsb = cxo_bytes(rows, nbk, 1), yb = cxo_bytes(rows, out, sizeof(uint16_t));
    cxo_arg a[] = {{w->data, wb, CXO_W, 0}, {w->scale, sb, CXO_W, 0}, {x, cxo_bytes(rows, in, 4), CXO_IN, 0},
                   {y, cxo_bytes(rows, out, 4), CXO_OUT, 0}};
    void *scr = NULL;
    if (cxo_dev(cx, a, 4, cxo_al(qb) + cxo_al(xsb) + cxo_al(yb), &scr, st) != 0) return -1;
    uint8_t *dq = scr, *dxs = dq + cxo_al(qb);
    uint16_t *dy = (uint16_t *)(dxs + cxo_al(xsb));
    const uint8_t *dw = a[0].d, *ds = a[1].d;
    if (cxo_launched(cx, tide_cuda_quant_fp8_act(a[2].d, rows, in, dq, dxs, NULL, st)) != 0) return -1;
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
    /* bf16 -> f32 is exact */
    if (cxo_launched(cx, tide_cuda_bf16_to_f32(dy, rows * out, a[3].d, NULL, st)) != 0) return -1;
    return cxo_dev_done(cx, a, 4, st);
}

static void cu_linear(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows,
                      float *y, int flags) {
    if (rows <= 0 || w->out <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int op = linear_op(w->type);
    cxo_arg io[] = {{x, F4(rows * w->in), CXO_IN, 0}, {y, F4(rows * w->out), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, y, F4(rows * w->out));
    } else if (!cx || !linear_supported(w)) {
        if (fallback(cx, op, io, 2)) {
            tide_cpu_ops()->linear(tide_cpu_ops(), pool, w, x, rows, y, flags);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[op]++;
        int rc = w->type == TIDE_W_FP8 || w->type == TIDE_W_FP4 ? linear_gpu(cx, w, x, rows, y, &st)
                                                                : linear_plain_gpu(cx, w, x, rows, y, flags, &st);
        if (rc != 0) {
            cxo_fail(cx, "linear", &st);
            cxo_zero(cx, y, F4(rows * w->out));
        }
    }
    leave(cx);
}

/* ---- rmsnorm ---- */

static void cu_rmsnorm(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim, const float *w,
                       double eps, float *y) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{x, F4(rows * dim), CXO_IN, 0}, {w, F4(dim), CXO_W, 0}, {y, F4(rows * dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, y, F4(rows * dim));
    } else if (!cx || dim < 1 || dim > TIDE_CUDA_RMSNORM_MAX_DIM) {
        if (fallback(cx, TIDE_CUDA_OP_RMSNORM, a, 3)) {
            tide_cpu_ops()->rmsnorm(tide_cpu_ops(), pool, x, rows, dim, w, eps, y);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_RMSNORM]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_rmsnorm_f32(a[0].d, rows, dim, a[1].d, eps, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "rmsnorm", &st);
            cxo_zero(cx, y, F4(rows * dim));
        }
    }
    leave(cx);
}

/* ---- rope (host arrays: the attention sub-layer's) ---- */

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
    cxo_arg a[] = {{x, F4(2 * n_freq), CXO_INOUT, 0}};
    if (cx && cx->failed) {
        /* in place: x stays as it was */
    } else if (!cx || !ok || cxo_any_resident(cx, a, 1)) {
        if (fallback(cx, TIDE_CUDA_OP_ROPE, a, 1)) {
            tide_cpu_ops()->rope(tide_cpu_ops(), x, n_vec, stride, n_freq, cs, inverse);
            return;
        }
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

static void cu_hc_mixes(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                        const float *fn, const float *scale, const float *base, double norm_eps, int iters,
                        double hc_eps, float *pre, float *post, float *comb) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int64_t n = hc * dim, nm = (2 + hc) * hc;
    int ok = hc_ok(hc, dim) && (int64_t)hc * dim <= TIDE_CUDA_HC_MAX_N && iters >= 0;
    cxo_arg a[] = {{x, F4(rows * n), CXO_IN, 0},      {fn, F4(nm * n), CXO_W, 0},
                   {scale, F4(3), CXO_W, 0},           {base, F4(nm), CXO_W, 0},
                   {pre, F4(rows * hc), CXO_OUT, 0},   {post, F4(rows * hc), CXO_OUT, 0},
                   {comb, F4(rows * hc * hc), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, pre, a[4].bytes);
        cxo_zero(cx, post, a[5].bytes);
        cxo_zero(cx, comb, a[6].bytes);
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_HC_MIXES, a, 7)) {
            tide_cpu_ops()->hc_mixes(tide_cpu_ops(), pool, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps,
                                     pre, post, comb);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_MIXES]++;
        int fast = cx->kernels == TIDE_CUDA_KERNELS_FAST;
        size_t wsb = fast ? tide_cuda_hc_mixes_fast_workspace(rows, hc, dim) : 0;
        void *ws = NULL;
        int rc = cxo_dev(cx, a, 7, wsb, fast ? &ws : NULL, &st);
        if (rc == 0)
            rc = cxo_launched(
                cx, fast ? tide_cuda_hc_mixes_fast(a[0].d, rows, hc, dim, a[1].d, a[2].d, a[3].d, norm_eps, iters,
                                                   hc_eps, a[4].d, a[5].d, a[6].d, ws, wsb, NULL, &st)
                         : tide_cuda_hc_mixes(a[0].d, rows, hc, dim, a[1].d, a[2].d, a[3].d, norm_eps, iters, hc_eps,
                                              a[4].d, a[5].d, a[6].d, NULL, &st));
        if (rc == 0) rc = cxo_dev_done(cx, a, 7, &st);
        if (rc != 0) {
            cxo_fail(cx, "hc_mixes", &st);
            cxo_zero(cx, pre, a[4].bytes);
            cxo_zero(cx, post, a[5].bytes);
            cxo_zero(cx, comb, a[6].bytes);
        }
    }
    leave(cx);
}

static void cu_hc_pre(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                      float *y) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{x, F4(rows * hc * dim), CXO_IN, 0}, {pre, F4(rows * hc), CXO_IN, 0},
                   {y, F4(rows * dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, y, a[2].bytes);
    } else if (!cx || !hc_ok(hc, dim)) {
        if (fallback(cx, TIDE_CUDA_OP_HC_PRE, a, 3)) {
            tide_cpu_ops()->hc_pre(tide_cpu_ops(), x, rows, hc, dim, pre, y);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_PRE]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_hc_pre(a[0].d, rows, hc, dim, a[1].d, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "hc_pre", &st);
            cxo_zero(cx, y, a[2].bytes);
        }
    }
    leave(cx);
}

static void cu_hc_post(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                       const float *post, const float *comb, float *out) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{y, F4(rows * dim), CXO_IN, 0},        {res, F4(rows * hc * dim), CXO_IN, 0},
                   {post, F4(rows * hc), CXO_IN, 0},      {comb, F4(rows * hc * hc), CXO_IN, 0},
                   {out, F4(rows * hc * dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, out, a[4].bytes);
    } else if (!cx || !hc_ok(hc, dim)) {
        if (fallback(cx, TIDE_CUDA_OP_HC_POST, a, 5)) {
            tide_cpu_ops()->hc_post(tide_cpu_ops(), y, res, rows, hc, dim, post, comb, out);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_HC_POST]++;
        if (cxo_dev(cx, a, 5, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_hc_post(a[0].d, a[1].d, rows, hc, dim, a[2].d, a[3].d, a[4].d, NULL, &st)) !=
                0 ||
            cxo_dev_done(cx, a, 5, &st) != 0) {
            cxo_fail(cx, "hc_post", &st);
            cxo_zero(cx, out, a[4].bytes);
        }
    }
    leave(cx);
}

/* ---- sparse attention (the gather: cuda_ops_attn.c; host arrays) ---- */

static void cu_sparse_attn(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                           const tide_attn_row *idx, const float *sink, float scale, float *out) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{q, F4(rows * heads * dim), CXO_IN, 0}, {out, F4(rows * heads * dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, out, a[1].bytes);
    } else if (!cx || !cxo_attn_supported(rows, heads, dim, idx) || cxo_any_resident(cx, a, 2)) {
        if (fallback(cx, TIDE_CUDA_OP_SPARSE_ATTN, a, 2)) {
            tide_cpu_ops()->sparse_attn(tide_cpu_ops(), pool, q, rows, heads, dim, idx, sink, scale, out);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_SPARSE_ATTN]++;
        if (cxo_attn_run(cx, q, rows, heads, dim, idx, sink, scale, out, &st) != 0) {
            cxo_fail(cx, "sparse_attn", &st);
            cxo_zero(cx, out, a[1].bytes);
        }
    }
    leave(cx);
}

/* ---- indexer ---- */

static void cu_index_scores(const tide_ops *self, const float *q, int heads, int64_t d, const float *w,
                            const float *keys, int64_t n, float *score) {
    if (n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = heads >= 1 && heads <= 4096 && d >= 1 && n <= INT32_MAX;
    cxo_arg a[] = {{q, F4(heads * d), CXO_IN, 0}, {w, F4(heads), CXO_IN, 0}, {keys, F4(n * d), CXO_IN, 0},
                   {score, F4(n), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, score, a[3].bytes);
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_INDEX_SCORES, a, 4)) {
            tide_cpu_ops()->index_scores(tide_cpu_ops(), q, heads, d, w, keys, n, score);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_INDEX_SCORES]++;
        int rc = cxo_dev(cx, a, 4, 0, NULL, &st);
        if (rc == 0)
            rc = cxo_launched(cx, cx->kernels == TIDE_CUDA_KERNELS_FAST
                                      ? tide_cuda_index_scores_fast(a[0].d, 1, heads, d, a[1].d, a[2].d, n, 1, 0,
                                                                    a[3].d, NULL, &st)
                                      : tide_cuda_index_scores(a[0].d, 1, heads, d, a[1].d, a[2].d, n, a[3].d, NULL,
                                                               &st));
        if (rc == 0) rc = cxo_dev_done(cx, a, 4, &st);
        if (rc != 0) {
            cxo_fail(cx, "index_scores", &st);
            cxo_zero(cx, score, a[3].bytes);
        }
    }
    leave(cx);
}

static int has_nan(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}

/* score and out are host arrays (the indexer's): the NaN check reads them */
static int cu_topk_sorted(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch) {
    if (k > n) k = (int)n;
    if (k <= 0) return 0;
    tide_cuda_ops_ctx *cx = enter(self);
    int got = k;
    cxo_arg a[] = {{score, F4(n), CXO_IN, 0}, {out, cxo_bytes(k, 1, 4), CXO_OUT, 0}};
    /* the kernel's order keys assume no NaN; the CPU's comparison rule
     * decides NaN cases */
    if (cx && cx->failed) {
        got = 0;
    } else if (!cx || n > INT32_MAX || cxo_any_resident(cx, a, 2) || has_nan(score, n)) {
        if (fallback(cx, TIDE_CUDA_OP_TOPK, a, 2))
            return tide_cpu_ops()->topk_sorted(tide_cpu_ops(), score, n, k, out, scratch);
        got = 0;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_TOPK]++;
        if (cxo_dev(cx, a, 2, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_topk_sorted(a[0].d, 1, n, k, a[1].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 2, &st) != 0) {
            cxo_fail(cx, "topk_sorted", &st);
            got = 0;
        }
    }
    leave(cx);
    return got;
}

/* ---- MoE routing (idx and w: the host's, which groups rows by expert) ---- */

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
    cxo_arg a[] = {{logits, F4(rows * n_experts), CXO_IN, 0}, {bias, F4(n_experts), CXO_W, 0},
                   {idx, cxo_bytes(rows, k, 4), CXO_OUT, 0}, {w, F4(rows * k), CXO_OUT, 0}};
    if (cx && (cx->failed || cxo_any_resident(cx, a + 2, 2))) {
        if (!cx->failed) { /* the outputs must be host arrays */
            tide_status st = {0};
            tide_fail(&st, TIDE_ERR_INVALID, "the expert ids and weights must be host arrays");
            cxo_fail(cx, "moe_route", &st);
        }
        moe_defined(rows, n_experts, k, idx, w);
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_MOE_ROUTE, a, 4)) {
            tide_cpu_ops()->moe_route(tide_cpu_ops(), logits, rows, n_experts, k, func, bias, norm, route_scale, idx,
                                      w);
            return;
        }
        moe_defined(rows, n_experts, k, idx, w);
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_MOE_ROUTE]++;
        if (cxo_dev(cx, a, 4, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_moe_route(a[0].d, rows, n_experts, k, func, a[1].d, norm, route_scale, a[2].d,
                                                 a[3].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 4, &st) != 0) {
            cxo_fail(cx, "moe_route", &st);
            moe_defined(rows, n_experts, k, idx, w);
        }
    }
    leave(cx);
}

/* ---- elementwise: swiglu, engram_mix, compress_pool ---- */

static void cu_swiglu(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                      const float *weight, float *h) {
    if (rows <= 0 || n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{g, F4(rows * n), CXO_IN, 0}, {u, F4(rows * n), CXO_IN, 0}, {weight, F4(rows), CXO_IN, 0},
                   {h, F4(rows * n), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, h, a[3].bytes);
    } else if (!cx) {
        tide_cpu_ops()->swiglu(tide_cpu_ops(), g, u, rows, n, limit, weight, h);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_SWIGLU]++;
        if (cxo_dev(cx, a, 4, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_swiglu(a[0].d, a[1].d, rows, n, limit, a[2].d, a[3].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 4, &st) != 0) {
            cxo_fail(cx, "swiglu", &st);
            cxo_zero(cx, h, a[3].bytes);
        }
    }
    leave(cx);
}

static void cu_engram_mix(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                          double eps, float *x) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = hc >= 1 && dim >= 1 && dim <= TIDE_CUDA_ENGRAM_MAX_DIM && rows * hc <= INT32_MAX;
    cxo_arg a[] = {{kv, F4(rows * (hc + 1) * dim), CXO_IN, 0}, {w, F4(hc * dim), CXO_W, 0},
                   {x, F4(rows * hc * dim), CXO_INOUT, 0}};
    if (cx && cx->failed) {
        /* in place: x stays as it was */
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_ENGRAM_MIX, a, 3)) {
            tide_cpu_ops()->engram_mix(tide_cpu_ops(), kv, w, rows, hc, dim, eps, x);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ENGRAM_MIX]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_engram_mix(a[0].d, a[1].d, rows, hc, dim, eps, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0)
            cxo_fail(cx, "engram_mix", &st);
    }
    leave(cx);
}

static void cu_compress_pool(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim,
                             float *out) {
    if (dim <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int ok = r >= 1 && r <= 64; /* the kernel's range; the CPU decides the rest */
    cxo_arg a[] = {{kv, F4(r * dim), CXO_IN, 0}, {score, F4(r * dim), CXO_IN, 0}, {out, F4(dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, out, a[2].bytes);
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_COMPRESS_POOL, a, 3)) {
            tide_cpu_ops()->compress_pool(tide_cpu_ops(), kv, score, r, dim, out);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_COMPRESS_POOL]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_compress_pool(a[0].d, a[1].d, 1, r, dim, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "compress_pool", &st);
            cxo_zero(cx, out, a[2].bytes);
        }
    }
    leave(cx);
}

/* ---- the forward's data movement (fwd_glue.cu): index arrays are the
 *      host's, uploaded with the op ---- */

static void cu_embed(const tide_ops *self, const tide_weight *table, const int32_t *ids, int64_t rows, int hc,
                     float *h) {
    if (rows <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int bf16 = table->type == TIDE_W_BF16;
    int ok = table->type == TIDE_W_F32 || bf16;
    cxo_arg a[] = {{table->data, cxo_bytes(table->out, table->in, bf16 ? 2 : 4), CXO_W, 0},
                   {ids, cxo_bytes(rows, 1, 4), CXO_IN, 0}, {h, F4(rows * hc * table->in), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, h, a[2].bytes);
    } else if (!cx || !ok) {
        if (fallback(cx, TIDE_CUDA_OP_EMBED, a, 3)) {
            tide_cpu_ops()->embed(tide_cpu_ops(), table, ids, rows, hc, h);
            return;
        }
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_EMBED]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_embed(a[0].d, bf16, table->in, a[1].d, rows, hc, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "embed", &st);
            cxo_zero(cx, h, a[2].bytes);
        }
    }
    leave(cx);
}

static void cu_gather_rows(const tide_ops *self, const void *src, size_t width, const int64_t *idx, int64_t n,
                           void *dst) {
    if (n <= 0 || !width) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int64_t hi = -1;
    for (int64_t i = 0; i < n; i++) hi = idx[i] > hi ? idx[i] : hi;
    cxo_arg a[] = {{src, cxo_bytes(hi + 1, (int64_t)width, 1), CXO_IN, 0}, {idx, cxo_bytes(n, 8, 1), CXO_IN, 0},
                   {dst, cxo_bytes(n, (int64_t)width, 1), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, dst, a[2].bytes);
    } else if (!cx) {
        tide_cpu_ops()->gather_rows(tide_cpu_ops(), src, width, idx, n, dst);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_GATHER]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_gather_rows(a[0].d, width, a[1].d, n, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "gather_rows", &st);
            cxo_zero(cx, dst, a[2].bytes);
        }
    }
    leave(cx);
}

static void cu_scatter_add(const tide_ops *self, const float *y, int64_t n, int64_t dim, const int64_t *idx,
                           float *acc) {
    if (n <= 0 || dim <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    int64_t hi = -1;
    for (int64_t i = 0; i < n; i++) hi = idx[i] > hi ? idx[i] : hi;
    cxo_arg a[] = {{y, F4(n * dim), CXO_IN, 0}, {idx, cxo_bytes(n, 8, 1), CXO_IN, 0},
                   {acc, F4((hi + 1) * dim), CXO_INOUT, 0}};
    if (cx && cx->failed) {
        /* in place: acc stays as it was */
    } else if (!cx) {
        tide_cpu_ops()->scatter_add(tide_cpu_ops(), y, n, dim, idx, acc);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_SCATTER_ADD]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_scatter_add(a[0].d, n, dim, a[1].d, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0)
            cxo_fail(cx, "scatter_add", &st);
    }
    leave(cx);
}

static void cu_add_bf16(const tide_ops *self, const float *x, const float *y, int64_t n, float *out) {
    if (n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{x, F4(n), CXO_IN, 0}, {y, F4(n), CXO_IN, 0}, {out, F4(n), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, out, a[2].bytes);
    } else if (!cx) {
        tide_cpu_ops()->add_bf16(tide_cpu_ops(), x, y, n, out);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ELEMENTWISE]++;
        if (cxo_dev(cx, a, 3, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_add_bf16(a[0].d, a[1].d, n, a[2].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 3, &st) != 0) {
            cxo_fail(cx, "add_bf16", &st);
            cxo_zero(cx, out, a[2].bytes);
        }
    }
    leave(cx);
}

static void cu_div_scalar(const tide_ops *self, float *x, int64_t n, float s) {
    if (n <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{x, F4(n), CXO_INOUT, 0}};
    if (cx && cx->failed) {
        /* in place */
    } else if (!cx) {
        tide_cpu_ops()->div_scalar(tide_cpu_ops(), x, n, s);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ELEMENTWISE]++;
        if (cxo_dev(cx, a, 1, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_div_scalar(a[0].d, n, s, NULL, &st)) != 0 || cxo_dev_done(cx, a, 1, &st) != 0)
            cxo_fail(cx, "div_scalar", &st);
    }
    leave(cx);
}

static void cu_hc_mean(const tide_ops *self, const float *h, int64_t rows, int hc, int64_t dim, float *out) {
    if (rows <= 0 || dim <= 0) return;
    tide_cuda_ops_ctx *cx = enter(self);
    cxo_arg a[] = {{h, F4(rows * hc * dim), CXO_IN, 0}, {out, F4(rows * dim), CXO_OUT, 0}};
    if (cx && cx->failed) {
        cxo_zero(cx, out, a[1].bytes);
    } else if (!cx) {
        tide_cpu_ops()->hc_mean(tide_cpu_ops(), h, rows, hc, dim, out);
        return;
    } else {
        tide_status st = {0};
        cx->stats.gpu_calls[TIDE_CUDA_OP_ELEMENTWISE]++;
        if (cxo_dev(cx, a, 2, 0, NULL, &st) != 0 ||
            cxo_launched(cx, tide_cuda_hc_mean(a[0].d, rows, hc, dim, a[1].d, NULL, &st)) != 0 ||
            cxo_dev_done(cx, a, 2, &st) != 0) {
            cxo_fail(cx, "hc_mean", &st);
            cxo_zero(cx, out, a[1].bytes);
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
    .alloc = cxo_op_alloc,
    .release = cxo_op_release,
    .upload = cxo_op_upload,
    .download = cxo_op_download,
    .copy = cxo_op_copy,
    .zero = cxo_op_zero,
    .embed = cu_embed,
    .gather_rows = cu_gather_rows,
    .scatter_add = cu_scatter_add,
    .add_bf16 = cu_add_bf16,
    .div_scalar = cu_div_scalar,
    .hc_mean = cu_hc_mean,
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
        "embed",      "gather_rows", "scatter_add", "elementwise",
    };
    return op >= 0 && op < TIDE_CUDA_OP_COUNT ? names[op] : "?";
}
