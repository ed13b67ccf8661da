/* Block quantisation properties on fresh random rows (seed from tu_seed):
 * sim equals dequant(quant) bit for bit; scales are the reference's (the
 * ceil power of two of the clamped amax over the target maximum, or the e4m3
 * cast of amax / 6); no value is clamped where the scale is a ceil; the error
 * of every value is within half a step of the target grid; constant blocks,
 * outliers, all-tiny blocks, signed zeros, NaN and partial blocks behave. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"
#include "num_testdata.h"
#include "testutil.h"

#define N 8192

static void assert_same_row(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        if (!nt_same_f32(a[i], b[i])) fail_msg("%s: element %zu: %a vs %a", what, i, (double)a[i], (double)b[i]);
    }
}

static float amax_of(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Half a step of the e4m3 grid around v (|v| <= 448), and of e2m1 (|v| <= 6). */
static double e4m3_half_step(double v) {
    double a = fabs(v);
    return a < 0x1p-6 ? 0x1p-10 : ldexp(1.0, ilogb(a) - 4);
}

static double e2m1_half_step(double v) {
    double a = fabs(v);
    return a < 2 ? 0.25 : a < 4 ? 0.5 : 1.0;
}

/* Weights are never near FLT_MAX; keep them where their grid stays finite. */
static void tame(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) > 1e30f) x[i] = copysignf(1e30f, x[i]);
}

static float *row(tu_rng *r) {
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    nt_fill(r, x, N);
    return x;
}

static void check_fp8_act(size_t block) {
    tu_rng rng = {tu_seed() ^ (0xf8a0u + block)};
    float *x = row(&rng), *sim = malloc(N * sizeof(float)), *deq = malloc(N * sizeof(float));
    uint8_t *q = malloc(N), *sc = malloc(N / block);
    assert_true(sim && deq && q && sc);
    memcpy(sim, x, N * sizeof(float));
    tide_sim_fp8_act(sim, N, block);
    tide_quant_fp8_act(x, N, block, q, sc);
    tide_dequant_fp8_act(q, sc, N, block, deq);
    assert_same_row(sim, deq, N, "fp8 sim vs dequant(quant)");
    for (size_t b = 0; b < N / block; b++) {
        const float *xb = x + b * block;
        float amax = amax_of(xb, block);
        float ratio = (amax < 1e-4f ? 1e-4f : amax) * (1.0f / 448.0f);
        double s = ldexp(1.0, sc[b] - 127);
        assert_true(sc[b] >= 1 && sc[b] <= 254);
        assert_true(ratio <= s && ratio > s / 2); /* the ceil power of two */
        if (amax < 1e-4f) assert_int_equal(sc[b], 127 - 22); /* the clamp: ceil(1e-4 / 448) = 2^-22 */
        int constant = 1;
        for (size_t i = 0; i < block; i++) {
            double v = (double)xb[i] / s, d = deq[b * block + i];
            assert_true(fabs(v) <= 448.0);
            if (isinf(d) && fabs((double)xb[i]) + s * e4m3_half_step(v) >= 0x1p128) continue; /* past FLT_MAX */
            if (fabs((double)xb[i] - d) > s * e4m3_half_step(v))
                fail_msg("fp8 block %zu elem %zu: x %a deq %a scale 2^%d", b, i, (double)xb[i], d, sc[b] - 127);
            assert_int_equal(!!signbit(d), !!signbit(xb[i]));
            constant &= xb[i] == xb[0];
        }
        if (constant)
            for (size_t i = 0; i < block; i++) assert_true(nt_same_f32(deq[b * block + i], deq[b * block]));
    }
    free(x), free(sim), free(deq), free(q), free(sc);
}

static void test_fp8_act_32(void **state) { (void)state, check_fp8_act(32); }
static void test_fp8_act_128(void **state) { (void)state, check_fp8_act(128); }

