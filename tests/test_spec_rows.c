/* Decode rows (model/forward.h, docs/spec.md "Exact in every layout"): a
 * verify chunk fed under a checkpoint with decode_rows computes, row for
 * row, what one-token decode steps compute, in the reference's layout with
 * the index-key quirk (the defaults), and rollback leaves the state of
 * those steps.
 *
 * A fresh checkpoint (TIDE_TEST_SHAPE, default tiny) and random prompts: a
 * straight run decodes a random continuation one token per step; the
 * speculative run feeds chunks of 2..block+1 tokens at every position
 * (a true prefix of random length, then wrong tokens), rolls back to the
 * true prefix and goes on. Every true row's logits must equal the straight
 * run's bit for bit, and `published` after every rollback too. Without
 * decode rows (TIDE_SPEC_ROWS_PLAIN=1: what the forward pass did before)
 * the same chunks differ from decoding: the quirk's published keys are the
 * chunk's, and the reference layout keeps the chunk's trailing empty top-k
 * entries. Also: a chunk longer than tide_fwd_decode_rows_max is refused
 * with a message and changes nothing. And the engine's batched draft:
 * tide_dspark_draft_many over several sequences equals tide_dspark_draft
 * of each, bit for bit (ids, logits, confidences). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "specrows", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

#define MAXT 96

static tide_fwd_ctx *ctx(const tide_model *m) {
    tide_fwd_opts o = tide_fwd_default_opts(); /* the reference's layout and quirk */
    tide_status st = {0};
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st) != 0) fail_msg("%s", st.msg);
    return fx;
}

static void feed(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *t, int64_t n, float *lg) {
    tide_step_seq s = {c, t, n, lg ? TIDE_LOGITS_ALL : TIDE_LOGITS_NONE};
    tide_step_out out = {lg, NULL};
    tide_status st = {0};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
}

static int32_t rand_tok(tu_rng *r, const tide_model *m) {
    int32_t t;
    do t = (int32_t)(tu_next(r) % (uint64_t)m->cfg.text.vocab_size);
    while (t == m->cfg.image_token_id);
    return t;
}

