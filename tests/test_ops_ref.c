/* The CPU ops, one at a time, against the numpy reference's component entry
 * points (tools/ref/components.py) on fresh random inputs: the GEMMs (fp8,
 * fp4, bf16), RMSNorm, RoPE (frequencies, cos/sin tables, rotation),
 * hyper-connection mixes / pre / post, sparse attention with sinks and -1
 * entries, indexer scores, top-k with ties, candidate blocks, MoE routing,
 * SwiGLU and the compressor's pooling. Everything must match bit for bit.
 * The RoPE frequencies are also checked to be the correctly rounded f32 of
 * the exact formula (tide's rule, docs/model.md "Deviations"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "model/forward_internal.h"
#include "model/model.h"
#include "num/num.h"
#include "test_ops_util.h"

typedef struct {
    char *dir;
    tu_rng r;
    const tide_ops *ops;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = tu_mkdtemp("opsref");
    f->r.s = tu_seed();
    f->ops = tide_cpu_ops();
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static float *bf_randn(tu_rng *r, int64_t n, double scale) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = tide_round_bf16((float)(tu_normal(r) * scale));
    return x;
}

/* Compares n floats with the oracle's output `name` exactly (NaN-free). */
static void expect_equal(fixture *f, const char *name, const float *mine, int64_t n) {
    int64_t m;
    double *ref = tn_out(f->dir, name, &m);
    assert_non_null(ref);
    assert_int_equal(m, n);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!((double)mine[i] == ref[i] || (isinf(mine[i]) && isinf(ref[i]) && (mine[i] > 0) == (ref[i] > 0)))) {
            if (first < 0) first = i;
            bad++;
        }
    if (bad) fail_msg("%s: %lld of %lld differ (first at %lld: %.9g vs ref %.9g)", name, (long long)bad,
                      (long long)n, (long long)first, mine[first], ref[first]);
    free(ref);
}

static void test_gemm(void **state) {
    fixture *f = *state;
    for (int fmt = 0; fmt < 3; fmt++) {
        int64_t M = 5, N = 40 + (int64_t)(tu_next(&f->r) % 30), K = 32 * (2 + (int64_t)(tu_next(&f->r) % 4));
        float *x = bf_randn(&f->r, M * K, 1.5);
        uint8_t *w = malloc((size_t)(N * K)), *sc;
        float *wb = NULL;
        tide_weight tw = {0};
        tw.out = N;
        tw.in = K;
        tn_arr in[3];
        in[0] = tn_f32("x", x, 2, M, K, 0);
        const char *op;
        if (fmt == 0) {
            for (int64_t i = 0; i < N * K; i++) {
                uint8_t c;
                do c = (uint8_t)tu_next(&f->r);
                while ((c & 0x7f) == 0x7f);
                w[i] = c;
            }
            int64_t sn = ((N + 31) / 32) * (K / 32);
            sc = malloc((size_t)sn);
            for (int64_t i = 0; i < sn; i++) sc[i] = (uint8_t)(120 + tu_next(&f->r) % 10);
            in[1] = (tn_arr){"w", 'u', 2, {N, K}, w};
            in[2] = (tn_arr){"w_scale", 'u', 2, {(N + 31) / 32, K / 32}, sc};
            tw.type = TIDE_W_FP8;
            tw.data = w;
            tw.scale = sc;
            op = "fp8_gemm";
        } else if (fmt == 1) {
            for (int64_t i = 0; i < N * K / 2; i++) w[i] = (uint8_t)tu_next(&f->r);
            sc = malloc((size_t)(N * K / 32));
            for (int64_t i = 0; i < N * K / 32; i++) sc[i] = (uint8_t)(120 + tu_next(&f->r) % 10);
            in[1] = (tn_arr){"w", 'u', 2, {N, K / 2}, w};
            in[2] = (tn_arr){"w_scale", 'u', 2, {N, K / 32}, sc};
            tw.type = TIDE_W_FP4;
            tw.data = w;
            tw.scale = sc;
            op = "fp4_gemm";
        } else {
            sc = NULL;
            wb = bf_randn(&f->r, N * K, 0.2);
            uint16_t *wh = (uint16_t *)(void *)w;
            free(w);
            w = malloc((size_t)(N * K) * 2);
            wh = (uint16_t *)(void *)w;
            for (int64_t i = 0; i < N * K; i++) wh[i] = tide_f32_to_bf16(wb[i]);
            in[1] = tn_f32("w", wb, 2, N, K, 0);
            tw.type = TIDE_W_BF16;
            tw.data = w;
            op = "linear_bf16";
        }
        assert_int_equal(tn_call(f->dir, op, in, fmt == 2 ? 2 : 3), 0);
        float *y = malloc((size_t)(M * N) * sizeof(float));
        f->ops->linear(f->ops, NULL, &tw, x, M, y, TIDE_LIN_BF16_OUT);
        expect_equal(f, "y", y, M * N);
        free(x);
        free(w);
        free(sc);
        free(wb);
        free(y);
    }
}

