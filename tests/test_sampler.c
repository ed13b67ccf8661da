/* Properties of the sampler (src/engine/sampler.c) on fresh random logits:
 * greedy paths, each filter's definition, penalties and bias, batch
 * invariance, the empirical frequencies of the exponential race, stop rules,
 * parameter validation and bad input. The comparison with an independent
 * numpy reference is test_sampler_ref.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "testutil.h"

#define V 1000

static tu_rng rng_for(uint64_t salt) { return (tu_rng){tu_seed() ^ salt}; }

static void fill_logits(tu_rng *r, float *l, int32_t n, double scale) {
    for (int32_t i = 0; i < n; i++) l[i] = (float)(scale * tu_normal(r));
}

static int32_t argmax_f(const float *l, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

typedef struct {
    tide_sampler_ws ws;
    double *probs;
    tide_status st;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f || tide_sampler_ws_init(&f->ws, V, &f->st)) return -1;
    f->probs = malloc(V * sizeof *f->probs);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    tide_sampler_ws_free(&f->ws);
    free(f->probs);
    free(f);
    return 0;
}

static int32_t sample(fixture *f, const tide_sampling_params *p, const float *l, uint64_t pos) {
    tide_sampler_input in = {.logits = l, .position = pos};
    tide_sample_result res;
    assert_int_equal(tide_sample(&f->ws, p, &in, &res, &f->st), 0);
    return res.token;
}

static void probs(fixture *f, const tide_sampling_params *p, const tide_sampler_input *in) {
    if (tide_sampler_probs(&f->ws, p, in, f->probs, &f->st)) fail_msg("%s", f->st.msg);
}

/* Greedy = argmax; so are top_k = 1 and a temperature below the threshold,
 * whatever the seed and position. */
static void test_greedy(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(1);
    float l[V];
    for (int it = 0; it < 20; it++) {
        fill_logits(&r, l, V, 3);
        int32_t want = argmax_f(l, V);
        tide_sampling_params p = tide_sampling_params_default();
        p.seed = tu_next(&r);
        p.temperature = 0;
        assert_int_equal(sample(f, &p, l, tu_next(&r)), want);
        p.temperature = 1e-6f;
        assert_int_equal(sample(f, &p, l, tu_next(&r)), want);
        p.temperature = (float)(0.1 + 2 * tu_uniform(&r));
        p.top_k = 1;
        assert_int_equal(sample(f, &p, l, tu_next(&r)), want);
        /* just above the threshold the race runs, but a lead of 0.01 is 500
         * in s units, beyond what Exp(1) draws (<= 36.8) can overturn */
        p.top_k = 0;
        p.temperature = 2e-5f;
        l[want] += 0.01f;
        assert_int_equal(sample(f, &p, l, tu_next(&r)), want);
    }
    /* ties go to the lowest id; NaN never wins */
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    l[3] = NAN;
    l[17] = 2;
    l[400] = 2;
    tide_sampling_params p = tide_sampling_params_default();
    p.temperature = 0;
    assert_int_equal(sample(f, &p, l, 0), 17);
}

/* Top-k keeps exactly the k best (ties by lower id) with renormalised softmax. */
static void test_top_k(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(2);
    float l[V];
    for (int it = 0; it < 20; it++) {
        fill_logits(&r, l, V, 2);
        if (it % 2) /* ties across the boundary */
            for (int i = 0; i < 200; i++) l[tu_next(&r) % V] = l[tu_next(&r) % V];
        tide_sampling_params p = tide_sampling_params_default();
        p.top_k = 1 + (int32_t)(tu_next(&r) % V);
        p.temperature = (float)(0.3 + tu_uniform(&r));
        tide_sampler_input in = {.logits = l};
        probs(f, &p, &in);
        int32_t kept = 0;
        for (int32_t i = 0; i < V; i++) kept += f->probs[i] > 0;
        assert_int_equal(kept, p.top_k == 1 ? 1 : p.top_k);
        for (int32_t i = 0; i < V; i++)
            for (int32_t j = 0; j < V && f->probs[i] > 0; j++)
                if (f->probs[j] == 0)
                    assert_true(l[i] > l[j] || (l[i] == l[j] && i < j));
    }
}