static uint8_t nib(const uint8_t *p, size_t i) { return (uint8_t)((p[i / 2] >> (4 * (i & 1))) & 15); }

static void test_fp4_e8m0(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0xf4e8u};
    const size_t block = 32;
    float *x = row(&rng), *sim = malloc(N * sizeof(float)), *deq = malloc(N * sizeof(float));
    uint8_t *q = malloc(N / 2), *sc = malloc(N / block);
    assert_true(sim && deq && q && sc);
    memcpy(sim, x, N * sizeof(float));
    tide_sim_fp4_e8m0(sim, N, block);
    tide_quant_fp4_e8m0(x, N, block, q, sc);
    tide_dequant_fp4_e8m0(q, sc, N, block, deq);
    assert_same_row(sim, deq, N, "fp4 e8m0 sim vs dequant(quant)");
    for (size_t b = 0; b < N / block; b++) {
        const float *xb = x + b * block;
        float amax = amax_of(xb, block);
        float ratio = (amax < 0x1.8p-124f ? 0x1.8p-124f : amax) * (1.0f / 6.0f);
        double s = ldexp(1.0, sc[b] - 127);
        assert_true(ratio <= s && ratio > s / 2);
        if (amax <= 0x1.8p-124f) assert_int_equal(sc[b], 1); /* 6 * 2^-126 / 6 = 2^-126 */
        for (size_t i = 0; i < block; i++) {
            double v = (double)xb[i] / s, d = deq[b * block + i];
            assert_true(fabs(v) <= 6.0);
            if (isinf(d) && fabs((double)xb[i]) + s * e2m1_half_step(v) >= 0x1p128) continue; /* past FLT_MAX */
            if (fabs((double)xb[i] - d) > s * e2m1_half_step(v))
                fail_msg("fp4 e8m0 block %zu elem %zu: x %a deq %a", b, i, (double)xb[i], d);
            assert_int_equal(nib(q, b * block + i) >> 3, !!signbit(xb[i]));
        }
    }
    free(x), free(sim), free(deq), free(q), free(sc);
}

static void test_fp4_e4m3(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0xf4e4u};
    const size_t block = 16;
    float *x = row(&rng), *sim = malloc(N * sizeof(float)), *deq = malloc(N * sizeof(float));
    uint8_t *q = malloc(N / 2), *sc = malloc(N / block);
    assert_true(sim && deq && q && sc);
    memcpy(sim, x, N * sizeof(float));
    tide_sim_fp4_e4m3(sim, N, block);
    tide_quant_fp4_e4m3(x, N, block, q, sc);
    tide_dequant_fp4_e4m3(q, sc, N, block, deq);
    assert_same_row(sim, deq, N, "fp4 e4m3 sim vs dequant(quant)");
    for (size_t b = 0; b < N / block; b++) {
        const float *xb = x + b * block;
        float amax = amax_of(xb, block), amaxc = amax < 0x1.8p-7f ? 0x1.8p-7f : amax;
        assert_int_equal(sc[b], tide_f32_to_e4m3(amaxc / 6.0f));
        float s = tide_e4m3_to_f32(sc[b]);
        if (amax < 0x1.8p-7f) assert_int_equal(sc[b], 0x01); /* 2^-9 */
        if (amaxc > 2784.0f) { /* amax / 6 rounds past 448: NaN scale, NaN block */
            assert_int_equal(sc[b], 0x7f);
            for (size_t i = 0; i < block; i++) assert_true(isnan(deq[b * block + i]));
            continue;
        }
        assert_true(s > 0 && fabs(s - (double)(amaxc / 6.0f)) <= e4m3_half_step(amaxc / 6.0f));
        for (size_t i = 0; i < block; i++) {
            double v = (double)xb[i] / s, d = deq[b * block + i];
            double clamp = fabs(v) > 6 ? (fabs(v) - 6) * s : 0;
            if (fabs(v) > 6) v = v > 0 ? 6 : -6;
            if (fabs((double)xb[i] - d) > s * e2m1_half_step(v) + clamp)
                fail_msg("fp4 e4m3 block %zu elem %zu: x %a deq %a scale %a", b, i, (double)xb[i], d, (double)s);
            assert_int_equal(nib(q, b * block + i) >> 3, !!signbit(xb[i]));
        }
    }
    free(x), free(sim), free(deq), free(q), free(sc);
}