static void test_rmsnorm(void **state) {
    fixture *f = *state;
    int64_t T = 7, D = 96 + 32 * (int64_t)(tu_next(&f->r) % 6);
    float *x = bf_randn(&f->r, T * D, 3.0), *w = bf_randn(&f->r, D, 1.0), eps = 1e-20f;
    tn_arr in[] = {tn_f32("x", x, 2, T, D, 0), tn_f32("w", w, 1, D, 0, 0), {"eps", 'f', 0, {0}, &eps}};
    assert_int_equal(tn_call(f->dir, "rmsnorm", in, 3), 0);
    float *y = malloc((size_t)(T * D) * sizeof(float));
    f->ops->rmsnorm(f->ops, NULL, x, T, D, w, 1e-20, y);
    expect_equal(f, "y", y, T * D);
    free(x);
    free(w);
    free(y);
}

/* One RoPE configuration: rope dim, theta, and YaRN (original_len 0 = none). */
typedef struct {
    int rd;
    double theta, factor, beta_fast, beta_slow;
    int64_t original_len;
} rope_cfg;

/* The configurations we ship: the released config (tests/data, also the
 * `tide synth` presets' thetas and YaRN), the synth_tiny.py shapes (default,
 * CTINY) and a few other rope dims. Add a row when a new shape appears. */
static const rope_cfg ROPE_CFGS[] = {
    {64, 10000, 0, 0, 0, 0},     {64, 160000, 16, 32, 1, 65536}, {64, 40000, 8, 32, 1, 4096},
    {16, 10000, 0, 0, 0, 0},     {16, 160000, 16, 32, 1, 64},    {64, 160000, 16, 32, 1, 0},
    {32, 10000, 0, 0, 0, 0},     {128, 10000, 0, 0, 0, 0},
};

/* tide_rope_freqs follows the reference's float32 steps; its one
 * transcendental, base ** e, is evaluated in double and rounded once to f32.
 * Re-evaluate that power in long double (64-bit mantissa, libm independent
 * of the double path) and require (a) the same f32 and (b) a margin of
 * 2^-45 relative to every f32 rounding midpoint, so that any libm with a
 * double error of a few ulp yields the same f32: the power is the correctly
 * rounded one, not an artefact of this machine's pow. The rest of the
 * formula is replayed here in f32, step by step. */
static void test_rope_freqs_correctly_rounded(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof ROPE_CFGS / sizeof ROPE_CFGS[0]; c++) {
        const rope_cfg *k = &ROPE_CFGS[c];
        float mine[64];
        tide_rope_freqs(k->rd, k->original_len, k->theta, k->factor, k->beta_fast, k->beta_slow, mine);
        float low = 0, span = 1;
        if (k->original_len > 0) {
            long double lo = k->rd * logl((long double)k->original_len / (k->beta_fast * 2 * M_PI)) /
                             (2 * logl(k->theta));
            long double hi = k->rd * logl((long double)k->original_len / (k->beta_slow * 2 * M_PI)) /
                             (2 * logl(k->theta));
            long double l = floorl(lo) > 0 ? floorl(lo) : 0;
            long double high = ceill(hi) < k->rd - 1 ? ceill(hi) : k->rd - 1;
            low = (float)l;
            span = (float)(high - l > 1e-3L ? high - l : 1e-3L);
        }
        for (int i = 0; i < k->rd / 2; i++) {
            float e = (float)(2 * i) / (float)k->rd;
            long double v = powl((long double)k->theta, (long double)e);
            float p = (float)v;
            long double up = ((long double)p + nextafterf(p, INFINITY)) / 2;
            long double dn = ((long double)p + nextafterf(p, 0)) / 2;
            long double margin = fminl(fabsl(v - up), fabsl(v - dn)) / v;
            if (margin < 0x1p-45L)
                fail_msg("cfg %zu freq %d: power %.12Lg within %Lg of an f32 midpoint", c, i, v, margin);
            float f = 1.0f / p;
            if (k->original_len > 0) {
                float ramp = ((float)i - low) / span;
                ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
                float smooth = 1.0f - ramp;
                float a = f / (float)k->factor, b = 1.0f - smooth;
                float t1 = a * b, t2 = f * smooth;
                f = t1 + t2;
            }
            if (mine[i] != f) fail_msg("cfg %zu freq %d: %.9g vs %.9g", c, i, mine[i], f);
        }
    }
}