/* A large k takes the quickselect path instead of the heap. */
static void test_top_k_large(void **state) {
    (void)state;
    enum { V2 = 6000 };
    tu_rng r = rng_for(10);
    tide_sampler_ws ws;
    tide_status st = {0};
    assert_int_equal(tide_sampler_ws_init(&ws, V2, &st), 0);
    float *l = malloc(V2 * sizeof *l);
    double *pr = malloc(V2 * sizeof *pr);
    for (int it = 0; it < 10; it++) {
        fill_logits(&r, l, V2, 2);
        for (int i = 0; i < 2000; i++) l[tu_next(&r) % V2] = l[tu_next(&r) % V2]; /* ties */
        tide_sampling_params p = tide_sampling_params_default();
        p.top_k = 1025 + (int32_t)(tu_next(&r) % (V2 - 1025));
        tide_sampler_input in = {.logits = l};
        assert_int_equal(tide_sampler_probs(&ws, &p, &in, pr, &st), 0);
        /* the worst kept token beats the best dropped one in the total order */
        int32_t kept = 0, worst = -1, best_out = -1;
        for (int32_t i = 0; i < V2; i++) {
            if (pr[i] > 0) {
                kept++;
                if (worst < 0 || l[i] < l[worst] || (l[i] == l[worst] && i > worst)) worst = i;
            } else if (best_out < 0 || l[i] > l[best_out] || (l[i] == l[best_out] && i < best_out)) {
                best_out = i;
            }
        }
        assert_int_equal(kept, p.top_k);
        assert_true(l[worst] > l[best_out] || (l[worst] == l[best_out] && worst < best_out));
    }
    free(l);
    free(pr);
    tide_sampler_ws_free(&ws);
}

/* Top-p keeps the smallest prefix (by probability) whose mass reaches p. */
static void test_top_p(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(3);
    float l[V];
    double full[V];
    for (int it = 0; it < 30; it++) {
        fill_logits(&r, l, V, 0.5 + 4 * tu_uniform(&r));
        tide_sampling_params p = tide_sampling_params_default();
        p.temperature = (float)(0.3 + 1.5 * tu_uniform(&r));
        tide_sampler_input in = {.logits = l};
        probs(f, &p, &in);
        memcpy(full, f->probs, sizeof full);
        p.top_p = (float)(0.01 + 0.98 * tu_uniform(&r));
        probs(f, &p, &in);
        double mass = 0, min_kept = 2, max_dropped = 0, sum = 0;
        for (int32_t i = 0; i < V; i++) {
            sum += f->probs[i];
            if (f->probs[i] > 0) {
                mass += full[i];
                if (full[i] < min_kept) min_kept = full[i];
            } else if (full[i] > max_dropped) max_dropped = full[i];
        }
        assert_true(fabs(sum - 1) < 1e-12);
        assert_true(mass >= p.top_p - 1e-12);           /* reaches p */
        assert_true(mass - min_kept < p.top_p + 1e-12); /* minimal */
        assert_true(min_kept >= max_dropped);            /* a prefix of the order */
        for (int32_t i = 0; i < V; i++)
            if (f->probs[i] > 0) assert_true(fabs(f->probs[i] - full[i] / mass) < 1e-12);
    }
}

/* Min-p keeps p_i >= min_p * p_max of the tempered softmax. */
static void test_min_p(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(4);
    float l[V];
    double full[V];
    for (int it = 0; it < 30; it++) {
        fill_logits(&r, l, V, 0.5 + 3 * tu_uniform(&r));
        tide_sampling_params p = tide_sampling_params_default();
        p.temperature = (float)(0.3 + 1.5 * tu_uniform(&r));
        tide_sampler_input in = {.logits = l};
        probs(f, &p, &in);
        memcpy(full, f->probs, sizeof full);
        double pmax = 0;
        for (int32_t i = 0; i < V; i++) pmax = full[i] > pmax ? full[i] : pmax;
        p.min_p = (float)(0.5 * tu_uniform(&r));
        probs(f, &p, &in);
        for (int32_t i = 0; i < V; i++) {
            double ratio = full[i] / pmax;
            if (fabs(ratio - p.min_p) < 1e-9) continue; /* too close to call */
            assert_int_equal(f->probs[i] > 0, ratio > p.min_p);
        }
    }
}

