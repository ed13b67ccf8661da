/* Equivalences of the forward pass that need no oracle, bit for bit:
 *   - with the chunking-independent attention layout and the intended index
 *     keys, one-shot prefill == chunked prefill == prefill + decode steps;
 *   - in every mode, a ragged batch (several sequences, prefill chunks and
 *     decode tokens mixed) == each sequence run alone;
 *   - results do not depend on the thread count;
 *   - bad input (ids out of range, the image token, a sequence listed twice)
 *     fails with a message and leaves the state unchanged;
 *   - `tide run` prints the greedy continuation and rejects bad ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

typedef tn_model_fixture fixture;

static int setup(void **state) { return tn_model_setup(state, "fwdeq", 0, 0); }
static int teardown(void **state) { return tn_model_teardown(state); }

static void prompt(uint64_t seed, int32_t *p, int n, const tide_model *m) {
    tu_rng r = {seed};
    for (int i = 0; i < n; i++) {
        do p[i] = (int32_t)(tu_next(&r) % (uint64_t)m->cfg.text.vocab_size);
        while (p[i] == m->cfg.image_token_id);
    }
}

/* Logits of every position of p[0..n) processed in steps of the given sizes
 * (sizes cycle; 1 = decode). */
static float *run_chunks(const tide_model *m, tide_fwd_opts o, int threads, const int32_t *p, int n,
                         const int *sizes, int n_sizes) {
    int64_t V = m->cfg.text.vocab_size;
    tide_status st = {0};
    tide_fwd_ctx *fx;
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), threads, &o, &fx, &st), 0);
    tide_seq_cache sc;
    assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
    float *lg = malloc((size_t)(n * V) * sizeof(float));
    for (int off = 0, k = 0; off < n; k++) {
        int c = sizes[k % n_sizes];
        if (c > n - off) c = n - off;
        tide_step_seq s = {&sc, p + off, c, TIDE_LOGITS_ALL};
        tide_step_out out = {lg + (int64_t)off * V, NULL};
        if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("%s", st.msg);
        off += c;
    }
    assert_int_equal(sc.pos, n);
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    return lg;
}

static void test_chunking_invariance(void **state) {
    fixture *f = *state;
    int64_t V = f->m->cfg.text.vocab_size;
    int32_t p[40];
    prompt(f->seed, p, 40, f->m);
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = 0;
    o.index_key_quirk = 0;
    int one[] = {40}, chunks[] = {7, 3, 1, 12, 5}, dec[] = {17, 1};
    float *a = run_chunks(f->m, o, 2, p, 40, one, 1);
    float *b = run_chunks(f->m, o, 2, p, 40, chunks, 5);
    float *c = run_chunks(f->m, o, 2, p, 40, dec, 2);
    assert_memory_equal(a, b, (size_t)(40 * V) * sizeof(float));
    assert_memory_equal(a, c, (size_t)(40 * V) * sizeof(float));
    free(a);
    free(b);
    free(c);
}

static void test_threads_invariance(void **state) {
    fixture *f = *state;
    int64_t V = f->m->cfg.text.vocab_size;
    int32_t p[24];
    prompt(f->seed + 1, p, 24, f->m);
    tide_fwd_opts o = tide_fwd_default_opts();
    int sizes[] = {13, 1};
    float *a = run_chunks(f->m, o, 1, p, 24, sizes, 2);
    float *b = run_chunks(f->m, o, 3, p, 24, sizes, 2);
    assert_memory_equal(a, b, (size_t)(24 * V) * sizeof(float));
    free(a);
    free(b);
}

/* Three sequences: A prefilled then decoding, B a long prefill in chunks, C
 * short; every step mixes them. Compared with each run alone. */
static void test_batch_invariance(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    int64_t V = m->cfg.text.vocab_size;
    enum { NA = 20, NB = 30, NC = 6 };
    int32_t pa[NA], pb[NB], pc[NC];
    prompt(f->seed + 2, pa, NA, m);
    prompt(f->seed + 3, pb, NB, m);
    prompt(f->seed + 4, pc, NC, m);
    tide_fwd_opts o = tide_fwd_default_opts();
    int sa[] = {12, 1}, sb[] = {9, 9, 9, 3}, sc_[] = {1};
    float *ra = run_chunks(m, o, 2, pa, NA, sa, 2);
    float *rb = run_chunks(m, o, 2, pb, NB, sb, 4);
    float *rc = run_chunks(m, o, 2, pc, NC, sc_, 1);

    tide_status st = {0};
    tide_fwd_ctx *fx;
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
    tide_seq_cache ca, cb, cc;
    assert_int_equal(tide_fwd_seq_init(fx, &ca, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &cb, &st), 0);
    assert_int_equal(tide_fwd_seq_init(fx, &cc, &st), 0);
    float *lg = malloc((size_t)(40 * V) * sizeof(float));
    int oa = 0, ob = 0, oc = 0, ka = 0, kb = 0;
    while (oa < NA || ob < NB || oc < NC) {
        tide_step_seq s[3];
        int n = 0, na = 0, nb = 0, nc = 0;
        if (oc < NC) { /* C first: order inside a step must not matter */
            nc = 1;
            s[n++] = (tide_step_seq){&cc, pc + oc, nc, TIDE_LOGITS_ALL};
        }
        if (oa < NA) {
            na = sa[ka++ % 2];
            if (na > NA - oa) na = NA - oa;
            s[n++] = (tide_step_seq){&ca, pa + oa, na, TIDE_LOGITS_ALL};
        }
        if (ob < NB) {
            nb = sb[kb++ % 4];
            if (nb > NB - ob) nb = NB - ob;
            s[n++] = (tide_step_seq){&cb, pb + ob, nb, TIDE_LOGITS_ALL};
        }
        assert_int_equal(tide_step_logit_rows(s, n), nc + na + nb);
        tide_step_out out = {lg, NULL};
        if (tide_forward(fx, s, n, &out, &st) != 0) fail_msg("%s", st.msg);
        float *p = lg;
        if (nc) assert_memory_equal(p, rc + (int64_t)oc * V, (size_t)(nc * V) * sizeof(float)), p += nc * V;
        if (na) assert_memory_equal(p, ra + (int64_t)oa * V, (size_t)(na * V) * sizeof(float)), p += na * V;
        if (nb) assert_memory_equal(p, rb + (int64_t)ob * V, (size_t)(nb * V) * sizeof(float));
        oa += na;
        ob += nb;
        oc += nc;
    }
    tide_fwd_seq_free(fx, &ca);
    tide_fwd_seq_free(fx, &cb);
    tide_fwd_seq_free(fx, &cc);
    tide_fwd_ctx_free(fx);
    free(lg);
    free(ra);
    free(rb);
    free(rc);
}

