/* Rollback of a sequence for speculative decoding (tide_seq_checkpoint /
 * tide_seq_rollback), canonical mode, fresh tiny checkpoint and prompts:
 * for draft lengths 1..6 at positions that put the draft across ratio-2
 * group boundaries (and across ratio-1 positions, window slots), feed the
 * draft (true tokens where accepted, wrong ones after), roll back to keep
 * 0..k, continue with the true tokens: every logit equals a straight run's,
 * bit for bit, and the cache state (rings, partial groups, n_comp,
 * published, pos) equals the straight run's too (the straight run feeds the
 * accepted tokens as one chunk, the continuation as another). Also: several rounds on one
 * checkpoint, the forward refusing to run past the checkpoint, bad
 * arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "rollback", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

static void prompt(tu_rng *r, int32_t *p, int n, const tide_model *m) {
    for (int i = 0; i < n; i++) {
        do p[i] = (int32_t)(tu_next(r) % (uint64_t)m->cfg.text.vocab_size);
        while (p[i] == m->cfg.image_token_id);
    }
}

/* The chunking-invariant mode: canonical layout, intended index keys. With
 * the reference's index-key quirk, a draft chunk's accepted rows can read
 * keys published because of a rejected row (chunk-level state), so no
 * rollback can be exact there (docs/model.md). */
static tide_fwd_ctx *ctx(const tide_model *m) {
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = 0;
    o.index_key_quirk = 0;
    tide_status st = {0};
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st) != 0) fail_msg("%s", st.msg);
    return fx;
}

static void step(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *t, int64_t n, float *lg) {
    tide_step_seq s = {c, t, n, lg ? TIDE_LOGITS_ALL : TIDE_LOGITS_NONE};
    tide_step_out out = {lg, NULL};
    tide_status st = {0};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
}

/* The state a straight run and a rolled-back run must share. */
static void assert_same_state(const tide_seq_cache *a, const tide_seq_cache *b) {
    assert_int_equal(a->pos, b->pos);
    assert_int_equal(a->published, b->published);
    assert_int_equal(a->dspark_pos, b->dspark_pos);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->pos * sizeof(int32_t));
    for (int k = 0; k < a->n_src; k++) assert_int_equal(a->n_comp[k], b->n_comp[k]);
    /* ring slots of the last window positions (older slots hold positions
     * overwritten in both) */
    for (int l = 0; l < a->n_layers; l++)
        for (int64_t t = a->pos - a->window; t < a->pos; t++)
            if (t >= 0)
                assert_memory_equal(tide_seq_ring(a, l, t), tide_seq_ring(b, l, t), a->ring_bytes);
    /* partial groups: the slots of the current group's fed positions */
    for (int k = 0; k < a->n_src; k++) {
        int64_t r = a->src[k].ratio, g0 = a->pos / r * r;
        for (int64_t t = g0; t < a->pos; t++) {
            size_t off = ((size_t)k * a->max_ratio + (size_t)(t % r)) * a->head_dim;
            assert_memory_equal(a->cmp_kv + off, b->cmp_kv + off, (size_t)a->head_dim * sizeof(float));
            assert_memory_equal(a->cmp_score + off, b->cmp_score + off, (size_t)a->head_dim * sizeof(float));
        }
    }
}

/* One case: prompt of n, a draft of k tokens of which keep are right, then
 * `cont` more true tokens; the straight run feeds the accepted tokens as one
 * chunk and the continuation as another. */
static void one_case(tide_fwd_ctx *fx, const int32_t *truth, int n, int k, int keep, int cont,
                     tu_rng *r, tide_seq_ckpt *ck) {
    const tide_model *m = tide_fwd_model(fx);
    int64_t V = m->cfg.text.vocab_size;
    tide_status st = {0};
    tide_seq_cache a, b;
    assert_int_equal(tide_fwd_seq_init(fx, &a, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &b, &st), 0);
    step(fx, &a, truth, n, NULL);
    step(fx, &b, truth, n, NULL);

    /* the straight run: the accepted tokens, then the continuation */
    float *want = malloc((size_t)((keep + cont) * V + 1) * sizeof(float));
    float *got = malloc((size_t)((keep + cont + k) * V + 1) * sizeof(float));
    if (keep > 0) step(fx, &a, truth + n, keep, want);
    step(fx, &a, truth + n + keep, cont, want + (int64_t)keep * V);

    /* the speculative run: checkpoint, the draft (wrong after keep), roll
     * back, continue with the true tokens from the first rejected one */
    int32_t draft[8];
    for (int i = 0; i < k; i++) {
        draft[i] = truth[n + i];
        if (i >= keep) prompt(r, &draft[i], 1, m);
    }
    assert_int_equal(tide_seq_checkpoint(&b, ck, k, &st), 0);
    step(fx, &b, draft, k, got);
    assert_int_equal(tide_seq_rollback(&b, ck, keep, &st), 0);
    step(fx, &b, truth + n + keep, cont, got + (int64_t)keep * V);
    if (memcmp(got, want, (size_t)((keep + cont) * V) * sizeof(float)) != 0)
        fail_msg("prompt %d, draft %d, keep %d, continuation %d: logits differ", n, k, keep, cont);
    assert_same_state(&a, &b);
    free(want);
    free(got);
    tide_fwd_seq_free(fx, &a);
    tide_fwd_seq_free(fx, &b);
}

