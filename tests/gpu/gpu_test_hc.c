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
 * Inputs: x BF16-exact with a random magnitude per row, fn ~ N(0, 1/n), the
 * model's scale/base ranges, hc = 4 (the model) and others. */
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
    static const shape big[] = {{8, 4, 4096, 20}, {3, 4, 7168, 20}, {5, 2, 1000, 3},
                                {2, 1, 129, 1},   {4, 16, 512, 20}, {7, 3, 333, 0}};
    static const shape small[] = {{2, 4, 1024, 20}, {2, 3, 333, 2}};
    const shape *sh = c.small ? small : big;
    size_t ns = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < ns; i++) run_case(&c, &rng, sh[i]);
    bad_args(&c);
    return gu_finish(&c);
}