/* Reads the processed logits back from the distribution at T = 1 without
 * filters: log p_i - log p_ref = l'_i - l'_ref. */
static double logit_gap(const double *pr, int32_t i, int32_t ref) { return log(pr[i]) - log(pr[ref]); }

/* Presence once per distinct output token, frequency per occurrence,
 * repetition on prompt and output tokens (divide positive, multiply negative),
 * then bias. */
static void test_penalties_and_bias(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(5);
    float l[V];
    for (int it = 0; it < 10; it++) {
        fill_logits(&r, l, V, 2);
        l[0] = 0; /* reference token: never penalised */
        l[1] = 1.5f;
        l[2] = -1.5f;
        l[3] = 0.7f;
        l[4] = -0.3f;
        l[5] = 0.25f;
        int32_t prompt[] = {1, 2, 1, 1};          /* repetition only */
        int32_t output[] = {3, 4, 3, 3, 2, 4, 3}; /* 3 x4, 4 x2, 2 x1 */
        tide_sampling_params p = tide_sampling_params_default();
        p.repetition_penalty = (float)(1.1 + tu_uniform(&r));
        p.frequency_penalty = (float)(tu_uniform(&r) - 0.5);
        p.presence_penalty = (float)(tu_uniform(&r) - 0.5);
        tide_logit_bias bias[] = {{5, 1.25f}, {5, -0.5f}, {6, 2.0f}};
        p.logit_bias = bias;
        p.n_logit_bias = 3;
        tide_sampler_input in = {.logits = l, .prompt = prompt, .n_prompt = 4, .output = output, .n_output = 7};
        probs(f, &p, &in);
        double rp = p.repetition_penalty, fr = p.frequency_penalty, pr = p.presence_penalty;
        const double tol = 1e-5;
        assert_true(fabs(logit_gap(f->probs, 1, 0) - 1.5 / rp) < tol);
        assert_true(fabs(logit_gap(f->probs, 2, 0) - (-1.5 * rp - fr * 1 - pr)) < tol);
        assert_true(fabs(logit_gap(f->probs, 3, 0) - (0.7 / rp - fr * 4 - pr)) < tol);
        assert_true(fabs(logit_gap(f->probs, 4, 0) - (-0.3 * rp - fr * 2 - pr)) < tol);
        assert_true(fabs(logit_gap(f->probs, 5, 0) - (0.25 + 0.75)) < tol);
        assert_true(fabs(logit_gap(f->probs, 6, 0) - (l[6] + 2.0)) < tol);
        assert_true(fabs(logit_gap(f->probs, 7, 0) - l[7]) < tol);
    }
    /* a +100 bias wins the greedy pick */
    fill_logits(&r, l, V, 1);
    tide_logit_bias big = {(int32_t)(tu_next(&r) % V), 100};
    tide_sampling_params p = tide_sampling_params_default();
    p.temperature = 0;
    p.logit_bias = &big;
    p.n_logit_bias = 1;
    assert_int_equal(sample(f, &p, l, 0), big.token);
}

/* The constraint mask bans tokens; a banned argmax is never picked. */
static void test_mask(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(6);
    float l[V];
    uint32_t allow[(V + 31) / 32];
    for (int it = 0; it < 10; it++) {
        fill_logits(&r, l, V, 2);
        for (size_t w = 0; w < sizeof allow / 4; w++) allow[w] = (uint32_t)tu_next(&r);
        allow[0] |= 1;
        tide_sampling_params p = tide_sampling_params_default();
        p.seed = tu_next(&r);
        tide_sampler_input in = {.logits = l, .allow = allow, .position = it};
        probs(f, &p, &in);
        for (int32_t i = 0; i < V; i++)
            assert_int_equal(f->probs[i] > 0, (int)((allow[i >> 5] >> (i & 31)) & 1u));
        tide_sample_result res;
        for (int k = 0; k < 50; k++) {
            in.position = tu_next(&r);
            assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), 0);
            assert_true((allow[res.token >> 5] >> (res.token & 31)) & 1u);
        }
        p.temperature = 0;
        assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), 0);
        int32_t best = -1;
        for (int32_t i = 0; i < V; i++)
            if (((allow[i >> 5] >> (i & 31)) & 1u) && (best < 0 || l[i] > l[best])) best = i;
        assert_int_equal(res.token, best);
    }
}

