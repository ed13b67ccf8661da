/* numpy's default_rng reproduced bit for bit (src/num/pcg64.c), checked
 * against numpy itself through TIDE_PYTHON: raw 64-bit streams, SeedSequence
 * words, and Generator.integers() over 64-bit, 32-bit and degenerate ranges,
 * for fixed seeds (the engram ones) and fresh random ones. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num/pcg64.h"
#include "testutil.h"

/* Runs python code, returns its stdout (caller frees). */
static char *py(const char *code) {
    char *cmd = malloc(strlen(code) + 256);
    sprintf(cmd, "%s -c '%s'", TIDE_PYTHON, code);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    free(cmd);
    if (rc != 0) fprintf(stderr, "python failed (%d): %s\n", rc, out ? out : "");
    assert_int_equal(rc, 0);
    return out;
}

/* Parses whitespace-separated unsigned integers (numpy prints uint64 as such). */
static size_t parse_u64(const char *s, uint64_t *v, size_t cap) {
    size_t n = 0;
    char *end;
    while (*s && n < cap) {
        while (*s == ' ' || *s == '\n' || *s == '[' || *s == ']') s++;
        if (!*s) break;
        v[n++] = strtoull(s, &end, 10);
        assert_true(end != s);
        s = end;
    }
    return n;
}

static size_t parse_i64(const char *s, int64_t *v, size_t cap) {
    size_t n = 0;
    char *end;
    while (*s && n < cap) {
        while (*s == ' ' || *s == '\n') s++;
        if (!*s) break;
        v[n++] = strtoll(s, &end, 10);
        assert_true(end != s);
        s = end;
    }
    return n;
}

static void test_raw_streams(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    uint64_t seeds[8] = {0, 1, 10007, 10007 * 14, 4294967296ull, UINT64_MAX,
                         tu_next(&r), tu_next(&r) >> 33};
    enum { N = 40 };
    char code[4096];
    int o = snprintf(code, sizeof code, "import numpy as np\nfor s in [");
    for (int i = 0; i < 8; i++) o += snprintf(code + o, sizeof code - o, "%" PRIu64 ",", seeds[i]);
    snprintf(code + o, sizeof code - o,
             "]:\n print(\" \".join(str(int(v)) for v in np.random.default_rng(s).bit_generator.random_raw(%d)))",
             N);
    char *out = py(code);
    uint64_t want[8 * N];
    assert_int_equal(parse_u64(out, want, 8 * N), 8 * N);
    for (int i = 0; i < 8; i++) {
        tide_pcg64 g;
        tide_pcg64_seed(&g, seeds[i]);
        for (int j = 0; j < N; j++) {
            uint64_t got = tide_pcg64_next64(&g);
            if (got != want[i * N + j])
                fail_msg("seed %" PRIu64 " draw %d: %" PRIu64 " != numpy %" PRIu64, seeds[i], j, got,
                         want[i * N + j]);
        }
    }
    free(out);
}

static void test_seedseq(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x5eed};
    uint64_t seed = tu_next(&r);
    char code[512];
    snprintf(code, sizeof code,
             "import numpy as np\nprint(*np.random.SeedSequence(%" PRIu64 ").generate_state(11, np.uint32))\n"
             "print(*np.random.SeedSequence(0).generate_state(5, np.uint32))",
             seed);
    char *out = py(code);
    uint64_t want[16];
    assert_int_equal(parse_u64(out, want, 16), 16);
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, got[11];
    tide_seedseq_generate_u32(ent, (seed >> 32) ? 2 : 1, got, 11);
    for (int i = 0; i < 11; i++) assert_int_equal(got[i], want[i]);
    uint32_t zero = 0;
    tide_seedseq_generate_u32(&zero, 1, got, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(got[i], want[11 + i]);
    free(out);
}

