/* A release-sized tensor count: 48 shards, 66,048 small F4 expert weights
 * (43 layers x 256 experts x 3, plus change), written with the streaming
 * writer and opened again. Checks that nothing is quadratic in the tensor
 * count and that every tensor round-trips; prints the write and open times
 * (informational only, never asserted) for docs/checkpoint-io.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/safetensors.h"
#include "testutil.h"

enum { NSHARDS = 48, NTENSORS = 66048 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void tensor_name(int i, char *buf, size_t cap) {
    snprintf(buf, cap, "layers.%d.ffn.experts.%d.w%d.weight", i / 768, i / 3 % 256, i % 3 + 1);
}

static void test_release_sized_count(void **state) {
    (void)state;
    uint64_t salt = tu_seed();
    char *dir = tu_mkdtemp("stscale");
    tide_status st = {0};
    tide_stw *w = NULL;
    char name[96];
    int64_t shape[2] = {4, 8}; /* 32 F4 values = 16 bytes */
    double t0 = now();
    assert_int_equal(tide_stw_open(dir, NSHARDS, &w, &st), 0);
    for (int i = 0; i < NTENSORS; i++) {
        tensor_name(i, name, sizeof name);
        if (tide_stw_add(w, i * NSHARDS / NTENSORS, name, TIDE_DT_F4, 2, shape, &st) != 0)
            fail_msg("%s", st.msg);
    }
    for (int i = NTENSORS - 1; i >= 0; i--) {
        uint64_t bytes[2] = {(uint64_t)i ^ salt, ~(uint64_t)i};
        tensor_name(i, name, sizeof name);
        if (tide_stw_write(w, name, bytes, sizeof bytes, &st) != 0) fail_msg("%s", st.msg);
    }
    if (tide_stw_finish(w, &st) != 0) fail_msg("%s", st.msg);
    double t1 = now();
    tide_st *ck = NULL;
    if (tide_st_open(dir, &ck, &st) != 0) fail_msg("%s", st.msg);
    double t2 = now();
    assert_int_equal(tide_st_count(ck), NTENSORS);
    assert_int_equal(tide_st_nfiles(ck), NSHARDS);
    for (int i = 0; i < NTENSORS; i++) {
        tensor_name(i, name, sizeof name);
        const tide_tensor *t = tide_st_find(ck, name);
        assert_non_null(t);
        uint64_t bytes[2];
        memcpy(bytes, t->data, sizeof bytes);
        assert_true(bytes[0] == ((uint64_t)i ^ salt) && bytes[1] == ~(uint64_t)i);
    }
    fprintf(stderr, "%d tensors in %d shards: write %.2f s, open %.2f s\n", NTENSORS, NSHARDS,
            t1 - t0, t2 - t1);
    tide_st_close(ck);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_release_sized_count)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
