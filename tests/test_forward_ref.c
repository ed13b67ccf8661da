/* The forward pass against the numpy reference (tools/ref/v41.py) on tiny
 * synthetic checkpoints: fresh seeds for the weights and the prompts,
 * prompts long enough to cross the window, ratio-2 group boundaries,
 * candidate-block boundaries and the engram n-gram edges; every prefill row
 * and every decode row compared, decode fed the reference's greedy ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/model.h"
#include "test_ops_util.h"

/* Logit tolerance (absolute; tiny's logits are O(1..5)). See docs/model.md
 * "Error bound" for why this is the right size. */
#define LOGIT_TOL 0.08

typedef struct {
    int ref_layout, quirk;
} mode;

static int32_t argmax_f(const float *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return (int32_t)b;
}

static int32_t argmax_d(const double *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return (int32_t)b;
}

/* Runs the reference: rows = every prefill row + n_dec decode rows. */
static double *run_ref(const char *dir, const int32_t *p, int np, int n_dec, int chunk, int quirk,
                       int64_t *n_out) {
    char ids[8192] = "", cmd[12288], b[32];
    for (int i = 0; i < np; i++) {
        snprintf(b, sizeof b, "%s%d", i ? "," : "", p[i]);
        strcat(ids, b);
    }
    char chunk_s[32] = "";
    if (chunk) snprintf(chunk_s, sizeof chunk_s, "--chunk %d", chunk);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && %s %s/tools/ref/v41.py --model . --prompt-ids %s --decode %d --all-rows %s %s "
             "--out ref.npy >/dev/null",
             dir, TIDE_PYTHON, TIDE_SOURCE_DIR, ids, n_dec, chunk_s, quirk ? "" : "--intended-index-keys");
    if (tu_system(cmd, NULL) != 0) return NULL;
    return tn_out(dir, "/ref", n_out);
}

/* Our logits for the same rows: prefill (in chunks of `chunk`, 0 = one
 * step) with every row, then decode feeding dec[]. */
static float *run_mine(const tide_model *m, mode md, int threads, const int32_t *p, int np,
                       const int32_t *dec, int n_dec, int chunk) {
    int64_t V = m->cfg.text.vocab_size;
    tide_status st = {0};
    tide_fwd_opts o = tide_fwd_default_opts();
    o.ref_layout = md.ref_layout;
    o.index_key_quirk = md.quirk;
    tide_fwd_ctx *fx;
    assert_int_equal(tide_fwd_ctx_create(m, tide_cpu_ops(), threads, &o, &fx, &st), 0);
    tide_seq_cache sc;
    assert_int_equal(tide_fwd_seq_init(fx, &sc, &st), 0);
    float *lg = malloc((size_t)((np + n_dec) * V) * sizeof(float));
    int step = chunk ? chunk : np;
    for (int off = 0; off < np; off += step) {
        int n = np - off < step ? np - off : step;
        tide_step_seq s = {&sc, p + off, n, TIDE_LOGITS_ALL};
        tide_step_out out = {lg + (int64_t)off * V, NULL};
        if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("forward: %s", st.msg);
    }
    for (int i = 0; i < n_dec; i++) {
        tide_step_seq s = {&sc, &dec[i], 1, TIDE_LOGITS_LAST};
        tide_step_out out = {lg + (int64_t)(np + i) * V, NULL};
        if (tide_forward(fx, &s, 1, &out, &st) != 0) fail_msg("decode: %s", st.msg);
    }
    tide_fwd_seq_free(fx, &sc);
    tide_fwd_ctx_free(fx);
    return lg;
}

static void random_prompt(tu_rng *r, int32_t *p, int n, int64_t V, int64_t image) {
    for (int i = 0; i < n; i++) {
        do p[i] = 3 + (int32_t)(tu_next(r) % (uint64_t)(V - 3));
        while (p[i] == image);
    }
    if (n > 0) p[0] = 0; /* BOS */
    /* a repeated bigram so the engram n-grams hit the same rows twice */
    if (n > 12) {
        p[10] = p[4];
        p[11] = p[5];
    }
}

