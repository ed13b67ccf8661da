/* Speculative decoding in the engine (engine/spec.h, docs/spec.md).
 *
 * The property: speculation changes speed, never the tokens. The same
 * requests run with --spec off, fixed:5 and dspark; greedy and seeded
 * sampling outputs must be identical. On random weights the DSpark head's
 * drafts are almost never accepted, so the runs also take drafts from a
 * hook: the tokens the off run produced, corrupted at a random position
 * (so accepted prefixes of every length and rejections at every position
 * happen), which exercises the rollback of every cache. Plus: a two-sample
 * chi-square test that sampled outputs under speculation (drafts that are
 * only the greedy guess) follow the distribution of plain sampling over
 * disjoint seeds; the budget rule on known inputs; --spec parsing; bad
 * configurations.
 *
 * Every run is in the engine's default mode, the reference's attention
 * layout with its index-key quirk, where a verify chunk is only exact
 * through the forward pass's decode rows (test_spec_rows.c); the
 * chunking-invariant mode once (test_canonical).
 *
 * The model: a fresh synthetic checkpoint (TIDE_TEST_SHAPE, default tiny)
 * or the checkpoint directory in TIDE_SPEC_MODEL (e.g. tide-mini).
 * TIDE_SPEC_FILTER=NAME runs only the tests matching it (cmocka's filter). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/spec.h"
#include "model/model.h"
#include "test_ops_util.h"
#include "tide.h"

typedef tn_model_fixture fixture;

static int setup(void **state) {
    const char *dir = getenv("TIDE_SPEC_MODEL");
    if (!dir || !*dir) return tn_model_setup(state, "spec", 0, 0);
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f;
    f->seed = tu_seed() % 100000 + 1;
    tide_status st = {0};
    if (tide_model_load(dir, &f->m, &st) != 0) {
        fprintf(stderr, "load %s: %s\n", dir, st.msg);
        return -1;
    }
    return 0;
}
static int teardown(void **state) { return tn_model_teardown(state); }

#define NQ 8
#define MAXNEW 10

typedef struct {
    int n;
    int32_t prompt[NQ][16];
    int64_t n_prompt[NQ];
    tide_sampling_params sp[NQ];
    int32_t out[NQ][MAXNEW];
    int64_t n_out[NQ];
    int64_t verified, accepted, preemptions, prefix_hits;
} runset;

/* the hook's oracle: the off run's outputs */
typedef struct {
    const runset *oracle;
    tu_rng r;
    int corrupt; /* 1: a suffix of each draft is wrong, from position calls % span on */
    int64_t calls;
} hook_ctx;

static void hook(void *ctx, void *user, const int32_t *tokens, int64_t n_tokens, int32_t *draft, float *conf, int n) {
    hook_ctx *h = ctx;
    int i = (int)(intptr_t)user;
    const runset *o = h->oracle;
    int64_t done = n_tokens - o->n_prompt[i]; /* outputs so far */
    (void)tokens;
    /* corrupted: the first wrong position cycles 0, 1, .., n-1 over the
     * calls (deterministic), so the first draft made is wrong from its
     * first token on (a rejection in the first verify step: every request
     * decodes at least 5 tokens) and later ones keep right prefixes of
     * every length (acceptances) */
    int good = h->corrupt ? (int)(h->calls % (int64_t)n) : n;
    for (int j = 0; j < n; j++) {
        conf[j] = (float)(tu_next(&h->r) % 9) - 2.0f; /* varied survivals for the budget */
        int64_t at = done + j;
        int32_t t = at < o->n_out[i] ? o->out[i][at] : 0;
        draft[j] = j < good ? t : (t + 1 + (int32_t)(tu_next(&h->r) % 97)) % 1000;
    }
    h->calls++;
}

static int g_canonical; /* 1: the chunking-invariant mode */

static tide_engine_config cfg_for(int mode, int k) {
    tide_engine_config c = tide_engine_config_default(); /* the reference's layout and quirk */
    c.n_threads = 2;
    c.canonical_layout = g_canonical;
    c.index_key_quirk = !g_canonical;
    c.max_seqs = 16;
    c.max_step_tokens = 96;
    c.spec_mode = mode;
    c.spec_k = k;
    /* a fixed cost model for the budget (the profile is tested apart) */
    c.spec_cost[0] = 1e-3;
    c.spec_cost[1] = 1e-4;
    c.spec_cost[2] = 2e-4;
    return c;
}

