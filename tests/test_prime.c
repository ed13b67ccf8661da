/* src/num/prime.c: 64-bit mulmod / powmod and the Miller-Rabin test, against
 * independent references: trial division on fresh random numbers, a sieve
 * over a whole range, and the classic hard cases (Carmichael numbers, strong
 * pseudoprimes to many prime bases, large known primes). */
#include <stdlib.h>
#include <string.h>

#include "num/prime.h"
#include "testutil.h"

static int trial_division(uint64_t n) {
    if (n < 2) return 0;
    for (uint64_t d = 2; d * d <= n; d++)
        if (n % d == 0) return 0;
    return 1;
}

static void test_sieve_range(void **state) {
    (void)state;
    enum { N = 200000 };
    uint8_t *composite = calloc(N, 1);
    assert_non_null(composite);
    composite[0] = composite[1] = 1;
    for (uint64_t i = 2; i * i < N; i++)
        if (!composite[i])
            for (uint64_t j = i * i; j < N; j += i) composite[j] = 1;
    for (uint64_t n = 0; n < N; n++)
        if (tide_is_prime_u64(n) != !composite[n]) fail_msg("n = %llu", (unsigned long long)n);
    free(composite);
}

static void test_random_against_trial_division(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    for (int i = 0; i < 3000; i++) {
        uint64_t n = tu_next(&r) >> (24 + i % 16); /* up to 2^40: trial division stays quick */
        if (tide_is_prime_u64(n) != trial_division(n)) fail_msg("n = %llu", (unsigned long long)n);
    }
}

static void test_hard_cases(void **state) {
    (void)state;
    static const uint64_t composites[] = {
        561, 1105, 1729, 41041, 825265, /* Carmichael numbers */
        2047, 1373653, 25326001, 3215031751ull, 2152302898747ull, 3474749660383ull, 341550071728321ull,
        3825123056546413051ull,         /* strong pseudoprime to bases 2..23 */
        4294967297ull,                  /* 2^32 + 1 = 641 * 6700417 */
        UINT64_MAX,                     /* 3 * 5 * 17 * 257 * 641 * 65537 * 6700417 */
        18446744030759878681ull,        /* 4294967291^2: a square of a prime */
    };
    for (size_t i = 0; i < sizeof composites / sizeof *composites; i++)
        if (tide_is_prime_u64(composites[i])) fail_msg("%llu is composite", (unsigned long long)composites[i]);
    static const uint64_t primes[] = {2, 3, 37, 41, 2147483647ull, 4294967291ull, 2305843009213693951ull /* 2^61-1 */,
                                      18446744073709551557ull /* the largest 64-bit prime */};
    for (size_t i = 0; i < sizeof primes / sizeof *primes; i++)
        if (!tide_is_prime_u64(primes[i])) fail_msg("%llu is prime", (unsigned long long)primes[i]);
    assert_int_equal(tide_next_prime_u64(16000000), 16000057); /* the released Engram config's first bucket */
    assert_true(tide_next_prime_u64(18446744073709551557ull) == 0);
    assert_true(tide_next_prime_u64(18446744073709551556ull) == 18446744073709551557ull);
}

static void test_mulmod_powmod(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    for (int i = 0; i < 2000; i++) {
        uint64_t a = tu_next(&r), b = tu_next(&r), m = tu_next(&r) | 1;
        /* reference: schoolbook doubling, no 128-bit type */
        uint64_t want = 0, x = a % m, y = b;
        while (y) {
            if (y & 1) want = want >= m - x ? want - (m - x) : want + x;
            x = x >= m - x ? x - (m - x) : x + x;
            y >>= 1;
        }
        assert_true(tide_mulmod_u64(a, b, m) == want);
        uint32_t e = (uint32_t)(tu_next(&r) % 64);
        uint64_t p = 1 % m;
        for (uint32_t k = 0; k < e; k++) p = tide_mulmod_u64(p, a, m);
        assert_true(tide_powmod_u64(a, e, m) == p);
    }
    assert_true(tide_powmod_u64(5, 0, 1) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sieve_range),
        cmocka_unit_test(test_random_against_trial_division),
        cmocka_unit_test(test_hard_cases),
        cmocka_unit_test(test_mulmod_powmod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
