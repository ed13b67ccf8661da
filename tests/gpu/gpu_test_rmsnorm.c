/* GPU RMSNorm against the CPU backend: bit-identical outputs required.
 *
 * Both compute in f32 with the same rounding points and the same (numpy
 * pairwise) summation order for the mean of squares, so the error bound is
 * zero: every output must equal tide_cpu_ops()->rmsnorm's bit for bit, for
 * the f32 output (BF16-exact values), the bf16 output and the in-place call
 * (y == x). Inputs are fresh random BF16-exact rows with a random magnitude
 * per row (2^-8 .. 2^8); outputs are poisoned (NaN) before each run. */
#include "backend/ops.h"
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t rows, dim;
} shape;

static void run_case(gu_ctx *c, gu_rng *rng, shape s) {
    size_t n = (size_t)(s.rows * s.dim);
    float *x = gu_xmalloc(n * sizeof(float)), *w = gu_xmalloc((size_t)s.dim * sizeof(float));
    float *ref = gu_xmalloc(n * sizeof(float)), *got = gu_xmalloc(n * sizeof(float));
    uint16_t *got16 = gu_xmalloc(n * sizeof(uint16_t));
    for (int64_t r = 0; r < s.rows; r++) {
        double mag = ldexp(1.0, (int)(gu_uniform(rng) * 17) - 8);
        for (int64_t i = 0; i < s.dim; i++) x[r * s.dim + i] = tide_round_bf16((float)(gu_normal(rng) * mag));
    }
    for (int64_t i = 0; i < s.dim; i++) w[i] = tide_round_bf16((float)(1.0 + 0.25 * gu_normal(rng)));
    const double eps = 1e-6;
    tide_cpu_ops()->rmsnorm(tide_cpu_ops(), NULL, x, s.rows, s.dim, w, eps, ref);

    float *dx = gu_dalloc(n * sizeof(float)), *dw = gu_dalloc((size_t)s.dim * sizeof(float));
    float *dy = gu_dalloc(n * sizeof(float));
    uint16_t *dy16 = gu_dalloc(n * sizeof(uint16_t));
    gu_up(dx, x, n * sizeof(float));
    gu_up(dw, w, (size_t)s.dim * sizeof(float));
    tide_status st = {0};
    char name[64];

    /* f32 output */
    gu_poison(dy, 0xff, n * sizeof(float));
    gu_ran(tide_cuda_rmsnorm_f32(dx, s.rows, s.dim, dw, eps, dy, NULL, &st), &st, "rmsnorm_f32");
    gu_down(got, dy, n * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &ref[i], 4) != 0;
    snprintf(name, sizeof name, "f32 %lldx%lld", (long long)s.rows, (long long)s.dim);
    gu_result(c, name, bad == 0, "bit-exact required; %zu of %zu differ", bad, n);

    /* bf16 output */
    gu_poison(dy16, 0xff, n * sizeof(uint16_t));
    gu_ran(tide_cuda_rmsnorm_bf16(dx, s.rows, s.dim, dw, eps, dy16, NULL, &st), &st, "rmsnorm_bf16");
    gu_down(got16, dy16, n * sizeof(uint16_t));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += got16[i] != tide_f32_to_bf16(ref[i]);
    snprintf(name, sizeof name, "bf16 %lldx%lld", (long long)s.rows, (long long)s.dim);
    gu_result(c, name, bad == 0, "bit-exact required; %zu of %zu differ", bad, n);

    /* in place: y == x */
    gu_ran(tide_cuda_rmsnorm_f32(dx, s.rows, s.dim, dw, eps, dx, NULL, &st), &st, "rmsnorm_f32 in place");
    gu_down(got, dx, n * sizeof(float));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &ref[i], 4) != 0;
    snprintf(name, sizeof name, "in-place %lldx%lld", (long long)s.rows, (long long)s.dim);
    gu_result(c, name, bad == 0, "bit-exact required; %zu of %zu differ", bad, n);

    tide_cuda_free(dx);
    tide_cuda_free(dw);
    tide_cuda_free(dy);
    tide_cuda_free(dy16);
    free(x);
    free(w);
    free(ref);
    free(got);
    free(got16);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    int rc1 = tide_cuda_rmsnorm_f32(NULL, 1, 0, NULL, 1e-6, NULL, NULL, &st);
    int rc2 = tide_cuda_rmsnorm_f32(NULL, 1, TIDE_CUDA_RMSNORM_MAX_DIM + 1, NULL, 1e-6, NULL, NULL, &st);
    int rc3 = tide_cuda_rmsnorm_f32(NULL, 0, 64, NULL, 1e-6, NULL, NULL, &st); /* nothing to do */
    gu_result(c, "bad arguments", rc1 == -1 && rc2 == -1 && rc3 == 0 && st.code == TIDE_ERR_INVALID,
              "dim 0 and dim > max refused, rows 0 a no-op; last message: %s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_rmsnorm");
    gu_rng rng = {c.seed};
    /* dim % 4 != 0 takes the scalar path (1001, 12345, 3, 129, 7) */
    static const shape big[] = {{1, 4096}, {37, 4096}, {64, 7168},  {5, 1000}, {3, 3},      {2, 129},
                                {8, 16384}, {300, 512}, {4, 1536}, {1, 7},     {3, 1001},   {2, 12345},
                                {9, 6000},  {1000, 4096}};
    static const shape small[] = {{3, 4096}, {5, 1000}, {3, 3}, {2, 129}, {1, 16384}, {9, 1001}};
    const shape *sh = c.small ? small : big;
    size_t ns = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < ns; i++) run_case(&c, &rng, sh[i]);
    bad_args(&c);
    return gu_finish(&c);
}