static void test_rollback_exact(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    tu_rng r = {f->seed};
    enum { MAXN = 24 };
    int32_t truth[MAXN + 16];
    {
        tide_fwd_ctx *fx = ctx(m);
        tide_seq_ckpt ck = {0}; /* reused across cases */
        for (int i = 0; i < 16; i++) {
            int n = 9 + (int)(tu_next(&r) % (MAXN - 9)); /* odd and even starts: drafts cross groups */
            int k = 1 + (int)(tu_next(&r) % 6);
            int keep = (int)(tu_next(&r) % (uint64_t)(k + 1));
            int cont = 1 + (int)(tu_next(&r) % 4);
            prompt(&r, truth, n + k + cont, m);
            one_case(fx, truth, n, k, keep, cont, &r, &ck);
        }
        tide_seq_ckpt_free(&ck);
        tide_fwd_ctx_free(fx);
    }
}

/* Several speculative rounds on one sequence and one checkpoint, each
 * rejecting part of its draft, against one straight run of the accepted
 * tokens. */
static void test_rollback_rounds(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size;
    tu_rng r = {f->seed + 11};
    enum { N = 12, ROUNDS = 6 };
    int32_t truth[N + ROUNDS * 8];
    prompt(&r, truth, N + ROUNDS * 8, m);
    tide_fwd_ctx *fx = ctx(m);
    tide_status st = {0};
    tide_seq_cache a, b;
    tide_seq_ckpt ck = {0};
    assert_int_equal(tide_fwd_seq_init(fx, &a, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &b, &st), 0);
    step(fx, &a, truth, N, NULL);
    step(fx, &b, truth, N, NULL);
    float *lg = malloc((size_t)(8 * V) * sizeof(float)), *la = malloc((size_t)(8 * V) * sizeof(float));
    for (int i = 0; i < ROUNDS; i++) {
        int k = 2 + i % 5, keep = (i * 3) % (k + 1);
        int64_t pos = b.pos;
        int32_t draft[8];
        memcpy(draft, truth + pos, (size_t)k * sizeof(int32_t));
        for (int j = keep; j < k; j++) prompt(&r, &draft[j], 1, m);
        assert_int_equal(tide_seq_checkpoint(&b, &ck, k, &st), 0);
        step(fx, &b, draft, k, lg);
        assert_int_equal(tide_seq_rollback(&b, &ck, keep, &st), 0);
        /* the corrected token after the accepted ones, as a decoder would */
        step(fx, &b, truth + pos + keep, 1, lg + (int64_t)keep * V);
        step(fx, &a, truth + pos, keep + 1, la);
        assert_memory_equal(lg, la, (size_t)((keep + 1) * V) * sizeof(float));
    }
    assert_same_state(&a, &b);
    free(lg);
    free(la);
    tide_seq_ckpt_free(&ck);
    tide_fwd_seq_free(fx, &a);
    tide_fwd_seq_free(fx, &b);
    tide_fwd_ctx_free(fx);
}

static void test_rollback_bad(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    tu_rng r = {f->seed + 5};
    int32_t t[16];
    prompt(&r, t, 16, m);
    tide_fwd_ctx *fx = ctx(m);
    tide_status st = {0};
    tide_seq_cache c, d;
    tide_seq_ckpt ck = {0}, other = {0};
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &d, &st), 0);
    step(fx, &c, t, 8, NULL);
    assert_int_equal(tide_seq_checkpoint(&c, &ck, 0, &st), -1);
    assert_non_null(strstr(st.msg, "max_ahead"));
    assert_int_equal(tide_seq_checkpoint(&c, &ck, (int)m->cfg.text.sliding_window + 1, &st), -1);
    assert_int_equal(tide_seq_rollback(&c, &ck, 0, &st), -1); /* nothing active */
    assert_non_null(strstr(st.msg, "not active"));
    assert_int_equal(tide_seq_checkpoint(&c, &ck, 3, &st), 0);
    /* the forward pass refuses to go past the checkpoint's reach */
    tide_step_seq s = {&c, t + 8, 4, TIDE_LOGITS_NONE};
    assert_int_equal(tide_forward(fx, &s, 1, NULL, &st), -1);
    assert_non_null(strstr(st.msg, "checkpoint"));
    assert_int_equal(c.pos, 8);
    step(fx, &c, t + 8, 2, NULL);
    assert_int_equal(tide_seq_rollback(&c, &ck, 3, &st), -1); /* only 2 fed */
    assert_non_null(strstr(st.msg, "keep"));
    assert_int_equal(tide_seq_rollback(&c, &ck, -1, &st), -1);
    assert_int_equal(tide_seq_rollback(&d, &ck, 0, &st), -1); /* another sequence */
    assert_int_equal(tide_seq_rollback(&c, &other, 0, &st), -1);
    assert_int_equal(tide_seq_rollback(&c, &ck, 1, &st), 0);
    assert_int_equal(c.pos, 9);
    assert_null(c.ckpt);
    assert_int_equal(tide_seq_rollback(&c, &ck, 0, &st), -1); /* detached */
    step(fx, &c, t + 9, 7, NULL); /* no checkpoint: no limit */
    tide_seq_ckpt_free(&ck);
    tide_fwd_seq_free(fx, &c);
    tide_fwd_seq_free(fx, &d);
    tide_fwd_ctx_free(fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_exact),
        cmocka_unit_test(test_rollback_rounds),
        cmocka_unit_test(test_rollback_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
