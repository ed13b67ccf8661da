/* tide's numerics against the independent numpy model (tools/ref/quant.py)
 * on fresh random data: every scalar cast, every code table and every block
 * quantiser must agree BIT FOR BIT (codes, scales and dequantised values).
 * The data mixes magnitudes from f32 denormals to near FLT_MAX, constant
 * blocks, outliers, signed zeros and exact rounding ties (num_testdata.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"
#include "num_testdata.h"
#include "testutil.h"

#define ROWS 80
#define COLS 224 /* 7 weight blocks across; 80 rows leave a partial block */
#define N (ROWS * COLS)

typedef struct {
    char *dir;
    float x[N];
} fixture;

static void *slurp(const char *dir, const char *name, size_t want) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("quant.py wrote no %s", name);
    void *buf = malloc(want + 1);
    assert_non_null(buf);
    size_t got = fread(buf, 1, want + 1, f);
    fclose(f);
    if (got != want) fail_msg("%s: %zu bytes, want %zu", name, got, want);
    return buf;
}

/* Compares n elements of size sz; `skip` (may be NULL) marks elements to
 * leave out. Reports the first difference with the input it came from. */
static void compare(const fixture *fx, const char *name, const void *mine, size_t n, size_t sz, size_t per_input,
                    const unsigned char *skip) {
    unsigned char *ref = slurp(fx->dir, name, n * sz);
    for (size_t i = 0; i < n; i++) {
        if (skip && skip[i]) continue;
        const unsigned char *a = (const unsigned char *)mine + i * sz, *b = ref + i * sz;
        int same;
        if (sz == 4) {
            float fa, fb;
            memcpy(&fa, a, 4);
            memcpy(&fb, b, 4);
            same = nt_same_f32(fa, fb);
        } else {
            same = memcmp(a, b, sz) == 0;
        }
        if (!same) {
            unsigned va = 0, vb = 0;
            memcpy(&va, a, sz < 4 ? sz : 4);
            memcpy(&vb, b, sz < 4 ? sz : 4);
            size_t src = per_input ? i * per_input : 0;
            fail_msg("%s: element %zu: tide 0x%x, quant.py 0x%x (input[%zu] = %a)", name, i, va, vb, src,
                     src < N ? (double)fx->x[src] : 0.0);
        }
    }
    free(ref);
}

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    tu_rng rng = {tu_seed() ^ 0x7265660au};
    nt_fill(&rng, fx->x, N);
    fx->dir = tu_mkdtemp("num");
    if (!fx->dir) return -1;
    char path[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/x.f32", fx->dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(fx->x, sizeof(float), N, f) != N) return -1;
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tools/ref/quant.py' '%s' '%s' %d %d 2>&1", TIDE_PYTHON, TIDE_SOURCE_DIR, path,
             fx->dir, ROWS, COLS);
    char *out = NULL;
    int rc = tu_system(cmd, &out);
    if (rc != 0) fprintf(stderr, "quant.py failed (%d): %s\n", rc, out ? out : "");
    free(out);
    *state = fx;
    return rc == 0 ? 0 : -1;
}

static int teardown(void **state) {
    fixture *fx = *state;
    if (fx) {
        tu_rmtree(fx->dir);
        free(fx->dir);
        free(fx);
    }
    return 0;
}

static void test_scalar_casts(void **state) {
    fixture *fx = *state;
    static uint16_t h[N];
    static uint8_t c[N];
    for (size_t i = 0; i < N; i++) h[i] = tide_f32_to_bf16(fx->x[i]);
    compare(fx, "bf16.u16", h, N, 2, 1, NULL);
    for (size_t i = 0; i < N; i++) h[i] = tide_f32_to_f16(fx->x[i]);
    compare(fx, "f16.u16", h, N, 2, 1, NULL);
    for (size_t i = 0; i < N; i++) c[i] = tide_f32_to_e4m3(fx->x[i]);
    compare(fx, "e4m3.u8", c, N, 1, 1, NULL);
    for (size_t i = 0; i < N; i++) c[i] = tide_f32_to_e2m1(fx->x[i]);
    compare(fx, "e2m1.u8", c, N, 1, 1, NULL);
    for (size_t i = 0; i < N; i++) c[i] = tide_e8m0_ceil(fabsf(fx->x[i]));
    compare(fx, "e8m0.u8", c, N, 1, 1, NULL);
}

