/* The decoder variant in the engine (tide_engine_config.decoder_tail,
 * docs/engine.md "The decoder variant"): with the shortest exact tail
 * (-1: n_upper x (window - 1) + 1 = 22 on tiny) a batch of prompts longer
 * than it gives exactly the tokens of the variant off, in the
 * chunking-invariant mode, while the rows before each tail skip the upper
 * layers (counted); a short tail (4) runs every request to completion with
 * its rows skipped too (its tokens may differ: approximate). The prefix
 * cache's pages are unaffected (a hit after a decoder-variant prefill gives
 * the same tokens as one after a full prefill). Bad values are refused.
 * Fresh random prompts per run (seed printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "decoder", 0, 9); }
static int teardown(void **state) { return tn_model_teardown(state); }

enum { N = 6, NEW = 4, MAXP = 48 };

typedef struct {
    int32_t prompt[N][MAXP];
    int64_t n_prompt[N];
    int32_t out[N][NEW];
    tide_engine_stats s;
} run;

static void make_prompts(const fixture *f, run *r, uint64_t salt) {
    memset(r, 0, sizeof *r);
    tu_rng g = {f->seed * 13 + salt};
    for (int i = 0; i < N; i++) {
        r->n_prompt[i] = 30 + (int64_t)(tu_next(&g) % (MAXP - 30));
        tn_random_tokens(f->m, &g, r->prompt[i], r->n_prompt[i]);
    }
    /* the last two share the first 32 tokens of the first: prefix-cache hits */
    memcpy(r->prompt[N - 1], r->prompt[0], 32 * sizeof(int32_t));
    memcpy(r->prompt[N - 2], r->prompt[0], 32 * sizeof(int32_t));
}

/* One request at a time (so the later ones hit the earlier ones' pages). */
static void run_all(const fixture *f, run *r, int64_t tail) {
    tide_engine_config c = tide_engine_config_default();
    c.canonical_layout = 1;
    c.index_key_quirk = 0;
    c.kv_block = 2;
    c.page_tokens = 8;
    c.prefix_replay = -1;
    c.decoder_tail = tail;
    tide_engine *e;
    tide_status st = {0};
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    for (int i = 0; i < N; i++) {
        tide_request q = tide_request_default();
        q.prompt = r->prompt[i];
        q.n_prompt = r->n_prompt[i];
        q.sampling.temperature = 0;
        q.sampling.max_tokens = NEW;
        tide_request_id id;
        if (tide_engine_submit(e, &q, &id, &st) != 0) fail_msg("%s", st.msg);
        assert_int_equal(tide_engine_run(e, &st), 0);
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, id, &info, &st), 0);
        if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
        assert_int_equal(info.n_output, NEW);
        memcpy(r->out[i], info.output, sizeof r->out[i]);
        tide_engine_release(e, id);
    }
    tide_engine_get_stats(e, &r->s);
    tide_engine_destroy(e);
}

static void test_exact_tail(void **state) {
    fixture *f = *state;
    run off, on, shorty;
    make_prompts(f, &off, 1);
    make_prompts(f, &on, 1);
    make_prompts(f, &shorty, 1);
    run_all(f, &off, 0);
    run_all(f, &on, -1);
    run_all(f, &shorty, 4);
    assert_int_equal(off.s.decoder_tail, 0);
    assert_int_equal(off.s.decoder_rows_skipped, 0);
    assert_int_equal(on.s.decoder_tail, 22);
    assert_int_equal(shorty.s.decoder_tail, 4);
    assert_true(off.s.prefix_hits >= 2); /* the shared prefix hit the cache */
    assert_int_equal(on.s.prefix_hits, off.s.prefix_hits);
    /* every prefill row before the tail (a hit's replay from 0 included) skipped the upper layers */
    int64_t want_on = 0, want_short = 0;
    for (int i = 0; i < N; i++) {
        want_on += on.n_prompt[i] - 22;
        want_short += shorty.n_prompt[i] - 4;
    }
    assert_int_equal(on.s.decoder_rows_skipped, want_on);
    assert_int_equal(shorty.s.decoder_rows_skipped, want_short);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        if (memcmp(off.out[i], on.out[i], sizeof off.out[i]) != 0)
            fail_msg("request %d: the exact tail changed the tokens", i);
        differ += memcmp(off.out[i], shorty.out[i], sizeof off.out[i]) != 0;
    }
    print_message("tail 4: %d of %d requests got other tokens (approximate)\n", differ, N);
}

static void test_bad_values(void **state) {
    fixture *f = *state;
    tide_engine_config c = tide_engine_config_default();
    c.decoder_tail = -2;
    tide_engine *e;
    tide_status st = {0};
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    assert_non_null(strstr(st.msg, "decoder_tail -2"));
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 5,6,7 --decoder-tail x 2>&1", TIDE_EXE, f->dir);
    assert_int_equal(tu_system(cmd, &out), 2);
    assert_non_null(strstr(out, "--decoder-tail"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 5,6,7,8,9 --max-tokens 2 --decoder-tail 2 2>/dev/null",
             TIDE_EXE, f->dir);
    assert_int_equal(tu_system(cmd, &out), 0);
    assert_non_null(strchr(out, ','));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_tail),
        cmocka_unit_test(test_bad_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