/* Same (seed, position) -> same token whatever the batch order, the workspace
 * or the other rows; a different position draws anew. */
static void test_batch_invariance(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(7);
    enum { ROWS = 16 };
    static float rows[ROWS][V];
    tide_sampling_params ps[ROWS];
    uint64_t pos[ROWS];
    int32_t first[ROWS];
    for (int i = 0; i < ROWS; i++) {
        fill_logits(&r, rows[i], V, 0.5); /* flat: many plausible tokens */
        ps[i] = tide_sampling_params_default();
        ps[i].seed = i < 4 ? 42 : tu_next(&r); /* some share a seed */
        ps[i].top_p = i % 3 ? 1.0f : 0.9f;
        pos[i] = i < 4 ? 7 : tu_next(&r) >> 20;
        first[i] = sample(f, &ps[i], rows[i], pos[i]);
    }
    tide_sampler_ws ws2;
    assert_int_equal(tide_sampler_ws_init(&ws2, V, &f->st), 0);
    for (int round = 0; round < 5; round++) {
        int order[ROWS];
        for (int i = 0; i < ROWS; i++) order[i] = i;
        for (int i = ROWS - 1; i > 0; i--) {
            int j = (int)(tu_next(&r) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < ROWS; k++) {
            int i = order[k];
            tide_sampler_input in = {.logits = rows[i], .position = pos[i]};
            tide_sample_result res;
            assert_int_equal(tide_sample(round % 2 ? &ws2 : &f->ws, &ps[i], &in, &res, &f->st), 0);
            assert_int_equal(res.token, first[i]);
        }
    }
    tide_sampler_ws_free(&ws2);
    /* over many positions a flat distribution gives many different tokens */
    int distinct = 0;
    static uint8_t hit[V];
    memset(hit, 0, sizeof hit);
    for (uint64_t q = 0; q < 200; q++) {
        int32_t t = sample(f, &ps[0], rows[0], q);
        distinct += !hit[t];
        hit[t] = 1;
    }
    assert_true(distinct > 100);
}

/* The race against a brute-force one over every kept token (no cut-off),
 * on wide logits and low temperatures where most tokens are skipped. */
static void test_race_bruteforce(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(11);
    float l[V];
    for (int it = 0; it < 200; it++) {
        fill_logits(&r, l, V, 2 + 10 * tu_uniform(&r));
        tide_sampling_params p = tide_sampling_params_default();
        p.seed = tu_next(&r);
        p.temperature = (float)(0.05 + tu_uniform(&r));
        if (it % 3 == 1) p.top_p = 0.99f;
        if (it % 3 == 2) p.top_k = 40;
        uint64_t pos = tu_next(&r) >> 3;
        tide_sampler_input in = {.logits = l, .position = pos};
        probs(f, &p, &in);
        int32_t want = -1;
        double bq = -1;
        for (int32_t i = 0; i < V; i++) {
            if (f->probs[i] == 0) continue;
            double q = f->probs[i] / tide_rng_exp(p.seed, pos, TIDE_RNG_STREAM_SAMPLE, (uint32_t)i);
            if (q > bq) bq = q, want = i;
        }
        assert_int_equal(sample(f, &p, l, pos), want);
    }
}

/* Chi-square of the race's frequencies over N positions against the filtered
 * softmax, on a small vocabulary, with and without filters. */
static void chi_square_case(fixture *f, tu_rng *r, int filtered) {
    enum { W = 12, N = 30000 };
    float l[V];
    for (int32_t i = 0; i < V; i++) l[i] = -INFINITY; /* only W tokens live */
    for (int32_t i = 0; i < W; i++) l[i * 37] = (float)tu_normal(r);
    tide_sampling_params p = tide_sampling_params_default();
    p.seed = tu_next(r);
    p.temperature = (float)(0.5 + tu_uniform(r));
    if (filtered) {
        p.top_k = 10;
        p.top_p = 0.95f;
        p.min_p = 0.02f;
    }
    tide_sampler_input in = {.logits = l};
    probs(f, &p, &in);
    int counts[V] = {0};
    uint64_t base = tu_next(r) >> 16;
    for (int n = 0; n < N; n++) counts[sample(f, &p, l, base + (uint64_t)n)]++;
    double chi = 0;
    int df = -1;
    for (int32_t i = 0; i < V; i++) {
        if (f->probs[i] == 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = N * f->probs[i];
        chi += (counts[i] - e) * (counts[i] - e) / e;
        df++;
    }
    /* df <= 11: P(chi2_11 > 50) ~ 6e-7 */
    if (chi > 50) fail_msg("chi-square %.1f with %d degrees of freedom", chi, df);
}

static void test_frequencies(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(8);
    chi_square_case(f, &r, 0);
    chi_square_case(f, &r, 1);
}

static void test_logprob(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(9);
    float l[V];
    fill_logits(&r, l, V, 2);
    double m = l[argmax_f(l, V)], z = 0;
    for (int32_t i = 0; i < V; i++) z += exp(l[i] - m);
    tide_sampling_params p = tide_sampling_params_default();
    p.seed = tu_next(&r);
    p.presence_penalty = 1; /* the logprob is of the raw distribution */
    int32_t out[] = {1, 2, 3};
    tide_sampler_input in = {.logits = l, .output = out, .n_output = 3, .position = 5, .want_logprob = 1};
    tide_sample_result res;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), 0);
    assert_true(fabs(res.logprob - (l[res.token] - m - log(z))) < 1e-5);
}

