/* The scalar number formats: every code of e4m3, e8m0 and e2m1 and every
 * bf16 / f16 bit pattern round-trips; ties, overflow, NaN and denormals of
 * each format land where torch's casts put them. Expected values here are
 * computed from the formats' definitions (ldexp on mantissa and exponent),
 * not from tide's bit tricks. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "num/num.h"
#include "testutil.h"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float fromb(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Value of an e4m3 code from the definition: bias 7, 3 mantissa bits. */
static double e4m3_value(int c) {
    int e = (c >> 3) & 15, m = c & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return c & 0x80 ? -v : v;
}

static void test_e4m3_all_codes(void **state) {
    (void)state;
    for (int c = 0; c < 256; c++) {
        float f = tide_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            assert_true(isnan(f));
            assert_int_equal(tide_f32_to_e4m3(f) & 0x7f, 0x7f);
            continue;
        }
        assert_true((double)f == e4m3_value(c));
        assert_int_equal(!!signbit(f), c >> 7); /* 0x80 is -0 */
        assert_int_equal(tide_f32_to_e4m3(f), c);
    }
    assert_true(tide_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(tide_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(tide_e4m3_to_f32(0x08) == 0x1p-6f);
}

/* Between each pair of neighbouring e4m3 values: the exact midpoint goes to
 * the even code, one f32 ulp either side to the nearer value. */
static void test_e4m3_ties(void **state) {
    (void)state;
    for (int c = 0; c < 0x7e; c++) {
        double lo = e4m3_value(c), hi = e4m3_value(c + 1);
        float mid = (float)((lo + hi) / 2); /* exact: short binary fractions */
        assert_true((double)mid == (lo + hi) / 2);
        int even = (c & 1) ? c + 1 : c;
        for (int s = 0; s < 2; s++) {
            float m = s ? -mid : mid;
            int sign = s ? 0x80 : 0;
            assert_int_equal(tide_f32_to_e4m3(m), even | sign);
            assert_int_equal(tide_f32_to_e4m3(nextafterf(m, s ? -INFINITY : INFINITY)), (c + 1) | sign);
            assert_int_equal(tide_f32_to_e4m3(nextafterf(m, 0.0f)), c | sign);
        }
    }
}

static void test_e4m3_overflow_nan_denormal(void **state) {
    (void)state;
    /* (448, 464] rounds down to 448; above 464 the RNE result is the bit
     * pattern 0x7f, NaN; from 480 on (and infinity) NaN too. */
    assert_int_equal(tide_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(tide_f32_to_e4m3(449.0f), 0x7e);
    assert_int_equal(tide_f32_to_e4m3(464.0f), 0x7e);
    assert_int_equal(tide_f32_to_e4m3(-464.0f), 0xfe);
    assert_int_equal(tide_f32_to_e4m3(nextafterf(464.0f, 1e9f)), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(479.9f), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(480.0f), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(-480.0f), 0xff);
    assert_int_equal(tide_f32_to_e4m3(1e30f), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(FLT_MAX), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(INFINITY), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(-INFINITY), 0xff);
    assert_int_equal(tide_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(tide_f32_to_e4m3(-NAN), 0xff);
    assert_int_equal(tide_f32_to_e4m3(fromb(0x7f800001u)), 0x7f); /* signalling NaN */
    /* denormals: steps of 2^-9; 2^-10 is the tie between 0 and 2^-9 */
    assert_int_equal(tide_f32_to_e4m3(0x1p-10f), 0x00);
    assert_int_equal(tide_f32_to_e4m3(nextafterf(0x1p-10f, 1.0f)), 0x01);
    assert_int_equal(tide_f32_to_e4m3(-0x1p-10f), 0x80);
    assert_int_equal(tide_f32_to_e4m3(0x3p-10f), 0x02); /* tie 1 vs 2 -> even */
    assert_int_equal(tide_f32_to_e4m3(0x5p-10f), 0x02); /* tie 2 vs 3 -> even */
    assert_int_equal(tide_f32_to_e4m3(0x7p-10f), 0x04);
    assert_int_equal(tide_f32_to_e4m3(0xfp-10f), 0x08); /* tie 7 vs 8 (= 2^-6, normal) */
    assert_int_equal(tide_f32_to_e4m3(fromb(1)), 0x00); /* f32 denormals */
    assert_int_equal(tide_f32_to_e4m3(-fromb(0x007fffffu)), 0x80);
    assert_int_equal(tide_f32_to_e4m3(0.0f), 0x00);
    assert_int_equal(tide_f32_to_e4m3(-0.0f), 0x80);
}

static void test_e8m0(void **state) {
    (void)state;
    for (int c = 0; c < 255; c++) {
        float f = tide_e8m0_to_f32((uint8_t)c);
        assert_true((double)f == ldexp(1.0, c - 127));
        if (c >= 1) assert_int_equal(tide_e8m0_ceil(f), c); /* exact powers stay */
        if (c >= 1 && c <= 253) assert_int_equal(tide_e8m0_ceil(nextafterf(f, INFINITY)), c + 1);
        if (c >= 2) assert_int_equal(tide_e8m0_ceil(nextafterf(f, 0.0f)), c);
        if (c >= 1 && c <= 253) assert_int_equal(tide_e8m0_ceil(f * 1.5f), c + 1);
    }
    assert_true(isnan(tide_e8m0_to_f32(255)));
    /* the reference reads the f32 exponent field: any denormal ratio (2^-127
     * included) gets 2^-126; zero gets 2^-127 (code 0) */
    assert_int_equal(tide_e8m0_ceil(0x1p-127f), 1);
    assert_int_equal(tide_e8m0_ceil(fromb(1)), 1);
    assert_int_equal(tide_e8m0_ceil(0.0f), 0);
    assert_int_equal(tide_e8m0_ceil(FLT_MAX), 255);
    assert_int_equal(tide_e8m0_ceil(INFINITY), 255);
    assert_int_equal(tide_e8m0_ceil(NAN), 255);
    assert_int_equal(tide_e8m0_ceil(1.0f), 127);
    assert_int_equal(tide_e8m0_ceil(0x1p127f), 254);
    /* the reference's constants: 448 * f32(1/448) is exactly 1 */
    assert_int_equal(tide_e8m0_ceil(448.0f * (1.0f / 448.0f)), 127);
}

static void test_e2m1(void **state) {
    (void)state;
    static const double mag[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++) {
        float f = tide_e2m1_to_f32((uint8_t)c);
        assert_true(fabs((double)f) == mag[c & 7]);
        assert_int_equal(!!signbit(f), c >> 3); /* code 8 is -0 */
        assert_int_equal(tide_f32_to_e2m1(f), c);
    }
    /* midpoints: the even code wins */
    static const float mids[7] = {.25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const int want[7] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(tide_f32_to_e2m1(mids[i]), want[i]);
        assert_int_equal(tide_f32_to_e2m1(-mids[i]), want[i] | 8);
        assert_int_equal(tide_f32_to_e2m1(nextafterf(mids[i], 0.0f)), i);
        assert_int_equal(tide_f32_to_e2m1(nextafterf(mids[i], 9.0f)), i + 1);
    }
    assert_int_equal(tide_f32_to_e2m1(-0.0f), 8);
    assert_int_equal(tide_f32_to_e2m1(-0.1f), 8);
    assert_int_equal(tide_f32_to_e2m1(6.0f), 7);
    assert_int_equal(tide_f32_to_e2m1(100.0f), 7); /* clamped */
    assert_int_equal(tide_f32_to_e2m1(-INFINITY), 15);
    assert_int_equal(tide_f32_to_e2m1(NAN), 7); /* bucketize puts NaN last */
    assert_int_equal(tide_f32_to_e2m1(fromb(1)), 0);
}

static void test_bf16_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tide_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits(f), h << 16);
        uint16_t back = tide_f32_to_bf16(f);
        if (isnan(f)) {
            assert_true(isnan(tide_bf16_to_f32(back)));
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            assert_int_equal(back, h);
        }
    }
}

