/* The engine (include/tide.h): request lifecycle, continuous batching,
 * preemption, sampling, cancel, bad requests, and `tide run --input`.
 *
 * The central property: a request's tokens depend on nothing but the request
 * (prompt, parameters, seed). Every test runs the same requests under
 * different batch compositions (alone, 64 at once, small budgets, a KV pool
 * so small that requests are preempted and recomputed, reversed submission
 * order) and requires identical outputs. All on a tiny synthetic checkpoint
 * with fresh random prompts per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "engine", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

/* A set of requests: prompts of 1..max_prompt random tokens, 1..max_new tokens. */
typedef struct {
    int n;
    int32_t *prompt[64];
    int64_t n_prompt[64];
    tide_sampling_params sp[64];
    int has_seed[64];
} reqset;

static void make_reqs(const fixture *f, reqset *rs, int n, int max_prompt, int max_new, uint64_t salt) {
    tu_rng r = {f->seed * 31 + salt};
    rs->n = n;
    int64_t V = f->m->cfg.text.vocab_size;
    for (int i = 0; i < n; i++) {
        rs->n_prompt[i] = 1 + (int64_t)(tu_next(&r) % (uint64_t)max_prompt);
        rs->prompt[i] = malloc((size_t)rs->n_prompt[i] * sizeof(int32_t));
        for (int64_t j = 0; j < rs->n_prompt[i]; j++) {
            int32_t t;
            do t = (int32_t)(tu_next(&r) % (uint64_t)V);
            while (t == f->m->cfg.image_token_id);
            rs->prompt[i][j] = t;
        }
        rs->sp[i] = tide_sampling_params_default();
        rs->sp[i].temperature = 0;
        rs->sp[i].max_tokens = 1 + (int64_t)(tu_next(&r) % (uint64_t)max_new);
        rs->has_seed[i] = 0;
    }
}

static void free_reqs(reqset *rs) {
    for (int i = 0; i < rs->n; i++) free(rs->prompt[i]);
}

typedef struct {
    int32_t *out[64];
    int64_t n_out[64];
    tide_finish_reason reason[64];
    int64_t preemptions, max_batch, min_batch, blocks_used_end;
} results;

static void free_results(results *r) {
    for (int i = 0; i < 64; i++) free(r->out[i]);
}

static tide_engine_config base_cfg(void) {
    tide_engine_config c = tide_engine_config_default();
    c.n_threads = 2;
    return c;
}

/* Runs requests `which[0..n)` of rs on an engine made from cfg, submitting
 * them in that order; outputs land at the request's index. */
static void run_set(const fixture *f, const tide_engine_config *cfg, const reqset *rs, const int *which, int n,
                    results *res) {
    memset(res, 0, sizeof *res);
    res->min_batch = 1 << 30;
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(cfg, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_request_id ids[64];
    for (int k = 0; k < n; k++) {
        int i = which[k];
        tide_request r = tide_request_default();
        r.prompt = rs->prompt[i];
        r.n_prompt = rs->n_prompt[i];
        r.sampling = rs->sp[i];
        r.has_seed = rs->has_seed[i];
        if (tide_engine_submit(e, &r, &ids[k], &st) != 0) fail_msg("%s", st.msg);
    }
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        tide_engine_stats s;
        tide_engine_get_stats(e, &s);
        if (s.last_step_seqs > res->max_batch) res->max_batch = s.last_step_seqs;
        if (s.last_step_seqs < res->min_batch) res->min_batch = s.last_step_seqs;
        assert_true(s.kv_blocks_used <= cfg->kv_blocks);
    }
    for (int k = 0; k < n; k++) {
        int i = which[k];
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[k], &info, &st), 0);
        assert_int_equal(info.state, TIDE_REQ_FINISHED);
        if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
        res->out[i] = malloc((size_t)(info.n_output ? info.n_output : 1) * sizeof(int32_t));
        memcpy(res->out[i], info.output, (size_t)info.n_output * sizeof(int32_t));
        res->n_out[i] = info.n_output;
        res->reason[i] = info.reason;
        assert_int_equal(info.n_prompt, rs->n_prompt[i]);
        tide_engine_release(e, ids[k]);
    }
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    res->preemptions = s.preemptions;
    res->blocks_used_end = s.kv_blocks_used;
    assert_int_equal(s.n_waiting + s.n_running + s.n_finished, 0);
    tide_engine_destroy(e);
}

