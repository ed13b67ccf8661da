/* Prefix-cache restore with SWA bounded replay (tide_fwd_seq_restore) and
 * the decoder variant (cache->tail_lo), on a fresh tiny checkpoint and fresh
 * random prompts:
 *   - start = 0 (no bound): logits bit-identical to a full prefill, in the
 *     canonical mode and in the reference mode, and the shared blocks'
 *     bytes unchanged by the replay;
 *   - bounded replay: finite, deterministic, different from the full
 *     prefill for a short replay, bit-identical once the replay covers the
 *     receptive field through the windows (layers x (window - 1) tokens);
 *   - the decoder variant: the tail covering the prompt is exact, a tail of
 *     upper-layers x (window - 1) + 1 tokens too, a short tail is finite;
 *     logits of skipped rows are refused;
 *   - DSpark after a restore or with the decoder variant: the stage rings
 *     seeded from the rows that ran; start = 0 drafts equal the full run's,
 *     drafts over empty stage slots stay finite;
 *   - bad arguments fail with a message and change nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dspark.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "replay", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

enum { KV_BLOCK = 2 }; /* small blocks: frozen prefixes of 4k tokens are whole blocks */

static void prompt(uint64_t seed, int32_t *p, int n, const tide_model *m) {
    tu_rng r = {seed};
    for (int i = 0; i < n; i++) {
        do p[i] = (int32_t)(tu_next(&r) % (uint64_t)m->cfg.text.vocab_size);
        while (p[i] == m->cfg.image_token_id);
    }
}

static tide_fwd_ctx *ctx(const tide_model *m, int canonical) {
    tide_fwd_opts o = tide_fwd_default_opts();
    o.kv_block = KV_BLOCK;
    if (canonical) o.ref_layout = o.index_key_quirk = 0;
    tide_status st = {0};
    tide_fwd_ctx *fx;
    if (tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st) != 0) fail_msg("%s", st.msg);
    return fx;
}

/* Feeds t[0..n) as one chunk; returns all n logit rows (malloc'd). */
static float *feed(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *t, int64_t n) {
    int64_t V = tide_fwd_model(fx)->cfg.text.vocab_size;
    float *lg = malloc((size_t)(n * V) * sizeof(float));
    tide_step_seq s = {c, t, n, TIDE_LOGITS_ALL};
    tide_step_out out = {lg, NULL};
    tide_status st = {0};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
    return lg;
}

/* A sequence restored from ref's first `frozen` tokens: ref's blocks of the
 * frozen prefix shared in (as the engine does on a prefix-cache hit). */
static void restore_from(tide_fwd_ctx *fx, tide_seq_cache *c, const tide_seq_cache *ref, const int32_t *p,
                         int64_t frozen, int64_t start) {
    tide_status st = {0};
    assert_int_equal(tide_fwd_seq_init(fx, c, &st), 0);
    for (int k = 0; k < c->n_src; k++) {
        int64_t nb = frozen / c->src[k].ratio / KV_BLOCK;
        if (tide_kv_share(tide_fwd_kv(fx), &c->tables[k], ref->tables[k].blocks, nb, &st) != 0)
            fail_msg("%s", st.msg);
    }
    if (tide_fwd_seq_restore(fx, c, p, frozen, start, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(c->pos, start);
}

/* FNV-1a over the latents and index keys of ref's frozen positions. */
static uint64_t checksum(tide_fwd_ctx *fx, const tide_seq_cache *c, int64_t frozen) {
    const tide_kv_pool *kv = tide_fwd_kv(fx);
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < c->n_src; k++)
        for (int64_t j = 0; j < frozen / c->src[k].ratio; j++) {
            const unsigned char *a = tide_kv_latent(kv, &c->tables[k], j); /* packed latent and key */
            for (size_t i = 0; i < tide_kv_pos_bytes(kv); i++) h = (h ^ a[i]) * 1099511628211ull;
        }
    return h;
}

static double max_err(const float *a, const float *b, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = fabs((double)a[i] - (double)b[i]);
        e = d > e ? d : e;
    }
    return e;
}

/* Runs a full prefill of p[0..n) on ref (logits kept in *full), then a
 * restore at frozen / start fed p[start..n) and `dec` teacher-forced decode
 * tokens on both; returns the restored run's logits of rows frozen..n-1 and
 * of the decode steps, and those of the full run in *want. */
