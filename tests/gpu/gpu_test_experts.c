/* GPU routed experts (tide_cuda_moe_experts: grouped FP4 GEMMs with the
 * SwiGLU fused) against the CPU computation of src/model/moe.c's routed part
 * on tide_cpu_ops(): per expert in ascending id, the rows routed to it (row
 * order, then slot order), g = linear(w1), u = linear(w3) (BF16 out),
 * h = swiglu(g, u, limit, weight), ye = linear(w2, h) (BF16 out), acc[row] +=
 * ye in f32; then, with the shared expert's output s, bf16(acc + s).
 *
 * Error bound. The GPU does the same f32 roundings except inside each
 * 32-block dot product of the three GEMMs, which comes from the tensor cores
 * instead of an exact double sum rounded once (see gpu_test_gemm: measured
 * bit-identical for FP4 weights). A differing block sum can move g, u or ye
 * by one bf16 step; a moved h can move its FP8 code (one e4m3 step) or, if
 * it is its block's maximum, the block's scale. So per output element
 *     |gpu - cpu| <= 2^-6 * M + 2^-10 * T
 * where M = sum over the row's experts of |ye_e| (one or two bf16 steps of
 * every term) and T = sum of ||hq_e|| * ||w2_e[d]|| (the size of the second
 * GEMM's terms, covering re-rounded FP8 codes). Also required: at least 99%
 * of the outputs bit-identical, ||gpu - cpu|| / ||cpu|| < 1e-3, two runs
 * bit-identical (the bucket order varies, the results must not). Reported:
 * the bit-identical share, the largest error in bf16 ulps of the CPU value,
 * and the largest error in units of the bound. The experts' w2 scales
 * differ by up to 2^24 between experts, so that the f32 sum of a row's
 * terms is inexact and a wrong summation order would show (checked: with
 * the order reversed, fewer than 99% of the outputs stay bit-identical). */
#include "backend/ops.h"
#include "base/threadpool.h"
#include "gpu_util.h"
#include "num/num.h"

typedef struct {
    int64_t rows, D, I;
    int E, k;
    double limit;
    int pattern; /* 0 distinct random experts, 1 skewed to a few, 2 with repeated and out-of-range ids */
} ecase;

typedef struct {
    uint8_t *w1, *s1, *w3, *s3, *w2, *s2; /* host */
    void *d[6];                           /* device copies, same order */
} expert;

static void fill_bytes(gu_rng *rng, uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = gu_next(rng);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)gu_next(rng);
}

/* e8m0 codes base..base+4: base 118 (2^-9 .. 2^-5) keeps the GEMM outputs
 * O(1) for |e2m1| <= 6 */
static void fill_scales(gu_rng *rng, uint8_t *p, size_t n, int base) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(base + gu_next(rng) % 5);
}

static void route(gu_rng *rng, const ecase *cs, int32_t *idx, float *w) {
    int *perm = gu_xmalloc((size_t)cs->E * sizeof(int));
    int pool = cs->pattern == 1 ? (cs->k + 2 < cs->E ? cs->k + 2 : cs->E) : cs->E;
    for (int64_t r = 0; r < cs->rows; r++) {
        for (int e = 0; e < cs->E; e++) perm[e] = e;
        for (int j = 0; j < cs->k; j++) { /* partial Fisher-Yates over the first `pool` ids */
            int t = j + (int)(gu_next(rng) % (uint64_t)(pool - j));
            int tmp = perm[j];
            perm[j] = perm[t];
            perm[t] = tmp;
            idx[r * cs->k + j] = perm[j];
            w[r * cs->k + j] = (float)(0.1 + 0.9 * gu_uniform(rng));
        }
        if (cs->pattern == 2) {
            if (cs->k >= 2 && gu_uniform(rng) < 0.25) idx[r * cs->k + 1] = idx[r * cs->k];
            if (gu_uniform(rng) < 0.25) idx[r * cs->k + cs->k - 1] = gu_uniform(rng) < 0.5 ? -1 : cs->E;
        }
    }
    free(perm);
}