static void test_bad_input(void **state) {
    fixture *f = *state;
    const tide_model *m = f->m;
    tide_status st = {0};
    tide_fwd_ctx *fx;
    tide_fwd_opts o = tide_fwd_default_opts();
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), 1, &o, &fx, &st), 0);
    tide_seq_cache sc;
    assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
    int32_t ok[3] = {0, 5, 9}, big[2] = {0, (int32_t)m->cfg.text.vocab_size}, neg[1] = {-1};
    int32_t img[2] = {0, (int32_t)m->cfg.image_token_id};
    tide_step_out out = {NULL, NULL};
    tide_step_seq s = {&sc, big, 2, TIDE_LOGITS_NONE};
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
    assert_non_null(strstr(st.msg, "outside the vocabulary"));
    s.tokens = neg;
    s.n_tokens = 1;
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
    s.tokens = img;
    s.n_tokens = 2;
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
    assert_non_null(strstr(st.msg, "outside an image span"));
    s.n_tokens = 0;
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), -1);
    assert_int_equal(sc.pos, 0);
    s.tokens = ok;
    s.n_tokens = 3;
    tide_step_seq two[2] = {s, s};
    assert_int_equal(tide_forward(fx, two, 2, &out, &st), -1);
    assert_non_null(strstr(st.msg, "twice"));
    assert_int_equal(sc.pos, 0);
    assert_int_equal(tide_forward(fx, &s, 1, &out, &st), 0);
    assert_int_equal(sc.pos, 3);
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
}

static void test_cli_run(void **state) {
    fixture *f = *state;
    char cmd[2048];
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 0,17,300,4000,12 --max-tokens 5 --ignore-eos 2>/dev/null",
             TIDE_EXE, f->dir);
    assert_int_equal(tu_system(cmd, &out), 0);
    int commas = 0;
    for (char *p = out; *p; p++) commas += *p == ',';
    assert_int_equal(commas, 4);
    /* the same continuation from the library */
    int32_t p[5] = {0, 17, 300, 4000, 12};
    int32_t ids[5];
    {
        int64_t V = f->m->cfg.text.vocab_size;
        tide_status st = {0};
        tide_fwd_ctx *fx;
        tide_fwd_opts o = tide_fwd_default_opts();
        assert_int_equal(tide_fwd_ctx_create(f->m, tide_cpu_ops(), 2, &o, &fx, &st), 0);
        tide_seq_cache sc;
        assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
        float *lg = malloc((size_t)V * sizeof(float));
        tide_step_seq s = {&sc, p, 5, TIDE_LOGITS_LAST};
        tide_step_out o2 = {lg, NULL};
        for (int i = 0; i < 5; i++) {
            assert_int_equal(tide_forward(fx, &s, 1, &o2, &st), 0);
            int64_t b = 0;
            for (int64_t v = 1; v < V; v++)
                if (lg[v] > lg[b]) b = v;
            ids[i] = (int32_t)b;
            s.tokens = &ids[i];
            s.n_tokens = 1;
        }
        free(lg);
        tide_fwd_seq_free(fx, &sc);
        tide_fwd_ctx_free(fx);
    }
    char want[256];
    snprintf(want, sizeof want, "%d,%d,%d,%d,%d", ids[0], ids[1], ids[2], ids[3], ids[4]);
    assert_non_null(strstr(out, want));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 0,%lld 2>&1", TIDE_EXE, f->dir,
             (long long)f->m->cfg.text.vocab_size);
    assert_int_not_equal(tu_system(cmd, &out), 0);
    assert_non_null(strstr(out, "outside the vocabulary"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 0,%lld 2>&1", TIDE_EXE, f->dir,
             (long long)f->m->cfg.image_token_id);
    assert_int_not_equal(tu_system(cmd, &out), 0);
    assert_non_null(strstr(out, "outside an image's span"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 1,x 2>&1", TIDE_EXE, f->dir);
    assert_int_equal(tu_system(cmd, &out), 2);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunking_invariance),
        cmocka_unit_test(test_threads_invariance),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_cli_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
