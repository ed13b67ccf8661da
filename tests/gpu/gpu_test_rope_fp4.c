/* GPU RoPE (tide_cuda_rope) and FP4 activation simulations
 * (tide_cuda_sim_fp4_e8m0 / _e4m3) against the CPU: tide_cpu_ops()->rope per
 * row, tide_sim_fp4_e8m0 / tide_sim_fp4_e4m3 per row.
 *
 * Error bound: zero. Both are the same f32 roundings in the same order
 * (RoPE: four products, two sums, one BF16 rounding; FP4: the same scale
 * codes and e2m1 rounding), so every output must be bit-identical (NaN
 * compared as NaN). Inputs: BF16-exact heads with the rotated part in the
 * last 64 dims of each head (the model's layout), cos/sin of random angles
 * per row, forward and inverse; FP4 rows with random magnitudes per block,
 * blocks of zeros, tiny values, f32 denormals, an infinity, a NaN, huge
 * values whose e4m3 scale is NaN, and trailing partial blocks. */
#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

static void rope_case(gu_ctx *c, gu_rng *rng, int64_t rows, int64_t heads, int64_t head_dim, int64_t rd,
                      int inverse) {
    const int64_t nf = rd / 2, row_stride = heads * head_dim;
    size_t nx = (size_t)(rows * row_stride), ncs = (size_t)(rows * rd);
    float *x = gu_xmalloc(nx * 4), *ref = gu_xmalloc(nx * 4), *got = gu_xmalloc(nx * 4), *cs = gu_xmalloc(ncs * 4);
    for (size_t i = 0; i < nx; i++) x[i] = GC_BF16_NORMAL(rng, 1.0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t f = 0; f < nf; f++) {
            double ang = (gu_uniform(rng) * 2.0 - 1.0) * 1000.0 * pow(10000.0, -2.0 * (double)f / (double)rd);
            cs[r * rd + 2 * f] = (float)cos(ang);
            cs[r * rd + 2 * f + 1] = (float)sin(ang);
        }
    memcpy(ref, x, nx * 4);
    for (int64_t r = 0; r < rows; r++)
        tide_cpu_ops()->rope(tide_cpu_ops(), ref + r * row_stride + head_dim - rd, heads, head_dim, nf, cs + r * rd,
                             inverse);
    float *dx = gu_dalloc(nx * 4), *dcs = gu_dalloc(ncs * 4);
    gu_up(dx, x, nx * 4);
    gu_up(dcs, cs, ncs * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_rope(dx + head_dim - rd, rows, heads, row_stride, head_dim, nf, dcs, inverse, NULL, &st), &st,
           "rope");
    gu_down(got, dx, nx * 4);
    gc_stats g = gc_compare(got, ref, nx, 0.0);
    char name[96];
    snprintf(name, sizeof name, "rope%s rows %lld heads %lld head_dim %lld rd %lld", inverse ? " inverse" : "",
             (long long)rows, (long long)heads, (long long)head_dim, (long long)rd);
    gu_result(c, name, g.differ == 0, "bit-exact required (rotated and untouched dims); %zu of %zu differ", g.differ,
              g.n);
    tide_cuda_free(dx);
    tide_cuda_free(dcs);
    free(x);
    free(ref);
    free(got);
    free(cs);
}

static void fill_fp4_input(gu_rng *rng, float *x, size_t n, int64_t block, int specials) {
    for (size_t i0 = 0; i0 < n; i0 += (size_t)block) {
        double mag = ldexp(1.0, (int)(gu_uniform(rng) * 40) - 20);
        int kind = (int)(gu_uniform(rng) * 10);
        for (size_t i = i0; i < n && i < i0 + (size_t)block; i++) {
            float v = (float)(gu_normal(rng) * mag);
            if (specials && kind == 0) v = 0.0f;
            if (specials && kind == 1) v = (float)(gu_normal(rng) * 1e-40); /* f32 denormals */
            if (specials && kind == 2) v = (float)(gu_normal(rng) * 5000.0); /* e4m3 scale NaN */
            x[i] = v;
        }
    }
    if (specials && n > 40) {
        x[3] = INFINITY;
        x[n - 5] = NAN;
    }
}

static void fp4_case(gu_ctx *c, gu_rng *rng, int64_t rows, int64_t n, int64_t block, int e4m3, int specials) {
    size_t nx = (size_t)(rows * n);
    float *x = gu_xmalloc(nx * 4), *ref = gu_xmalloc(nx * 4), *got = gu_xmalloc(nx * 4);
    fill_fp4_input(rng, x, nx, block, specials);
    memcpy(ref, x, nx * 4);
    for (int64_t r = 0; r < rows; r++) {
        if (e4m3) tide_sim_fp4_e4m3(ref + r * n, (size_t)n, (size_t)block);
        else tide_sim_fp4_e8m0(ref + r * n, (size_t)n, (size_t)block);
    }
    float *dx = gu_dalloc(nx * 4);
    gu_up(dx, x, nx * 4);
    tide_status st = {0};
    int rc = e4m3 ? tide_cuda_sim_fp4_e4m3(dx, rows, n, block, NULL, &st)
                  : tide_cuda_sim_fp4_e8m0(dx, rows, n, block, NULL, &st);
    gu_ran(rc, &st, "sim_fp4");
    gu_down(got, dx, nx * 4);
    gc_stats g = gc_compare(got, ref, nx, 0.0);
    char name[96];
    snprintf(name, sizeof name, "fp4 %s/%lld rows %lld n %lld%s", e4m3 ? "e4m3" : "e8m0", (long long)block,
             (long long)rows, (long long)n, specials ? " specials" : "");
    gu_result(c, name, g.differ == 0, "bit-exact required (NaN as NaN); %zu of %zu differ", g.differ, g.n);
    tide_cuda_free(dx);
    free(x);
    free(ref);
    free(got);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_rope_fp4");
    gu_rng rng = {c.seed};
    int small = c.small;
    rope_case(&c, &rng, small ? 3 : 64, 64, 512, 64, 0);
    rope_case(&c, &rng, small ? 3 : 64, 64, 512, 64, 1);
    rope_case(&c, &rng, small ? 2 : 33, 1, 512, 64, 0);
    rope_case(&c, &rng, small ? 2 : 17, 64, 128, 64, 0);
    rope_case(&c, &rng, 5, 3, 10, 6, 1);
    fp4_case(&c, &rng, small ? 4 : 256, 128, 32, 0, 0);
    fp4_case(&c, &rng, small ? 4 : 256, 128, 32, 0, 1);
    fp4_case(&c, &rng, small ? 4 : 512, 512, 16, 1, 0);
    fp4_case(&c, &rng, small ? 4 : 512, 512, 16, 1, 1);
    fp4_case(&c, &rng, 7, 100, 32, 0, 1); /* trailing partial block of 4 */
    fp4_case(&c, &rng, 7, 101, 16, 1, 1); /* odd length, partial block of 5 */
    tide_status st = {0};
    int rc1 = tide_cuda_sim_fp4_e8m0(NULL, 1, 32, 0, NULL, &st), rc2 = tide_cuda_rope(NULL, 1, 1, 0, 0, 4, NULL, 0, NULL, &st);
    gu_result(&c, "bad arguments", rc1 == -1 && rc2 == -1 && st.code == TIDE_ERR_INVALID,
              "block 0 and NULL pointers refused; last message: %s", st.msg);
    return gu_finish(&c);
}