static void run(const fixture *f, const tide_engine_config *cfg, runset *rs, hook_ctx *h) {
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(cfg, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    if (h) tide_engine_set_draft_hook(e, hook, h);
    tide_request_id ids[NQ];
    for (int i = 0; i < rs->n; i++) {
        tide_request r = tide_request_default();
        r.prompt = rs->prompt[i];
        r.n_prompt = rs->n_prompt[i];
        r.sampling = rs->sp[i];
        r.has_seed = 1;
        r.user = (void *)(intptr_t)i;
        if (tide_engine_submit(e, &r, &ids[i], &st) != 0) fail_msg("%s", st.msg);
    }
    while (tide_engine_busy(e)) {
        assert_int_equal(tide_engine_step(e, &st), 0);
        if (tide_engine_check(e, &st) != 0) fail_msg("%s", st.msg);
    }
    int64_t ver = 0, acc = 0;
    for (int i = 0; i < rs->n; i++) {
        tide_request_info info;
        assert_int_equal(tide_engine_get(e, ids[i], &info, &st), 0);
        if (info.reason == TIDE_FINISH_ERROR) fail_msg("request %d: %s", i, info.error);
        assert_true(info.n_output <= MAXNEW);
        memcpy(rs->out[i], info.output, (size_t)info.n_output * sizeof(int32_t));
        rs->n_out[i] = info.n_output;
        assert_true(info.n_spec_accepted <= info.n_spec_verified);
        ver += info.n_spec_verified;
        acc += info.n_spec_accepted;
        tide_engine_release(e, ids[i]);
    }
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.spec_verified, ver);
    assert_int_equal(s.spec_accepted, acc);
    if (cfg->spec_mode != TIDE_SPEC_OFF) { /* every sampled row gives its token, plus the accepted drafts */
        assert_true(s.tokens_generated >= s.spec_seq_steps);
        assert_true(s.tokens_generated <= s.spec_seq_steps + s.spec_accepted);
    }
    if (cfg->spec_mode == TIDE_SPEC_OFF) assert_int_equal(s.spec_drafted, 0);
    else assert_true(s.spec_drafted > 0);
    rs->verified = ver;
    rs->accepted = acc;
    rs->preemptions = s.preemptions;
    rs->prefix_hits = s.prefix_hits;
    tide_engine_destroy(e);
}

static void make(const fixture *f, runset *rs, int n, uint64_t salt, int sampled) {
    assert_true(n <= NQ);
    tu_rng r = {f->seed * 977 + salt};
    memset(rs, 0, sizeof *rs);
    rs->n = n;
    int64_t V = f->m->cfg.text.vocab_size;
    for (int i = 0; i < n; i++) {
        rs->n_prompt[i] = 1 + (int64_t)(tu_next(&r) % 16);
        for (int64_t j = 0; j < rs->n_prompt[i]; j++) {
            int32_t t;
            do t = (int32_t)(tu_next(&r) % (uint64_t)V);
            while (t == f->m->cfg.image_token_id);
            rs->prompt[i][j] = t;
        }
        rs->sp[i] = tide_sampling_params_default();
        rs->sp[i].temperature = sampled ? 1.0f : 0.0f;
        if (sampled) rs->sp[i].top_k = 4;
        rs->sp[i].max_tokens = 5 + (int64_t)(tu_next(&r) % (MAXNEW - 5 + 1));
        rs->sp[i].seed = tu_next(&r);
    }
}

/* a's requests (a prefix of b's) against b's */
static void same(const runset *a, const runset *b, const char *what) {
    for (int i = 0; i < a->n; i++)
        if (a->n_out[i] != b->n_out[i] || memcmp(a->out[i], b->out[i], (size_t)a->n_out[i] * sizeof(int32_t)))
            fail_msg("%s: request %d differs from --spec off", what, i);
}

/* off == fixed:5 == dspark (the head's own drafts), then with the oracle's
 * drafts (all right, and corrupted), greedy or seeded sampling. */
