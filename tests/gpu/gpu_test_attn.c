/* GPU sparse attention (tide_cuda_sparse_attn) against the CPU backend's
 * sparse_attn on fresh random data.
 *
 * Error bound: the kernel repeats the CPU's roundings (the same 4-lane double
 * dot products, numpy-order exp and sums, BF16 probabilities, double value
 * sums in entry order), so it is designed to be bit-identical; the test
 * requires every output within one BF16 rounding step of the CPU's
 * (|gpu - cpu| <= 2^-8 |cpu|) and at most 0.1% of the outputs differing at
 * all, and reports how many are bit-identical. Cases cover empty slots (-1
 * and out-of-range indices), a chunk of 64 that is entirely empty, rows with
 * no entries at all, lengths not a multiple of 64, and large sinks.
 * The fast kernel (tide_cuda_sparse_attn_fast) is held to the bound derived
 * in run_case on every case whose dim it takes. */
#include <math.h>

#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t rows;
    int heads;
    int64_t dim, n_kv;
    int n_idx;
    double empty; /* fraction of empty entries */
    int empty_chunk; /* 1: entries 64..127 of row 0 all empty */
} shape;

static void run_case(gu_ctx *c, gu_rng *rng, shape s) {
    size_t nq = (size_t)(s.rows * s.heads * s.dim), nkv = (size_t)(s.n_kv * s.dim);
    size_t ni = (size_t)(s.rows * s.n_idx);
    float *q = gu_xmalloc(nq * sizeof(float)), *kv = gu_xmalloc(nkv * sizeof(float));
    float *sink = gu_xmalloc((size_t)s.heads * sizeof(float));
    float *ref = gu_xmalloc(nq * sizeof(float)), *got = gu_xmalloc(nq * sizeof(float));
    int32_t *idx = gu_xmalloc(ni * sizeof(int32_t));
    const float **ptr = gu_xmalloc(ni * sizeof(float *));
    tide_attn_row *rows = gu_xmalloc((size_t)s.rows * sizeof(tide_attn_row));
    for (size_t i = 0; i < nq; i++) q[i] = GC_BF16_NORMAL(rng, 1.0);
    for (size_t i = 0; i < nkv; i++) kv[i] = GC_BF16_NORMAL(rng, 1.0);
    for (int h = 0; h < s.heads; h++) sink[h] = (float)(gu_normal(rng) * 2.0 + (h == 0 ? 8.0 : 0.0));
    for (int64_t r = 0; r < s.rows; r++) {
        for (int i = 0; i < s.n_idx; i++) {
            int32_t e = (int32_t)(gu_uniform(rng) * (double)s.n_kv);
            double u = gu_uniform(rng);
            if (u < s.empty) e = u < s.empty / 4 ? (int32_t)s.n_kv + 3 : -1; /* -1, or out of range */
            if (s.empty_chunk && r == 0 && i >= 64 && i < 128) e = -1;
            idx[r * s.n_idx + i] = e;
            ptr[r * s.n_idx + i] = (e >= 0 && e < s.n_kv) ? kv + (int64_t)e * s.dim : NULL;
        }
        rows[r].kv = ptr + r * s.n_idx;
        rows[r].n_idx = s.n_idx;
    }
    float scale = (float)(1.0 / sqrt((double)s.dim));
    tide_cpu_ops()->sparse_attn(tide_cpu_ops(), NULL, q, s.rows, s.heads, s.dim, rows, sink, scale, ref);

    float *dq = gu_dalloc(nq * sizeof(float)), *dkv = gu_dalloc(nkv * sizeof(float) + 4);
    float *dsink = gu_dalloc((size_t)s.heads * sizeof(float)), *dout = gu_dalloc(nq * sizeof(float));
    int32_t *didx = gu_dalloc(ni * sizeof(int32_t) + 4);
    gu_up(dq, q, nq * sizeof(float));
    gu_up(dkv, kv, nkv * sizeof(float));
    gu_up(dsink, sink, (size_t)s.heads * sizeof(float));
    gu_up(didx, idx, ni * sizeof(int32_t));
    gu_poison(dout, 0xff, nq * sizeof(float));
    tide_status st = {0};
    gu_ran(tide_cuda_sparse_attn(dq, s.rows, s.heads, s.dim, dkv, s.n_kv, didx, s.n_idx, dsink, scale, dout, NULL,
                                 &st),
           &st, "sparse_attn");
    gu_down(got, dout, nq * sizeof(float));
    gc_stats g = gc_compare(got, ref, nq, 0x1p-8);
    char name[96];
    snprintf(name, sizeof name, "rows %lld heads %d dim %lld n_idx %d n_kv %lld%s", (long long)s.rows, s.heads,
             (long long)s.dim, s.n_idx, (long long)s.n_kv, s.empty_chunk ? " empty chunk" : "");
    gu_result(c, name, g.outside == 0 && g.differ * 1000 <= g.n,
              "bit-identical %zu of %zu; outside 1 bf16 step %zu; max rel %.3g", g.n - g.differ, g.n, g.outside,
              g.max_rel);
    /* the fast kernel (dim a multiple of 4, <= 512), against the bound:
     * with exact probabilities w_i (sink included) and E_d = sum_i w_i |v_i[d]|,
     *   |gpu - cpu| <= 2 c E_d + 2^-7 |cpu|,
     *   c = 2^-7 + 2 ds + (n/64 + 4) 2^-20 + n 2^-23,
     * ds = the largest score error scale * dim 2^-23 sum|q k| (f32 dots), 2^-7
     * one bf16 step of a probability on either side, 2^-20 per __expf and per
     * chunk correction, n 2^-23 the f32 sums; 2^-7 |cpu| the output's bf16. */
    if (s.dim % 4 == 0 && s.dim <= TIDE_CUDA_ATTN_FAST_MAX_DIM) {
        gu_poison(dout, 0xff, nq * sizeof(float));
        gu_ran(tide_cuda_sparse_attn_fast(dq, s.rows, s.heads, s.dim, dkv, s.n_kv, didx, s.n_idx, dsink, scale, dout,
                                          NULL, &st),
               &st, "sparse_attn_fast");
        gu_down(got, dout, nq * sizeof(float));
        double *wv = gu_xmalloc((size_t)(s.n_idx + 1) * sizeof(double)), *sv = gu_xmalloc((size_t)(s.n_idx + 1) * sizeof(double));
        size_t over = 0, same = 0;
        double worst = 0;
        for (int64_t r = 0; r < s.rows; r++)
            for (int h = 0; h < s.heads; h++) {
                const float *qh = q + (r * s.heads + h) * s.dim;
                double mx = sink[h], ds = 0;
                for (int i = 0; i < s.n_idx; i++) {
                    const float *k = ptr[r * s.n_idx + i];
                    if (!k) continue;
                    double dot = 0, mag = 0;
                    for (int64_t d = 0; d < s.dim; d++) {
                        dot += (double)qh[d] * k[d];
                        mag += fabs((double)qh[d] * k[d]);
                    }
                    sv[i] = dot * scale;
                    if (sv[i] > mx) mx = sv[i];
                    double e = scale * (double)s.dim * 0x1p-23 * mag;
                    if (e > ds) ds = e;
                }
                double den = exp((double)sink[h] - mx);
                for (int i = 0; i < s.n_idx; i++) den += ptr[r * s.n_idx + i] ? exp(sv[i] - mx) : 0.0;
                for (int i = 0; i < s.n_idx; i++) wv[i] = ptr[r * s.n_idx + i] ? exp(sv[i] - mx) / den : 0.0;
                double cc = 0x1p-7 + 2 * ds + ((double)s.n_idx / 64 + 4) * 0x1p-20 + (double)s.n_idx * 0x1p-23;
                for (int64_t d = 0; d < s.dim; d++) {
                    double E = 0;
                    for (int i = 0; i < s.n_idx; i++)
                        if (wv[i] > 0) E += wv[i] * fabs((double)ptr[r * s.n_idx + i][d]);
                    size_t o = (size_t)((r * s.heads + h) * s.dim + d);
                    double b = 2 * cc * E + 0x1p-7 * fabs((double)ref[o]) + 1e-30, e = fabs((double)got[o] - ref[o]);
                    over += !(e <= b);
                    same += got[o] == ref[o];
                    if (e / b > worst) worst = e / b;
                }
            }
        snprintf(name, sizeof name, "fast rows %lld heads %d dim %lld n_idx %d n_kv %lld%s", (long long)s.rows, s.heads,
                 (long long)s.dim, s.n_idx, (long long)s.n_kv, s.empty_chunk ? " empty chunk" : "");
        gu_result(c, name, over == 0, "%zu outside the bound; worst error/bound %.3g; bit-identical %zu of %zu", over,
                  worst, same, nq);
        free(wv);
        free(sv);
    }
    tide_cuda_free(dq);
    tide_cuda_free(dkv);
    tide_cuda_free(dsink);
    tide_cuda_free(dout);
    tide_cuda_free(didx);
    free(q);
    free(kv);
    free(sink);
    free(ref);
    free(got);
    free(idx);
    free(ptr);
    free(rows);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    int rc1 = tide_cuda_sparse_attn(NULL, 1, 1, 0, NULL, 0, NULL, 0, NULL, 1.0f, NULL, NULL, &st);
    int rc2 = tide_cuda_sparse_attn(NULL, 1, 1, TIDE_CUDA_ATTN_MAX_DIM + 1, NULL, 0, NULL, 0, NULL, 1.0f, NULL, NULL,
                                    &st);
    int rc3 = tide_cuda_sparse_attn(NULL, 0, 1, 64, NULL, 0, NULL, 0, NULL, 1.0f, NULL, NULL, &st);
    gu_result(c, "bad arguments", rc1 == -1 && rc2 == -1 && rc3 == 0 && st.code == TIDE_ERR_INVALID,
              "dim 0 and dim > max refused, rows 0 a no-op; last message: %s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_attn");
    gu_rng rng = {c.seed};
    static const shape big[] = {
        {1, 64, 512, 700, 640, 0.1, 0},  /* decode-like: window 128 + top-k 512 */
        {4, 16, 512, 300, 200, 0.2, 1},  /* an empty chunk */
        {3, 8, 128, 50, 64, 0.0, 0},     /* exactly one chunk */
        {2, 4, 96, 40, 65, 0.5, 0},      /* one entry past a chunk */
        {2, 2, 64, 10, 0, 0.0, 0},       /* no entries: the sink alone */
        {5, 3, 130, 90, 130, 0.05, 1},   /* dim not a multiple of 4 */
        {16, 8, 512, 2000, 300, 0.1, 0},
    };
    static const shape small[] = {{1, 4, 512, 200, 150, 0.1, 1}, {2, 2, 64, 10, 0, 0.0, 0},
                                  {2, 3, 130, 90, 70, 0.2, 0}};
    const shape *sh = c.small ? small : big;
    size_t ns = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < ns; i++) run_case(&c, &rng, sh[i]);
    bad_args(&c);
    return gu_finish(&c);
}