static float *restored_run(tide_fwd_ctx *fx, const int32_t *p, int n, int64_t frozen, int64_t start, int dec,
                           float **want) {
    const tide_model *m = tide_fwd_model(fx);
    int64_t V = m->cfg.text.vocab_size, nr = n - frozen + dec;
    tide_seq_cache ref, c;
    tide_status st = {0};
    assert_int_equal(tide_fwd_seq_init(fx, &ref, &st), 0);
    float *full = feed(fx, &ref, p, n);
    uint64_t before = checksum(fx, &ref, frozen);
    restore_from(fx, &c, &ref, p, frozen, start);
    float *got = feed(fx, &c, p + start, n - start);
    assert_int_equal(checksum(fx, &ref, frozen), before); /* the shared blocks were only read */
    float *g = malloc((size_t)(nr * V) * sizeof(float)), *w = malloc((size_t)(nr * V) * sizeof(float));
    memcpy(g, got + (frozen - start) * V, (size_t)((n - frozen) * V) * sizeof(float));
    memcpy(w, full + frozen * V, (size_t)((n - frozen) * V) * sizeof(float));
    int32_t tok = (int32_t)(p[n - 1] % 1000 + 3);
    for (int i = 0; i < dec; i++) {
        float *a = feed(fx, &ref, &tok, 1), *b = feed(fx, &c, &tok, 1);
        memcpy(w + (n - frozen + i) * V, a, (size_t)V * sizeof(float));
        memcpy(g + (n - frozen + i) * V, b, (size_t)V * sizeof(float));
        int64_t best = 0;
        for (int64_t v = 0; v < V; v++) best = a[v] > a[best] ? v : best;
        tok = (int32_t)best;
        free(a);
        free(b);
    }
    free(full);
    free(got);
    tide_fwd_seq_free(fx, &c);
    tide_fwd_seq_free(fx, &ref);
    *want = w;
    return g;
}

static void test_unbounded_replay_exact(void **state) {
    fixture *f = *state;
    int64_t V = f->m->cfg.text.vocab_size;
    enum { N = 30, F = 20, DEC = 3 };
    int32_t p[N];
    prompt(f->seed, p, N, f->m);
    for (int canonical = 1; canonical >= 0; canonical--) {
        tide_fwd_ctx *fx = ctx(f->m, canonical);
        float *want, *got = restored_run(fx, p, N, F, 0, DEC, &want);
        assert_memory_equal(got, want, (size_t)((N - F + DEC) * V) * sizeof(float));
        free(got);
        free(want);
        tide_fwd_ctx_free(fx);
    }
}

static void test_bounded_replay(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size, win = m->cfg.text.sliding_window;
    enum { DEC = 2 };
    int64_t field = m->n_backbone * (win - 1); /* 70 on tiny */
    int F = (int)((field + win + 3) / 4 * 4), N = F + 20; /* 80, 100 on tiny */
    int32_t *p = malloc((size_t)N * sizeof(int32_t));
    prompt(f->seed + 1, p, N, m);
    tide_fwd_ctx *fx = ctx(m, 1);
    size_t sz = (size_t)((N - F + DEC) * V) * sizeof(float);

    /* a short replay: finite, deterministic, not exact */
    float *want, *want2, *a = restored_run(fx, p, N, F, F - win, DEC, &want);
    float *b = restored_run(fx, p, N, F, F - win, DEC, &want2);
    assert_memory_equal(a, b, sz);
    double e = max_err(a, want, (int64_t)(sz / sizeof(float)));
    assert_true(isfinite(e));
    assert_true(e > 0);
    free(a);
    free(b);
    free(want2);
    free(want);

    /* no replay at all (start = frozen): still finite */
    a = restored_run(fx, p, N, F, F, DEC, &want);
    assert_true(isfinite(max_err(a, want, (int64_t)(sz / sizeof(float)))));
    free(a);
    free(want);

    /* a replay covering the receptive field: exact */
    a = restored_run(fx, p, N, F, F - field, DEC, &want);
    assert_memory_equal(a, want, sz);
    free(a);
    free(want);
    free(p);
    tide_fwd_ctx_free(fx);
}

/* Prefill of p[0..n) with tail_lo = n - tail, then dec decode tokens;
 * logits of the last prompt row and of the decode steps. */
static float *decoder_run(tide_fwd_ctx *fx, const int32_t *p, int n, int tail, const int32_t *dec, int n_dec) {
    int64_t V = tide_fwd_model(fx)->cfg.text.vocab_size;
    tide_seq_cache c;
    tide_status st = {0};
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    c.tail_lo = n - tail;
    float *lg = malloc((size_t)((1 + n_dec) * V) * sizeof(float));
    tide_step_seq s = {&c, p, n, TIDE_LOGITS_LAST};
    tide_step_out out = {lg, NULL};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
    for (int i = 0; i < n_dec; i++) {
        tide_step_seq d = {&c, &dec[i], 1, TIDE_LOGITS_LAST};
        tide_step_out o = {lg + (1 + i) * V, NULL};
        if (tide_forward(fx, &d, 1, &o, &st) != 0) fail_msg("%s", st.msg);
    }
    tide_fwd_seq_free(fx, &c);
    return lg;
}