static void same(const results *a, const results *b, const int *which, int n) {
    for (int k = 0; k < n; k++) {
        int i = which[k];
        if (a->n_out[i] != b->n_out[i] || memcmp(a->out[i], b->out[i], (size_t)a->n_out[i] * sizeof(int32_t)))
            fail_msg("request %d: outputs differ (%lld vs %lld tokens)", i, (long long)a->n_out[i],
                     (long long)b->n_out[i]);
        assert_int_equal(a->reason[i], b->reason[i]);
    }
}

static void order(int *w, int n, int reversed) {
    for (int i = 0; i < n; i++) w[i] = reversed ? n - 1 - i : i;
}

/* Greedy outputs: alone == inside a batch of 64 (all admitted at once, the
 * batch shrinking to 1 as requests finish) == small batches under a small
 * budget, submitted in reverse. Reference layouts (chunk plan fixed). */
static void test_greedy_batch_invariance(void **state) {
    fixture *f = *state;
    reqset rs;
    make_reqs(f, &rs, 64, 4, 3, 1);
    rs.sp[0].max_tokens = 6; /* outlives the rest: the batch ends at size 1 */
    int all[64], rev[64];
    order(all, 64, 0);
    order(rev, 64, 1);
    tide_engine_config big = base_cfg();
    big.max_step_tokens = 512;
    big.prefill_chunk = 4;
    results rb;
    run_set(f, &big, &rs, all, 64, &rb);
    assert_int_equal(rb.max_batch, 64); /* from 64 at once down to 1 */
    assert_int_equal(rb.min_batch, 1);
    assert_int_equal(rb.blocks_used_end, 0);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(rb.n_out[i], rs.sp[i].max_tokens);
        assert_int_equal(rb.reason[i], TIDE_FINISH_LENGTH);
    }
    tide_engine_config alone = big;
    alone.max_seqs = 1;
    for (int i = 0; i < 2; i++) {
        results ra;
        run_set(f, &alone, &rs, &i, 1, &ra);
        same(&ra, &rb, &i, 1);
        free_results(&ra);
    }
    tide_engine_config small = big;
    small.max_seqs = 12;
    small.max_step_tokens = 16;
    results rsm;
    run_set(f, &small, &rs, rev, 64, &rsm);
    same(&rsm, &rb, all, 64);
    free_results(&rsm);
    free_results(&rb);
    free_reqs(&rs);
}

/* Preemption by recompute loses nothing: a KV pool of a few blocks forces
 * preemptions; outputs equal the unpressured run. Both chunking modes. */
static void preempt_case(fixture *f, int canonical) {
    reqset rs;
    make_reqs(f, &rs, 8, 8, 5, 2 + (uint64_t)canonical);
    for (int i = 0; i < 8; i++) rs.sp[i].max_tokens = 5; /* each ends up holding >= 10 blocks */
    int all[8];
    order(all, 8, 0);
    tide_engine_config c = base_cfg();
    c.canonical_layout = canonical;
    c.index_key_quirk = !canonical;
    c.max_step_tokens = 64;
    c.prefill_chunk = canonical ? 0 : 4;
    results free_run;
    run_set(f, &c, &rs, all, 8, &free_run);
    assert_int_equal(free_run.preemptions, 0);
    c.kv_block = 1;
    /* KV sources of ratio 2, 2 and 1: a sequence of L positions holds about
     * 2L one-position blocks, at most 2 x 12; three do not fit */
    c.kv_blocks = 26;
    c.max_step_tokens = canonical ? 16 : 64;
    results tight;
    run_set(f, &c, &rs, all, 8, &tight);
    assert_true(tight.preemptions > 0);
    assert_int_equal(tight.blocks_used_end, 0);
    same(&tight, &free_run, all, 8);
    free_results(&tight);
    free_results(&free_run);
    free_reqs(&rs);
}

static void test_preemption_ref(void **state) { preempt_case(*state, 0); }
static void test_preemption_canonical(void **state) { preempt_case(*state, 1); }