static double bf16_ulp(double v) {
    v = fabs(v);
    if (v < 0x1p-126) return 0x1p-133;
    int e;
    frexp(v, &e); /* v = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 1 - 7);
}

static void run_case(gu_ctx *c, gu_rng *rng, tide_pool *pool, const ecase *cs) {
    const int64_t rows = cs->rows, D = cs->D, I = cs->I;
    const int E = cs->E, k = cs->k;
    const tide_ops *ops = tide_cpu_ops();
    size_t nx = (size_t)(rows * D);
    float *x = gu_xmalloc(nx * 4), *w = gu_xmalloc((size_t)(rows * k) * 4);
    int32_t *idx = gu_xmalloc((size_t)(rows * k) * 4);
    uint16_t *sh = gu_xmalloc(nx * 2);
    for (size_t i = 0; i < nx; i++) x[i] = tide_round_bf16((float)gu_normal(rng));
    for (size_t i = 0; i < nx; i++) sh[i] = tide_f32_to_bf16((float)gu_normal(rng));
    route(rng, cs, idx, w);
    expert *ex = gu_xmalloc((size_t)E * sizeof *ex);
    size_t b13 = (size_t)(I * D / 2), s13 = (size_t)(I * (D / 32)), b2 = (size_t)(D * I / 2), s2 = (size_t)(D * (I / 32));
    for (int e = 0; e < E; e++) {
        expert *p = &ex[e];
        p->w1 = gu_xmalloc(b13), p->w3 = gu_xmalloc(b13), p->w2 = gu_xmalloc(b2);
        p->s1 = gu_xmalloc(s13), p->s3 = gu_xmalloc(s13), p->s2 = gu_xmalloc(s2);
        fill_bytes(rng, p->w1, b13), fill_bytes(rng, p->w3, b13), fill_bytes(rng, p->w2, b2);
        /* w2's scales spread the experts' outputs over 2^-12 .. 2^12: the
         * f32 sum of a row's bf16 terms is then inexact, so its order (by
         * expert id) shows in the result */
        fill_scales(rng, p->s1, s13, 118), fill_scales(rng, p->s3, s13, 118);
        fill_scales(rng, p->s2, s2, 106 + 6 * (e % 5));
    }

    /* CPU reference: moe.c's loop */
    float *acc = calloc(nx, 4), *xe = gu_xmalloc(nx * (size_t)k * 4), *we = gu_xmalloc((size_t)(rows * k) * 4);
    float *g = gu_xmalloc((size_t)(rows * k * I) * 4), *u = gu_xmalloc((size_t)(rows * k * I) * 4);
    float *ye = gu_xmalloc(nx * (size_t)k * 4), *w2dq = gu_xmalloc((size_t)(D * I) * 4);
    double *M = calloc(nx, sizeof(double)), *T = calloc(nx, sizeof(double)), *w2n = gu_xmalloc((size_t)D * 8);
    double *hn = gu_xmalloc((size_t)(rows * k) * 8);
    int64_t *who = gu_xmalloc((size_t)(rows * k) * 8);
    if (!acc || !M || !T) exit(2);
    for (int e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int j = 0; j < k; j++)
                if (idx[r * k + j] == e) {
                    memcpy(xe + n * D, x + r * D, (size_t)D * 4);
                    we[n] = w[r * k + j];
                    who[n++] = r;
                }
        if (n == 0) continue;
        tide_weight w1 = {TIDE_W_FP4, I, D, ex[e].w1, ex[e].s1}, w3 = {TIDE_W_FP4, I, D, ex[e].w3, ex[e].s3};
        tide_weight w2 = {TIDE_W_FP4, D, I, ex[e].w2, ex[e].s2};
        ops->linear(ops, pool, &w1, xe, n, g, TIDE_LIN_BF16_OUT);
        ops->linear(ops, pool, &w3, xe, n, u, TIDE_LIN_BF16_OUT);
        ops->swiglu(ops, g, u, n, I, cs->limit, we, g);
        ops->linear(ops, pool, &w2, g, n, ye, TIDE_LIN_BF16_OUT);
        /* bound terms: ||hq|| per routed row, ||w2[d]|| per output */
        for (int64_t i = 0; i < n; i++) {
            tide_sim_fp8_act(g + i * I, (size_t)I, 32);
            double a = 0;
            for (int64_t q = 0; q < I; q++) a += (double)g[i * I + q] * g[i * I + q];
            hn[i] = sqrt(a);
        }
        tide_dequant_fp4_weight(ex[e].w2, ex[e].s2, (size_t)D, (size_t)I, w2dq);
        for (int64_t d = 0; d < D; d++) {
            double a = 0;
            for (int64_t q = 0; q < I; q++) a += (double)w2dq[d * I + q] * w2dq[d * I + q];
            w2n[d] = sqrt(a);
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < D; d++) {
                size_t o = (size_t)(who[i] * D + d);
                acc[o] += ye[i * D + d];
                M[o] += fabs((double)ye[i * D + d]);
                T[o] += hn[i] * w2n[d];
            }
    }
    float *ref2 = gu_xmalloc(nx * 4);
    for (size_t i = 0; i < nx; i++) ref2[i] = tide_round_bf16(acc[i] + tide_bf16_to_f32(sh[i]));

    /* GPU */
    tide_cuda_expert_weights *tab = gu_xmalloc((size_t)E * sizeof *tab);
    for (int e = 0; e < E; e++) {
        const uint8_t *hp[6] = {ex[e].w1, ex[e].s1, ex[e].w3, ex[e].s3, ex[e].w2, ex[e].s2};
        size_t nb[6] = {b13, s13, b13, s13, b2, s2};
        for (int j = 0; j < 6; j++) {
            ex[e].d[j] = gu_dalloc(nb[j]);
            gu_up(ex[e].d[j], hp[j], nb[j]);
        }
        tide_cuda_expert_weights t = {ex[e].d[0], ex[e].d[1], ex[e].d[2], ex[e].d[3], ex[e].d[4], ex[e].d[5]};
        tab[e] = t;
    }
    tide_status st = {0};
    tide_cuda_experts *dex = NULL;
    if (tide_cuda_experts_create(tab, E, D, I, &dex, &st) != 0) {
        fprintf(stderr, "experts_create: %s\n", st.msg);
        exit(2);
    }
    size_t wsb = tide_cuda_moe_experts_workspace(dex, rows, k);
    void *dws = gu_dalloc(wsb);
    float *dx = gu_dalloc(nx * 4), *dw = gu_dalloc((size_t)(rows * k) * 4), *dy = gu_dalloc(nx * 4);
    int32_t *didx = gu_dalloc((size_t)(rows * k) * 4);
    uint16_t *dsh = gu_dalloc(nx * 2);
    gu_up(dx, x, nx * 4);
    gu_up(dw, w, (size_t)(rows * k) * 4);
    gu_up(didx, idx, (size_t)(rows * k) * 4);
    gu_up(dsh, sh, nx * 2);
    float *got = gu_xmalloc(nx * 4), *again = gu_xmalloc(nx * 4);
    int repeat_same = 1;
    for (int with_shared = 0; with_shared < 2; with_shared++) {
        const float *ref = with_shared ? ref2 : acc;
        gu_poison(dy, 0xff, nx * 4);
        gu_poison(dws, 0xff, wsb);
        gu_ran(tide_cuda_moe_experts(dex, dx, rows, didx, dw, k, cs->limit, with_shared ? dsh : NULL, dy, dws, wsb,
                                     NULL, &st),
               &st, "moe_experts");
        gu_down(got, dy, nx * 4);
        if (!with_shared) { /* a second run: the bucket order may differ, the result may not */
            gu_poison(dy, 0xff, nx * 4);
            gu_ran(tide_cuda_moe_experts(dex, dx, rows, didx, dw, k, cs->limit, NULL, dy, dws, wsb, NULL, &st), &st,
                   "moe_experts (repeat)");
            gu_down(again, dy, nx * 4);
            repeat_same = memcmp(got, again, nx * 4) == 0;
        }
        size_t same = 0, over = 0, nan = 0;
        double max_ulp = 0, worst = 0, e2 = 0, r2 = 0;
        for (size_t i = 0; i < nx; i++) {
            float gv = got[i], rv = ref[i];
            if (memcmp(&gv, &rv, 4) == 0) {
                same++;
                continue;
            }
            if (gv != gv || rv != rv) {
                nan++;
                continue;
            }
            double d = fabs((double)gv - rv), bound = ldexp(M[i], -6) + ldexp(T[i], -10);
            double ulps = d / bf16_ulp(rv);
            if (ulps > max_ulp) max_ulp = ulps;
            if (bound > 0 && d / bound > worst) worst = d / bound;
            if (d > bound) over++;
            e2 += d * d;
        }
        for (size_t i = 0; i < nx; i++) r2 += (double)ref[i] * ref[i];
        double nrel = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
        double share = (double)same / (double)nx;
        char name[160];
        snprintf(name, sizeof name, "rows %lld D %lld I %lld E %d k %d limit %g %s%s", (long long)rows, (long long)D,
                 (long long)I, E, k, cs->limit,
                 cs->pattern == 0 ? "random" : cs->pattern == 1 ? "skewed" : "repeated+invalid ids",
                 with_shared ? " +shared" : "");
        int pass = nan == 0 && over == 0 && share >= 0.99 && nrel < 1e-3 && (with_shared || repeat_same);
        gu_result(c, name, pass,
                  "bit-identical %.4f%% (need >= 99%%), max err %.2f bf16 ulps, max err/bound %.3g, over bound %zu, "
                  "NaN/unwritten %zu, norm-rel err %.2e (bound 1e-3)%s",
                  100.0 * share, max_ulp, worst, over, nan, nrel,
                  with_shared ? "" : (repeat_same ? ", repeat identical" : ", REPEAT DIFFERS"));
    }

    tide_cuda_experts_destroy(dex);
    tide_cuda_free(dws);
    tide_cuda_free(dx);
    tide_cuda_free(dw);
    tide_cuda_free(dy);
    tide_cuda_free(didx);
    tide_cuda_free(dsh);
    for (int e = 0; e < E; e++) {
        for (int j = 0; j < 6; j++) tide_cuda_free(ex[e].d[j]);
        free(ex[e].w1), free(ex[e].w3), free(ex[e].w2), free(ex[e].s1), free(ex[e].s3), free(ex[e].s2);
    }
    free(ex), free(tab), free(x), free(w), free(idx), free(sh), free(acc), free(xe), free(we), free(g), free(u);
    free(ye), free(w2dq), free(M), free(T), free(w2n), free(hn), free(who), free(ref2), free(got), free(again);
}