static void test_decoder_variant(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size, win = m->cfg.text.sliding_window;
    enum { DEC = 3 };
    int n_upper = m->n_backbone - 1 - (m->n_kv_src > 0 ? m->kv_src_layer[m->n_kv_src - 1] : -1);
    int exact_tail = (int)(n_upper * (win - 1) + 1); /* 22 on tiny */
    int N = exact_tail + 18;
    int32_t *p = malloc((size_t)(N + DEC) * sizeof(int32_t));
    prompt(f->seed + 2, p, N + DEC, m);
    for (int canonical = 1; canonical >= 0; canonical--) {
        tide_fwd_ctx *fx = ctx(m, canonical);
        size_t sz = (size_t)((1 + DEC) * V) * sizeof(float);
        float *full = decoder_run(fx, p, N, N, p + N, DEC);
        float *t1 = decoder_run(fx, p, N, exact_tail, p + N, DEC);
        float *t2 = decoder_run(fx, p, N, 2, p + N, DEC);
        float *t3 = decoder_run(fx, p, N, 2, p + N, DEC);
        if (canonical) assert_memory_equal(t1, full, sz);
        assert_memory_equal(t2, t3, sz);
        assert_true(isfinite(max_err(t2, full, (int64_t)(sz / sizeof(float)))));
        free(full);
        free(t1);
        free(t2);
        free(t3);
        tide_fwd_ctx_free(fx);
    }
    free(p);
}

/* Chunked prefill with the decoder variant: only the tail rows run the
 * upper layers, whichever chunk they fall in; same logits as one chunk. */
static void test_decoder_chunked(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size;
    enum { N = 33, TAIL = 10 };
    int32_t p[N];
    prompt(f->seed + 3, p, N, m);
    tide_fwd_ctx *fx = ctx(m, 1);
    float *one = decoder_run(fx, p, N, TAIL, NULL, 0);
    tide_seq_cache c;
    tide_status st = {0};
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);
    c.tail_lo = N - TAIL;
    float *lg = malloc((size_t)V * sizeof(float));
    int sizes[] = {7, 12, 9, 5};
    for (int off = 0, k = 0; off < N; off += sizes[k++]) {
        tide_step_seq s = {&c, p + off, sizes[k], off + sizes[k] == N ? TIDE_LOGITS_LAST : TIDE_LOGITS_NONE};
        tide_step_out out = {lg, NULL};
        if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
    }
    assert_memory_equal(lg, one, (size_t)V * sizeof(float));
    free(lg);
    free(one);
    tide_fwd_seq_free(fx, &c);
    tide_fwd_ctx_free(fx);
}

/* Feeds p[c->pos, n) (dspark_in recorded), seeds the stage rings from rows
 * >= seed_from, decodes one greedy token and drafts a block after it. */
static void prefill_and_draft(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *p, int64_t n, int64_t seed_from,
                              tide_dspark_out *d) {
    const tide_text_config *tc = &tide_fwd_model(fx)->cfg.text;
    int64_t V = tc->vocab_size, T = tc->n_dspark_target_layer_ids * tc->hidden_size, pos0 = c->pos;
    tide_status st = {0};
    float *lg = malloc((size_t)V * sizeof(float)), *hid = malloc((size_t)((n - pos0) * T) * sizeof(float));
    tide_step_seq s = {c, p + pos0, n - pos0, TIDE_LOGITS_LAST};
    tide_step_out out = {lg, hid};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
    if (tide_dspark_seed(fx, c, hid + (seed_from - pos0) * T, n - seed_from, seed_from, &st) != 0)
        fail_msg("%s", st.msg);
    int64_t best = 0;
    for (int64_t v = 0; v < V; v++) best = lg[v] > lg[best] ? v : best;
    int32_t tok = (int32_t)best;
    s = (tide_step_seq){c, &tok, 1, TIDE_LOGITS_LAST};
    if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
    best = 0;
    for (int64_t v = 0; v < V; v++) best = lg[v] > lg[best] ? v : best;
    if (tide_dspark_draft(fx, c, hid, n, (int32_t)best, NULL, d, &st) != 0) fail_msg("%s", st.msg);
    free(lg);
    free(hid);
}

