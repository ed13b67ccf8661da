/* Private helpers shared by the CPU backend's kernels. */
#ifndef TIDE_BACKEND_CPU_INTERNAL_H
#define TIDE_BACKEND_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "backend/ops.h"
#include "num/num.h"

/* Dot product: exact f32 products summed in double (4 lanes, fixed order),
 * rounded once to f32. The reference's matmuls accumulate in f32 in an
 * unspecified order (torch) and the numpy oracle in float64; a double sum of
 * f32 products is within ~1e-16 of the exact value, so this rounds like the
 * exact result: deterministic, independent of threading and of blocking. */
static inline float tide_cpu_dot(const float *a, const float *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (float)((s0 + s1) + (s2 + s3));
}

/* An f32 sum in numpy's pairwise order (numpy/core/src/umath/loops_utils:
 * pairwise_sum): below 8 values sequential; up to 128, eight running sums
 * combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) then the tail added in
 * order; above 128, split at n/2 rounded down to a multiple of 8. Used where
 * the reference reduces in f32 (norm statistics, softmax denominators), so
 * the oracle's roundings are reproduced exactly. */
static inline float tide_cpu_sum_np(const float *x, int64_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (int64_t i = 0; i < n; i++) r += x[i];
        return r;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = x[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += x[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += x[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return tide_cpu_sum_np(x, n2) + tide_cpu_sum_np(x + n2, n - n2);
}

/* Mean of squares in f32 as numpy's np.mean(np.square(x), dtype=f32). */
static inline float tide_cpu_mean_sq(const float *x, int64_t n, float *scratch) {
    for (int64_t i = 0; i < n; i++) scratch[i] = x[i] * x[i];
    return tide_cpu_sum_np(scratch, n) / (float)n;
}

/* exp in f32 by the algorithm of numpy's SIMD float32 exp (Cody-Waite
 * reduction by ln 2 in two FMA steps, a 5/2-degree rational minimax
 * approximation, scaling by 2^k). It is not correctly rounded (up to ~2.5
 * ulp), and neither is torch's; we use it so that the CPU backend rounds
 * exactly like the numpy oracle (tools/ref), which makes every test of the
 * forward pass bit-reproducible (glibc's expf disagrees with it on ~38% of
 * inputs by an ulp, enough to flip top-k choices downstream). */
static inline float tide_cpu_expf(float x) {
    if (x != x) return x;
    if (x >= 88.72283935546875f) return INFINITY;
    if (x <= -103.97208404541015625f) return 0.0f;
    float k = rintf(x * 0x1.715476p+0f);
    float y = fmaf(k, -6.93145752e-1f, x);
    y = fmaf(k, -1.42860677e-6f, y);
    float num = fmaf(0x1.0a7bbp-11f, y, 0x1.bae2b2p-8f);
    num = fmaf(num, y, 0x1.a2fb18p-5f);
    num = fmaf(num, y, 0x1.fa98bp-3f);
    num = fmaf(num, y, 0x1.7397aap-1f);
    num = fmaf(num, y, 1.0f);
    float den = fmaf(0x1.61d064p-6f, y, -0x1.18d0aep-2f);
    den = fmaf(den, y, 1.0f);
    return ldexpf(num / den, (int)k);
}

static inline float tide_cpu_sigmoid(float x) { return 1.0f / (1.0f + tide_cpu_expf(-x)); }

void tide_cpu_linear(const tide_ops *self, tide_pool *pool, const tide_weight *w, const float *x, int64_t rows,
                     float *y, int flags);
void tide_cpu_rmsnorm(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim, const float *w,
                      double eps, float *y);
void tide_cpu_rope(const tide_ops *self, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                   int inverse);
void tide_cpu_hc_mixes(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                       const float *fn, const float *scale, const float *base, double norm_eps,
                       int iters, double hc_eps, float *pre, float *post, float *comb);
void tide_cpu_hc_pre(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                     float *y);
void tide_cpu_hc_post(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                      const float *post, const float *comb, float *out);
void tide_cpu_sparse_attn(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                          const tide_attn_row *idx, const float *sink, float scale, float *out);
void tide_cpu_index_scores(const tide_ops *self, const float *q, int heads, int64_t d, const float *w,
                           const float *keys, int64_t n, float *score);
int tide_cpu_topk_sorted(const tide_ops *self, const float *score, int64_t n, int k, int32_t *out, int32_t *scratch);
void tide_cpu_swiglu(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                     const float *weight, float *h);
void tide_cpu_engram_mix(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                         double eps, float *x);
void tide_cpu_moe_route(const tide_ops *self, const float *logits, int64_t rows, int n_experts, int k, int func,
                        const float *bias, int norm, float route_scale, int32_t *idx, float *w);
void tide_cpu_compress_pool(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim, float *out);
/* cpu_mem.c: memory and data movement */
void *tide_cpu_alloc(const tide_ops *self, size_t bytes);
void tide_cpu_release(const tide_ops *self, void *p);
void tide_cpu_copy(const tide_ops *self, void *dst, const void *src, size_t bytes);
void tide_cpu_zero(const tide_ops *self, void *p, size_t bytes);
void tide_cpu_embed(const tide_ops *self, const tide_weight *table, const int32_t *ids, int64_t rows, int hc,
                    float *h);
void tide_cpu_gather_rows(const tide_ops *self, const void *src, size_t width, const int64_t *idx, int64_t n,
                          void *dst);
void tide_cpu_scatter_add(const tide_ops *self, const float *y, int64_t n, int64_t dim, const int64_t *idx,
                          float *acc);
void tide_cpu_add_bf16(const tide_ops *self, const float *a, const float *b, int64_t n, float *out);
void tide_cpu_div_scalar(const tide_ops *self, float *x, int64_t n, float s);
void tide_cpu_hc_mean(const tide_ops *self, const float *h, int64_t rows, int hc, int64_t dim, float *out);

#endif
