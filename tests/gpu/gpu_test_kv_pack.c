/* GPU packed KV entries (kv_pack.cu) against the CPU's (cache/kv_pack.h):
 * the packed bytes of tide_cuda_kv_pack must equal tide_kv_pack's and the
 * values of tide_cuda_kv_unpack tide_kv_unpack's, bit for bit (NaN as NaN),
 * for the three formats at the released widths (window 512, latent 512, key
 * 128) and at odd widths (a partial last block, an odd nibble).
 *
 * Each 16-block of the fresh random rows is one of: normal values over
 * 2^-20 .. 2^20, all zeros of either sign, tiny values (the amax floors,
 * e4m3 denormal scales), f32 denormals, a block with an infinity, a block
 * with a NaN. Outputs are written twice over two poison patterns; both runs
 * must match, so an unwritten byte cannot pass by accident. */
#include "cache/kv_pack.h"
#include "gpu_cmp.h"
#include "gpu_util.h"

typedef struct {
    int fmt;
    int64_t rows, dim;
} shape;

static void fill(gu_rng *rng, float *x, int64_t n) {
    for (int64_t b0 = 0; b0 < n; b0 += 16) {
        int64_t len = n - b0 < 16 ? n - b0 : 16;
        double u = gu_uniform(rng), mag = ldexp(1.0, (int)(gu_uniform(rng) * 41) - 20);
        int kind = u < 0.65 ? 0 : u < 0.72 ? 1 : u < 0.79 ? 2 : u < 0.86 ? 3 : u < 0.93 ? 4 : 5;
        for (int64_t i = 0; i < len; i++) {
            double v = kind == 1 ? (gu_uniform(rng) < 0.5 ? -0.0 : 0.0)
                     : kind == 2 ? gu_normal(rng) * 1e-7
                     : kind == 3 ? gu_normal(rng) * 0x1p-140
                                 : gu_normal(rng) * mag;
            x[b0 + i] = (float)v;
        }
        if (kind == 4) x[b0 + (int64_t)(gu_uniform(rng) * len)] = gu_uniform(rng) < 0.5 ? INFINITY : -INFINITY;
        if (kind == 5) x[b0 + (int64_t)(gu_uniform(rng) * len)] = NAN;
    }
}

static void run_case(gu_ctx *c, gu_rng *rng, shape s) {
    size_t eb = tide_kv_entry_bytes((tide_kv_fmt)s.fmt, s.dim), nx = (size_t)(s.rows * s.dim);
    size_t ne = (size_t)s.rows * eb;
    float *x = gu_xmalloc(nx * sizeof(float)), *y = gu_xmalloc(nx * sizeof(float)), *gy = gu_xmalloc(nx * sizeof(float));
    uint8_t *e = gu_xmalloc(ne), *ge = gu_xmalloc(ne);
    for (int64_t r = 0; r < s.rows; r++) fill(rng, x + r * s.dim, s.dim);
    for (int64_t r = 0; r < s.rows; r++) {
        tide_kv_pack((tide_kv_fmt)s.fmt, x + r * s.dim, s.dim, e + (size_t)r * eb);
        tide_kv_unpack((tide_kv_fmt)s.fmt, e + (size_t)r * eb, s.dim, y + r * s.dim);
    }
    float *dx = gu_dalloc(nx * sizeof(float)), *dy = gu_dalloc(nx * sizeof(float));
    uint8_t *de = gu_dalloc(ne);
    gu_up(dx, x, nx * sizeof(float));
    size_t bad_e = 0, bad_y = 0;
    static const int poison[2] = {0x5a, 0xa5};
    for (int p = 0; p < 2; p++) {
        tide_status st = {0};
        gu_poison(de, poison[p], ne);
        gu_ran(tide_cuda_kv_pack(s.fmt, dx, s.rows, s.dim, de, NULL, &st), &st, "kv_pack");
        gu_down(ge, de, ne);
        for (size_t i = 0; i < ne; i++) bad_e += ge[i] != e[i];
        /* unpack the CPU's bytes, so a packing error does not hide an unpacking one */
        gu_up(de, e, ne);
        gu_poison(dy, poison[p], nx * sizeof(float));
        gu_ran(tide_cuda_kv_unpack(s.fmt, de, s.rows, s.dim, dy, NULL, &st), &st, "kv_unpack");
        gu_down(gy, dy, nx * sizeof(float));
        bad_y += gc_compare(gy, y, nx, 0.0).differ;
    }
    char name[80];
    static const char *const fmts[] = {"window", "latent", "key"};
    snprintf(name, sizeof name, "%s %lldx%lld", fmts[s.fmt], (long long)s.rows, (long long)s.dim);
    gu_result(c, name, bad_e == 0 && bad_y == 0,
              "bit-exact required; packed bytes differing %zu of %zu, unpacked values %zu of %zu (2 runs)", bad_e,
              2 * ne, bad_y, 2 * nx);
    tide_cuda_free(dx);
    tide_cuda_free(dy);
    tide_cuda_free(de);
    free(x);
    free(y);
    free(gy);
    free(e);
    free(ge);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_kv_pack");
    gu_rng rng = {c.seed};
    static const shape big[] = {{0, 1000, 512}, {1, 1000, 512}, {2, 4000, 128}, {0, 7, 45},
                                {1, 9, 37},     {2, 5, 33},     {1, 1, 1},      {0, 300, 96}};
    static const shape small[] = {{0, 20, 512}, {1, 20, 512}, {2, 40, 128}, {1, 3, 37}, {2, 3, 33}};
    const shape *sh = c.small ? small : big;
    size_t n = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < n; i++) run_case(&c, &rng, sh[i]);
    return gu_finish(&c);
}
