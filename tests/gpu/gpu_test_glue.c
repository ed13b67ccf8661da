/* The forward's data-movement kernels (fwd_glue.cu) against the CPU ops of
 * the same names (backend/cpu/cpu_mem.c) on fresh random inputs, all
 * required bit-identical (two NaNs count as equal):
 *   embed        f32 and bf16 tables, hc 1 and 4, repeated and extreme ids;
 *   gather_rows  4-byte rows and odd byte widths, repeated indices;
 *   scatter_add  distinct and repeated target rows (the CPU's order);
 *   add_bf16     with NaN / inf / values that round across a bf16 step;
 *   div_scalar   by non-powers of two;
 *   hc_mean      hc 1..4. */
#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

static void check(gu_ctx *c, const char *name, const void *got, const void *ref, size_t n_floats) {
    gc_stats s = gc_compare(got, ref, n_floats, 0.0);
    gu_result(c, name, s.differ == 0, "%zu of %zu outputs differ (bound: bit-identical), max rel %.3g", s.differ,
              n_floats, s.max_rel);
}

static float rnd(gu_rng *r, int specials) {
    double p = gu_uniform(r);
    if (specials && p < 0.003) return NAN;
    if (specials && p < 0.006) return p < 0.0045 ? INFINITY : -INFINITY;
    return (float)(gu_normal(r) * 3.0);
}

static void embed_case(gu_ctx *c, gu_rng *r, int bf16, int64_t n_rows, int64_t dim, int64_t rows, int hc) {
    size_t el = bf16 ? 2 : 4, tb = (size_t)(n_rows * dim) * el, hb = (size_t)(rows * hc * dim) * 4;
    uint8_t *table = gu_xmalloc(tb);
    for (int64_t i = 0; i < n_rows * dim; i++) {
        float v = rnd(r, 0);
        if (bf16) {
            uint16_t b = tide_f32_to_bf16(v);
            memcpy(table + i * 2, &b, 2);
        } else {
            memcpy(table + i * 4, &v, 4);
        }
    }
    int32_t *ids = gu_xmalloc((size_t)rows * 4);
    for (int64_t i = 0; i < rows; i++)
        ids[i] = i == 0 ? (int32_t)(n_rows - 1) : i == 1 ? 0 : (int32_t)(gu_next(r) % (uint64_t)n_rows);
    if (rows > 3) ids[3] = ids[2]; /* a repeat */
    float *ref = gu_xmalloc(hb), *got = gu_xmalloc(hb);
    tide_weight w = {bf16 ? TIDE_W_BF16 : TIDE_W_F32, n_rows, dim, table, NULL};
    tide_cpu_ops()->embed(tide_cpu_ops(), &w, ids, rows, hc, ref);
    void *dt = gu_dalloc(tb), *di = gu_dalloc((size_t)rows * 4), *dh = gu_dalloc(hb);
    gu_up(dt, table, tb);
    gu_up(di, ids, (size_t)rows * 4);
    gu_poison(dh, 0xff, hb);
    tide_status st = {0};
    gu_ran(tide_cuda_embed(dt, bf16, dim, di, rows, hc, dh, NULL, &st), &st, "embed");
    gu_down(got, dh, hb);
    char name[96];
    snprintf(name, sizeof name, "embed %s %lldx%lld rows %lld hc %d", bf16 ? "bf16" : "f32", (long long)n_rows,
             (long long)dim, (long long)rows, hc);
    check(c, name, got, ref, hb / 4);
    tide_cuda_free(dt), tide_cuda_free(di), tide_cuda_free(dh);
    free(table), free(ids), free(ref), free(got);
}

static void gather_case(gu_ctx *c, gu_rng *r, int64_t src_rows, size_t width, int64_t n) {
    size_t sb = (size_t)src_rows * width, db = (size_t)n * width;
    uint8_t *src = gu_xmalloc(sb), *ref = gu_xmalloc(db), *got = gu_xmalloc(db);
    for (size_t i = 0; i < sb; i++) src[i] = (uint8_t)gu_next(r);
    int64_t *idx = gu_xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)(gu_next(r) % (uint64_t)src_rows);
    tide_cpu_ops()->gather_rows(tide_cpu_ops(), src, width, idx, n, ref);
    void *ds = gu_dalloc(sb), *di = gu_dalloc((size_t)n * 8), *dd = gu_dalloc(db);
    gu_up(ds, src, sb);
    gu_up(di, idx, (size_t)n * 8);
    gu_poison(dd, 0x5a, db);
    tide_status st = {0};
    gu_ran(tide_cuda_gather_rows(ds, width, di, n, dd, NULL, &st), &st, "gather_rows");
    gu_down(got, dd, db);
    size_t differ = 0;
    for (size_t i = 0; i < db; i++) differ += got[i] != ref[i];
    char name[96];
    snprintf(name, sizeof name, "gather_rows %lld rows of %zu bytes from %lld", (long long)n, width,
             (long long)src_rows);
    gu_result(c, name, differ == 0, "%zu of %zu bytes differ", differ, db);
    tide_cuda_free(ds), tide_cuda_free(di), tide_cuda_free(dd);
    free(src), free(ref), free(got), free(idx);
}