/* Hand-made blocks: zeros, an outlier, NaN and infinity, a constant. */
static void test_special_blocks(void **state) {
    (void)state;
    float x[128];
    uint8_t q[128], sc[8];
    /* all zero (one negative): the clamps set the scales */
    memset(x, 0, sizeof x);
    x[5] = -0.0f;
    tide_quant_fp8_act(x, 32, 32, q, sc);
    assert_int_equal(sc[0], 105);
    assert_int_equal(q[0], 0x00);
    assert_int_equal(q[5], 0x80);
    tide_quant_fp4_e8m0(x, 32, 32, q, sc);
    assert_int_equal(sc[0], 1);
    assert_int_equal(q[2], 0x80); /* element 5 is the high nibble of byte 2 */
    tide_quant_fp4_e4m3(x, 32, 16, q, sc);
    assert_int_equal(sc[0], 0x01);
    assert_int_equal(sc[1], 0x01);
    /* an outlier: the rest of the block flushes to signed zero */
    for (int i = 0; i < 32; i++) x[i] = (i & 1 ? -1e-3f : 1e-3f);
    x[7] = 1e4f;
    float y[32];
    memcpy(y, x, sizeof y);
    tide_sim_fp8_act(y, 32, 32);
    assert_true(y[7] == 10240.0f); /* scale 2^5 (1e4/448 = 22.3); 1e4/32 = 312.5 -> 320 (step 32) */
    for (int i = 0; i < 32; i++)
        if (i != 7) assert_true(y[i] == 0.0f && !!signbit(y[i]) == (i & 1));
    /* exact powers: amax = 448 * 2^k gives scale 2^k and the max maps to 448 */
    for (int k = -12; k <= 30; k += 3) { /* 448 * 2^-12 is above the 1e-4 floor */
        for (int i = 0; i < 32; i++) x[i] = ldexpf(1.0f, k);
        x[3] = ldexpf(-448.0f, k);
        tide_quant_fp8_act(x, 32, 32, q, sc);
        assert_int_equal(sc[0], 127 + k);
        assert_int_equal(q[3], 0xfe);
        x[3] = ldexpf(6.0f, k);
        tide_quant_fp4_e8m0(x, 32, 32, q, sc);
        assert_int_equal(sc[0], 127 + k);
        assert_int_equal(q[1] >> 4, 7);
    }
    /* NaN or infinity poisons its own block only */
    for (int i = 0; i < 64; i++) x[i] = (float)i - 20.0f;
    x[40] = NAN;
    memcpy(y, x, 32 * sizeof(float));
    float z[64];
    memcpy(z, x, sizeof z);
    tide_sim_fp8_act(z, 64, 32);
    for (int i = 0; i < 32; i++) assert_false(isnan(z[i]));
    for (int i = 32; i < 64; i++) assert_true(isnan(z[i]));
    x[40] = INFINITY;
    memcpy(z, x, sizeof z);
    tide_sim_fp4_e8m0(z, 64, 32);
    for (int i = 0; i < 32; i++) assert_false(isnan(z[i]));
    for (int i = 32; i < 64; i++) assert_true(isnan(z[i]));
    memcpy(z, x, sizeof z);
    tide_sim_fp4_e4m3(z, 64, 16);
    for (int i = 0; i < 32; i++) assert_false(isnan(z[i]));
    for (int i = 32; i < 48; i++) assert_true(isnan(z[i]));
    /* a block longer than the row is one block */
    for (int i = 0; i < 64; i++) x[i] = (float)i - 20.0f;
    memcpy(z, x, sizeof z);
    float w[64];
    memcpy(w, x, sizeof w);
    tide_sim_fp8_act(z, 64, SIZE_MAX);
    tide_sim_fp8_act(w, 64, 64);
    assert_memory_equal(z, w, sizeof z);
    memcpy(z, x, sizeof z);
    memcpy(w, x, sizeof w);
    tide_sim_fp4_e4m3(z, 64, SIZE_MAX / 2);
    tide_sim_fp4_e4m3(w, 64, 64);
    assert_memory_equal(z, w, sizeof z);
    /* block 0 is a no-op */
    memcpy(z, x, sizeof z);
    tide_sim_fp8_act(z, 64, 0);
    tide_sim_fp4_e8m0(z, 64, 0);
    tide_sim_fp4_e4m3(z, 64, 0);
    assert_memory_equal(z, x, sizeof z);
}

