/* GPU FP8 activation quantisation (per 32, ue8m0 scales) against
 * tide_quant_fp8_act: codes and scales must be bit-identical.
 *
 * Each 32-block of the fresh random input is drawn from one of several
 * kinds, so that every branch of the format is hit: normal values over a
 * wide range of magnitudes (2^-20 .. 2^20), all zeros (the 1e-4 amax floor),
 * tiny values (scale at the floor, e4m3 denormal codes), f32 denormals,
 * exact powers of two (scale ratios on a power of two), a block with an
 * infinity, a block with a NaN. Rows whose length is not a multiple of 32
 * (a trailing partial block) or of 4 (the scalar path), and an input that is
 * not 16-byte aligned, are covered. Outputs are written twice over two
 * different poison patterns; both runs must match, so an unwritten byte
 * cannot pass by accident. */
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t rows, n;
    int misalign; /* start x one float into the buffer */
} shape;

static float draw(gu_rng *rng, int kind, double mag) {
    switch (kind) {
    case 0: return 0.0f;
    case 1: return (float)(gu_normal(rng) * 1e-7);
    case 2: return (float)(gu_normal(rng) * 0x1p-140); /* f32 denormals */
    case 3: return (float)ldexp(gu_uniform(rng) < 0.5 ? -1.0 : 1.0, (int)(gu_uniform(rng) * 20) - 10);
    default: return (float)(gu_normal(rng) * mag);
    }
}

static void fill(gu_rng *rng, float *x, int64_t n) {
    for (int64_t b0 = 0; b0 < n; b0 += 32) {
        int64_t len = n - b0 < 32 ? n - b0 : 32;
        double u = gu_uniform(rng);
        int kind = u < 0.70 ? 4 : u < 0.75 ? 0 : u < 0.80 ? 1 : u < 0.85 ? 2 : u < 0.90 ? 3 : u < 0.95 ? 5 : 6;
        double mag = ldexp(1.0, (int)(gu_uniform(rng) * 41) - 20);
        for (int64_t i = 0; i < len; i++) x[b0 + i] = draw(rng, kind > 4 ? 4 : kind, mag);
        if (kind == 5) x[b0 + (int64_t)(gu_uniform(rng) * len)] = gu_uniform(rng) < 0.5 ? INFINITY : -INFINITY;
        if (kind == 6) x[b0 + (int64_t)(gu_uniform(rng) * len)] = NAN;
    }
}

static void run_case(gu_ctx *c, gu_rng *rng, shape s) {
    int64_t nb = (s.n + 31) / 32;
    size_t nx = (size_t)(s.rows * s.n), ns = (size_t)(s.rows * nb);
    float *x = gu_xmalloc((nx + 1) * sizeof(float));
    float *xs = x + s.misalign;
    uint8_t *q = gu_xmalloc(nx), *sc = gu_xmalloc(ns), *gq = gu_xmalloc(nx), *gs = gu_xmalloc(ns);
    for (int64_t r = 0; r < s.rows; r++) fill(rng, xs + r * s.n, s.n);
    for (int64_t r = 0; r < s.rows; r++) tide_quant_fp8_act(xs + r * s.n, (size_t)s.n, 32, q + r * s.n, sc + r * nb);

    float *dxb = gu_dalloc((nx + 1) * sizeof(float));
    float *dx = dxb + s.misalign;
    uint8_t *dq = gu_dalloc(nx), *ds = gu_dalloc(ns);
    gu_up(dx, xs, nx * sizeof(float));
    size_t bad_q = 0, bad_s = 0;
    static const int poison[2] = {0x5a, 0xa5};
    for (int p = 0; p < 2; p++) {
        tide_status st = {0};
        gu_poison(dq, poison[p], nx);
        gu_poison(ds, poison[p], ns);
        gu_ran(tide_cuda_quant_fp8_act(dx, s.rows, s.n, dq, ds, NULL, &st), &st, "quant_fp8_act");
        gu_down(gq, dq, nx);
        gu_down(gs, ds, ns);
        for (size_t i = 0; i < nx; i++) bad_q += gq[i] != q[i];
        for (size_t i = 0; i < ns; i++) bad_s += gs[i] != sc[i];
    }
    char name[80];
    snprintf(name, sizeof name, "%lldx%lld%s", (long long)s.rows, (long long)s.n, s.misalign ? " unaligned" : "");
    gu_result(c, name, bad_q == 0 && bad_s == 0, "bit-exact required; codes differing %zu of %zu, scales %zu of %zu (2 runs)",
              bad_q, 2 * nx, bad_s, 2 * ns);
    tide_cuda_free(dxb);
    tide_cuda_free(dq);
    tide_cuda_free(ds);
    free(x);
    free(q);
    free(sc);
    free(gq);
    free(gs);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_quant_fp8");
    gu_rng rng = {c.seed};
    static const shape big[] = {{1, 32, 0},    {17, 4096, 0}, {9, 7168, 0}, {5, 1000, 0}, {3, 1001, 0}, {64, 2048, 0},
                                {2, 31, 0},    {1, 5, 0},     {7, 4096, 1}, {1000, 512, 0}, {3, 96, 1}};
    static const shape small[] = {{1, 32, 0}, {3, 1000, 0}, {3, 1001, 0}, {2, 31, 0}, {2, 512, 1}};
    const shape *sh = c.small ? small : big;
    size_t n = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < n; i++) run_case(&c, &rng, sh[i]);
    return gu_finish(&c);
}
