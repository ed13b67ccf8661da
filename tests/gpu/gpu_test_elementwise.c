/* GPU elementwise ops (elementwise.cu) against the CPU backend on fresh
 * random inputs, all required bit-identical (two NaNs count as equal):
 *   swiglu        tide_cpu_ops()->swiglu, with and without the clamp and the
 *                 row weight, in place (h == g), n not a multiple of 4,
 *                 NaN / inf / beyond-the-limit inputs;
 *   compress_pool tide_cpu_ops()->compress_pool per group, r from 1 to 64;
 *   engram_mix    tide_cpu_ops()->engram_mix (x updated in place), dims
 *                 below 8, not a multiple of 8, the model's 5120, the limit;
 *   argmax        the greedy argmax of src/engine/sampler.c (first index of
 *                 the maximum, NaN and -inf never win, -1 when nothing
 *                 qualifies), written out here, with planted ties, NaNs,
 *                 +inf, all -inf rows, vocab 129280 and odd sizes;
 *   copy          tide_cuda_copy, byte for byte. */
#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

static float special(gu_rng *rng, float v) {
    double p = gu_uniform(rng);
    if (p < 0.002) return NAN;
    if (p < 0.004) return INFINITY;
    if (p < 0.006) return -INFINITY;
    return v;
}

static void check(gu_ctx *c, const char *name, const float *got, const float *ref, size_t n) {
    gc_stats s = gc_compare(got, ref, n, 0.0);
    gu_result(c, name, s.differ == 0, "%zu of %zu outputs differ (bound: bit-identical), max rel %.3g", s.differ, n,
              s.max_rel);
}

static void swiglu_case(gu_ctx *c, gu_rng *rng, int64_t rows, int64_t n, double limit, int weighted, int in_place,
                        int specials) {
    size_t N = (size_t)(rows * n);
    float *g = gu_xmalloc(N * 4), *u = gu_xmalloc(N * 4), *w = gu_xmalloc((size_t)rows * 4), *ref = gu_xmalloc(N * 4);
    float *got = gu_xmalloc(N * 4);
    for (size_t i = 0; i < N; i++) {
        g[i] = tide_round_bf16((float)(gu_normal(rng) * 6.0));
        u[i] = tide_round_bf16((float)(gu_normal(rng) * 6.0));
        if (specials) g[i] = special(rng, g[i]), u[i] = special(rng, u[i]);
    }
    for (int64_t r = 0; r < rows; r++) w[r] = (float)(0.05 + gu_uniform(rng));
    tide_cpu_ops()->swiglu(tide_cpu_ops(), g, u, rows, n, limit, weighted ? w : NULL, ref);
    float *dg = gu_dalloc(N * 4), *du = gu_dalloc(N * 4), *dw = gu_dalloc((size_t)rows * 4);
    float *dh = in_place ? dg : gu_dalloc(N * 4);
    gu_up(dg, g, N * 4);
    gu_up(du, u, N * 4);
    gu_up(dw, w, (size_t)rows * 4);
    if (!in_place) gu_poison(dh, 0xff, N * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_swiglu(dg, du, rows, n, limit, weighted ? dw : NULL, dh, NULL, &st), &st, "swiglu");
    gu_down(got, dh, N * 4);
    char name[128];
    snprintf(name, sizeof name, "swiglu %lldx%lld limit %g%s%s%s", (long long)rows, (long long)n, limit,
             weighted ? " weighted" : "", in_place ? " in place" : "", specials ? " nan/inf" : "");
    check(c, name, got, ref, N);
    tide_cuda_free(dg), tide_cuda_free(du), tide_cuda_free(dw);
    if (!in_place) tide_cuda_free(dh);
    free(g), free(u), free(w), free(ref), free(got);
}