/* A trailing partial block is quantised on its own, and odd lengths pack
 * the last code into a byte of its own. */
static void test_partial_blocks(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0x9a47u};
    float x[101], a[101], b[101];
    nt_fill(&rng, x, 96);
    for (int i = 96; i < 101; i++) x[i] = (float)tu_normal(&rng);
    uint8_t q[101], sc[8], q2[64], sc2[32];
    /* fp8: 3 blocks of 32 and one of 5 */
    memcpy(a, x, sizeof x);
    tide_sim_fp8_act(a, 101, 32);
    tide_quant_fp8_act(x, 101, 32, q, sc);
    tide_dequant_fp8_act(q, sc, 101, 32, b);
    assert_same_row(a, b, 101, "fp8 partial");
    memcpy(b, x + 96, 5 * sizeof(float));
    tide_sim_fp8_act(b, 5, 5);
    assert_same_row(a + 96, b, 5, "fp8 tail block");
    /* fp4 with odd blocks (7) and an odd length: codes straddle bytes */
    for (size_t blk = 7; blk <= 32; blk += 25) {
        memcpy(a, x, sizeof x);
        tide_sim_fp4_e8m0(a, 101, blk);
        memset(q2, 0xee, sizeof q2);
        tide_quant_fp4_e8m0(x, 101, blk, q2, sc2);
        assert_int_equal(q2[50] >> 4, 0); /* the last byte's high nibble is clear */
        tide_dequant_fp4_e8m0(q2, sc2, 101, blk, b);
        assert_same_row(a, b, 101, "fp4 e8m0 odd");
        memcpy(a, x, sizeof x);
        tide_sim_fp4_e4m3(a, 101, blk);
        tide_quant_fp4_e4m3(x, 101, blk, q2, sc2);
        tide_dequant_fp4_e4m3(q2, sc2, 101, blk, b);
        assert_same_row(a, b, 101, "fp4 e4m3 odd");
    }
    /* packing: the even element is the low nibble */
    float two[2] = {6.0f, -1.0f};
    tide_quant_fp4_e8m0(two, 2, 2, q2, sc2);
    assert_int_equal(q2[0], 0x07 | (0x0a << 4));
}