/* A batch on a 3-thread pool gives each row the token of a single call; a
 * bad row fails alone and is named. */
static void test_batch(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(12);
    enum { ROWS = 40 };
    tide_pool *pool;
    assert_int_equal(tide_pool_create(3, &pool, &f->st), 0);
    int threads = tide_pool_size(pool);
    tide_sampler_ws ws[3];
    for (int t = 0; t < threads; t++) assert_int_equal(tide_sampler_ws_init(&ws[t], V, &f->st), 0);
    static float rows[ROWS][V];
    tide_sampling_params ps[ROWS];
    const tide_sampling_params *pp[ROWS];
    tide_sampler_input in[ROWS];
    tide_sample_result res[ROWS];
    int32_t hist[64];
    for (int i = 0; i < 64; i++) hist[i] = (int32_t)(tu_next(&r) % V);
    for (int i = 0; i < ROWS; i++) {
        fill_logits(&r, rows[i], V, 1 + 3 * tu_uniform(&r));
        ps[i] = tide_sampling_params_default();
        ps[i].seed = tu_next(&r);
        ps[i].temperature = i % 7 == 0 ? 0.0f : (float)(0.3 + tu_uniform(&r));
        ps[i].top_p = i % 2 ? 0.9f : 1.0f;
        ps[i].top_k = i % 3 ? 0 : 20;
        ps[i].repetition_penalty = i % 5 ? 1.0f : 1.3f;
        ps[i].frequency_penalty = i % 4 ? 0.0f : 0.5f;
        pp[i] = &ps[i];
        in[i] = (tide_sampler_input){.logits = rows[i], .prompt = hist, .n_prompt = 32, .output = hist + 32,
                                     .n_output = 32, .position = tu_next(&r) >> 4};
    }
    assert_int_equal(tide_sample_batch(pool, ws, pp, in, res, ROWS, &f->st), 0);
    for (int i = 0; i < ROWS; i++) {
        tide_sample_result one;
        assert_int_equal(tide_sample(&f->ws, &ps[i], &in[i], &one, &f->st), 0);
        assert_int_equal(res[i].token, one.token);
        assert_int_equal(res[i].n_candidates, one.n_candidates);
    }
    for (int32_t t = 0; t < V; t++) rows[17][t] = rows[29][t] = -INFINITY;
    assert_int_equal(tide_sample_batch(pool, ws, pp, in, res, ROWS, &f->st), -1);
    assert_non_null(strstr(f->st.msg, "sampler batch row 17: "));
    assert_int_equal(res[17].token, -1);
    assert_int_equal(res[29].token, -1);
    assert_true(res[16].token >= 0 && res[18].token >= 0);
    assert_int_equal(tide_sample_batch(NULL, ws, pp, in, res, 10, &f->st), 0); /* inline */
    assert_int_equal(tide_sample_batch(pool, ws, pp, in, res, -1, &f->st), -1);
    for (int t = 0; t < threads; t++) tide_sampler_ws_free(&ws[t]);
    tide_pool_destroy(pool);
}

