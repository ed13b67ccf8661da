/* Philox-4x32-10 against the known-answer vectors of the Random123 suite
 * (kat_vectors), and the sampler's mapping of (seed, position, stream, index)
 * onto it: uniforms strictly inside (0, 1), Exp(1) moments, independence of
 * neighbouring positions, seeds, streams and indices. */
#include <math.h>
#include <stdio.h>

#include "engine/rng.h"
#include "testutil.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1, uint32_t o0,
                uint32_t o1, uint32_t o2, uint32_t o3) {
    const uint32_t ctr[4] = {c0, c1, c2, c3}, key[2] = {k0, k1};
    uint32_t out[4];
    tide_philox4x32_10(ctr, key, out);
    assert_int_equal(out[0], o0);
    assert_int_equal(out[1], o1);
    assert_int_equal(out[2], o2);
    assert_int_equal(out[3], o3);
}

static void test_philox_kat(void **state) {
    (void)state;
    kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
    kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
        0xa20bc7c6, 0x6d5451fd);
    kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
        0x5001e420, 0x24126ea1);
}

static void test_mapping(void **state) {
    (void)state;
    /* index i uses word (i & 1) of block i / 2, with the documented counter layout */
    uint64_t seed = 0x0123456789abcdefull, pos = 0x00000007fffffff3ull;
    uint32_t key[2] = {0x89abcdefu, 0x01234567u}, ctr[4] = {21, 3, 0xfffffff3u, 7u}, o[4];
    tide_philox4x32_10(ctr, key, o);
    uint64_t w[2];
    tide_rng_words(seed, pos, 3, 21, w);
    assert_true(w[0] == ((uint64_t)o[0] | (uint64_t)o[1] << 32));
    assert_true(w[1] == ((uint64_t)o[2] | (uint64_t)o[3] << 32));
    assert_true(tide_rng_uniform(seed, pos, 3, 42) == tide_rng_u01(w[0]));
    assert_true(tide_rng_uniform(seed, pos, 3, 43) == tide_rng_u01(w[1]));
    assert_true(tide_rng_exp(seed, pos, 3, 43) == -log(tide_rng_u01(w[1])));
    /* the extremes of the uniform map */
    assert_true(tide_rng_u01(0) > 0 && tide_rng_u01(0) < 1e-15);
    assert_true(tide_rng_u01(UINT64_MAX) < 1 && tide_rng_u01(UINT64_MAX) > 1 - 1e-15);
    assert_true(isfinite(-log(tide_rng_u01(0))) && -log(tide_rng_u01(UINT64_MAX)) > 0);
}

/* Exp(1): mean 1, variance 1; 200k draws give a standard error of 0.0022 on
 * the mean: 6 sigma bounds. Plus a 16-bin chi-square on the uniforms. */
static void test_moments(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0xE1};
    uint64_t seed = tu_next(&r), pos = tu_next(&r) >> 8;
    const int n = 200000;
    double s = 0, s2 = 0;
    int bins[16] = {0};
    for (int i = 0; i < n; i++) {
        /* walk over indices, positions and streams alike */
        uint64_t p = pos + (uint64_t)(i % 7);
        uint32_t idx = (uint32_t)(i / 7), stream = (uint32_t)(i % 3);
        double u = tide_rng_uniform(seed, p, stream, idx);
        assert_true(u > 0 && u < 1);
        bins[(int)(u * 16)]++;
        double e = -log(u);
        s += e;
        s2 += e * e;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean - 1) < 6 * sqrt(1.0 / n));
    assert_true(fabs(var - 1) < 6 * sqrt(8.0 / n)); /* var of (E-1)^2 is 8 */
    double chi = 0, want = n / 16.0;
    for (int b = 0; b < 16; b++) chi += (bins[b] - want) * (bins[b] - want) / want;
    assert_true(chi < 60); /* df 15: P(chi2 > 60) ~ 2e-7 */
}

/* Different positions, seeds, streams or indices give different draws, and
 * their correlation is near zero. */
static void test_independence(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0xE2};
    uint64_t seed = tu_next(&r), pos = tu_next(&r) >> 1;
    const int n = 20000;
    double sxy[4] = {0}, sx = 0, sx2 = 0;
    for (int i = 0; i < n; i++) {
        double a = tide_rng_uniform(seed, pos, 0, (uint32_t)i);
        double b[4] = {tide_rng_uniform(seed, pos + 1, 0, (uint32_t)i), tide_rng_uniform(seed ^ 1, pos, 0, (uint32_t)i),
                       tide_rng_uniform(seed, pos, 1, (uint32_t)i), tide_rng_uniform(seed, pos, 0, (uint32_t)i ^ 1u)};
        for (int k = 0; k < 4; k++) {
            assert_true(a != b[k]);
            sxy[k] += (a - 0.5) * (b[k] - 0.5);
        }
        sx += a;
        sx2 += (a - 0.5) * (a - 0.5);
    }
    for (int k = 0; k < 4; k++) assert_true(fabs(sxy[k] / sx2) < 6 / sqrt((double)n));
    assert_true(fabs(sx / n - 0.5) < 6 * sqrt(1.0 / 12 / n));
    /* a pure function: the same arguments give the same bits */
    assert_true(tide_rng_exp(seed, pos, 0, 77) == tide_rng_exp(seed, pos, 0, 77));
}

/* Derived seeds: deterministic, distinct for neighbouring requests and
 * engine seeds. */
static void test_derive_seed(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0xE3};
    uint64_t base = tu_next(&r);
    assert_true(tide_rng_derive_seed(base, 5) == tide_rng_derive_seed(base, 5));
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t a = tide_rng_derive_seed(base, i);
        assert_true(a != tide_rng_derive_seed(base, i + 1));
        assert_true(a != tide_rng_derive_seed(base + 1, i));
        assert_true(a != base);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_mapping),
        cmocka_unit_test(test_moments),
        cmocka_unit_test(test_independence),
        cmocka_unit_test(test_derive_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
