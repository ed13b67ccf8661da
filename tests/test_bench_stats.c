/* The benchmark's bookkeeping: percentiles (src/bench/stats.h) against an
 * independent count on fresh random samples, generated workloads
 * (bench/workload.h) and latency recording from engine events
 * (bench/recorder.h) fed by hand-made events. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/recorder.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "testutil.h"

/* The p-th percentile by definition: the value v such that the rank of v is
 * p/100 * (n-1) when the samples are ranked 0..n-1, interpolating between
 * neighbours; found by counting, without sorting. */
static double ref_percentile(const double *v, int64_t n, double p) {
    double rank = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank);
    double a = 0, b = 0;
    for (int64_t i = 0; i < n; i++) { /* the value of rank lo, and of rank lo + 1 */
        int64_t below = 0, equal = 0;
        for (int64_t j = 0; j < n; j++) below += v[j] < v[i], equal += v[j] == v[i];
        if (below <= lo && lo < below + equal) a = v[i];
        if (below <= lo + 1 && lo + 1 < below + equal) b = v[i];
    }
    if (lo + 1 >= n) return a;
    return a + (rank - (double)lo) * (b - a);
}

static void test_percentiles(void **state) {
    (void)state;
    tu_rng r = {tu_seed()};
    for (int it = 0; it < 100; it++) {
        int64_t n = 1 + (int64_t)(tu_next(&r) % 60);
        double v[60], s[60];
        for (int64_t i = 0; i < n; i++) v[i] = it % 3 ? tu_normal(&r) : (double)(tu_next(&r) % 5); /* ties too */
        memcpy(s, v, sizeof s);
        tide_stats_sort(s, n);
        for (int64_t i = 1; i < n; i++) assert_true(s[i - 1] <= s[i]);
        static const double ps[] = {0, 1, 10, 50, 90, 99, 99.9, 100};
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            double got = tide_stats_percentile(s, n, ps[k]), want = ref_percentile(v, n, ps[k]);
            assert_true(fabs(got - want) <= 1e-12 * (1 + fabs(want)));
        }
        double mean = 0;
        for (int64_t i = 0; i < n; i++) mean += v[i];
        assert_true(fabs(tide_stats_mean(v, n) - mean / (double)n) <= 1e-12 * (1 + fabs(mean)));
    }
    assert_true(isnan(tide_stats_percentile(NULL, 0, 50)));
    assert_true(isnan(tide_stats_mean(NULL, 0)));
}

static void test_workloads(void **state) {
    (void)state;
    uint64_t seed = tu_seed();
    tide_status st = {0};
    tide_workload w, w2;
    assert_int_equal(tide_workload_random(&w, 50, 3, 9, 4, 1000, 500, seed, &st), 0);
    int64_t total = 0, seen_lo = 0, seen_hi = 0;
    for (int64_t i = 0; i < w.n; i++) {
        assert_true(w.n_prompt[i] >= 3 && w.n_prompt[i] <= 9);
        seen_lo |= w.n_prompt[i] == 3, seen_hi |= w.n_prompt[i] == 9;
        total += w.n_prompt[i];
        for (int64_t t = 0; t < w.n_prompt[i]; t++)
            assert_true(w.prompt[i][t] >= 3 && w.prompt[i][t] < 1000 && w.prompt[i][t] != 500);
    }
    assert_true(seen_lo && seen_hi);
    assert_int_equal(total, w.total_prompt);
    assert_int_equal(w.max_tokens, 4);
    assert_int_equal(tide_workload_random(&w2, 50, 3, 9, 4, 1000, 500, seed, &st), 0);
    for (int64_t i = 0; i < w.n; i++) {
        assert_int_equal(w.n_prompt[i], w2.n_prompt[i]);
        assert_memory_equal(w.prompt[i], w2.prompt[i], (size_t)w.n_prompt[i] * sizeof(int32_t));
    }
    tide_workload_free(&w);
    tide_workload_free(&w2);

    assert_int_equal(tide_workload_shared_prefix(&w, 5, 20, 6, 2, 129280, 129264, seed, &st), 0);
    for (int64_t i = 0; i < w.n; i++) {
        assert_int_equal(w.n_prompt[i], 26);
        assert_memory_equal(w.prompt[i], w.prompt[0], 20 * sizeof(int32_t));
        if (i) assert_memory_not_equal(w.prompt[i] + 20, w.prompt[0] + 20, 6 * sizeof(int32_t));
    }
    tide_workload_free(&w);

    assert_int_equal(tide_workload_random(&w, 0, 3, 9, 4, 1000, 500, seed, &st), -1);
    assert_int_equal(tide_workload_random(&w, 5, 9, 3, 4, 1000, 500, seed, &st), -1);
    assert_int_equal(tide_workload_random(&w, 5, 3, 9, 0, 1000, 500, seed, &st), -1);
    assert_int_equal(tide_workload_shared_prefix(&w, 5, 0, 0, 1, 1000, 500, seed, &st), -1);
    tide_workload_free(&w); /* harmless on a failed one */
}

static tide_event token(int64_t slot, tide_request_id id) {
    tide_event e = {.kind = TIDE_EVENT_TOKEN, .id = id, .user = tide_recorder_slot(slot)};
    return e;
}

static void test_recorder(void **state) {
    (void)state;
    tide_recorder r;
    tide_status st = {0};
    assert_int_equal(tide_recorder_init(&r, 3, 1, &st), 0);
    for (int i = 0; i < 3; i++) tide_recorder_submitted(&r, i);
    /* slot 1 gets 40 tokens (the inter-token array grows), slot 0 two, slot 2 none */
    for (int t = 0; t < 40; t++) tide_recorder_on_event(&r, &(tide_event){.kind = TIDE_EVENT_TOKEN, .id = 11, .user = tide_recorder_slot(1)});
    tide_event e = token(0, 10);
    tide_recorder_on_event(&r, &e);
    tide_recorder_on_event(&r, &e);
    tide_event fin = {.kind = TIDE_EVENT_FINISHED, .id = 10, .user = tide_recorder_slot(0), .reason = TIDE_FINISH_LENGTH};
    tide_recorder_on_event(&r, &fin);
    tide_event err = {.kind = TIDE_EVENT_FINISHED, .id = 12, .user = tide_recorder_slot(2), .reason = TIDE_FINISH_ERROR,
                      .error = "boom"};
    tide_recorder_on_event(&r, &err);
    tide_event alien = token(7, 99); /* not one of ours: ignored */
    tide_recorder_on_event(&r, &alien);
    assert_int_equal(r.n_ttft, 2);
    assert_int_equal(r.ttft_slot[0], 1);
    assert_int_equal(r.ttft_slot[1], 0);
    assert_int_equal(r.n_itl, 39 + 1);
    assert_int_equal(r.n_tokens_total, 42);
    for (int64_t i = 0; i < r.n_itl; i++) assert_true(r.itl[i] >= 0);
    for (int64_t i = 0; i < r.n_ttft; i++) assert_true(r.ttft[i] >= 0);
    assert_int_equal(r.n_done, 2);
    assert_int_equal(r.done[0], 10);
    assert_int_equal(r.done[1], 12);
    assert_int_equal(r.n_errors, 1);
    assert_string_equal(r.first_error, "boom");
    tide_recorder_free(&r);
    assert_int_equal(tide_recorder_init(&r, 0, 1, &st), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentiles),
        cmocka_unit_test(test_workloads),
        cmocka_unit_test(test_recorder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