/* Frequencies and cos/sin tables equal to the oracle's bit for bit (both
 * sides follow the reference's float32 steps), then the rotation. */
static void test_rope(void **state) {
    fixture *f = *state;
    int64_t T = 6, H = 3, rd = 64;
    for (int yarn = 0; yarn < 2; yarn++) {
        float *x = bf_randn(&f->r, T * H * rd, 2.0);
        int32_t pos[6];
        for (int t = 0; t < T; t++) pos[t] = (int32_t)(tu_next(&f->r) % 50000);
        pos[0] = yarn ? 65535 : 0;
        float theta = yarn ? 160000.0f : 10000.0f, yv[4] = {16, 32, 1, 65536}, rdf = (float)rd, inv = 1;
        tn_arr in[] = {{"rd", 'f', 0, {0}, &rdf}, {"pos", 'i', 1, {T}, pos}, {"theta", 'f', 0, {0}, &theta},
                       {"yarn", 'f', 1, {4}, yv}};
        assert_int_equal(tn_call(f->dir, "rope_freqs", in, yarn ? 4 : 3), 0);
        int64_t n;
        double *rf = tn_out(f->dir, "inv_freq", &n), *rc = tn_out(f->dir, "cos", &n), *rs = tn_out(f->dir, "sin", &n);
        float mine[32], cs[64];
        tide_rope_freqs((int)rd, yarn ? 65536 : 0, theta, 16, 32, 1, mine);
        for (int k = 0; k < rd / 2; k++)
            if ((double)mine[k] != rf[k]) fail_msg("freq %d: %.9g vs oracle %.9g", k, mine[k], rf[k]);
        for (int t = 0; t < T; t++) {
            tide_rope_cs(mine, (int)rd / 2, pos[t], cs);
            for (int k = 0; k < rd / 2; k++) {
                assert_true(cs[2 * k] == (float)rc[t * rd / 2 + k]);
                assert_true(cs[2 * k + 1] == (float)rs[t * rd / 2 + k]);
            }
        }
        /* the rotation (inverse on the second pass) against op "rope" */
        tn_arr in2[] = {tn_f32("x", x, 3, T, H, rd), {"pos", 'i', 1, {T}, pos}, {"theta", 'f', 0, {0}, &theta},
                        {"yarn", 'f', 1, {4}, yv}, {"inverse", 'f', 0, {0}, &inv}};
        assert_int_equal(tn_call(f->dir, "rope", in2, yarn ? 5 : 3), 0);
        float *y = malloc((size_t)(T * H * rd) * sizeof(float));
        memcpy(y, x, (size_t)(T * H * rd) * sizeof(float));
        for (int t = 0; t < T; t++) {
            tide_rope_cs(mine, (int)rd / 2, pos[t], cs);
            f->ops->rope(f->ops, y + t * H * rd, H, rd, rd / 2, cs, yarn);
        }
        expect_equal(f, "y", y, T * H * rd);
        free(rf);
        free(rc);
        free(rs);
        free(x);
        free(y);
    }
}