static void bad_args(gu_ctx *c) {
    tide_status st = {0};
    tide_cuda_experts *ex = NULL;
    uint8_t *d = gu_dalloc(4096);
    tide_cuda_expert_weights t = {d, d, d, d, d + 8, d}; /* w2 not 16-byte aligned */
    int rc1 = tide_cuda_experts_create(&t, 1, 64, 64, &ex, &st);
    int rc2 = tide_cuda_experts_create(&t, 1, 48, 64, &ex, &st); /* dim % 32 */
    tide_cuda_expert_weights ok = {d, d, d, d, d, d};
    int rc3 = tide_cuda_experts_create(&ok, 1, 64, 64, &ex, &st);
    int rc4 = -1, rc5 = -1;
    if (rc3 == 0) {
        size_t need = tide_cuda_moe_experts_workspace(ex, 4, 2);
        float *dxy = gu_dalloc(4096);
        rc4 = tide_cuda_moe_experts(ex, dxy, 4, (const int32_t *)d, dxy, 2, 10.0, NULL, dxy, d, need - 1, NULL, &st);
        rc5 = tide_cuda_moe_experts(ex, dxy, 4, (const int32_t *)d, dxy, 0, 10.0, NULL, dxy, d, need, NULL, &st);
        tide_cuda_free(dxy);
    }
    tide_cuda_experts_destroy(ex);
    tide_cuda_free(d);
    gu_result(c, "bad arguments", rc1 == -1 && rc2 == -1 && rc3 == 0 && rc4 == -1 && rc5 == -1,
              "misaligned w2, dim %% 32, short workspace and k = 0 refused; last message: %s", st.msg);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_experts");
    gu_rng rng = {c.seed};
    tide_pool *pool = gu_pool();
    /* the released widths (D 5120, I 2304, 48 local experts, top-6) at
     * decode sizes (skinny tiles), then odd shapes: D, I not multiples of
     * the tiles or of 128, wide tiles (P >= 32 E), buckets of several
     * tiles, repeated and out-of-range ids, no clamp */
    static const ecase big[] = {
        {5, 5120, 2304, 48, 6, 10.0, 0},  {64, 5120, 2304, 48, 6, 10.0, 0}, {300, 352, 224, 8, 4, 10.0, 0},
        {40, 352, 224, 8, 6, 0.0, 1},     {7, 96, 160, 5, 3, 10.0, 2},      {1, 64, 32, 1, 1, 10.0, 0},
        {600, 256, 96, 3, 2, 7.0, 2},     {33, 1024, 512, 16, 6, 10.0, 1},
    };
    static const ecase small[] = {
        {7, 96, 160, 5, 3, 10.0, 2}, {300, 352, 224, 8, 4, 10.0, 0}, {40, 352, 224, 8, 6, 0.0, 1}};
    const ecase *cs = c.small ? small : big;
    size_t n = c.small ? sizeof small / sizeof *small : sizeof big / sizeof *big;
    for (size_t i = 0; i < n; i++) run_case(&c, &rng, pool, &cs[i]);
    bad_args(&c);
    tide_pool_destroy(pool);
    return gu_finish(&c);
}
