/* GPU F32 / BF16-weight linear (tide_cuda_linear_f32) against the CPU
 * backend's linear() with TIDE_W_F32 / TIDE_W_BF16 weights, on fresh random
 * inputs with full f32 mantissas.
 *
 * Bounds:
 *   default (double lanes): bit-identical to the CPU, required (the same
 *     four double sums in the same order, the same single rounding);
 *   TIDE_CUDA_LIN_FAST (f32 lanes): per output
 *       |gpu - cpu| <= (in/4 + 3) * 2^-24 * sum_i |x_i W_i| + 2^-24 |cpu|
 *     (the lane sums' f32 rounding errors against an exact result, and the
 *     CPU's own single rounding), plus one bf16 step of |cpu| with BF16
 *     output (a rounding that flips: 2^(e-7) for |cpu| in [2^e, 2^(e+1)),
 *     i.e. up to 2^-7 |cpu|; a bound of 2^-8 |cpu| failed on a value at the
 *     bottom of its binade, seed 117712416801206). Reported: the largest error in units of that bound.
 * Shapes: the output head (129280 x 5120, f32), the gate (384 x 5120), the
 * hyper-connection projection (24 x 16384), and odd ones: in not a multiple
 * of 4 or 8 (the plain-load path and the lane-0 tail), out not a multiple
 * of 32, rows 1, 4, 16, 17, 100 (the three row-block sizes). */
#include "backend/ops.h"
#include "base/threadpool.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t out, in, rows;
    int bf16w, flags;
} lcase;

static void run_case(gu_ctx *c, gu_rng *rng, tide_pool *pool, const lcase *s) {
    size_t nw = (size_t)(s->out * s->in), nx = (size_t)(s->rows * s->in), ny = (size_t)(s->rows * s->out);
    size_t wbytes = nw * (s->bf16w ? 2 : 4);
    void *w = gu_xmalloc(wbytes);
    float *x = gu_xmalloc(nx * 4), *ref = gu_xmalloc(ny * 4), *got = gu_xmalloc(ny * 4);
    /* weights: uniform with a random magnitude per output row, full mantissas */
    for (int64_t o = 0; o < s->out; o++) {
        double mag = ldexp(1.0, (int)(gu_next(rng) % 8) - 8);
        for (int64_t i = 0; i < s->in; i++) {
            double v = ((double)(gu_next(rng) >> 11) * 0x1p-53 * 2.0 - 1.0) * mag;
            if (s->bf16w) ((uint16_t *)w)[o * s->in + i] = tide_f32_to_bf16((float)v);
            else ((float *)w)[o * s->in + i] = (float)v;
        }
    }
    for (size_t i = 0; i < nx; i++) x[i] = (float)gu_normal(rng);
    tide_weight tw = {s->bf16w ? TIDE_W_BF16 : TIDE_W_F32, s->out, s->in, w, NULL};
    tide_cpu_ops()->linear(tide_cpu_ops(), pool, &tw, x, s->rows, ref,
                           s->flags & TIDE_CUDA_LIN_BF16_OUT ? TIDE_LIN_BF16_OUT : 0);

    void *dw = gu_dalloc(wbytes);
    float *dx = gu_dalloc(nx * 4), *dy = gu_dalloc(ny * 4);
    gu_up(dw, w, wbytes);
    gu_up(dx, x, nx * 4);
    gu_poison(dy, 0xff, ny * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_linear_f32(dw, s->bf16w, s->out, s->in, dx, s->rows, dy, s->flags, NULL, &st), &st, "linear_f32");
    gu_down(got, dy, ny * 4);

    char name[128];
    snprintf(name, sizeof name, "%s %lldx%lld rows %lld%s%s", s->bf16w ? "bf16" : "f32", (long long)s->out,
             (long long)s->in, (long long)s->rows, s->flags & TIDE_CUDA_LIN_BF16_OUT ? " bf16-out" : "",
             s->flags & TIDE_CUDA_LIN_FAST ? " fast" : "");
    if (!(s->flags & TIDE_CUDA_LIN_FAST)) {
        gc_stats g = gc_compare(got, ref, ny, 0.0);
        gu_result(c, name, g.differ == 0, "%zu of %zu outputs differ (bound: bit-identical), max rel %.3g", g.differ, ny,
                  g.max_rel);
    } else {
        size_t over = 0, nan = 0, same = 0;
        double worst = 0;
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t o = 0; o < s->out; o++) {
                size_t i = (size_t)(r * s->out + o);
                if (memcmp(&got[i], &ref[i], 4) == 0) {
                    same++;
                    continue;
                }
                if (got[i] != got[i] || ref[i] != ref[i]) {
                    nan++;
                    continue;
                }
                double a = 0;
                for (int64_t k = 0; k < s->in; k++) {
                    double wv = s->bf16w ? tide_bf16_to_f32(((uint16_t *)w)[o * s->in + k]) : ((float *)w)[o * s->in + k];
                    a += fabs((double)x[r * s->in + k] * wv);
                }
                double bound = ((double)(s->in / 4) + 3) * 0x1p-24 * a + 0x1p-24 * fabs(ref[i]);
                if (s->flags & TIDE_CUDA_LIN_BF16_OUT) {
                    int e;
                    frexp(fabs((double)ref[i]), &e); /* |ref| in [2^(e-1), 2^e) */
                    bound += ldexp(1.0, e - 8);       /* its bf16 step: 2^(e-1-7) */
                }
                double d = fabs((double)got[i] - ref[i]);
                if (bound > 0 && d / bound > worst) worst = d / bound;
                if (d > bound) over++;
            }
        gu_result(c, name, over == 0 && nan == 0,
                  "bit-identical %.3f%%, over bound %zu, NaN/unwritten %zu, max err/bound %.3g "
                  "(bound (in/4+3) 2^-24 sum|x w| + 2^-24 |cpu|)",
                  100.0 * (double)same / (double)ny, over, nan, worst);
    }
    tide_cuda_free(dw), tide_cuda_free(dx), tide_cuda_free(dy);
    free(w), free(x), free(ref), free(got);
}