/* One prompt: returns the rows compared and counts those that differ. */
static int64_t one(const fixture *f, tide_fwd_ctx *fx, tu_rng *r, int plain, int64_t *differ) {
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size, win = m->cfg.text.sliding_window;
    int block = (int)m->cfg.text.dspark_block_size;
    if (block < 2) block = 2;
    if (block > win - 1) block = (int)win - 1;
    int64_t P = 1 + (int64_t)(tu_next(r) % 14), T = 24 + (int64_t)(tu_next(r) % 16);
    int32_t tok[MAXT];
    for (int64_t i = 0; i < P + T; i++) tok[i] = rand_tok(r, m);
    float *ref = malloc((size_t)(P + T) * (size_t)V * sizeof(float));
    float *lg = malloc((size_t)(block + 1) * (size_t)V * sizeof(float));
    int pub[MAXT];
    assert_non_null(ref);
    assert_non_null(lg);
    tide_status st = {0};

    /* the straight run: prefill, then one token per step */
    tide_seq_cache a, b;
    if (tide_fwd_seq_init(fx, &a, &st) != 0) fail_msg("%s", st.msg);
    feed(fx, &a, tok, P, NULL);
    for (int64_t t = P; t < P + T; t++) {
        feed(fx, &a, tok + t, 1, ref + t * V);
        pub[t] = a.published;
    }

    /* the speculative run */
    if (tide_fwd_seq_init(fx, &b, &st) != 0) fail_msg("%s", st.msg);
    feed(fx, &b, tok, P, NULL);
    tide_seq_ckpt ck;
    memset(&ck, 0, sizeof ck);
    int64_t rows = 0;
    int32_t chunk[32];
    while (b.pos < P + T) {
        int64_t p = b.pos, n = 2 + (int64_t)(tu_next(r) % (uint64_t)block); /* 2 .. block + 1 */
        if (p + n > P + T) n = P + T - p;
        if (!plain) {
            int64_t mx = tide_fwd_decode_rows_max(fx, &b, n);
            assert_true(mx >= 1 && mx <= n);
            if (mx < n) { /* longer is refused, and changes nothing */
                if (tide_seq_checkpoint(&b, &ck, (int)n, &st) != 0) fail_msg("%s", st.msg);
                ck.decode_rows = 1;
                tide_step_seq s = {&b, tok + p, n, TIDE_LOGITS_ALL};
                tide_step_out out = {lg, NULL};
                assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
                assert_non_null(strstr(st.msg, "decode rows"));
                assert_int_equal(b.pos, p);
                n = mx;
            }
        }
        /* a true prefix of 1..n tokens, then wrong ones */
        int64_t good = 1 + (int64_t)(tu_next(r) % (uint64_t)n);
        for (int64_t j = 0; j < n; j++) chunk[j] = j < good ? tok[p + j] : rand_tok(r, m);
        if (tide_seq_checkpoint(&b, &ck, (int)n, &st) != 0) fail_msg("%s", st.msg);
        ck.decode_rows = !plain;
        feed(fx, &b, chunk, n, lg);
        for (int64_t j = 0; j < good; j++, rows++)
            if (memcmp(lg + j * V, ref + (p + j) * V, (size_t)V * sizeof(float)) != 0) {
                if (!plain)
                    fail_msg("seed %llu: prompt %lld, chunk of %lld at %lld: row %lld differs from decoding",
                             (unsigned long long)f->seed, (long long)P, (long long)n, (long long)p, (long long)j);
                (*differ)++;
            }
        if (tide_seq_rollback(&b, &ck, good, &st) != 0) fail_msg("%s", st.msg);
        assert_int_equal(b.pos, p + good);
        if (!plain) assert_int_equal(b.published, pub[p + good - 1]);
    }
    tide_seq_ckpt_free(&ck);
    tide_fwd_seq_free(fx, &a);
    tide_fwd_seq_free(fx, &b);
    free(ref);
    free(lg);
    return rows;
}

static void run(void **state, int plain) {
    fixture *f = *state;
    tide_fwd_ctx *fx = ctx(f->m);
    tu_rng r = {f->seed * 31 + 7};
    int64_t rows = 0, differ = 0;
    for (int i = 0; i < 3; i++) rows += one(f, fx, &r, plain, &differ);
    printf("seed %llu: %lld verify rows%s, %lld differ from decoding\n", (unsigned long long)f->seed,
           (long long)rows, plain ? " without decode rows" : "", (long long)differ);
    assert_true(rows > 40);
    if (plain) assert_true(differ > 0); /* the knob shows what the test catches */
    tide_fwd_ctx_free(fx);
}

static void test_decode_rows(void **state) {
    const char *plain = getenv("TIDE_SPEC_ROWS_PLAIN");
    run(state, plain && *plain == '1');
}

/* The rule's own cases: without the quirk every chunk may be any length;
 * with it, a one-row chunk always may. */
static void test_rows_max(void **state) {
    fixture *f = *state;
    tide_fwd_opts o = tide_fwd_default_opts();
    o.index_key_quirk = 0;
    tide_status st = {0};
    tide_fwd_ctx *fx0, *fx1 = ctx(f->m);
    if (tide_fwd_ctx_create(f->m, tide_cpu_ops(), 1, &o, &fx0, &st) != 0) fail_msg("%s", st.msg);
    tide_seq_cache c;
    if (tide_fwd_seq_init(fx1, &c, &st) != 0) fail_msg("%s", st.msg);
    tu_rng r = {f->seed};
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = rand_tok(&r, f->m);
    feed(fx1, &c, t, 2, NULL);
    assert_int_equal(tide_fwd_decode_rows_max(fx0, &c, 9), 9);
    assert_int_equal(tide_fwd_decode_rows_max(fx1, &c, 1), 1);
    int64_t early = tide_fwd_decode_rows_max(fx1, &c, 9);
    feed(fx1, &c, t + 2, 30, NULL);
    int64_t late = tide_fwd_decode_rows_max(fx1, &c, 9);
    printf("decode rows at position 2: %lld, at 32: %lld (of 9)\n", (long long)early, (long long)late);
    assert_true(early >= 1 && early <= late);
    tide_fwd_seq_free(fx1, &c);
    tide_fwd_ctx_free(fx0);
    tide_fwd_ctx_free(fx1);
}