static void test_hc(void **state) {
    fixture *f = *state;
    int64_t T = 5, hc = 4, D = 64, nm = (2 + hc) * hc;
    float *x = bf_randn(&f->r, T * hc * D, 1.0);
    float *fn = malloc((size_t)(nm * hc * D) * sizeof(float)), scale[3], base[24];
    for (int64_t i = 0; i < nm * hc * D; i++) fn[i] = (float)(tu_normal(&f->r) * 0.05);
    for (int i = 0; i < 3; i++) scale[i] = (float)(0.5 + tu_uniform(&f->r));
    for (int i = 0; i < nm; i++) base[i] = (float)tu_normal(&f->r);
    float iters = 20, he = 1e-6f, ne = 1e-20f;
    tn_arr in[] = {tn_f32("x", x, 3, T, hc, D), tn_f32("fn", fn, 2, nm, hc * D, 0), tn_f32("scale", scale, 1, 3, 0, 0),
                   tn_f32("base", base, 1, nm, 0, 0), {"iters", 'f', 0, {0}, &iters}, {"hc_eps", 'f', 0, {0}, &he},
                   {"norm_eps", 'f', 0, {0}, &ne}};
    assert_int_equal(tn_call(f->dir, "hc_mixes", in, 7), 0);
    float pre[20], post[20], comb[80];
    f->ops->hc_mixes(f->ops, NULL, x, T, (int)hc, D, fn, scale, base, 1e-20, 20, 1e-6, pre, post, comb);
    expect_equal(f, "pre", pre, T * hc);
    expect_equal(f, "post", post, T * hc);
    expect_equal(f, "comb", comb, T * hc * hc);

    float *y = malloc((size_t)(T * D) * sizeof(float));
    tn_arr in2[] = {tn_f32("x", x, 3, T, hc, D), tn_f32("pre", pre, 2, T, hc, 0)};
    assert_int_equal(tn_call(f->dir, "hc_pre", in2, 2), 0);
    f->ops->hc_pre(f->ops, x, T, (int)hc, D, pre, y);
    expect_equal(f, "y", y, T * D);

    float *out = malloc((size_t)(T * hc * D) * sizeof(float));
    tn_arr in3[] = {tn_f32("y", y, 2, T, D, 0), tn_f32("residual", x, 3, T, hc, D), tn_f32("post", post, 2, T, hc, 0),
                    tn_f32("comb", comb, 3, T, hc, hc)};
    assert_int_equal(tn_call(f->dir, "hc_post", in3, 4), 0);
    f->ops->hc_post(f->ops, y, x, T, (int)hc, D, post, comb, out);
    expect_equal(f, "out", out, T * hc * D);
    free(x);
    free(fn);
    free(y);
    free(out);
}

static void test_sparse_attn(void **state) {
    fixture *f = *state;
    int64_t T = 3, H = 4, D = 128, NKV = 150, K = 140; /* three 64-chunks, the last partial */
    float *q = bf_randn(&f->r, T * H * D, 0.3), *kv = bf_randn(&f->r, NKV * D, 1.0), sink[4];
    for (int h = 0; h < H; h++) sink[h] = (float)tu_normal(&f->r);
    int32_t *idx = malloc((size_t)(T * K) * sizeof(int32_t));
    for (int64_t i = 0; i < T * K; i++)
        idx[i] = tu_uniform(&f->r) < 0.2 ? -1 : (int32_t)(tu_next(&f->r) % (uint64_t)NKV);
    for (int64_t i = 0; i < K; i++) idx[2 * K + i] = i < 70 ? -1 : idx[2 * K + i]; /* leading empties */
    float scale = (float)(1.0 / sqrt((double)D));
    tn_arr in[] = {tn_f32("q", q, 3, T, H, D), tn_f32("kv", kv, 2, NKV, D, 0), tn_f32("sink", sink, 1, H, 0, 0),
                   {"idx", 'i', 2, {T, K}, idx}, {"scale", 'f', 0, {0}, &scale}};
    assert_int_equal(tn_call(f->dir, "sparse_attn", in, 5), 0);
    const float **ent = malloc((size_t)(T * K) * sizeof(float *));
    tide_attn_row rows[3];
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < K; i++) ent[t * K + i] = idx[t * K + i] < 0 ? NULL : kv + idx[t * K + i] * D;
        rows[t].kv = ent + t * K;
        rows[t].n_idx = (int)K;
    }
    float *o = malloc((size_t)(T * H * D) * sizeof(float));
    f->ops->sparse_attn(f->ops, NULL, q, T, (int)H, D, rows, sink, scale, o);
    expect_equal(f, "o", o, T * H * D);
    free(q);
    free(kv);
    free(idx);
    free(ent);
    free(o);
}