/* Chunking-invariant mode: chunks cut to any budget give the same tokens. */
static void test_flexible_chunks(void **state) {
    fixture *f = *state;
    reqset rs;
    make_reqs(f, &rs, 8, 12, 3, 4);
    int all[8], rev[8];
    order(all, 8, 0);
    order(rev, 8, 1);
    tide_engine_config c = base_cfg();
    c.canonical_layout = 1;
    c.index_key_quirk = 0;
    c.max_seqs = 1;
    results a, b;
    run_set(f, &c, &rs, all, 8, &a);
    c.max_seqs = 4;
    c.max_step_tokens = 5;
    run_set(f, &c, &rs, rev, 8, &b);
    same(&a, &b, all, 8);
    free_results(&a);
    free_results(&b);
    free_reqs(&rs);
}

/* Seeded sampling: the same tokens alone and in any batch; other seeds give
 * other tokens (so this is not greedy in disguise). */
static void test_seeded_sampling(void **state) {
    fixture *f = *state;
    reqset rs;
    make_reqs(f, &rs, 10, 6, 4, 5);
    tu_rng r = {f->seed + 99};
    for (int i = 0; i < 10; i++) {
        rs.sp[i].temperature = 1.5f;
        rs.sp[i].top_k = i % 3 == 0 ? 0 : 50;
        rs.sp[i].top_p = i % 2 ? 0.95f : 1.0f;
        rs.sp[i].seed = tu_next(&r);
        rs.sp[i].max_tokens = 4;
        rs.has_seed[i] = 1;
    }
    int all[10], rev[10];
    order(all, 10, 0);
    order(rev, 10, 1);
    tide_engine_config c = base_cfg();
    c.prefill_chunk = 3;
    results a, b, d;
    run_set(f, &c, &rs, all, 10, &a);
    c.max_seqs = 3;
    c.max_step_tokens = 5;
    c.kv_block = 1;
    c.kv_blocks = 30;
    run_set(f, &c, &rs, rev, 10, &b);
    same(&a, &b, all, 10);
    int zero = 0;
    tide_engine_config alone = base_cfg();
    alone.prefill_chunk = 3;
    alone.max_seqs = 1;
    run_set(f, &alone, &rs, &zero, 1, &d);
    same(&d, &a, &zero, 1);
    free_results(&d);
    /* new seeds: some output must change */
    for (int i = 0; i < 10; i++) rs.sp[i].seed ^= 0x9e3779b97f4a7c15ull;
    c = base_cfg();
    c.prefill_chunk = 3;
    run_set(f, &c, &rs, all, 10, &d);
    int differ = 0;
    for (int i = 0; i < 10; i++) differ += memcmp(d.out[i], a.out[i], 4 * sizeof(int32_t)) != 0;
    assert_true(differ > 0);
    free_results(&a);
    free_results(&b);
    free_results(&d);
    free_reqs(&rs);
}

typedef struct {
    int tokens[8], finished[8], reason[8];
    tide_request_id ids[8];
} evlog;

static void on_event(void *ctx, const tide_event *ev) {
    evlog *l = ctx;
    int i = (int)(intptr_t)ev->user;
    assert_int_equal(ev->id, l->ids[i]);
    if (ev->kind == TIDE_EVENT_TOKEN) {
        l->tokens[i]++;
        assert_int_equal(ev->n_output, l->tokens[i]);
        assert_int_equal(ev->output[ev->n_output - 1], ev->token);
    } else {
        l->finished[i]++;
        l->reason[i] = (int)ev->reason;
    }
}

/* Cancel a running and a waiting request; the others are unaffected; events
 * come once per token and once at the end; stop tokens end a request. */