static void identical(fixture *f, int sampled) {
    printf("seed %llu\n", (unsigned long long)f->seed);
    runset off, x;
    make(f, &off, 4, 1 + (uint64_t)sampled, sampled);
    tide_engine_config c = cfg_for(TIDE_SPEC_OFF, 0);
    run(f, &c, &off, NULL);
    const struct {
        int mode, k, hook, corrupt;
        const char *name;
    } cases[] = {
        {TIDE_SPEC_DSPARK, 0, 0, 0, "dspark"},          {TIDE_SPEC_FIXED, 5, 1, 0, "fixed:5 oracle"},
        {TIDE_SPEC_FIXED, 5, 1, 1, "fixed:5 corrupted"}, {TIDE_SPEC_FIXED, 2, 1, 1, "fixed:2 corrupted"},
        {TIDE_SPEC_DSPARK, 0, 1, 1, "dspark corrupted"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        /* the DSpark head itself is slow on the CPU (its head and Markov
         * head span the vocabulary): 2 greedy requests with it; the
         * sampled runs take the corrupted oracles only (time under ASan) */
        if (sampled && (!cases[k].hook || !cases[k].corrupt || cases[k].k == 2)) continue;
        if (g_canonical && cases[k].k != 5) continue; /* the other mode once */
        memcpy(&x, &off, sizeof x);
        memset(x.out, 0, sizeof x.out);
        if (!cases[k].hook) x.n = 2;
        hook_ctx h = {&off, {f->seed + k}, cases[k].corrupt, 0};
        c = cfg_for(cases[k].mode, cases[k].k);
        run(f, &c, &x, cases[k].hook ? &h : NULL);
        same(&x, &off, cases[k].name);
        printf("  %-18s verified %lld accepted %lld\n", cases[k].name, (long long)x.verified, (long long)x.accepted);
        if (cases[k].hook) {
            assert_true(x.accepted > 0);
            if (!cases[k].corrupt && !sampled) assert_int_equal(x.accepted, x.verified);
            /* fixed:K verifies the first draft made (wrong from its first
             * token); the dspark budget may verify only right prefixes */
            if (cases[k].corrupt && cases[k].mode == TIDE_SPEC_FIXED) assert_true(x.accepted < x.verified);
            assert_true(x.accepted <= x.verified);
        }
    }
}

static void test_greedy_identical(void **state) { identical(*state, 0); }
static void test_canonical(void **state) {
    g_canonical = 1;
    identical(*state, 0);
    g_canonical = 0;
}
static void test_sampled_identical(void **state) { identical(*state, 1); }

/* Preemption and the prefix cache under speculation: a small pool and
 * prompts sharing pages; outputs equal an unpressured off run. */
static void test_preempt_prefix(void **state) {
    fixture *f = *state;
    runset off, x;
    make(f, &off, 6, 7, 0);
    for (int i = 1; i < off.n; i++) { /* share the first request's prompt head */
        off.n_prompt[i] = 16;
        memcpy(off.prompt[i], off.prompt[0], 9 * sizeof(int32_t));
        off.n_prompt[0] = 16;
    }
    tide_engine_config c = cfg_for(TIDE_SPEC_OFF, 0);
    run(f, &c, &off, NULL);
    memcpy(&x, &off, sizeof x);
    hook_ctx h = {&off, {f->seed}, 1, 0};
    c = cfg_for(TIDE_SPEC_FIXED, 4);
    c.kv_block = 1;
    c.kv_blocks = 140;
    c.page_tokens = 4;
    c.prefix_replay = -1;
    run(f, &c, &x, &h);
    same(&x, &off, "fixed:4 under KV pressure with the prefix cache");
    printf("preemptions %lld, prefix hits %lld, accepted %lld of %lld\n", (long long)x.preemptions,
           (long long)x.prefix_hits, (long long)x.accepted, (long long)x.verified);
    assert_true(x.accepted > 0);
    assert_true(x.preemptions > 0);
    assert_true(x.prefix_hits > 0);
}

/* A one-token prompt drafts right after its prefill (the head has the
 * row of position 0 and the token sampled from it): with the head's own
 * drafts, a block is drafted after the first step, and with a hook's
 * drafts (the off run's tokens) the first verify step comes right after
 * the prefill and accepts them; outputs equal off's. */
static void test_one_token_prompt(void **state) {
    fixture *f = *state;
    runset off, x;
    make(f, &off, 2, 13, 0);
    for (int i = 0; i < off.n; i++) {
        off.n_prompt[i] = 1;
        off.sp[i].max_tokens = 6;
    }
    tide_engine_config c = cfg_for(TIDE_SPEC_OFF, 0);
    run(f, &c, &off, NULL);
    /* the head's own draft after the prefill step */
    c = cfg_for(TIDE_SPEC_FIXED, 3);
    tide_status st = {0};
    tide_engine *e;
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_request r = tide_request_default();
    r.prompt = off.prompt[0];
    r.n_prompt = 1;
    r.sampling = off.sp[0];
    tide_request_id id;
    if (tide_engine_submit(e, &r, &id, &st) != 0) fail_msg("%s", st.msg);
    assert_int_equal(tide_engine_step(e, &st), 0); /* the prefill */
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.spec_drafted, f->m->cfg.text.dspark_block_size);
    assert_int_equal(tide_engine_step(e, &st), 0); /* verifies them (as many as position 1 allows) */
    tide_engine_get_stats(e, &s);
    assert_int_equal(s.spec_steps, 1);
    assert_true(s.spec_verified >= 1);
    tide_engine_destroy(e);
    /* oracle drafts: accepted from the first step on */
    memcpy(&x, &off, sizeof x);
    memset(x.out, 0, sizeof x.out);
    hook_ctx h = {&off, {f->seed}, 0, 0};
    c = cfg_for(TIDE_SPEC_FIXED, 3);
    run(f, &c, &x, &h);
    same(&x, &off, "one-token prompts, fixed:3 oracle");
    /* every draft right */
    assert_true(x.verified >= off.n);
    assert_int_equal(x.accepted, x.verified);
}