/* Extreme but valid parameters and odd logits (huge, tiny, +-0, NaN, -inf,
 * all equal): the call succeeds and the token is one the distribution allows. */
static void test_extremes(void **state) {
    fixture *f = *state;
    tu_rng r = rng_for(13);
    static const float temps[] = {1e-5f, 1e-4f, 0.01f, 1, 100, 1e30f, 3.4e38f};
    static const float tops[] = {1e-30f, 1e-7f, 0.5f, 0.9999999f, 1};
    static const float mins[] = {0, 1e-30f, 0.5f, 1};
    static const float reps[] = {1e-30f, 0.5f, 1, 2, 1e30f};
    float l[V];
    for (int it = 0; it < 400; it++) {
        int kind = (int)(tu_next(&r) % 4);
        for (int32_t i = 0; i < V; i++) {
            double u = tu_uniform(&r);
            l[i] = kind == 0   ? 0.0f
                   : kind == 1 ? (float)(1e30 * tu_normal(&r))
                   : u < 0.05  ? NAN
                   : u < 0.3   ? -INFINITY
                   : u < 0.35  ? -0.0f
                               : (float)(1e-30 * tu_normal(&r));
        }
        l[tu_next(&r) % V] = 1.0f; /* never everything masked */
        tide_sampling_params p = tide_sampling_params_default();
        p.seed = tu_next(&r);
        p.temperature = temps[tu_next(&r) % 7];
        p.top_p = tops[tu_next(&r) % 5];
        p.min_p = mins[tu_next(&r) % 4];
        p.top_k = (int32_t)(tu_next(&r) % 3) * (int32_t)(tu_next(&r) % (2 * V));
        p.repetition_penalty = kind == 1 ? 1.0f : reps[tu_next(&r) % 5]; /* 1e30 x 1e30 would be +inf */
        p.presence_penalty = (float)(4 * tu_uniform(&r) - 2);
        p.frequency_penalty = (float)(4 * tu_uniform(&r) - 2);
        tide_status st = {0};
        assert_int_equal(tide_sampling_params_check(&p, V, &st), 0);
        int32_t hist[40];
        for (int i = 0; i < 40; i++) hist[i] = (int32_t)(tu_next(&r) % V);
        tide_sampler_input in = {.logits = l, .prompt = hist, .n_prompt = 20, .output = hist + 20, .n_output = 20,
                                 .position = tu_next(&r), .want_logprob = 1};
        tide_sample_result res;
        if (tide_sample(&f->ws, &p, &in, &res, &st)) fail_msg("iteration %d: %s", it, st.msg);
        probs(f, &p, &in);
        assert_true(res.token >= 0 && res.token < V);
        assert_true(f->probs[res.token] > 0);
        int32_t n = 0;
        double sum = 0;
        for (int32_t i = 0; i < V; i++) {
            assert_true(f->probs[i] >= 0 && f->probs[i] <= 1);
            n += f->probs[i] > 0;
            sum += f->probs[i];
        }
        assert_true(fabs(sum - 1) < 1e-9);
        assert_true(n >= 1 && n <= res.n_candidates); /* kept tokens 745 e-folds below the best underflow */
    }
}

static void test_stop(void **state) {
    (void)state;
    int32_t stops[] = {7, 9};
    tide_sampling_params p = tide_sampling_params_default();
    p.stop_tokens = stops;
    p.n_stop_tokens = 2;
    p.max_tokens = 3;
    assert_int_equal(tide_sampling_stop(&p, 5, 1), TIDE_STOP_NONE);
    assert_int_equal(tide_sampling_stop(&p, 9, 1), TIDE_STOP_TOKEN);
    assert_int_equal(tide_sampling_stop(&p, 5, 3), TIDE_STOP_LENGTH);
    assert_int_equal(tide_sampling_stop(&p, 7, 3), TIDE_STOP_TOKEN);
    p.max_tokens = 0;
    assert_int_equal(tide_sampling_stop(&p, 5, 1000000), TIDE_STOP_NONE);
}

