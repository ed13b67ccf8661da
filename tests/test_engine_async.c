/* Overlapped scheduling (cfg.overlap: plan step N+1 while step N's forward
 * pass runs on an engine thread), the step's phases (prepare / launch /
 * complete) and their timing statistics (include/tide.h, tide_engine_stats;
 * docs/engine.md, "Overlapped scheduling").
 *
 * What is checked: with the overlap on and off, mixed traffic (prefix-cache
 * hits, stop tokens mid-batch, cancels, preemption in a small pool, two
 * waves) gives the same tokens as a cache-off, unpressured run, and the
 * same plans (steps, tokens fed, preemptions, hits: identical counters);
 * reference counts hold after every step; the phase times add up to the
 * step times, step by step and in total; the forward pass's idle gap is
 * counted once between each two consecutive passes of a busy period and
 * never across an idle engine. All on a tiny synthetic checkpoint with
 * fresh random prompts per run. No timing assertions beyond signs and
 * sums. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "engine_async", 0, 3); }
static int teardown(void **state) { return tn_model_teardown(state); }

#define N_REQ 20
#define EPS 1e-6

static int32_t rand_token(const fixture *f, tu_rng *r) {
    int32_t t;
    do t = (int32_t)(tu_next(r) % (uint64_t)f->m->cfg.text.vocab_size);
    while (t == f->m->cfg.image_token_id);
    return t;
}

/* The sums the statistics promise, at any moment. */
static void check_stats(const tide_engine *e) {
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_true(s.prepare_seconds >= 0 && s.forward_seconds >= 0 && s.complete_seconds >= 0);
    assert_true(s.last_prepare_seconds >= 0 && s.last_forward_seconds >= 0 && s.last_complete_seconds >= 0);
    assert_true(fabs(s.prepare_seconds + s.forward_seconds + s.complete_seconds - s.step_seconds) < EPS);
    assert_true(fabs(s.last_prepare_seconds + s.last_forward_seconds + s.last_complete_seconds -
                     s.last_step_seconds) < EPS);
    assert_true(fabs(s.host_seconds - (s.prepare_seconds + s.complete_seconds)) < EPS);
    assert_true(fabs(s.last_host_seconds - (s.last_prepare_seconds + s.last_complete_seconds)) < EPS);
    assert_true(s.sample_seconds >= 0 && s.sample_seconds <= s.complete_seconds + EPS);
    assert_true(s.last_sample_seconds >= 0 && s.last_sample_seconds <= s.last_complete_seconds + EPS);
    assert_true(s.overlap_seconds >= 0 && s.overlap_seconds <= s.forward_seconds + EPS);
    assert_true(s.last_overlap_seconds >= 0 && s.last_overlap_seconds <= s.last_forward_seconds + EPS);
    assert_true(s.forwards <= s.steps);
    assert_true(s.idle_gaps <= s.forwards);
    assert_true(s.idle_gap_seconds >= 0 && s.last_idle_gap_seconds >= 0);
    assert_true(s.last_idle_gap_seconds <= s.idle_gap_seconds + EPS);
    assert_true(s.idle_fraction >= 0 && s.idle_fraction <= 1);
    if (s.idle_gaps == 0) assert_true(s.idle_gap_seconds == 0 && s.idle_fraction == 0);
}

static void submit(tide_engine *e, const int32_t *prompt, int64_t n, const tide_sampling_params *sp, int has_seed,
                   tide_request_id *id) {
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = n;
    r.sampling = *sp;
    r.has_seed = has_seed;
    tide_status st = {0};
    if (tide_engine_submit(e, &r, id, &st) != 0) fail_msg("%s", st.msg);
}

/* Batch 64 (all admitted at once): the phases add up after every step; one
 * busy period has exactly forwards - 1 gaps; a gap is not counted across an
 * idle engine. Prints the measured split (docs/engine.md quotes it). */