/* Two-sample chi-square: the first two tokens (top-k 3, 9 cells) of
 * sampling under dspark with greedy-guess drafts over seeds 1..N against
 * plain sampling over seeds N+1..2N. */
typedef struct {
    int32_t g[MAXNEW];
    int64_t n_prompt;
} guess_ctx;

static void guess(void *ctx, void *user, const int32_t *tokens, int64_t n_tokens, int32_t *draft, float *conf,
                  int n) {
    const guess_ctx *g = ctx;
    (void)user;
    (void)tokens;
    (void)conf;
    for (int j = 0; j < n; j++) {
        int64_t at = n_tokens - g->n_prompt + j;
        draft[j] = at < MAXNEW ? g->g[at] : 0;
    }
}

static void test_chi_square(void **state) {
    fixture *f = *state;
    enum { N = 64 };
    runset one;
    make(f, &one, 1, 11, 0);
    one.sp[0].max_tokens = 2;
    tide_engine_config c = cfg_for(TIDE_SPEC_OFF, 0);
    run(f, &c, &one, NULL); /* the greedy guess */
    guess_ctx g = {{0}, one.n_prompt[0]};
    memcpy(g.g, one.out[0], 2 * sizeof(int32_t));
    int32_t first[3] = {-1, -1, -1};
    double cnt[2][64] = {{0}};
    int64_t acc = 0, ver = 0;
    for (int side = 0; side < 2; side++) {
        /* fixed:2 verifies every draft (the dspark budget may verify none:
         * then nothing is tested; seed 1883430496217643 did that) */
        tide_engine_config cs = cfg_for(side ? TIDE_SPEC_FIXED : TIDE_SPEC_OFF, side ? 2 : 0);
        cs.max_seqs = 64;
        cs.max_step_tokens = 512;
        tide_status st = {0};
        tide_engine *e;
        if (tide_engine_create_with_model(&cs, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
        if (side) tide_engine_set_draft_hook(e, guess, &g);
        tide_request_id ids[N];
        for (int s = 0; s < N; s++) {
            tide_request r = tide_request_default();
            r.prompt = one.prompt[0];
            r.n_prompt = one.n_prompt[0];
            r.sampling = tide_sampling_params_default();
            r.sampling.top_k = 3;
            r.sampling.max_tokens = 3;
            r.sampling.seed = (uint64_t)(side * N + s + 1) * 0x9e3779b97f4a7c15ull + f->seed;
            r.has_seed = 1;
            if (tide_engine_submit(e, &r, &ids[s], &st) != 0) fail_msg("%s", st.msg);
        }
        if (tide_engine_run(e, &st) != 0) fail_msg("%s", st.msg);
        for (int s = 0; s < N; s++) {
            tide_request_info info;
            assert_int_equal(tide_engine_get(e, ids[s], &info, &st), 0);
            assert_int_equal(info.n_output, 3);
            int a = 0, b = 0;
            while (a < 3 && first[a] != info.output[0] && first[a] >= 0) a++;
            if (a == 3) fail_msg("more than 3 first tokens under top-k 3");
            first[a] = info.output[0];
            /* the second token's cell: its rank among what was seen after this first token */
            b = (int)((uint32_t)info.output[1] * 2654435761u % 3u); /* a fixed 3-way split of the ids */
            cnt[side][a * 3 + b] += 1;
            acc += info.n_spec_accepted;
            ver += info.n_spec_verified;
        }
        tide_engine_destroy(e);
    }
    printf("chi-square side: %lld drafts verified, %lld accepted\n", (long long)ver, (long long)acc);
    assert_true(ver > 0); /* the speculative side verified drafts */
    assert_true(acc > 0); /* and accepted some (each with probability >= 1/3 under top-k 3) */
    double chi = 0;
    int df = -1;
    for (int k = 0; k < 9; k++) {
        double t = cnt[0][k] + cnt[1][k];
        if (t == 0) continue;
        df++;
        for (int s = 0; s < 2; s++) {
            double ex = t / 2;
            chi += (cnt[s][k] - ex) * (cnt[s][k] - ex) / ex;
        }
    }
    /* the 0.999 quantiles of chi-square with 1..8 degrees of freedom */
    static const double q999[9] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12};
    printf("chi-square %.2f with %d degrees of freedom (0.999 quantile %.2f), %lld drafts accepted\n", chi, df,
           df >= 1 ? q999[df] : 0.0, (long long)acc);
    assert_true(df >= 1);
    assert_true(chi < q999[df]);
}

/* The budget rule on known inputs. */
static void test_budget(void **state) {
    (void)state;
    float conf[4] = {2.0f, 0.0f, -2.0f, 5.0f}, s[4];
    tide_spec_survival(conf, 4, s);
    assert_float_equal(s[0], 1 / (1 + exp(-2.0)), 1e-6);
    assert_float_equal(s[1], s[0] * 0.5, 1e-6);
    for (int j = 1; j < 4; j++) assert_true(s[j] <= s[j - 1]);
    /* two sequences: survivals .9 .8 .1 / .5 .4 .3 */
    float surv[6] = {0.9f, 0.8f, 0.1f, 0.5f, 0.4f, 0.3f};
    int avail[2] = {3, 3}, take[2];
    tide_spec_costs free_verify = {1.0, 0.0, 0.0}; /* verifying costs nothing: take all */
    assert_int_equal(tide_spec_budget(&free_verify, TIDE_SPEC_DSPARK, 0, 2, surv, 3, avail, 2, 100, take), 6);
    assert_int_equal(take[0], 3);
    /* each verified row costs as much as the pass: (2 + S) / (1 + 2 + B)
     * is best at B = 2 (.9 and .8: 3.7/5 = .74 > 2/3, 4.2/6 = .7) */
    tide_spec_costs dear = {1.0, 1.0, 0.0};
    assert_int_equal(tide_spec_budget(&dear, TIDE_SPEC_DSPARK, 0, 2, surv, 3, avail, 2, 100, take), 2);
    assert_int_equal(take[0], 2);
    assert_int_equal(take[1], 0);
    /* a cap on B */
    assert_int_equal(tide_spec_budget(&free_verify, TIDE_SPEC_DSPARK, 0, 2, surv, 3, avail, 2, 3, take), 3);
    assert_int_equal(take[0], 2);
    assert_int_equal(take[1], 1);
    /* fixed:2 takes two each, trimmed by the cap from the lowest survival */
    assert_int_equal(tide_spec_budget(&dear, TIDE_SPEC_FIXED, 2, 2, surv, 3, avail, 2, 100, take), 4);
    assert_int_equal(take[0] + take[1], 4);
    assert_int_equal(tide_spec_budget(&dear, TIDE_SPEC_FIXED, 2, 2, surv, 3, avail, 2, 3, take), 3);
    assert_int_equal(take[0], 2);
    assert_int_equal(take[1], 1);
    assert_int_equal(tide_spec_budget(&dear, TIDE_SPEC_OFF, 0, 2, surv, 3, avail, 2, 100, take), 0);
    /* the simulation: acceptance 1 everywhere, free verification: block + 1 tokens */
    float acc[5] = {1, 1, 1, 1, 1};
    double tok, ver, sec;
    tide_spec_simulate(&free_verify, TIDE_SPEC_DSPARK, 0, 4, 5, acc, &tok, &ver, &sec);
    assert_float_equal(tok, 6.0, 1e-9);
    assert_float_equal(ver, 5.0, 1e-9);
}

static void test_parse_and_config(void **state) {
    fixture *f = *state;
    int mode, k;
    tide_status st = {0};
    assert_int_equal(tide_spec_parse("dspark", &mode, &k, &st), 0);
    assert_int_equal(mode, TIDE_SPEC_DSPARK);
    assert_int_equal(tide_spec_parse("fixed:5", &mode, &k, &st), 0);
    assert_int_equal(mode, TIDE_SPEC_FIXED);
    assert_int_equal(k, 5);
    assert_int_equal(tide_spec_parse("off", &mode, &k, &st), 0);
    assert_int_equal(mode, TIDE_SPEC_OFF);
    const char *bad[] = {"fixed:0", "fixed:", "fixed:x", "fixed:99", "dsparkk", "", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(tide_spec_parse(bad[i], &mode, &k, &st), -1);
        assert_non_null(strstr(st.msg, "--spec"));
    }
    tide_engine *e;
    tide_engine_config c = cfg_for(7, 0);
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    c = cfg_for(TIDE_SPEC_FIXED, 0);
    assert_int_equal(tide_engine_create_with_model(&c, f->m, &e, &st), -1);
    /* the profile on the running backend */
    c = cfg_for(TIDE_SPEC_DSPARK, 0);
    memset(c.spec_cost, 0, sizeof c.spec_cost);
    if (tide_engine_create_with_model(&c, f->m, &e, &st) != 0) fail_msg("%s", st.msg);
    tide_engine_stats s;
    tide_engine_get_stats(e, &s);
    printf("profile: pass %.3g s + %.3g s/row, draft %.3g s/seq\n", s.spec_verify_fixed_s, s.spec_verify_token_s,
           s.spec_draft_seq_s);
    assert_true(s.spec_verify_fixed_s + s.spec_verify_token_s > 0);
    assert_true(s.spec_draft_seq_s > 0);
    assert_int_equal(s.kv_blocks_used, 0); /* the scratch sequence gave its blocks back */
    tide_engine_destroy(e);
}

/* tide run --spec: the same ids as off (the default mode);
 * a bad value is a usage error naming the flag; --help lists it. */
static void test_cli(void **state) {
    fixture *f = *state;
    const char *dir = getenv("TIDE_SPEC_MODEL");
    if (!dir || !*dir) dir = f->dir;
    char cmd[4096], *a = NULL, *b = NULL, *c = NULL;
    snprintf(cmd, sizeof cmd,
             "'%s' run --model '%s' --prompt-ids 11,12,13,14 --max-tokens 12 2>/dev/null",
             TIDE_EXE, dir);
    assert_int_equal(tu_system(cmd, &a), 0);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 11,12,13,14 --max-tokens 12 --spec fixed:3 2>/dev/null",
             TIDE_EXE, dir);
    assert_int_equal(tu_system(cmd, &b), 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(strlen(a) > 0);
    assert_string_equal(a, b);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt-ids 1 --spec fixed:x 2>&1", TIDE_EXE, dir);
    assert_int_equal(tu_system(cmd, &c), 2);
    assert_non_null(strstr(c, "--spec fixed:x"));
    free(a);
    free(b);
    free(c);
    c = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run --help", TIDE_EXE);
    assert_int_equal(tu_system(cmd, &c), 0);
    assert_non_null(strstr(c, "--spec MODE"));
    free(c);
    c = NULL;
    snprintf(cmd, sizeof cmd, "'%s' bench spec --help", TIDE_EXE);
    assert_int_equal(tu_system(cmd, &c), 0);
    assert_non_null(strstr(c, "--acceptance"));
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_parse_and_config),
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_one_token_prompt),
        cmocka_unit_test(test_sampled_identical),
        cmocka_unit_test(test_preempt_prefix),
        cmocka_unit_test(test_chi_square),
        cmocka_unit_test(test_cli),
    };
    const char *only = getenv("TIDE_SPEC_FILTER"); /* e.g. test_greedy_identical */
    if (only && *only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, setup, teardown);
}