static void expect_bad(tide_sampling_params p, const char *needle) {
    tide_status st = {0};
    assert_int_equal(tide_sampling_params_check(&p, V, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_INVALID);
    if (!strstr(st.msg, needle)) fail_msg("message '%s' lacks '%s'", st.msg, needle);
}

static void test_params_check(void **state) {
    (void)state;
    tide_status st = {0};
    tide_sampling_params p = tide_sampling_params_default();
    assert_int_equal(tide_sampling_params_check(&p, V, &st), 0);
    tide_sampling_params q = p;
    q.temperature = -1;
    expect_bad(q, "temperature");
    q = p;
    q.temperature = NAN;
    expect_bad(q, "temperature");
    q = p;
    q.top_p = 0;
    expect_bad(q, "top_p");
    q = p;
    q.min_p = 1.5f;
    expect_bad(q, "min_p");
    q = p;
    q.repetition_penalty = 0;
    expect_bad(q, "repetition_penalty");
    q = p;
    q.presence_penalty = 3;
    expect_bad(q, "presence_penalty");
    q = p;
    q.frequency_penalty = NAN;
    expect_bad(q, "frequency_penalty");
    tide_logit_bias b = {V, 1};
    q = p;
    q.logit_bias = &b;
    q.n_logit_bias = 1;
    expect_bad(q, "logit_bias[0]: token id 1000");
    b.token = 3;
    b.bias = 101;
    expect_bad(q, "[-100, 100]");
    q = p;
    q.n_logit_bias = 2;
    expect_bad(q, "no array");
    int32_t stops[] = {1, -1};
    q = p;
    q.stop_tokens = stops;
    q.n_stop_tokens = 2;
    expect_bad(q, "stop_tokens[1]");
}

/* Bad input fails with a message and leaves the workspace clean. */
static void test_bad_input(void **state) {
    fixture *f = *state;
    float l[V];
    for (int32_t i = 0; i < V; i++) l[i] = -INFINITY;
    tide_sampling_params p = tide_sampling_params_default();
    tide_sampler_input in = {.logits = l};
    tide_sample_result res;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    assert_non_null(strstr(f->st.msg, "no token has a finite logit"));
    p.temperature = 0;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    for (int32_t i = 0; i < V; i++) l[i] = NAN;
    assert_int_equal(tide_sampler_probs(&f->ws, &p, &in, f->probs, &f->st), -1);
    p = tide_sampling_params_default();
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    l[10] = INFINITY;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    assert_non_null(strstr(f->st.msg, "+inf"));
    l[10] = 0;
    int32_t hist[] = {1, 2, V};
    p.repetition_penalty = 1.2f;
    in.output = hist;
    in.n_output = 3;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    assert_non_null(strstr(f->st.msg, "output[2] = 1000"));
    p.repetition_penalty = 1;
    p.frequency_penalty = 1;
    hist[2] = -5;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    in.n_output = 2;
    in.n_prompt = 4; /* no prompt array */
    p.repetition_penalty = 1.5f;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    in.logits = NULL;
    assert_int_equal(tide_sample(&f->ws, &p, &in, &res, &f->st), -1);
    for (int32_t i = 0; i < V; i++) assert_true(f->ws.seen[i] == 0 && f->ws.count[i] == 0);
    tide_sampler_ws ws;
    assert_int_equal(tide_sampler_ws_init(&ws, 0, &f->st), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_greedy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_top_k, setup, teardown),
        cmocka_unit_test(test_top_k_large),
        cmocka_unit_test_setup_teardown(test_top_p, setup, teardown),
        cmocka_unit_test_setup_teardown(test_min_p, setup, teardown),
        cmocka_unit_test_setup_teardown(test_penalties_and_bias, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_invariance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_race_bruteforce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frequencies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logprob, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extremes, setup, teardown),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_params_check),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