static void test_fp8_weight(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0x3e18u};
    const size_t out = 70, in = 100, sr = 3, scn = 4; /* partial edge blocks */
    float *w = malloc(out * in * sizeof(float)), *d = malloc(out * in * sizeof(float));
    float *d2 = malloc(out * in * sizeof(float));
    uint8_t *q = malloc(out * in), *q2 = malloc(out * in), sc[3 * 4], sc2[3 * 4];
    assert_true(w && d && d2 && q && q2);
    for (size_t r = 0; r < out; r++) nt_fill(&rng, w + r * in, in);
    tame(w, out * in);
    tide_quant_fp8_weight(w, out, in, q, sc);
    tide_dequant_fp8_weight(q, sc, out, in, d);
    for (size_t br = 0; br < sr; br++)
        for (size_t bc = 0; bc < scn; bc++) {
            float amax = 0;
            for (size_t r = br * 32; r < out && r < br * 32 + 32; r++)
                for (size_t c = bc * 32; c < in && c < bc * 32 + 32; c++) amax = fmaxf(amax, fabsf(w[r * in + c]));
            double s = ldexp(1.0, sc[br * scn + bc] - 127);
            float ratio = amax * (1.0f / 448.0f);
            assert_true(ratio <= s && (ratio > s / 2 || sc[br * scn + bc] <= 1));
            for (size_t r = br * 32; r < out && r < br * 32 + 32; r++)
                for (size_t c = bc * 32; c < in && c < bc * 32 + 32; c++) {
                    double v = w[r * in + c] / s;
                    assert_true(fabs(v) <= 448);
                    assert_true(fabs(w[r * in + c] - (double)d[r * in + c]) <= s * e4m3_half_step(v));
                }
        }
    /* the dequantised weight is on the grid: quantising it again changes nothing */
    tide_quant_fp8_weight(d, out, in, q2, sc2);
    tide_dequant_fp8_weight(q2, sc2, out, in, d2);
    assert_same_row(d, d2, out * in, "fp8 weight requantised");
    free(w), free(d), free(d2), free(q), free(q2);
}

static void test_fp4_weight(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0x3e14u};
    const size_t out = 24, in = 96;
    float w[24 * 96], d[24 * 96], d2[24 * 96], a[24 * 96];
    uint8_t q[24 * 48], q2[24 * 48], sc[24 * 3], sc2[24 * 3];
    nt_fill(&rng, w, out * in);
    tame(w, out * in);
    tide_quant_fp4_weight(w, out, in, q, sc);
    tide_dequant_fp4_weight(q, sc, out, in, d);
    memcpy(a, w, sizeof w);
    tide_sim_fp4_e8m0(a, out * in, 32); /* same as the activation quantiser */
    assert_same_row(a, d, out * in, "fp4 weight vs sim");
    assert_int_equal(q[0] & 15, tide_f32_to_e2m1(w[0] / tide_e8m0_to_f32(sc[0])));
    tide_quant_fp4_weight(d, out, in, q2, sc2);
    tide_dequant_fp4_weight(q2, sc2, out, in, d2);
    assert_same_row(d, d2, out * in, "fp4 weight requantised");
}

/* The reference writes the simulated values back into bf16 tensors. Every
 * simulated value is already a bf16 value (an e4m3 or e2m1 significand has at
 * most 4 bits, times an e4m3 scale at most 6, and bf16 has f32's exponent
 * range), so that rounding changes nothing; callers may skip it. */
static void test_sim_values_are_bf16(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0xbf16u};
    float *x = row(&rng), *y = malloc(N * sizeof(float));
    assert_non_null(y);
    void (*sims[3])(float *, size_t, size_t) = {tide_sim_fp8_act, tide_sim_fp4_e8m0, tide_sim_fp4_e4m3};
    const size_t blocks[3] = {32, 32, 16};
    for (int k = 0; k < 3; k++) {
        memcpy(y, x, N * sizeof(float));
        sims[k](y, N, blocks[k]);
        for (size_t i = 0; i < N; i++)
            if (isfinite(y[i]) && !nt_same_f32(tide_round_bf16(y[i]), y[i]))
                fail_msg("sim %d: %a is not a bf16 value", k, (double)y[i]);
    }
    free(x), free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_act_32),   cmocka_unit_test(test_fp8_act_128),
        cmocka_unit_test(test_fp4_e8m0),     cmocka_unit_test(test_fp4_e4m3),
        cmocka_unit_test(test_special_blocks), cmocka_unit_test(test_partial_blocks),
        cmocka_unit_test(test_fp8_weight),   cmocka_unit_test(test_fp4_weight),
        cmocka_unit_test(test_sim_values_are_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