static void test_indexer(void **state) {
    fixture *f = *state;
    int64_t T = 4, H = 4, d = 64, N = 37;
    float *q = bf_randn(&f->r, T * H * d, 1.0), *k = bf_randn(&f->r, N * d, 1.0), *w = bf_randn(&f->r, T * H, 0.3);
    for (int64_t t = 0; t < T; t++) tide_sim_fp4_e8m0(q + t * H * d, (size_t)(H * d), 32);
    tide_sim_fp4_e8m0(k, (size_t)(N * d), 32);
    int32_t cl[4] = {0, 9, 30, 37};
    tn_arr in[] = {tn_f32("q", q, 3, T, H, d), tn_f32("k", k, 2, N, d, 0), tn_f32("w", w, 2, T, H, 0),
                   {"compress_lens", 'i', 1, {T}, cl}};
    assert_int_equal(tn_call(f->dir, "indexer_score", in, 4), 0);
    float *sc = malloc((size_t)(T * N) * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        f->ops->index_scores(f->ops, q + t * H * d, (int)H, d, w + t * H, k, N, sc + t * N);
        for (int64_t j = cl[t]; j < N; j++) sc[t * N + j] = -INFINITY;
    }
    expect_equal(f, "score", sc, T * N);

    /* top-k with plenty of ties: scores on a coarse grid */
    for (int64_t i = 0; i < T * N; i++)
        if (!isinf(sc[i])) sc[i] = (float)(tu_next(&f->r) % 4);
    float kk = 6;
    tn_arr in2[] = {tn_f32("score", sc, 2, T, N, 0), {"k", 'f', 0, {0}, &kk}, {"compress_lens", 'i', 1, {T}, cl}};
    assert_int_equal(tn_call(f->dir, "topk", in2, 3), 0);
    int64_t n;
    double *ref = tn_out(f->dir, "idx", &n);
    assert_int_equal(n, T * 6);
    for (int64_t t = 0; t < T; t++) {
        int32_t out[64];
        int got = f->ops->topk_sorted(f->ops, sc + t * N, N, 6, out, NULL);
        for (int i = 0; i < 6; i++) {
            int32_t want = i < got && out[i] < cl[t] ? out[i] : -1;
            assert_int_equal(want, (int32_t)ref[t * 6 + i]);
        }
    }
    free(ref);
    free(q);
    free(k);
    free(w);
    free(sc);
}

/* Candidate blocks: coarse scores (ties between blocks), partial last
 * blocks, queries that see nothing, fewer reachable blocks than kept. */
static void test_candidate_blocks(void **state) {
    fixture *f = *state;
    int64_t T = 6, N = 29, bs = 4, kb = 3;
    int32_t cl[6] = {0, 1, 5, 12, 27, 29};
    float *sc = malloc((size_t)(T * N) * sizeof(float));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < N; j++) sc[t * N + j] = j < cl[t] ? (float)(tu_next(&f->r) % 5) - 2.0f : -INFINITY;
    float kbf = (float)kb, bsf = (float)bs;
    tn_arr in[] = {tn_f32("score", sc, 2, T, N, 0), {"compress_lens", 'i', 1, {T}, cl},
                   {"topk_blocks", 'f', 0, {0}, &kbf}, {"block_size", 'f', 0, {0}, &bsf}};
    assert_int_equal(tn_call(f->dir, "candidate_blocks", in, 4), 0);
    uint8_t mask[29];
    float bscore[8];
    int32_t bidx[8];
    float *mf = malloc((size_t)(T * N) * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        tide_candidate_mask(f->ops, sc + t * N, N, cl[t], kb, bs, mask, bscore, bidx);
        for (int64_t j = 0; j < N; j++) mf[t * N + j] = mask[j];
    }
    expect_equal(f, "mask", mf, T * N);
    free(sc);
    free(mf);
}

static void test_moe_route(void **state) {
    fixture *f = *state;
    int64_t T = 6, D = 64, E = 16;
    int k = 4;
    float *x = bf_randn(&f->r, T * D, 1.0), *gw = bf_randn(&f->r, E * D, 0.3), bias[16];
    for (int e = 0; e < E; e++) bias[e] = (float)(tu_normal(&f->r) * 0.1);
    for (int func = 0; func < 3; func++) {
        float kf = (float)k, rs = 1.5f, sf = (float)func, nt = 1;
        tn_arr in[] = {tn_f32("x", x, 2, T, D, 0), tn_f32("gate_w", gw, 2, E, D, 0), tn_f32("bias", bias, 1, E, 0, 0),
                       {"topk", 'f', 0, {0}, &kf}, {"route_scale", 'f', 0, {0}, &rs}, {"score_func", 'f', 0, {0}, &sf},
                       {"norm_topk", 'f', 0, {0}, &nt}};
        assert_int_equal(tn_call(f->dir, "moe_route", in, 7), 0);
        float *logits = malloc((size_t)(T * E) * sizeof(float)), w[24];
        int32_t idx[24];
        tide_weight tw = {TIDE_W_F32, E, D, gw, NULL};
        f->ops->linear(f->ops, NULL, &tw, x, T, logits, 0);
        f->ops->moe_route(f->ops, logits, T, (int)E, k, func, bias, 1, 1.5f, idx, w);
        int64_t n;
        /* sqrt-softplus too: log1p(exp(x)) in double rounded once on both sides */
        expect_equal(f, "weights", w, T * k);
        double *ri = tn_out(f->dir, "indices", &n);
        for (int64_t i = 0; i < T * k; i++) assert_int_equal(idx[i], (int32_t)ri[i]);
        free(ri);
        free(logits);
    }
    free(x);
    free(gw);
}