static void phase_stats_batch64(const fixture *f, int overlap) {
    tu_rng r = {f->seed * 131 + 7};
    int32_t prompts[64][4];
    tide_sampling_params sp[64];
    tide_engine_config c = tide_engine_config_default();
    c.prefill_chunk = 4;
    c.overlap = overlap;
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.forwards, 0);
    assert_int_equal(s.idle_gaps, 0);
    assert_true(s.step_seconds == 0 && s.idle_fraction == 0);
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < 4; j++) prompts[i][j] = rand_token(f, &r);
        sp[i] = tide_sampling_params_default();
        sp[i].temperature = 0;
        sp[i].max_tokens = 4;
        tide_request_id id;
        submit(e, prompts[i], 1 + (int64_t)(tu_next(&r) % 4), &sp[i], 0, &id);
    }
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        check_stats(e);
    }
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.forwards, 4); /* the prompts in one step (its rows sample), then 3 decode steps */
    assert_int_equal(s.idle_gaps, s.forwards - 1);
    if (!overlap) assert_true(s.overlap_seconds == 0);
    print_message("overlap %d: batch 64, tiny, %lld steps: per step prepare %.3f ms, forward %.3f ms, complete %.3f ms "
                  "(sampling %.3f ms), planning hidden %.3f ms, idle gap %.3f ms (%.1f %% of the step period)\n",
                  overlap, (long long)s.forwards, 1e3 * s.prepare_seconds / (double)s.steps,
                  1e3 * s.forward_seconds / (double)s.steps, 1e3 * s.complete_seconds / (double)s.steps,
                  1e3 * s.sample_seconds / (double)s.steps, 1e3 * s.overlap_seconds / (double)s.steps,
                  1e3 * s.idle_gap_seconds / (double)s.idle_gaps, 100 * s.idle_fraction);
    /* a second busy period after an idle one: its first pass ends no gap */
    int64_t fw = s.forwards, gaps = s.idle_gaps;
    tide_request_id id;
    submit(e, prompts[0], 4, &sp[0], 0, &id);
    assert_int_equal(tide_engine_run(e, &st), 0);
    check_stats(e);
    tide_engine_get_stats(e, &s);
    assert_true(s.forwards > fw);
    assert_int_equal(s.idle_gaps - gaps, s.forwards - fw - 1);
    tide_engine_destroy(e);
}

static void test_phase_stats_batch64(void **state) {
    phase_stats_batch64(*state, 0);
    phase_stats_batch64(*state, 1);
}

/* Mixed traffic. The reference: a cache-off engine with a large pool and
 * all requests at once. The engine under test: prefix cache on (whole-prefix
 * replay in the chunking-invariant mode, so a hit is exact), a pool small
 * enough to preempt, requests in two waves, two cancels, stop tokens that
 * end some requests mid-batch. Reference counts are checked after every
 * step. */
typedef struct {
    int32_t prompt[N_REQ][40];
    int64_t n_prompt[N_REQ];
    tide_sampling_params sp[N_REQ];
    int32_t stop[N_REQ];
} traffic;

static tide_engine_config exact_cfg(void) {
    tide_engine_config c = tide_engine_config_default();
    c.canonical_layout = 1;
    c.index_key_quirk = 0;
    c.kv_block = 2;
    c.page_tokens = 8;
    c.prefix_replay = -1;
    return c;
}