/* integers(low, high, size=N, dtype=int64) for ranges that take every path:
 * 64-bit Lemire (incl. the engram bound), 32-bit Lemire with buffered halves,
 * the full 32-bit range, a range of one, negative lows. */
static void test_integers(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x1a7e};
    struct { int64_t lo, hi; } cases[] = {
        {0, INT64_MAX / 99092 / 2}, /* the released engram bound */
        {0, INT64_MAX / 2},
        {-5, 1000},
        {0, 1},
        {0, 4294967296ll},          /* rng = 2^32-1: plain next32 */
        {7, 7 + 4294967295ll},      /* rng = 2^32-2: 32-bit Lemire */
        {0, 3},
        {-(int64_t)(tu_next(&r) >> 2), (int64_t)(tu_next(&r) >> 2)},
        {0, 1 + (int64_t)(tu_next(&r) >> 40)},
        {INT64_MIN, INT64_MAX},
    };
    enum { NC = sizeof cases / sizeof cases[0], N = 33 };
    uint64_t seed = tu_next(&r) >> 1;
    char code[8192];
    int o = snprintf(code, sizeof code, "import numpy as np\nfor lo, hi in [");
    for (int i = 0; i < NC; i++)
        o += snprintf(code + o, sizeof code - o, "(%" PRId64 ",%" PRId64 "),", cases[i].lo, cases[i].hi);
    snprintf(code + o, sizeof code - o,
             "]:\n print(*np.random.default_rng(%" PRIu64 ").integers(lo, hi, size=%d, dtype=np.int64))",
             seed, N);
    char *out = py(code);
    int64_t want[NC * N];
    assert_int_equal(parse_i64(out, want, NC * N), NC * N);
    for (int i = 0; i < NC; i++) {
        tide_pcg64 g;
        tide_pcg64_seed(&g, seed);
        int64_t got[N];
        assert_int_equal(tide_pcg64_integers_i64(&g, cases[i].lo, cases[i].hi, N, got), 0);
        for (int j = 0; j < N; j++)
            if (got[j] != want[i * N + j])
                fail_msg("integers(%" PRId64 ", %" PRId64 ") seed %" PRIu64 " #%d: %" PRId64
                         " != numpy %" PRId64,
                         cases[i].lo, cases[i].hi, seed, j, got[j], want[i * N + j]);
    }
    tide_pcg64 g;
    tide_pcg64_seed(&g, 1);
    int64_t v;
    assert_int_equal(tide_pcg64_integers_i64(&g, 5, 5, 1, &v), -1);
    free(out);
}

/* The engram multipliers exactly as engram.py draws them, for many layers. */
static void test_engram_multipliers(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0xe11a};
    int64_t V = 1 + (int64_t)(tu_next(&r) % 200000);
    int64_t bound = INT64_MAX / V / 2;
    char code[1024];
    snprintf(code, sizeof code,
             "import numpy as np\nfor L in range(64):\n"
             " print(*(np.random.default_rng(10007*L).integers(low=0, high=%" PRId64
             ", size=(4,), dtype=np.int64)*2+1))",
             bound);
    char *out = py(code);
    int64_t want[64 * 4];
    assert_int_equal(parse_i64(out, want, 64 * 4), 64 * 4);
    for (int L = 0; L < 64; L++) {
        tide_pcg64 g;
        tide_pcg64_seed(&g, 10007u * (uint64_t)L);
        int64_t m[4];
        tide_pcg64_integers_i64(&g, 0, bound, 4, m);
        for (int j = 0; j < 4; j++) {
            assert_true(want[L * 4 + j] & 1);
            if (m[j] * 2 + 1 != want[L * 4 + j])
                fail_msg("V=%" PRId64 " layer %d mult %d: %" PRId64 " != %" PRId64, V, L, j,
                         m[j] * 2 + 1, want[L * 4 + j]);
        }
    }
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_streams),
        cmocka_unit_test(test_seedseq),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_engram_multipliers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
