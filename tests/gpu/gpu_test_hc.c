/* GPU hyper-connection ops (tide_cuda_hc_mixes, _hc_pre, _hc_post) against
 * the CPU backend's hc_mixes / hc_pre / hc_post on fresh random data.
 *
 * Error bounds:
 *   hc_pre, hc_post: the same sequential f32 sums and one BF16 rounding:
 *     bit-identical required.
 *   hc_mixes: designed bit-identical (numpy-order mean of squares, the CPU's
 *     4-lane double dot products, the same exp and Sinkhorn roundings); the
 *     test requires pre, post and comb within 2^-18 relative of the CPU's
 *     (a few f32 ulps after 20 Sinkhorn iterations) and reports how many are
 *     bit-identical.
 *   hc_mixes_fast (kernel mode fast): f32 split-K sums, the bound derived
 *     in run_case; and the last row computed alone must give the same bits
 *     as in the batch (batch invariance).
 * Inputs: x BF16-exact with a random magnitude per row, fn ~ N(0, 1/n), the
 * model's scale/base ranges, hc = 4 (the model) and others. */
#include <math.h>
#include <string.h>

#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t rows;
    int hc;
    int64_t dim;
    int iters;
} shape;

static void run_case(gu_ctx *c, gu_rng *rng, shape s) {
    const int h = s.hc, nm = (2 + h) * h;
    const int64_t n = h * s.dim;
    size_t nx = (size_t)(s.rows * n), nfn = (size_t)(nm * n), ny = (size_t)(s.rows * s.dim);
    float *x = gu_xmalloc(nx * sizeof(float)), *fn = gu_xmalloc(nfn * sizeof(float));
    float scale[3], *base = gu_xmalloc((size_t)nm * sizeof(float));
    size_t npre = (size_t)(s.rows * h), ncomb = (size_t)(s.rows * h * h);
    float *rpre = gu_xmalloc(npre * 4), *rpost = gu_xmalloc(npre * 4), *rcomb = gu_xmalloc(ncomb * 4);
    float *gpre = gu_xmalloc(npre * 4), *gpost = gu_xmalloc(npre * 4), *gcomb = gu_xmalloc(ncomb * 4);
    for (int64_t r = 0; r < s.rows; r++) {
        double mag = ldexp(1.0, (int)(gu_uniform(rng) * 9) - 4);
        for (int64_t i = 0; i < n; i++) x[r * n + i] = GC_BF16_NORMAL(rng, mag);
    }
    double sd = 1.0 / sqrt((double)n);
    for (size_t i = 0; i < nfn; i++) fn[i] = (float)(gu_normal(rng) * sd);
    for (int i = 0; i < 3; i++) scale[i] = (float)(0.5 + gu_uniform(rng));
    for (int i = 0; i < nm; i++) base[i] = (float)(gu_normal(rng) * 0.5);
    const double norm_eps = 1e-6, hc_eps = 1e-6;
    tide_cpu_ops()->hc_mixes(tide_cpu_ops(), NULL, x, s.rows, h, s.dim, fn, scale, base, norm_eps, s.iters, hc_eps,
                             rpre, rpost, rcomb);

    float *dx = gu_dalloc(nx * 4), *dfn = gu_dalloc(nfn * 4), *dscale = gu_dalloc(3 * 4);
    float *dbase = gu_dalloc((size_t)nm * 4), *dpre = gu_dalloc(npre * 4), *dpost = gu_dalloc(npre * 4);
    float *dcomb = gu_dalloc(ncomb * 4);
    gu_up(dx, x, nx * 4);
    gu_up(dfn, fn, nfn * 4);
    gu_up(dscale, scale, 3 * 4);
    gu_up(dbase, base, (size_t)nm * 4);
    gu_poison(dpre, 0xff, npre * 4);
    gu_poison(dpost, 0xff, npre * 4);
    gu_poison(dcomb, 0xff, ncomb * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_hc_mixes(dx, s.rows, h, s.dim, dfn, dscale, dbase, norm_eps, s.iters, hc_eps, dpre, dpost, dcomb,
                              NULL, &st),
           &st, "hc_mixes");
    gu_down(gpre, dpre, npre * 4);
    gu_down(gpost, dpost, npre * 4);
    gu_down(gcomb, dcomb, ncomb * 4);
    gc_stats a = gc_compare(gpre, rpre, npre, 0x1p-18), b = gc_compare(gpost, rpost, npre, 0x1p-18);
    gc_stats m = gc_compare(gcomb, rcomb, ncomb, 0x1p-18);
    char name[96];
    snprintf(name, sizeof name, "mixes rows %lld hc %d dim %lld iters %d", (long long)s.rows, h, (long long)s.dim,
             s.iters);
    gu_result(c, name, a.outside + b.outside + m.outside == 0,
              "bit-identical pre %zu/%zu post %zu/%zu comb %zu/%zu; max rel %.3g %.3g %.3g (bound 2^-18)",
              a.n - a.differ, a.n, b.n - b.differ, b.n, m.n - m.differ, m.n, a.max_rel, b.max_rel, m.max_rel);

    /* the fast kernel: within the bound below, and batch-invariant */
    {
        size_t wsb = tide_cuda_hc_mixes_fast_workspace(s.rows, h, s.dim);
        void *dws = gu_dalloc(wsb);
        float *fpre = gu_xmalloc(npre * 4), *fpost = gu_xmalloc(npre * 4), *fcomb = gu_xmalloc(ncomb * 4);
        gu_poison(dpre, 0xff, npre * 4);
        gu_poison(dpost, 0xff, npre * 4);
        gu_poison(dcomb, 0xff, ncomb * 4);
        gu_ran(tide_cuda_hc_mixes_fast(dx, s.rows, h, s.dim, dfn, dscale, dbase, norm_eps, s.iters, hc_eps, dpre, dpost,
                                       dcomb, dws, wsb, NULL, &st),
               &st, "hc_mixes_fast");
        gu_down(fpre, dpre, npre * 4);
        gu_down(fpost, dpost, npre * 4);
        gu_down(fcomb, dcomb, ncomb * 4);
        /* The bound. Each projection m_j = rs * sum_i x_i w_ji is formed from
         * f32 partials of KS = 256 terms (4 interleaved accumulators) added
         * over n/256 slices, so |dm_j| <= g * (rs * sum_i |x_i w_ji| + |m_j|)
         * with g = (64 + n/256 + 8) * 2^-24 (the second term: rs's own error,
         * its sum of squares having only positive terms). The gates are
         * sigmoids (slope <= 1/4): |d pre| <= s0/4 * dm, |d post| <= s1/2 * dm,
         * plus a few f32 ulps; comb: the Sinkhorn-normalised exponentials
         * move by at most 8 * s2 * dm (softmax entries move by <= 2 * max|dl|
         * times the entry, the normalisations are contractions; 4x margin). */
        double g = (64.0 + (double)((n + 255) / 256) + 8.0) * 0x1p-24, worst = 0;
        size_t over = 0;
        for (int64_t r = 0; r < s.rows; r++) {
            const float *xr = x + r * n;
            double sq = 0;
            for (int64_t i = 0; i < n; i++) sq += (double)xr[i] * xr[i];
            double rs = 1.0 / sqrt(sq / (double)n + norm_eps);
            double dm[3] = {0, 0, 0}; /* max over pre, post, comb projections */
            for (int j = 0; j < nm; j++) {
                double dot = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    double t = (double)xr[i] * fn[(int64_t)j * n + i];
                    dot += t;
                    mag += fabs(t);
                }
                double e = g * (rs * mag + fabs(rs * dot));
                int k = j < h ? 0 : j < 2 * h ? 1 : 2;
                if (e > dm[k]) dm[k] = e;
            }
            for (int c2 = 0; c2 < h; c2++) {
                double b1 = scale[0] / 4.0 * dm[0] + 0x1p-20, b2 = scale[1] / 2.0 * dm[1] + 0x1p-20;
                double e1 = fabs((double)fpre[r * h + c2] - rpre[r * h + c2]);
                double e2 = fabs((double)fpost[r * h + c2] - rpost[r * h + c2]);
                over += !(e1 <= b1) + !(e2 <= b2);
                worst = fmax(worst, fmax(e1 / b1, e2 / b2));
            }
            double b3 = 8.0 * scale[2] * dm[2] + 0x1p-18;
            for (int k2 = 0; k2 < h * h; k2++) {
                double e3 = fabs((double)fcomb[r * h * h + k2] - rcomb[r * h * h + k2]);
                over += !(e3 <= b3);
                worst = fmax(worst, e3 / b3);
            }
        }
        /* batch invariance: the last row alone gives the same bits */
        float *dpre1 = gu_dalloc((size_t)h * 4), *dpost1 = gu_dalloc((size_t)h * 4), *dcomb1 = gu_dalloc((size_t)h * h * 4);
        float one[3 * TIDE_CUDA_HC_MAX * TIDE_CUDA_HC_MAX];
        gu_ran(tide_cuda_hc_mixes_fast(dx + (s.rows - 1) * n, 1, h, s.dim, dfn, dscale, dbase, norm_eps, s.iters, hc_eps,
                                       dpre1, dpost1, dcomb1, dws, wsb, NULL, &st),
               &st, "hc_mixes_fast alone");
        gu_down(one, dpre1, (size_t)h * 4);
        gu_down(one + h, dpost1, (size_t)h * 4);
        gu_down(one + 2 * h, dcomb1, (size_t)h * h * 4);
        int inv = !memcmp(one, fpre + (s.rows - 1) * h, (size_t)h * 4) &&
                  !memcmp(one + h, fpost + (s.rows - 1) * h, (size_t)h * 4) &&
                  !memcmp(one + 2 * h, fcomb + (s.rows - 1) * h * h, (size_t)h * h * 4);
        snprintf(name, sizeof name, "mixes fast rows %lld hc %d dim %lld iters %d", (long long)s.rows, h,
                 (long long)s.dim, s.iters);
        gu_result(c, name, over == 0 && inv, "%zu outside the bound, worst error/bound %.3g; last row alone %s", over,
                  worst, inv ? "bit-identical (batch-invariant)" : "DIFFERS from the batch");
        tide_cuda_free(dws), tide_cuda_free(dpre1), tide_cuda_free(dpost1), tide_cuda_free(dcomb1);
        free(fpre), free(fpost), free(fcomb);
    }

    /* hc_pre and hc_post with the CPU's coefficients (so that each op is
     * checked on its own): y = pre(x), out = post(y, x) */
    float *ry = gu_xmalloc(ny * 4), *gy = gu_xmalloc(ny * 4), *rout = gu_xmalloc(nx * 4), *gout = gu_xmalloc(nx * 4);
    float *dy = gu_dalloc(ny * 4), *dout = gu_dalloc(nx * 4);
    gu_up(dpre, rpre, npre * 4);
    gu_up(dpost, rpost, npre * 4);
    gu_up(dcomb, rcomb, ncomb * 4);
    tide_cpu_ops()->hc_pre(tide_cpu_ops(), x, s.rows, h, s.dim, rpre, ry);
    gu_poison(dy, 0xff, ny * 4);
    gu_ran(tide_cuda_hc_pre(dx, s.rows, h, s.dim, dpre, dy, NULL, &st), &st, "hc_pre");
    gu_down(gy, dy, ny * 4);
    gc_stats p = gc_compare(gy, ry, ny, 0.0);
    snprintf(name, sizeof name, "pre rows %lld hc %d dim %lld", (long long)s.rows, h, (long long)s.dim);
    gu_result(c, name, p.differ == 0, "bit-exact required; %zu of %zu differ", p.differ, p.n);
    tide_cpu_ops()->hc_post(tide_cpu_ops(), ry, x, s.rows, h, s.dim, rpost, rcomb, rout);
    gu_up(dy, ry, ny * 4);
    gu_poison(dout, 0xff, nx * 4);
    gu_ran(tide_cuda_hc_post(dy, dx, s.rows, h, s.dim, dpost, dcomb, dout, NULL, &st), &st, "hc_post");
    gu_down(gout, dout, nx * 4);
    gc_stats q = gc_compare(gout, rout, nx, 0.0);
    snprintf(name, sizeof name, "post rows %lld hc %d dim %lld", (long long)s.rows, h, (long long)s.dim);
    gu_result(c, name, q.differ == 0, "bit-exact required; %zu of %zu differ", q.differ, q.n);

    void *dev[] = {dx, dfn, dscale, dbase, dpre, dpost, dcomb, dy, dout};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) tide_cuda_free(dev[i]);
    void *host[] = {x, fn, base, rpre, rpost, rcomb, gpre, gpost, gcomb, ry, gy, rout, gout};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    int rc1 = tide_cuda_hc_mixes(NULL, 1, 0, 64, NULL, NULL, NULL, 1e-6, 20, 1e-6, NULL, NULL, NULL, NULL, &st);
    int rc2 = tide_cuda_hc_mixes(NULL, 1, 4, TIDE_CUDA_HC_MAX_N, NULL, NULL, NULL, 1e-6, 20, 1e-6, NULL, NULL, NULL,
                                 NULL, &st);
    float *p = gu_dalloc(64);
    int rc3 = tide_cuda_hc_post(p, p, 1, 1, 4, p, p, p, NULL, &st); /* out aliases res */
    tide_cuda_free(p);
    gu_result(c, "bad arguments", rc1 == -1 && rc2 == -1 && rc3 == -1 && st.code == TIDE_ERR_INVALID,
              "hc 0, hc*dim > max and aliasing refused; last message: %s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_hc");
    gu_rng rng = {c.seed};
    static const shape big[] = {{8, 4, 4096, 20}, {3, 4, 7168, 20}, {5, 2, 1000, 3},   {2, 1, 129, 1},
                                {4, 16, 512, 20}, {7, 3, 333, 0},    {21, 4, 5120, 20}, {1, 4, 5120, 20}};
    static const shape small[] = {{2, 4, 1024, 20}, {2, 3, 333, 2}};
    const shape *sh = c.small ? small : big;
    size_t ns = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < ns; i++) run_case(&c, &rng, sh[i]);
    bad_args(&c);
    return gu_finish(&c);
}