/* Drafting several sequences at once = one at a time. */
static void test_draft_many(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    tide_fwd_ctx *fx = ctx(m);
    tide_status st = {0};
    enum { N = 3 };
    int64_t V = m->cfg.text.vocab_size, B = m->cfg.text.dspark_block_size;
    int64_t W = m->cfg.text.n_dspark_target_layer_ids * m->cfg.text.hidden_size;
    tu_rng r = {f->seed * 5 + 3};
    tide_seq_cache c[N];
    float *hid = malloc((size_t)(N * 20 * W) * sizeof(float));
    int32_t tok[N][20], next[N];
    assert_non_null(hid);
    for (int i = 0; i < N; i++) {
        int64_t n = 1 + (int64_t)(tu_next(&r) % 19); /* sp = n - 1, position 0 included */
        for (int64_t t = 0; t < n; t++) tok[i][t] = rand_tok(&r, m);
        next[i] = rand_tok(&r, m);
        if (tide_fwd_seq_init(fx, &c[i], &st) != 0) fail_msg("%s", st.msg);
        tide_step_seq s = {&c[i], tok[i], n, TIDE_LOGITS_NONE};
        tide_step_out out = {NULL, hid + (int64_t)i * 20 * W};
        if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
        if (n > 1 && tide_dspark_seed(fx, &c[i], hid + (int64_t)i * 20 * W, n - 1, 0, &st) != 0) fail_msg("%s", st.msg);
    }
    int32_t *ids[2];
    float *lg[2], *cf[2];
    for (int k = 0; k < 2; k++) {
        ids[k] = malloc((size_t)(N * (B + 1)) * sizeof(int32_t));
        lg[k] = malloc((size_t)(N * B * V) * sizeof(float));
        cf[k] = malloc((size_t)(N * B) * sizeof(float));
        assert_true(ids[k] && lg[k] && cf[k]);
    }
    tide_dspark_job jobs[N];
    for (int i = 0; i < N; i++) {
        int64_t sp = c[i].pos - 1;
        for (int k = 0; k < 2; k++) {
            tide_dspark_out o = {ids[k] + i * (B + 1), lg[k] + i * B * V, cf[k] + i * B};
            if (k == 0) {
                if (tide_dspark_draft(fx, &c[i], hid + ((int64_t)i * 20 + sp) * W, sp, next[i], NULL, &o, &st) != 0)
                    fail_msg("%s", st.msg);
            } else {
                jobs[i] = (tide_dspark_job){&c[i], hid + ((int64_t)i * 20 + sp) * W, sp, next[i], NULL, o};
            }
        }
    }
    if (tide_dspark_draft_many(fx, jobs, N, &st) != 0) fail_msg("%s", st.msg);
    assert_memory_equal(ids[0], ids[1], (size_t)(N * (B + 1)) * sizeof(int32_t));
    assert_memory_equal(lg[0], lg[1], (size_t)(N * B * V) * sizeof(float));
    assert_memory_equal(cf[0], cf[1], (size_t)(N * B) * sizeof(float));
    /* a sequence twice is refused */
    jobs[1].cache = jobs[0].cache;
    assert_int_equal(tide_dspark_draft_many(fx, jobs, 2, &st), -1);
    assert_non_null(strstr(st.msg, "twice"));
    for (int k = 0; k < 2; k++) {
        free(ids[k]);
        free(lg[k]);
        free(cf[k]);
    }
    for (int i = 0; i < N; i++) tide_fwd_seq_free(fx, &c[i]);
    free(hid);
    tide_fwd_ctx_free(fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_rows),
        cmocka_unit_test(test_rows_max),
        cmocka_unit_test(test_draft_many),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