static void test_dspark_after_restore(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    const tide_text_config *tc = &m->cfg.text;
    TU_NEED_DEP(m->has_dspark, "DSpark stages in the checkpoint", "a $TIDE_TEST_SHAPE without them");
    int64_t V = tc->vocab_size, B = tc->dspark_block_size;
    enum { N = 26, F = 20 };
    int32_t p[N];
    prompt(f->seed + 5, p, N, m);
    tide_fwd_ctx *fx = ctx(m, 1);
    tide_status st = {0};
    int32_t ids[2][16];
    float conf[2][16], *dl[2] = {malloc((size_t)(B * V) * sizeof(float)), malloc((size_t)(B * V) * sizeof(float))};
    tide_dspark_out d0 = {ids[0], dl[0], conf[0]}, d1 = {ids[1], dl[1], conf[1]};
    tide_seq_cache ref, c;
    assert_int_equal(tide_fwd_seq_init(fx, &ref, &st), 0);
    prefill_and_draft(fx, &ref, p, N, 0, &d0);

    restore_from(fx, &c, &ref, p, F, 0); /* everything replayed: exact */
    prefill_and_draft(fx, &c, p, N, 0, &d1);
    assert_memory_equal(ids[0], ids[1], (size_t)(B + 1) * sizeof(int32_t));
    assert_memory_equal(dl[0], dl[1], (size_t)(B * V) * sizeof(float));
    assert_memory_equal(conf[0], conf[1], (size_t)B * sizeof(float));
    tide_fwd_seq_free(fx, &c);

    restore_from(fx, &c, &ref, p, F, F); /* no replay: the stage rings start at F */
    prefill_and_draft(fx, &c, p, N, F, &d1);
    assert_true(isfinite(max_err(dl[0], dl[1], B * V)));
    tide_fwd_seq_free(fx, &c);

    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0); /* the decoder variant, a 3-token tail */
    c.tail_lo = N - 3;
    prefill_and_draft(fx, &c, p, N, N - 3, &d1);
    assert_true(isfinite(max_err(dl[0], dl[1], B * V)));
    tide_fwd_seq_free(fx, &c);

    tide_fwd_seq_free(fx, &ref);
    free(dl[0]);
    free(dl[1]);
    tide_fwd_ctx_free(fx);
}

static void test_bad_arguments(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    enum { N = 16 };
    int32_t p[N];
    prompt(f->seed + 4, p, N, m);
    tide_fwd_ctx *fx = ctx(m, 1);
    tide_status st = {0};
    tide_seq_cache ref, c;
    assert_int_equal(tide_fwd_seq_init(fx, &ref, &st), 0);
    free(feed(fx, &ref, p, N));
    assert_int_equal(tide_fwd_seq_init(fx, &c, &st), 0);

    /* tables without the frozen blocks */
    assert_int_equal(tide_fwd_seq_restore(fx, &c, p, 8, 4, &st), -1);
    assert_non_null(strstr(st.msg, "table holds"));
    for (int k = 0; k < c.n_src; k++)
        assert_int_equal(tide_kv_share(tide_fwd_kv(fx), &c.tables[k], ref.tables[k].blocks,
                                       8 / c.src[k].ratio / KV_BLOCK, &st), 0);
    assert_int_equal(tide_fwd_seq_restore(fx, &c, p, 7, 4, &st), -1); /* ratio 2 */
    assert_non_null(strstr(st.msg, "multiple"));
    assert_int_equal(tide_fwd_seq_restore(fx, &c, p, 8, 9, &st), -1);
    assert_non_null(strstr(st.msg, "start"));
    assert_int_equal(tide_fwd_seq_restore(fx, &c, p, 8, -1, &st), -1);
    assert_int_equal(tide_fwd_seq_restore(fx, &c, NULL, 8, 4, &st), -1);
    int32_t bad[4] = {1, 2, -5, 3};
    assert_int_equal(tide_fwd_seq_restore(fx, &c, bad, 8, 4, &st), -1);
    assert_non_null(strstr(st.msg, "vocabulary"));
    assert_int_equal(tide_fwd_seq_restore(fx, &ref, p, 8, 4, &st), -1); /* not fresh */
    assert_non_null(strstr(st.msg, "fresh"));
    assert_int_equal(c.pos, 0);
    assert_int_equal(c.frozen_tokens, 0);
    assert_int_equal(c.ring_lo, 0);
    assert_int_equal(tide_fwd_seq_restore(fx, &c, p, 8, 4, &st), 0);

    /* the decoder variant: logits of rows it skipped are refused */
    c.tail_lo = 6;
    tide_step_seq s = {&c, p + 4, 4, TIDE_LOGITS_ALL};
    float *lg = malloc((size_t)(4 * m->cfg.text.vocab_size) * sizeof(float));
    tide_step_out out = {lg, NULL};
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
    assert_non_null(strstr(st.msg, "tail_lo"));
    assert_int_equal(c.pos, 4);
    s.logits = TIDE_LOGITS_LAST;
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), 0);
    assert_int_equal(c.pos, 8);
    free(lg);
    tide_fwd_seq_free(fx, &c);
    tide_fwd_seq_free(fx, &ref);
    tide_fwd_ctx_free(fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unbounded_replay_exact),
        cmocka_unit_test(test_bounded_replay),
        cmocka_unit_test(test_decoder_variant),
        cmocka_unit_test(test_decoder_chunked),
        cmocka_unit_test(test_dspark_after_restore),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