static void pool_case(gu_ctx *c, gu_rng *rng, int64_t groups, int r, int64_t dim) {
    size_t N = (size_t)(groups * r * dim), O = (size_t)(groups * dim);
    float *kv = gu_xmalloc(N * 4), *sc = gu_xmalloc(N * 4), *ref = gu_xmalloc(O * 4), *got = gu_xmalloc(O * 4);
    for (size_t i = 0; i < N; i++) {
        kv[i] = tide_round_bf16((float)gu_normal(rng));
        sc[i] = (float)(gu_normal(rng) * 3.0);
    }
    for (int64_t g = 0; g < groups; g++)
        tide_cpu_ops()->compress_pool(tide_cpu_ops(), kv + g * r * dim, sc + g * r * dim, r, dim, ref + g * dim);
    float *dkv = gu_dalloc(N * 4), *dsc = gu_dalloc(N * 4), *dout = gu_dalloc(O * 4);
    gu_up(dkv, kv, N * 4);
    gu_up(dsc, sc, N * 4);
    gu_poison(dout, 0xff, O * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_compress_pool(dkv, dsc, groups, r, dim, dout, NULL, &st), &st, "compress_pool");
    gu_down(got, dout, O * 4);
    char name[96];
    snprintf(name, sizeof name, "compress_pool groups %lld r %d dim %lld", (long long)groups, r, (long long)dim);
    check(c, name, got, ref, O);
    tide_cuda_free(dkv), tide_cuda_free(dsc), tide_cuda_free(dout);
    free(kv), free(sc), free(ref), free(got);
}

static void engram_case(gu_ctx *c, gu_rng *rng, int64_t rows, int hc, int64_t dim) {
    size_t nkv = (size_t)(rows * (hc + 1) * dim), nw = (size_t)(hc * dim), nx = (size_t)(rows * hc * dim);
    float *kv = gu_xmalloc(nkv * 4), *w = gu_xmalloc(nw * 4), *x = gu_xmalloc(nx * 4), *got = gu_xmalloc(nx * 4);
    for (size_t i = 0; i < nkv; i++) kv[i] = tide_round_bf16((float)gu_normal(rng));
    for (size_t i = 0; i < nw; i++) w[i] = (float)(gu_normal(rng) * 0.5);
    for (size_t i = 0; i < nx; i++) x[i] = tide_round_bf16((float)(gu_normal(rng) * 2.0));
    float *dkv = gu_dalloc(nkv * 4), *dw = gu_dalloc(nw * 4), *dx = gu_dalloc(nx * 4);
    gu_up(dkv, kv, nkv * 4);
    gu_up(dw, w, nw * 4);
    gu_up(dx, x, nx * 4);
    tide_cpu_ops()->engram_mix(tide_cpu_ops(), kv, w, rows, hc, dim, 1e-6, x);
    tide_status st = {0};
    gu_ran(tide_cuda_engram_mix(dkv, dw, rows, hc, dim, 1e-6, dx, NULL, &st), &st, "engram_mix");
    gu_down(got, dx, nx * 4);
    char name[96];
    snprintf(name, sizeof name, "engram_mix rows %lld hc %d dim %lld", (long long)rows, hc, (long long)dim);
    check(c, name, got, x, nx);
    tide_cuda_free(dkv), tide_cuda_free(dw), tide_cuda_free(dx);
    free(kv), free(w), free(x), free(got);
}

/* sampler.c's greedy argmax */
static int32_t ref_argmax(const float *l, int64_t V) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (l[i] > bv) bv = l[i], best = (int32_t)i;
    return best;
}

static void argmax_case(gu_ctx *c, gu_rng *rng, int64_t rows, int64_t V) {
    size_t N = (size_t)(rows * V);
    float *l = gu_xmalloc(N * 4);
    int32_t *ref = gu_xmalloc((size_t)rows * 4), *got = gu_xmalloc((size_t)rows * 4);
    for (size_t i = 0; i < N; i++) l[i] = (float)(gu_normal(rng) * 3.0);
    for (int64_t r = 0; r < rows; r++) {
        float *lr = l + r * V;
        int kind = (int)(r % 6);
        if (kind == 1) { /* a tie: the maximum copied to another position */
            int32_t m = ref_argmax(lr, V);
            int64_t at = (int64_t)(gu_next(rng) % (uint64_t)V);
            lr[at] = lr[m];
        } else if (kind == 2) { /* NaNs, one in front */
            for (int64_t i = 0; i < V; i++)
                if (gu_uniform(rng) < 0.01) lr[i] = NAN;
            lr[0] = NAN;
        } else if (kind == 3) { /* nothing qualifies */
            for (int64_t i = 0; i < V; i++) lr[i] = gu_uniform(rng) < 0.5 ? -INFINITY : NAN;
        } else if (kind == 4) { /* two +inf */
            lr[(int64_t)(gu_next(rng) % (uint64_t)V)] = INFINITY;
            lr[(int64_t)(gu_next(rng) % (uint64_t)V)] = INFINITY;
        } else if (kind == 5) { /* many equal values (bf16-rounded small range) */
            for (int64_t i = 0; i < V; i++) lr[i] = tide_round_bf16((float)(gu_uniform(rng) * 0.01));
        }
        ref[r] = ref_argmax(lr, V);
    }
    float *dl = gu_dalloc(N * 4);
    int32_t *dout = gu_dalloc((size_t)rows * 4);
    gu_up(dl, l, N * 4);
    gu_poison(dout, 0x7f, (size_t)rows * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_argmax(dl, rows, V, dout, NULL, &st), &st, "argmax");
    gu_down(got, dout, (size_t)rows * 4);
    size_t bad = 0;
    for (int64_t r = 0; r < rows; r++) bad += got[r] != ref[r];
    char name[96];
    snprintf(name, sizeof name, "argmax %lldx%lld", (long long)rows, (long long)V);
    gu_result(c, name, bad == 0, "%zu of %lld rows differ (bound: identical ids; ties, NaN, +-inf planted)", bad,
              (long long)rows);
    tide_cuda_free(dl), tide_cuda_free(dout);
    free(l), free(ref), free(got);
}

