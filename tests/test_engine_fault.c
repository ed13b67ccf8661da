/* Failures inside a step (engine.c, docs/engine.md "When a step fails"): a
 * forward pass that fails for one request of a batch (a fault injected
 * through tide_engine_set_fault) fails that request only, with a message in
 * tide_request_info.error, while the others finish with exactly the tokens
 * of a fault-free run (they are retried alone, then batched again); a pass
 * that fails once for the whole batch costs nobody anything; NaN weights
 * fail the request with "not finite" logits named as such, and the engine
 * serves the next request. Fresh random prompts per run (seed printed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "fault", 0, 5); }
static int teardown(void **state) { return tn_model_teardown(state); }

enum { N = 6, NEW = 5, POISON = 2 };

typedef struct {
    int32_t prompt[N][12];
    int64_t n_prompt[N];
    int32_t out[N][NEW];
    int64_t n_out[N];
    tide_finish_reason reason[N];
    char error[N][512];
} run;

static void make_prompts(const fixture *f, run *r) {
    memset(r, 0, sizeof *r);
    tu_rng g = {f->seed * 17 + 3};
    int64_t V = f->m->cfg.text.vocab_size;
    for (int i = 0; i < N; i++) {
        r->n_prompt[i] = 2 + (int64_t)(tu_next(&g) % 10);
        for (int64_t j = 0; j < r->n_prompt[i]; j++) {
            int32_t t;
            do t = (int32_t)(tu_next(&g) % (uint64_t)V);
            while (t == f->m->cfg.image_token_id);
            r->prompt[i][j] = t;
        }
    }
}

/* The fault: a pass fails when it holds a request whose user pointer is
 * `poison`, or (once, when `once` is set) whatever it holds. */
typedef struct {
    void *poison;
    int once, passes, failed;
} fault;

static int inject(void *ctx, void *const *users, int n, tide_status *st) {
    fault *x = ctx;
    x->passes++;
    if (x->once && n > 1) {
        x->once = 0;
        x->failed++;
        return tide_fail(st, TIDE_ERR_NOMEM, "injected failure of a batch of %d", n);
    }
    for (int i = 0; i < n; i++)
        if (x->poison && users[i] == x->poison) {
            x->failed++;
            return tide_fail(st, TIDE_ERR_INTERNAL, "injected failure");
        }
    return 0;
}

static void run_all(const fixture *f, run *r, fault *x) {
    tide_engine_config c = tide_engine_config_default();
    c.max_seqs = 8;
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    if (x) tide_engine_set_fault(e, inject, x);
    tide_request_id ids[N];
    static char tags[N];
    for (int i = 0; i < N; i++) {
        tide_request q = tide_request_default();
        q.prompt = r->prompt[i];
        q.n_prompt = r->n_prompt[i];
        q.sampling.temperature = 0;
        q.sampling.max_tokens = NEW;
        q.user = &tags[i];
        if (tide_engine_submit(e, &q, &ids[i], &st) != 0) fail_msg("%s", st.msg);
    }
    if (x && x->poison) x->poison = &tags[POISON];
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
    }
    for (int i = 0; i < N; i++) {
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
        assert_int_equal(info.state, TIDE_REQ_FINISHED);
        r->reason[i] = info.reason;
        r->n_out[i] = info.n_output;
        memcpy(r->out[i], info.output, (size_t)info.n_output * sizeof(int32_t));
        if (info.error) snprintf(r->error[i], sizeof r->error[i], "%s", info.error);
    }
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached); /* nothing leaked by the failed passes */
    assert_int_equal(s.failed_passes, x ? x->failed : 0);
    tide_engine_destroy(e);
}

static void test_one_request_fails(void **state) {
    fixture *f = *state;
    run ref, got;
    make_prompts(f, &ref);
    make_prompts(f, &got);
    run_all(f, &ref, NULL);
    fault x = {.poison = (void *)1};
    run_all(f, &got, &x);
    assert_true(x.failed >= 2); /* in the batch, then alone */
    for (int i = 0; i < N; i++) {
        if (i == POISON) {
            assert_int_equal(got.reason[i], TIDE_FINISH_ERROR);
            if (!strstr(got.error[i], "the forward pass failed: injected failure")) fail_msg("%s", got.error[i]);
            continue;
        }
        assert_int_equal(got.reason[i], TIDE_FINISH_LENGTH);
        assert_int_equal(got.n_out[i], NEW);
        if (memcmp(got.out[i], ref.out[i], sizeof ref.out[i]) != 0) fail_msg("request %d: tokens changed", i);
    }
}

static void test_batch_fails_once(void **state) {
    fixture *f = *state;
    run ref, got;
    make_prompts(f, &ref);
    make_prompts(f, &got);
    run_all(f, &ref, NULL);
    fault x = {.once = 1};
    run_all(f, &got, &x);
    assert_int_equal(x.failed, 1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got.reason[i], TIDE_FINISH_LENGTH);
        if (memcmp(got.out[i], ref.out[i], sizeof ref.out[i]) != 0) fail_msg("request %d: tokens changed", i);
    }
}

static void test_nan_weights(void **state) {
    fixture *f = *state;
    tide_engine_config c = tide_engine_config_default();
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    int32_t prompt[3] = {5, 6, 7};
    tide_request q = tide_request_default();
    q.prompt = prompt;
    q.n_prompt = 3;
    q.sampling.max_tokens = 2;
    float keep = f->m->norm[0];
    f->m->norm[0] = NAN; /* the final norm: every logit becomes NaN */
    tide_request_id a, b;
    assert_int_equal(tide_engine_submit(e, &q, &a, &st), 0);
    assert_int_equal(tide_engine_run(e, &st), 0);
    f->m->norm[0] = keep;
    assert_int_equal(tide_engine_submit(e, &q, &b, &st), 0);
    assert_int_equal(tide_engine_run(e, &st), 0);
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, a, &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_ERROR);
    if (!strstr(info.error, "request 1: the model's logits at position 2 are not finite") ||
        !strstr(info.error, "weights are likely bad") || strstr(info.error, "masked"))
        fail_msg("%s", info.error);
    assert_int_equal(tide_engine_get(e, b, &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_LENGTH);
    tide_engine_destroy(e);
}

/* Messages of a failed creation carry one "engine: " */
static void test_create_message(void **state) {
    (void)state;
    tide_engine_config c = tide_engine_config_default();
    c.model_dir = "/nonexistent/tide-model";
    tide_engine *e;
    tide_status st = {0};
    assert_int_equal(tide_engine_create(&c, &e, &st), -1);
    assert_non_null(strstr(st.msg, "engine: "));
    assert_null(strstr(st.msg, "engine: engine"));
    st = (tide_status){0};
    assert_int_equal(tide_engine_step(NULL, &st), -1);
    assert_non_null(strstr(st.msg, "no engine"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_request_fails),
        cmocka_unit_test(test_batch_fails_once),
        cmocka_unit_test(test_nan_weights),
        cmocka_unit_test(test_create_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