static void test_cancel_events_stop(void **state) {
    fixture *f = *state;
    reqset rs;
    make_reqs(f, &rs, 4, 6, 1, 6);
    for (int i = 0; i < 4; i++) rs.sp[i].max_tokens = 6;
    int all[4];
    order(all, 4, 0);
    tide_engine_config c = base_cfg();
    results ref;
    run_set(f, &c, &rs, all, 4, &ref);

    evlog log;
    memset(&log, 0, sizeof log);
    c.max_seqs = 2;
    c.on_event = on_event;
    c.event_ctx = &log;
    tide_status st = {0};
    tide_engine *e;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), 0);
    /* request 3 stops at the third token of its reference output */
    int32_t stop = ref.out[3][2];
    for (int i = 0; i < 4; i++) {
        tide_request r = tide_request_default();
        r.prompt = rs.prompt[i];
        r.n_prompt = rs.n_prompt[i];
        r.sampling = rs.sp[i];
        if (i == 3) {
            r.sampling.stop_tokens = &stop;
            r.sampling.n_stop_tokens = 1;
        }
        r.user = (void *)(intptr_t)i;
        assert_int_equal(tide_engine_submit(e, &r, &log.ids[i], &st), 0);
    }
    assert_int_equal(tide_engine_step(e, &st), 0);
    assert_int_equal(tide_engine_step(e, &st), 0);
    tide_request_info info;
    assert_int_equal(tide_engine_get(e, log.ids[1], &info, &st), 0);
    assert_int_equal(info.state, TIDE_REQ_RUNNING);
    assert_int_equal(tide_engine_get(e, log.ids[2], &info, &st), 0);
    assert_int_equal(info.state, TIDE_REQ_WAITING);
    assert_int_equal(tide_engine_cancel(e, log.ids[1], &st), 0);
    assert_int_equal(tide_engine_cancel(e, log.ids[2], &st), 0);
    assert_int_equal(tide_engine_cancel(e, log.ids[2], &st), 0); /* twice: nothing */
    assert_int_equal(tide_engine_cancel(e, 12345, &st), -1);
    assert_non_null(strstr(st.msg, "no request"));
    assert_int_equal(tide_engine_run(e, &st), 0);
    int64_t n_out1 = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tide_engine_get(e, log.ids[i], &info, &st), 0);
        assert_int_equal(info.state, TIDE_REQ_FINISHED);
        assert_int_equal(log.finished[i], 1);
        assert_int_equal(log.reason[i], info.reason);
        assert_int_equal(log.tokens[i], info.n_output);
        /* whatever was produced is a prefix of the reference */
        assert_true(info.n_output <= ref.n_out[i]);
        assert_memory_equal(info.output, ref.out[i], (size_t)info.n_output * sizeof(int32_t));
        if (i == 1) n_out1 = info.n_output;
    }
    assert_int_equal(tide_engine_get(e, log.ids[0], &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_LENGTH);
    assert_int_equal(info.n_output, 6);
    assert_int_equal(tide_engine_get(e, log.ids[1], &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_CANCELLED);
    assert_true(n_out1 >= 1 && n_out1 < 6);
    assert_int_equal(tide_engine_get(e, log.ids[2], &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_CANCELLED);
    assert_int_equal(info.n_output, 0);
    assert_int_equal(tide_engine_get(e, log.ids[3], &info, &st), 0);
    assert_int_equal(info.reason, TIDE_FINISH_STOP);
    int64_t first = 0;
    while (ref.out[3][first] != stop) first++;
    assert_int_equal(info.n_output, first + 1);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.n_finished, 4);
    assert_int_equal(s.kv_blocks_used, 0);
    tide_engine_release(e, log.ids[0]);
    assert_int_equal(tide_engine_get(e, log.ids[0], &info, &st), -1);
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.n_finished, 3);
    tide_engine_destroy(e); /* frees the unreleased ones */
    free_results(&ref);
    free_reqs(&rs);
}

static void expect_reject(tide_engine *e, const tide_request *r, const char *what) {
    tide_status st = {0};
    tide_request_id id = 77;
    assert_int_equal(tide_engine_submit(e, r, &id, &st), -1);
    assert_int_equal(id, 0);
    if (!strstr(st.msg, what)) fail_msg("expected '%s' in '%s'", what, st.msg);
    assert_false(tide_engine_busy(e));
}