/* The grouped launch (wo_a's form): G products, each group's weight, input
 * rows and output at their strides; default mode, so every group must be
 * bit-identical to the CPU's linear on that group. xs_pad shifts the input
 * groups off 16-byte alignment (the plain-load path). */
static void grouped_case(gu_ctx *c, gu_rng *rng, tide_pool *pool, int64_t G, int64_t out, int64_t in, int64_t rows,
                         int64_t xs_pad) {
    int64_t ws = out * in, xs = rows * in + xs_pad, ys = rows * out;
    uint16_t *w = gu_xmalloc((size_t)(G * ws) * 2);
    float *x = gu_xmalloc((size_t)(G * xs) * 4), *ref = gu_xmalloc((size_t)(G * ys) * 4);
    float *got = gu_xmalloc((size_t)(G * ys) * 4);
    for (int64_t i = 0; i < G * ws; i++) w[i] = tide_f32_to_bf16((float)gu_normal(rng));
    for (int64_t i = 0; i < G * xs; i++) x[i] = (float)gu_normal(rng);
    for (int64_t g = 0; g < G; g++) {
        tide_weight wt = {TIDE_W_BF16, out, in, w + g * ws, NULL};
        tide_cpu_ops()->linear(tide_cpu_ops(), pool, &wt, x + g * xs, rows, ref + g * ys, TIDE_LIN_BF16_OUT);
    }
    void *dw = gu_dalloc((size_t)(G * ws) * 2);
    float *dx = gu_dalloc((size_t)(G * xs) * 4), *dy = gu_dalloc((size_t)(G * ys) * 4);
    gu_up(dw, w, (size_t)(G * ws) * 2);
    gu_up(dx, x, (size_t)(G * xs) * 4);
    gu_poison(dy, 0xff, (size_t)(G * ys) * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_linear_f32_grouped(dw, 1, out, in, dx, rows, dy, TIDE_CUDA_LIN_BF16_OUT, G, ws, xs, ys, NULL, &st),
           &st, "linear_f32_grouped");
    gu_down(got, dy, (size_t)(G * ys) * 4);
    gc_stats g = gc_compare(got, ref, (size_t)(G * ys), 0.0);
    char name[96];
    snprintf(name, sizeof name, "grouped G %lld bf16 %lldx%lld rows %lld%s", (long long)G, (long long)out,
             (long long)in, (long long)rows, xs_pad ? " unaligned groups" : "");
    gu_result(c, name, g.differ == 0, "bit-exact required; %zu of %zu differ", g.differ, g.n);
    tide_cuda_free(dw), tide_cuda_free(dx), tide_cuda_free(dy);
    free(w), free(x), free(ref), free(got);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    float *d = gu_dalloc(4096);
    int rc1 = tide_cuda_linear_f32(d, 2, 4, 4, d, 1, d, 0, NULL, &st);                   /* w_bf16 2 */
    int rc2 = tide_cuda_linear_f32(d, 0, 4, 0, d, 1, d, 0, NULL, &st);                   /* in 0 */
    int rc3 = tide_cuda_linear_f32(d, 0, 4, 4, d, 1, d, 0x40, NULL, &st);                /* flags */
    int rc4 = tide_cuda_linear_f32((char *)d + 2, 0, 4, 4, d, 1, d, 0, NULL, &st);       /* misaligned f32 */
    int rc5 = tide_cuda_linear_f32(NULL, 0, 4, 4, d, 1, d, 0, NULL, &st);
    int rc6 = tide_cuda_linear_f32(d, 0, 3000000, 4, d, 1, d, 0, NULL, &st);             /* grid y */
    tide_cuda_free(d);
    gu_result(c, "bad arguments",
              rc1 == -1 && rc2 == -1 && rc3 == -1 && rc4 == -1 && rc5 == -1 && rc6 == -1 && st.code == TIDE_ERR_INVALID,
              "bad type, in 0, unknown flag, misaligned weight, NULL, too many outputs refused; last message: %s",
              st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_linear");
    gu_rng rng = {c.seed};
    tide_pool *pool = gu_pool();
    enum { B = TIDE_CUDA_LIN_BF16_OUT, F = TIDE_CUDA_LIN_FAST };
    static const lcase big[] = {
        {129280, 5120, 1, 0, 0}, {129280, 5120, 4, 0, 0}, {129280, 5120, 2, 0, F}, {384, 5120, 64, 1, 0},
        {384, 5120, 17, 0, 0},   {24, 16384, 16, 0, 0},   {1000, 333, 20, 0, 0},   {77, 1030, 5, 1, B},
        {300, 1024, 100, 0, F | B}, {45, 4099, 3, 1, F},  {33, 8, 1, 0, B},        {65, 1, 7, 1, 0},
        {512, 2048, 33, 1, 0},   {31, 6, 4, 0, F},
    };
    static const lcase small[] = {
        {100, 256, 3, 0, 0}, {77, 1030, 5, 1, B}, {45, 99, 17, 0, F}, {33, 8, 1, 0, B}, {65, 64, 20, 1, 0},
    };
    const lcase *cs = c.small ? small : big;
    size_t n = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < n; i++) run_case(&c, &rng, pool, &cs[i]);
    grouped_case(&c, &rng, pool, 4, 256, 512, 3, 0);
    grouped_case(&c, &rng, pool, 3, 100, 520, 1, 1);
    if (!c.small) grouped_case(&c, &rng, pool, 8, 1024, 4096, 2, 0); /* wo_a at the released widths */
    bad_args(&c);
    tide_pool_destroy(pool);
    return gu_finish(&c);
}