static void test_bf16_rounding(void **state) {
    (void)state;
    /* ties: halfway between 1 and 1+2^-7 goes down to the even 1; halfway
     * between 1+2^-7 and 1+2^-6 goes up to the even 1+2^-6 */
    assert_int_equal(tide_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(tide_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    assert_int_equal(tide_f32_to_bf16(-(1.0f + 0x1p-8f)), 0xbf80);
    assert_int_equal(tide_f32_to_bf16(-(1.0f + 0x3p-8f)), 0xbf82);
    assert_int_equal(tide_f32_to_bf16(nextafterf(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
    assert_int_equal(tide_f32_to_bf16(nextafterf(1.0f + 0x3p-8f, 0.0f)), 0x3f81);
    /* a tie that carries into the exponent */
    assert_int_equal(tide_f32_to_bf16(fromb(0x3fff8000u)), 0x4000);
    /* overflow: above the tie between the largest bf16 and 2^128 -> inf */
    assert_int_equal(tide_f32_to_bf16(FLT_MAX), 0x7f80);
    assert_int_equal(tide_f32_to_bf16(fromb(0x7f7f8000u)), 0x7f80); /* tie, odd -> up */
    assert_int_equal(tide_f32_to_bf16(fromb(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(tide_f32_to_bf16(-FLT_MAX), 0xff80);
    assert_int_equal(tide_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(tide_f32_to_bf16(-INFINITY), 0xff80);
    /* NaN stays NaN, quiet, even a signalling one whose payload is all low */
    assert_true(isnan(tide_round_bf16(NAN)));
    assert_true(isnan(tide_round_bf16(fromb(0x7f800001u))));
    assert_true(isnan(tide_round_bf16(fromb(0xff800001u))));
    assert_true(signbit(tide_round_bf16(fromb(0xff800001u))));
    /* denormals: same rule on the raw bits */
    assert_int_equal(tide_f32_to_bf16(fromb(0x00008000u)), 0x0000);
    assert_int_equal(tide_f32_to_bf16(fromb(0x00018000u)), 0x0002);
    assert_int_equal(tide_f32_to_bf16(fromb(0x00008001u)), 0x0001);
    assert_int_equal(tide_f32_to_bf16(fromb(0x807fffffu)), 0x8080); /* up into 2^-126 */
    assert_int_equal(tide_f32_to_bf16(-0.0f), 0x8000);
    /* the row forms agree with the scalar ones */
    float row[5] = {1.0f + 0x1p-8f, -3.3f, FLT_MAX, 1e-40f, -0.0f}, out[5];
    uint16_t h[5];
    tide_f32_to_bf16_row(row, h, 5);
    tide_bf16_to_f32_row(h, out, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(h[i], tide_f32_to_bf16(row[i]));
        assert_int_equal(bits(out[i]), bits(tide_round_bf16(row[i])));
    }
    tide_round_bf16_row(row, 5);
    assert_memory_equal(row, out, sizeof row);
}

static void test_f16_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tide_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31 && m) {
            assert_true(isnan(f));
            assert_true(isnan(tide_f16_to_f32(tide_f32_to_f16(f))));
            continue;
        }
        double v = e == 31 ? INFINITY : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
        assert_true(fabs((double)f) == v);
        assert_int_equal(!!signbit(f), h >> 15);
        assert_int_equal(tide_f32_to_f16(f), h);
    }
}

static void test_f16_rounding(void **state) {
    (void)state;
    assert_int_equal(tide_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
    assert_int_equal(tide_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    assert_int_equal(tide_f32_to_f16(nextafterf(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
    assert_int_equal(tide_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(tide_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(tide_f32_to_f16(65520.0f), 0x7c00); /* tie with 2^16 -> inf */
    assert_int_equal(tide_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(tide_f32_to_f16(INFINITY), 0x7c00);
    assert_true(isnan(tide_f16_to_f32(tide_f32_to_f16(NAN))));
    assert_true(isnan(tide_f16_to_f32(tide_f32_to_f16(fromb(0x7f800001u)))));
    /* denormals: steps of 2^-24 */
    assert_int_equal(tide_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(tide_f32_to_f16(0x1p-25f), 0x0000); /* tie -> even */
    assert_int_equal(tide_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(tide_f32_to_f16(0x3p-25f), 0x0002);
    assert_int_equal(tide_f32_to_f16(-0x1p-30f), 0x8000);
    assert_int_equal(tide_f32_to_f16(0x7ffp-25f), 0x0400); /* up into 2^-14 */
    assert_int_equal(tide_f32_to_f16(nextafterf(0x1p-14f, 0.0f)), 0x0400);
}

/* Random f32 bit patterns: the e4m3 and bf16 casts agree with a plain
 * nearest-value search written here in double precision. */
static void test_random_casts(void **state) {
    (void)state;
    tu_rng rng = {tu_seed() ^ 0x6e756d31u};
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)tu_next(&rng);
        if (i & 1) u = (u & 0x80ffffffu) | ((uint32_t)(112 + tu_next(&rng) % 26) << 23); /* e4m3 range */
        float x = fromb(u);
        if (isnan(x)) continue;
        double a = fabs((double)x);
        /* e4m3 by search */
        int want;
        if (a >= 480.0) {
            want = 0x7f;
        } else {
            int best = 0;
            for (int c = 1; c <= 0x7f; c++) {
                double vc = c == 0x7f ? 480.0 : e4m3_value(c), vb = best == 0x7f ? 480.0 : e4m3_value(best);
                double dc = fabs(vc - a), db = fabs(vb - a);
                if (dc < db || (dc == db && !(c & 1))) best = c;
            }
            want = best;
        }
        want |= signbit(x) ? 0x80 : 0;
        assert_int_equal(tide_f32_to_e4m3(x), want);
        /* bf16: the two neighbours on the truncated grid */
        if (isfinite(x)) {
            float lo = fromb(u & 0xffff0000u);
            double dlo = fabs((double)x - (double)lo);
            double hi = (u & 0x7fff0000u) == 0x7f7f0000u ? ldexp(1.0, 128) * (signbit(x) ? -1 : 1)
                                                         : (double)fromb((u & 0xffff0000u) + 0x10000u);
            double dhi = fabs(hi - (double)x);
            int up = dhi < dlo || (dhi == dlo && ((u >> 16) & 1));
            uint16_t wb = (uint16_t)((u >> 16) + (uint32_t)up);
            assert_int_equal(tide_f32_to_bf16(x), wb);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_all_codes),
        cmocka_unit_test(test_e4m3_ties),
        cmocka_unit_test(test_e4m3_overflow_nan_denormal),
        cmocka_unit_test(test_e8m0),
        cmocka_unit_test(test_e2m1),
        cmocka_unit_test(test_bf16_all_patterns),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_all_patterns),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_random_casts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