static void test_bad_requests(void **state) {
    fixture *f = *state;
    tide_engine_config c = base_cfg();
    c.kv_block = 1;
    c.kv_blocks = 50;
    tide_status st = {0};
    tide_engine *e;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), 0);
    int32_t V = (int32_t)f->m->cfg.text.vocab_size;
    int32_t p[3] = {5, 6, 7};
    tide_request r = tide_request_default();
    r.prompt = p;
    r.n_prompt = 0;
    r.sampling.max_tokens = 4;
    expect_reject(e, &r, "prompt is empty");
    r.n_prompt = 3;
    p[1] = V;
    expect_reject(e, &r, "outside the vocabulary");
    p[1] = -3;
    expect_reject(e, &r, "outside the vocabulary");
    p[1] = f->m->cfg.image_token_id;
    expect_reject(e, &r, "outside an image's span");
    p[1] = 6;
    r.sampling.max_tokens = 0;
    expect_reject(e, &r, "max_tokens");
    r.sampling.max_tokens = 4;
    r.sampling.temperature = -1;
    expect_reject(e, &r, "temperature");
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 100; /* 102 positions need more than 50 one-position blocks */
    expect_reject(e, &r, "KV blocks");
    expect_reject(e, NULL, "NULL");
    r.sampling.max_tokens = 2;
    tide_request_id id;
    assert_int_equal(tide_engine_submit(e, &r, &id, &st), 0);
    assert_int_equal(id, 1);
    assert_int_equal(tide_engine_run(e, &st), 0);
    tide_engine_destroy(e);
    /* bad configurations */
    c = base_cfg();
    c.prefill_chunk = c.max_step_tokens + 1;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    assert_null(e);
    c = base_cfg();
    c.max_seqs = 0;
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    c = base_cfg();
    c.model_dir = "/nonexistent/model";
    assert_int_equal(tide_engine_create(&c, &e, &st), -1);
    assert_null(e);
}

/* tide run --input: results per line, bad lines reported, greedy output equal
 * to the library's. */
static void test_cli_jsonl(void **state) {
    fixture *f = *state;
    reqset rs;
    make_reqs(f, &rs, 2, 6, 1, 7);
    rs.sp[0].max_tokens = 3;
    rs.sp[1].max_tokens = 2;
    int all[2] = {0, 1};
    tide_engine_config c = base_cfg();
    results ref;
    run_set(f, &c, &rs, all, 2, &ref);
    char in[1024], out[1024], cmd[16384];
    snprintf(in, sizeof in, "%s/in.jsonl", f->dir);
    snprintf(out, sizeof out, "%s/out.jsonl", f->dir);
    FILE *fp = fopen(in, "w");
    assert_non_null(fp);
    for (int i = 0; i < 2; i++) {
        fprintf(fp, "{\"id\": \"r%d\", \"prompt_ids\": [", i);
        for (int64_t j = 0; j < rs.n_prompt[i]; j++) fprintf(fp, "%s%d", j ? "," : "", rs.prompt[i][j]);
        fprintf(fp, "], \"max_tokens\": %lld, \"temperature\": 0, \"ignore_eos\": true}\n",
                (long long)rs.sp[i].max_tokens);
    }
    fprintf(fp, "{\"id\": \"bad\", \"prompt_ids\": [1, 2], \"max_tokens\": 0}\n");
    fclose(fp);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --input '%s' --output '%s' 2>&1", TIDE_EXE, f->dir, in, out);
    char *log = NULL;
    assert_int_equal(tu_system(cmd, &log), 1); /* one request failed */
    assert_non_null(strstr(log, "3/3 done"));
    free(log);
    char *text = NULL;
    snprintf(cmd, sizeof cmd, "cat '%s'", out);
    assert_int_equal(tu_system(cmd, &text), 0);
    for (int i = 0; i < 2; i++) {
        char want[1024];
        int n = snprintf(want, sizeof want, "{\"id\":\"r%d\",\"output_ids\":[", i);
        for (int64_t j = 0; j < ref.n_out[i]; j++) n += snprintf(want + n, sizeof want - (size_t)n, "%s%d", j ? "," : "", ref.out[i][j]);
        snprintf(want + n, sizeof want - (size_t)n,
                 "],\"finish_reason\":\"length\",\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"cached_tokens\":0}",
                 (long long)rs.n_prompt[i], (long long)ref.n_out[i]);
        if (!strstr(text, want)) fail_msg("missing %s in\n%s", want, text);
    }
    assert_non_null(strstr(text, "\"id\":\"bad\""));
    assert_non_null(strstr(text, "max_tokens is 0"));
    free(text);
    free_results(&ref);
    free_reqs(&rs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_batch_invariance),
        cmocka_unit_test(test_preemption_ref),
        cmocka_unit_test(test_preemption_canonical),
        cmocka_unit_test(test_flexible_chunks),
        cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_cancel_events_stop),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_cli_jsonl),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