static void test_code_tables(void **state) {
    fixture *fx = *state;
    float t[256];
    for (int i = 0; i < 256; i++) t[i] = tide_e4m3_to_f32((uint8_t)i);
    compare(fx, "dec_e4m3.f32", t, 256, 4, 0, NULL);
    for (int i = 0; i < 256; i++) t[i] = tide_e8m0_to_f32((uint8_t)i);
    compare(fx, "dec_e8m0.f32", t, 256, 4, 0, NULL);
    for (int i = 0; i < 16; i++) t[i] = tide_e2m1_to_f32((uint8_t)i);
    compare(fx, "dec_e2m1.f32", t, 16, 4, 0, NULL);
}

static void check_fp8_act(fixture *fx, size_t block, const char *tag) {
    static uint8_t q[N], s[N];
    static float d[N];
    char name[64];
    tide_quant_fp8_act(fx->x, N, block, q, s);
    memcpy(d, fx->x, sizeof d);
    tide_sim_fp8_act(d, N, block);
    snprintf(name, sizeof name, "%s.q", tag);
    compare(fx, name, q, N, 1, 1, NULL);
    snprintf(name, sizeof name, "%s.s", tag);
    compare(fx, name, s, N / block, 1, block, NULL);
    snprintf(name, sizeof name, "%s.d", tag);
    compare(fx, name, d, N, 4, 1, NULL);
}

static void test_fp8_act(void **state) {
    check_fp8_act(*state, 32, "fp8a32");
    check_fp8_act(*state, 128, "fp8a128");
}

static void test_fp4_e8m0(void **state) {
    fixture *fx = *state;
    static uint8_t q[N / 2], s[N / 32];
    static float d[N];
    tide_quant_fp4_e8m0(fx->x, N, 32, q, s);
    memcpy(d, fx->x, sizeof d);
    tide_sim_fp4_e8m0(d, N, 32);
    compare(fx, "fp4e8.q", q, N / 2, 1, 2, NULL);
    compare(fx, "fp4e8.s", s, N / 32, 1, 32, NULL);
    compare(fx, "fp4e8.d", d, N, 4, 1, NULL);
}

static void test_fp4_e4m3(void **state) {
    fixture *fx = *state;
    static uint8_t q[N / 2], s[N / 16], skip[N / 2];
    static float d[N];
    tide_quant_fp4_e4m3(fx->x, N, 16, q, s);
    memcpy(d, fx->x, sizeof d);
    tide_sim_fp4_e4m3(d, N, 16);
    compare(fx, "fp4e4.s", s, N / 16, 1, 16, NULL);
    /* In a block whose scale is NaN (amax > 2784) every value is NaN; the
     * code bytes there depend on the sign the hardware gives x / NaN, so they
     * are left out (the scale and the NaN values are still compared). */
    for (size_t i = 0; i < N / 2; i++) skip[i] = (s[i / 8] & 0x7f) == 0x7f;
    compare(fx, "fp4e4.q", q, N / 2, 1, 2, skip);
    compare(fx, "fp4e4.d", d, N, 4, 1, NULL);
}

static void test_weights(void **state) {
    fixture *fx = *state;
    static uint8_t q[N], s[N];
    static float d[N];
    const size_t ns8 = ((ROWS + 31) / 32) * (COLS / 32);
    tide_quant_fp8_weight(fx->x, ROWS, COLS, q, s);
    tide_dequant_fp8_weight(q, s, ROWS, COLS, d);
    compare(fx, "w8.q", q, N, 1, 1, NULL);
    compare(fx, "w8.s", s, ns8, 1, 0, NULL);
    compare(fx, "w8.d", d, N, 4, 1, NULL);
    tide_quant_fp4_weight(fx->x, ROWS, COLS, q, s);
    tide_dequant_fp4_weight(q, s, ROWS, COLS, d);
    compare(fx, "w4.q", q, N / 2, 1, 2, NULL);
    compare(fx, "w4.s", s, N / 32, 1, 32, NULL);
    compare(fx, "w4.d", d, N, 4, 1, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_casts), cmocka_unit_test(test_code_tables), cmocka_unit_test(test_fp8_act),
        cmocka_unit_test(test_fp4_e8m0),     cmocka_unit_test(test_fp4_e4m3),    cmocka_unit_test(test_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