static void scatter_case(gu_ctx *c, gu_rng *r, int64_t acc_rows, int64_t n, int64_t dim, int repeats) {
    size_t ab = (size_t)(acc_rows * dim) * 4, yb = (size_t)(n * dim) * 4;
    float *acc = gu_xmalloc(ab), *y = gu_xmalloc(yb), *ref = gu_xmalloc(ab), *got = gu_xmalloc(ab);
    for (int64_t i = 0; i < acc_rows * dim; i++) acc[i] = rnd(r, 0);
    for (int64_t i = 0; i < n * dim; i++) y[i] = rnd(r, 1);
    int64_t *idx = gu_xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) /* distinct unless repeats */
        idx[i] = repeats ? (int64_t)(gu_next(r) % (uint64_t)acc_rows) : (i * 7 + 3) % acc_rows;
    memcpy(ref, acc, ab);
    tide_cpu_ops()->scatter_add(tide_cpu_ops(), y, n, dim, idx, ref);
    void *da = gu_dalloc(ab), *dy = gu_dalloc(yb), *di = gu_dalloc((size_t)n * 8);
    gu_up(da, acc, ab);
    gu_up(dy, y, yb);
    gu_up(di, idx, (size_t)n * 8);
    tide_status st = {0};
    gu_ran(tide_cuda_scatter_add(dy, n, dim, di, da, NULL, &st), &st, "scatter_add");
    gu_down(got, da, ab);
    char name[96];
    snprintf(name, sizeof name, "scatter_add %lld rows of %lld into %lld%s", (long long)n, (long long)dim,
             (long long)acc_rows, repeats ? " repeated" : "");
    check(c, name, got, ref, ab / 4);
    tide_cuda_free(da), tide_cuda_free(dy), tide_cuda_free(di);
    free(acc), free(y), free(ref), free(got), free(idx);
}

static void elementwise_case(gu_ctx *c, gu_rng *r, int64_t n, float s) {
    size_t b = (size_t)n * 4;
    float *a = gu_xmalloc(b), *x = gu_xmalloc(b), *ref = gu_xmalloc(b), *got = gu_xmalloc(b);
    for (int64_t i = 0; i < n; i++) {
        a[i] = rnd(r, 1);
        /* half the pairs land next to a bf16 rounding boundary */
        x[i] = (i & 1) ? rnd(r, 1) : tide_round_bf16(a[i]) * 0x1p-9f;
    }
    tide_cpu_ops()->add_bf16(tide_cpu_ops(), a, x, n, ref);
    void *da = gu_dalloc(b), *dx = gu_dalloc(b), *dout = gu_dalloc(b);
    gu_up(da, a, b);
    gu_up(dx, x, b);
    tide_status st = {0};
    gu_ran(tide_cuda_add_bf16(da, dx, n, dout, NULL, &st), &st, "add_bf16");
    gu_down(got, dout, b);
    char name[96];
    snprintf(name, sizeof name, "add_bf16 n %lld", (long long)n);
    check(c, name, got, ref, (size_t)n);
    memcpy(ref, a, b);
    tide_cpu_ops()->div_scalar(tide_cpu_ops(), ref, n, s);
    gu_ran(tide_cuda_div_scalar(da, n, s, NULL, &st), &st, "div_scalar");
    gu_down(got, da, b);
    snprintf(name, sizeof name, "div_scalar n %lld by %g", (long long)n, (double)s);
    check(c, name, got, ref, (size_t)n);
    tide_cuda_free(da), tide_cuda_free(dx), tide_cuda_free(dout);
    free(a), free(x), free(ref), free(got);
}

static void hc_mean_case(gu_ctx *c, gu_rng *r, int64_t rows, int hc, int64_t dim) {
    size_t hb = (size_t)(rows * hc * dim) * 4, ob = (size_t)(rows * dim) * 4;
    float *h = gu_xmalloc(hb), *ref = gu_xmalloc(ob), *got = gu_xmalloc(ob);
    for (int64_t i = 0; i < rows * hc * dim; i++) h[i] = tide_round_bf16(rnd(r, 0));
    tide_cpu_ops()->hc_mean(tide_cpu_ops(), h, rows, hc, dim, ref);
    void *dh = gu_dalloc(hb), *dout = gu_dalloc(ob);
    gu_up(dh, h, hb);
    gu_poison(dout, 0xff, ob);
    tide_status st = {0};
    gu_ran(tide_cuda_hc_mean(dh, rows, hc, dim, dout, NULL, &st), &st, "hc_mean");
    gu_down(got, dout, ob);
    char name[96];
    snprintf(name, sizeof name, "hc_mean %lld rows hc %d dim %lld", (long long)rows, hc, (long long)dim);
    check(c, name, got, ref, (size_t)(rows * dim));
    tide_cuda_free(dh), tide_cuda_free(dout);
    free(h), free(ref), free(got);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_glue");
    gu_rng rng = {c.seed};
    int sm = c.small;
    embed_case(&c, &rng, 0, 1000, 512, 37, 4);
    embed_case(&c, &rng, 1, sm ? 4000 : 129280, sm ? 256 : 4096, sm ? 9 : 64, 4);
    embed_case(&c, &rng, 1, 50, 33, 5, 1);
    gather_case(&c, &rng, 300, 4096 * 4, 200);
    gather_case(&c, &rng, 17, 13, 40);
    gather_case(&c, &rng, 5, 4, 1);
    scatter_case(&c, &rng, 64, 40, sm ? 256 : 4096, 0);
    scatter_case(&c, &rng, 8, 50, 129, 1);
    elementwise_case(&c, &rng, sm ? 10001 : 1000003, 3.0f);
    elementwise_case(&c, &rng, 7, 0.7f);
    hc_mean_case(&c, &rng, sm ? 5 : 256, 4, sm ? 128 : 4096);
    hc_mean_case(&c, &rng, 3, 3, 77);
    hc_mean_case(&c, &rng, 2, 1, 10);
    return gu_finish(&c);
}