static void test_swiglu(void **state) {
    fixture *f = *state;
    int64_t T = 5, F = 96;
    float *g = bf_randn(&f->r, T * F, 6.0), *u = bf_randn(&f->r, T * F, 6.0), wt[5], lim = 10;
    for (int t = 0; t < T; t++) wt[t] = (float)tu_uniform(&f->r);
    tn_arr in[] = {tn_f32("gate", g, 2, T, F, 0), tn_f32("up", u, 2, T, F, 0), {"limit", 'f', 0, {0}, &lim},
                   tn_f32("weight", wt, 1, T, 0, 0)};
    assert_int_equal(tn_call(f->dir, "swiglu", in, 4), 0);
    float *h = malloc((size_t)(T * F) * sizeof(float));
    f->ops->swiglu(f->ops, g, u, T, F, 10.0, wt, h);
    int64_t n;
    double *ref = tn_out(f->dir, "y", &n);
    for (int64_t i = 0; i < T * F; i++) assert_true(h[i] == tide_round_bf16((float)ref[i]));
    free(ref);
    free(g);
    free(u);
    free(h);
}

/* The compressor at ratio 2 from a carried state: our linear + pooling + norm. */
static void test_compressor(void **state) {
    fixture *f = *state;
    int64_t T = 5, DIM = 64, D = 32;
    int r = 2;
    int64_t sp = 7; /* odd: the first token completes the carried group */
    float *x = bf_randn(&f->r, T * DIM, 1.0), *wkv = bf_randn(&f->r, D * DIM, 0.2), *wg = bf_randn(&f->r, D * DIM, 0.2);
    float *nw = bf_randn(&f->r, D, 1.0), skv[64], ssc[64];
    for (int i = 0; i < r * D; i++) skv[i] = (float)tu_normal(&f->r), ssc[i] = (float)tu_normal(&f->r);
    float rf = 2, eps = 1e-20f, spf = (float)sp;
    tn_arr in[] = {tn_f32("x", x, 2, T, DIM, 0), tn_f32("wkv", wkv, 2, D, DIM, 0), tn_f32("wgate", wg, 2, D, DIM, 0),
                   tn_f32("norm_w", nw, 1, D, 0, 0), {"ratio", 'f', 0, {0}, &rf}, {"eps", 'f', 0, {0}, &eps},
                   {"start_pos", 'f', 0, {0}, &spf}, tn_f32("state_kv", skv, 2, r, D, 0),
                   tn_f32("state_score", ssc, 2, r, D, 0)};
    assert_int_equal(tn_call(f->dir, "compressor", in, 9), 0);
    float kv[5 * 32], sc[5 * 32], lat[5 * 32];
    tide_weight w1 = {TIDE_W_F32, D, DIM, wkv, NULL}, w2 = {TIDE_W_F32, D, DIM, wg, NULL};
    f->ops->linear(f->ops, NULL, &w1, x, T, kv, 0);
    f->ops->linear(f->ops, NULL, &w2, x, T, sc, 0);
    int64_t g = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t p = sp + t, slot = p % r;
        memcpy(skv + slot * D, kv + t * D, (size_t)D * sizeof(float));
        memcpy(ssc + slot * D, sc + t * D, (size_t)D * sizeof(float));
        if ((p + 1) % r == 0) f->ops->compress_pool(f->ops, skv, ssc, r, D, lat + (g++) * D);
    }
    f->ops->rmsnorm(f->ops, NULL, lat, g, D, nw, 1e-20, lat);
    expect_equal(f, "latent", lat, g * D);
    expect_equal(f, "state_kv", skv, r * D);
    free(x);
    free(wkv);
    free(wg);
    free(nw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),        cmocka_unit_test(test_rmsnorm),     cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_freqs_correctly_rounded),
        cmocka_unit_test(test_hc),          cmocka_unit_test(test_sparse_attn), cmocka_unit_test(test_indexer),
        cmocka_unit_test(test_moe_route),   cmocka_unit_test(test_swiglu),      cmocka_unit_test(test_compressor),
        cmocka_unit_test(test_candidate_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