typedef tn_model_fixture fixture;

/* One checkpoint for the whole program (synth, load). The engine uses its
 * own RoPE frequencies: both sides follow the float64-rounded-once rule. */
static int n_setups; /* each group gets its own checkpoint seed */
static int setup(void **state) { return tn_model_setup(state, "fwdref", 1, (uint64_t)n_setups++); }
static int teardown(void **state) { return tn_model_teardown(state); }

static void compare_case(const fixture *f, uint64_t pseed, int np, int n_dec, int chunk, mode md) {
    if (f->skip) skip();
    const tide_model *m = f->m;
    const char *dir = f->dir;
    int64_t V = m->cfg.text.vocab_size;
    tu_rng r = {pseed * 7919 + 1};
    int32_t p[256], dec[64];
    assert_true(np <= 256 && n_dec <= 64);
    random_prompt(&r, p, np, V, m->cfg.image_token_id);
    int64_t n_ref;
    double *ref = run_ref(dir, p, np, n_dec, chunk, md.quirk, &n_ref);
    assert_non_null(ref);
    assert_int_equal(n_ref, (int64_t)(np + n_dec) * V);
    for (int i = 0; i < n_dec; i++) dec[i] = argmax_d(ref + (int64_t)(np - 1 + i) * V, V);
    if (getenv("TIDE_TEST_VERBOSE")) {
        print_message("prompt:");
        for (int i = 0; i < np; i++) print_message("%s%d", i ? "," : " ", p[i]);
        print_message("\n");
    }
    float *mine = run_mine(m, md, 2, p, np, dec, n_dec, chunk);
    double worst = 0;
    int worst_row = -1, mism = 0;
    for (int row = 0; row < np + n_dec; row++) {
        const double *a = ref + (int64_t)row * V;
        const float *b = mine + (int64_t)row * V;
        double re = 0;
        for (int64_t v = 0; v < V; v++) re = fmax(re, fabs(a[v] - (double)b[v]));
        if (re > worst) worst = re, worst_row = row;
        if (getenv("TIDE_TEST_VERBOSE")) print_message("  row %d err %.6f\n", row, re);
        int32_t ra = argmax_d(a, V), mb = argmax_f(b, V);
        if (ra != mb) {
            /* allowed only when the reference itself has a near-tie */
            double gap = a[ra] - a[mb];
            if (gap > 2 * LOGIT_TOL) mism++;
            print_message("row %d: argmax %d vs ref %d (ref gap %.4f)\n", row, mb, ra, gap);
        }
    }
    print_message("checkpoint seed %llu, prompt seed %llu, %d prompt + %d decode rows, chunk %d, layout %d, "
                  "quirk %d: max |logit err| %.6f (row %d)\n",
                  (unsigned long long)f->seed, (unsigned long long)pseed, np, n_dec, chunk, md.ref_layout,
                  md.quirk, worst, worst_row);
    assert_true(worst < LOGIT_TOL);
    assert_int_equal(mism, 0);
    free(ref);
    free(mine);
}

/* Prefill then 32 greedy decode steps: the continuation must be identical. */
static void test_greedy32(void **state) {
    fixture *f = *state;
    compare_case(f, f->seed + 1, 14, 32, 0, (mode){1, 1});
}

/* The "intended" index keys (quirk off). */
static void test_intended_keys(void **state) {
    fixture *f = *state;
    compare_case(f, f->seed + 2, 17, 5, 0, (mode){1, 0});
}

/* Chunked prefill (chunks of 7 after the first) against the oracle's. */
static void test_chunked(void **state) {
    fixture *f = *state;
    compare_case(f, f->seed + 3, 26, 3, 7, (mode){1, 1});
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy32),
        cmocka_unit_test(test_intended_keys),
        cmocka_unit_test(test_chunked),
    };
    /* Three checkpoints from three seeds: weights, routing and top-k ties
     * differ, so each exercises the comparisons on fresh ground. */
    int failed = 0;
    failed += cmocka_run_group_tests_name("checkpoint seed 1", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("checkpoint seed 2", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("checkpoint seed 3", tests, setup, teardown);
    return failed;
}