static void copy_case(gu_ctx *c, gu_rng *rng, size_t bytes) {
    uint8_t *h = gu_xmalloc(bytes), *got = gu_xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)gu_next(rng);
    void *src = gu_dalloc(bytes), *dst = gu_dalloc(bytes);
    gu_up(src, h, bytes);
    gu_poison(dst, 0, bytes);
    tide_status st = {0};
    gu_ran(tide_cuda_copy(dst, src, bytes, NULL, &st), &st, "copy");
    gu_down(got, dst, bytes);
    char name[64];
    snprintf(name, sizeof name, "copy %zu bytes", bytes);
    gu_result(c, name, memcmp(h, got, bytes) == 0, "byte-identical required");
    tide_cuda_free(src), tide_cuda_free(dst);
    free(h), free(got);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    int rc1 = tide_cuda_compress_pool(NULL, NULL, 1, 65, 8, NULL, NULL, &st);
    int rc2 = tide_cuda_engram_mix(NULL, NULL, 1, 4, TIDE_CUDA_ENGRAM_MAX_DIM + 1, 1e-6, NULL, NULL, &st);
    int rc3 = tide_cuda_argmax(NULL, 1, 0, NULL, NULL, &st);
    int rc4 = tide_cuda_swiglu(NULL, NULL, 2, 3, 0.0, NULL, NULL, NULL, &st);
    int rc5 = tide_cuda_copy(NULL, NULL, 17, NULL, &st);
    gu_result(c, "bad arguments", rc1 == -1 && rc2 == -1 && rc3 == -1 && rc4 == -1 && rc5 == -1,
              "r > 64, dim too large, vocab 0, NULL pointers, copy of 17 bytes refused; last message: %s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_elementwise");
    gu_rng rng = {c.seed};
    int sm = c.small;
    swiglu_case(&c, &rng, sm ? 3 : 64, 2304, 10.0, 1, 0, 0);
    swiglu_case(&c, &rng, sm ? 3 : 64, 2304, 10.0, 1, 1, 1);
    swiglu_case(&c, &rng, 7, 333, 10.0, 0, 0, 1);
    swiglu_case(&c, &rng, 5, 1001, 0.0, 1, 1, 1);
    swiglu_case(&c, &rng, 1, 3, 7.0, 1, 0, 0);
    pool_case(&c, &rng, sm ? 3 : 1000, 2, 512);
    pool_case(&c, &rng, sm ? 3 : 300, 4, 512);
    pool_case(&c, &rng, 17, 1, 333);
    pool_case(&c, &rng, 5, 7, 100);
    pool_case(&c, &rng, 3, 64, 130);
    engram_case(&c, &rng, sm ? 2 : 9, 4, 5120);
    engram_case(&c, &rng, 3, 4, 7);
    engram_case(&c, &rng, 3, 2, 129);
    engram_case(&c, &rng, 2, 4, 1000);
    engram_case(&c, &rng, 1, 1, 8);
    if (!sm) engram_case(&c, &rng, 2, 3, TIDE_CUDA_ENGRAM_MAX_DIM);
    argmax_case(&c, &rng, sm ? 6 : 64, 129280);
    argmax_case(&c, &rng, 12, 1001);
    argmax_case(&c, &rng, 6, 7);
    argmax_case(&c, &rng, 6, 1);
    copy_case(&c, &rng, sm ? 4096 : (size_t)64 << 20);
    bad_args(&c);
    return gu_finish(&c);
}