static void make_traffic(const fixture *f, traffic *t) {
    tu_rng r = {f->seed * 977 + 11};
    int32_t shared[16];
    for (int j = 0; j < 16; j++) shared[j] = rand_token(f, &r);
    for (int i = 0; i < N_REQ; i++) {
        int64_t n = 0;
        if (i % 2 == 0) { /* half share a 2-page prefix */
            memcpy(t->prompt[i], shared, sizeof shared);
            n = 16;
        }
        int64_t extra = 1 + (int64_t)(tu_next(&r) % 8);
        for (int64_t j = 0; j < extra; j++) t->prompt[i][n++] = rand_token(f, &r);
        t->n_prompt[i] = n;
        t->sp[i] = tide_sampling_params_default();
        t->sp[i].max_tokens = 2 + (int64_t)(tu_next(&r) % 5);
        if (i % 3 == 0) t->sp[i].temperature = 0;
        else {
            t->sp[i].temperature = 1.3f;
            t->sp[i].top_k = 50;
            t->sp[i].seed = (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull + f->seed;
        }
        t->stop[i] = -1;
    }
}

/* Runs every request on one engine; out[i] gets request i's tokens. */
static void run_reference(const fixture *f, const traffic *t, int32_t out[N_REQ][8], int64_t *n_out) {
    tide_engine_config c = exact_cfg();
    c.prefix_cache = 0;
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_request_id ids[N_REQ];
    for (int i = 0; i < N_REQ; i++) submit(e, t->prompt[i], t->n_prompt[i], &t->sp[i], i % 3 != 0, &ids[i]);
    assert_int_equal(tide_engine_run(e, &st), 0);
    for (int i = 0; i < N_REQ; i++) {
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
        assert_int_equal(info.reason, TIDE_FINISH_LENGTH);
        memcpy(out[i], info.output, (size_t)info.n_output * sizeof(int32_t));
        n_out[i] = info.n_output;
    }
    tide_engine_destroy(e);
}

static void step_checked(tide_engine *e) {
    tide_status st = {0};
    assert_int_equal(tide_engine_step(e, &st), 0);
    if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
    check_stats(e);
}

/* The counters that follow from the plans alone. */
typedef struct {
    int64_t steps, forwards, tokens_fed, tokens_generated, preemptions, prefix_hits, prefix_hit_tokens;
} plan_counts;

static void mixed_traffic(const fixture *f, int overlap, int32_t ref[N_REQ][8], const int64_t *n_ref,
                          plan_counts *pc) {
    traffic t;
    make_traffic(f, &t);
    /* stop tokens: every fourth request stops at its second token's first
     * occurrence (the RNG is keyed by position: the tokens before it are
     * unchanged) */
    int64_t want[N_REQ];
    tide_finish_reason why[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        want[i] = n_ref[i];
        why[i] = TIDE_FINISH_LENGTH;
        if (i % 4 != 1) continue;
        t.stop[i] = ref[i][1];
        t.sp[i].stop_tokens = &t.stop[i];
        t.sp[i].n_stop_tokens = 1;
        for (int64_t j = 0; j < n_ref[i]; j++)
            if (ref[i][j] == t.stop[i]) {
                want[i] = j + 1;
                why[i] = TIDE_FINISH_STOP;
                break;
            }
    }
    tide_engine_config c = exact_cfg();
    c.max_seqs = 8;
    c.max_step_tokens = 16;
    c.kv_blocks = 40;
    c.overlap = overlap;
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_request_id ids[N_REQ];
    for (int i = 0; i < N_REQ / 2; i++) submit(e, t.prompt[i], t.n_prompt[i], &t.sp[i], i % 3 != 0, &ids[i]);
    step_checked(e);
    step_checked(e);
    int cancelled[2] = {3, N_REQ / 2 - 1}; /* one likely running, one likely waiting */
    for (int k = 0; k < 2; k++) assert_int_equal(tide_engine_cancel(e, ids[cancelled[k]], &st), 0);
    for (int i = N_REQ / 2; i < N_REQ; i++) submit(e, t.prompt[i], t.n_prompt[i], &t.sp[i], i % 3 != 0, &ids[i]);
    while (tide_engine_busy(e)) step_checked(e);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_true(s.prefix_hits > 0);
    assert_true(s.preemptions > 0);
    *pc = (plan_counts){s.steps,       s.forwards,    s.tokens_fed,       s.tokens_generated,
                        s.preemptions, s.prefix_hits, s.prefix_hit_tokens};
    for (int i = 0; i < N_REQ; i++) {
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
        int was_cancelled = i == cancelled[0] || i == cancelled[1];
        if (was_cancelled) {
            assert_int_equal(info.reason, TIDE_FINISH_CANCELLED);
            assert_true(info.n_output <= want[i]);
        } else {
            if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
            assert_int_equal(info.reason, why[i]);
            assert_int_equal(info.n_output, want[i]);
        }
        if (memcmp(info.output, ref[i], (size_t)info.n_output * sizeof(int32_t)) != 0)
            fail_msg("request %d: tokens differ from the reference", i);
        tide_engine_release(e, ids[i]);
    }
    if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
    tide_engine_clear_prefix_cache(e);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, 0);
    tide_engine_destroy(e);
}

static void test_mixed_traffic_exact(void **state) {
    const fixture *f = *state;
    traffic t;
    make_traffic(f, &t);
    int32_t ref[N_REQ][8];
    int64_t n_ref[N_REQ];
    run_reference(f, &t, ref, n_ref);
    plan_counts off, on;
    mixed_traffic(f, 0, ref, n_ref, &off);
    mixed_traffic(f, 1, ref, n_ref, &on);
    assert_memory_equal(&off, &on, sizeof off);
}

/* overlap: 0 (the default) and 1 work; anything else is refused. */
static void test_overlap_config(void **state) {
    fixture *f = *state;
    tide_engine_config c = tide_engine_config_default();
    assert_true(c.overlap == 0 || c.overlap == 1); /* 0 unless the build flips it */
    tide_status st = {0};
    tide_engine *e = NULL;
    int bad[2] = {2, -1};
    for (int k = 0; k < 2; k++) {
        c.overlap = bad[k];
        st = (tide_status){0};
        assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
        assert_null(e);
        char want[64];
        snprintf(want, sizeof want, "overlap %d is not 0 (off) or 1 (on)", bad[k]);
        if (!strstr(st.msg, want)) fail_msg("%s", st.msg);
    }
    for (int k = 0; k < 2; k++) {
        c.overlap = k;
        assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), 0);
        tide_engine_destroy(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phase_stats_batch64),
        cmocka_unit_test(test_mixed_traffic_exact),
        cmocka_unit_test(test_overlap_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
