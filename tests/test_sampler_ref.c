/* The sampler against an independent numpy reference (tools/ref/sampler_ref.py)
 * on fresh random cases: random vocabulary sizes (one at the released 129280),
 * logits with deliberate ties and NaNs, and every parameter switched on or off
 * at random. For each case the test exports the logits, the parameters and the
 * Exp(1) draw the RNG gives every token at the case's (seed, position); the
 * reference returns the distribution that the race samples from and the token
 * it picks, which must match tide_sampler_probs and tide_sample. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "engine/sampler.h"
#include "testutil.h"

#define N_CASES 48

typedef struct {
    int32_t V;
    float *logits;
    uint32_t *allow;
    int32_t *prompt, *output;
    int64_t n_prompt, n_output;
    tide_logit_bias *bias;
    tide_sampling_params p;
    uint64_t position;
} rcase;

static int32_t rint_(tu_rng *r, int32_t lo, int32_t hi) { /* [lo, hi] */
    return lo + (int32_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}

static void make_case(rcase *c, tu_rng *r, int idx) {
    memset(c, 0, sizeof *c);
    int32_t V = idx == 0 ? 129280 : rint_(r, 1, 4000);
    c->V = V;
    c->logits = malloc((size_t)V * sizeof(float));
    double scale = 0.5 + 4.5 * tu_uniform(r);
    for (int32_t i = 0; i < V; i++) c->logits[i] = (float)(scale * tu_normal(r));
    if (V > 4 && tu_uniform(r) < 0.5) /* ties */
        for (int k = 0; k < V / 8 + 1; k++) c->logits[rint_(r, 0, V - 1)] = c->logits[rint_(r, 0, V - 1)];
    if (V > 4 && tu_uniform(r) < 0.25) c->logits[rint_(r, 0, V - 1)] = NAN;
    tide_sampling_params *p = &c->p;
    *p = tide_sampling_params_default();
    p->seed = tu_next(r);
    c->position = tu_next(r) >> rint_(r, 0, 60);
    double u = tu_uniform(r);
    p->temperature = u < 0.1 ? 0.0f : u < 0.15 ? 1e-6f : (float)(0.2 + 1.8 * tu_uniform(r));
    if (tu_uniform(r) < 0.5) p->top_k = rint_(r, 1, V);
    if (tu_uniform(r) < 0.5) p->top_p = (float)(0.02 + 0.98 * tu_uniform(r));
    if (tu_uniform(r) < 0.4) p->min_p = (float)(0.3 * tu_uniform(r));
    if (tu_uniform(r) < 0.4) p->repetition_penalty = (float)(0.5 + 1.5 * tu_uniform(r));
    if (tu_uniform(r) < 0.4) p->presence_penalty = (float)(4 * tu_uniform(r) - 2);
    if (tu_uniform(r) < 0.4) p->frequency_penalty = (float)(4 * tu_uniform(r) - 2);
    if (tu_uniform(r) < 0.5) {
        p->want_logprobs = 1;
        p->top_logprobs = rint_(r, 0, TIDE_SAMPLING_MAX_TOP_LOGPROBS);
    }
    c->n_prompt = rint_(r, 0, 300);
    c->n_output = rint_(r, 0, 300);
    c->prompt = malloc((size_t)(c->n_prompt + 1) * sizeof(int32_t));
    c->output = malloc((size_t)(c->n_output + 1) * sizeof(int32_t));
    int32_t hot = V < 50 ? V : 50; /* a small range, so tokens repeat */
    for (int64_t i = 0; i < c->n_prompt; i++) c->prompt[i] = rint_(r, 0, V - 1);
    for (int64_t i = 0; i < c->n_output; i++) c->output[i] = rint_(r, 0, hot - 1);
    if (tu_uniform(r) < 0.4) {
        p->n_logit_bias = rint_(r, 1, 10);
        c->bias = malloc((size_t)p->n_logit_bias * sizeof *c->bias);
        for (int32_t i = 0; i < p->n_logit_bias; i++) {
            c->bias[i].token = rint_(r, 0, V - 1);
            c->bias[i].bias = (float)(tu_uniform(r) < 0.1 ? -100 : 10 * tu_uniform(r) - 5);
        }
        p->logit_bias = c->bias;
    }
    if (tu_uniform(r) < 0.3) { /* a constraint mask: about 30% banned, never all */
        c->allow = malloc((size_t)(V / 32 + 1) * sizeof(uint32_t));
        memset(c->allow, 0xff, (size_t)(V / 32 + 1) * sizeof(uint32_t));
        for (int32_t i = 0; i < V; i++)
            if (tu_uniform(r) < 0.3) c->allow[i >> 5] &= ~(1u << (i & 31));
        int32_t keep = rint_(r, 0, V - 1);
        c->allow[keep >> 5] |= 1u << (keep & 31);
        c->logits[keep] = 1.0f; /* finite, so some token survives */
    }
}

static void free_case(rcase *c) {
    free(c->logits);
    free(c->allow);
    free(c->prompt);
    free(c->output);
    free(c->bias);
}

static void put_floats(FILE *f, const char *key, const float *v, int64_t n) {
    fprintf(f, "%s", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, " %.9g", (double)v[i]);
    fprintf(f, "\n");
}

static void put_ints(FILE *f, const char *key, const int32_t *v, int64_t n) {
    fprintf(f, "%s", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, " %d", (int)v[i]);
    fprintf(f, "\n");
}

static void write_case(const char *dir, int idx, const rcase *c) {
    char path[4200];
    snprintf(path, sizeof path, "%s/case_%d.txt", dir, idx);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const tide_sampling_params *p = &c->p;
    put_floats(f, "temperature", &p->temperature, 1);
    fprintf(f, "top_k %d\n", (int)p->top_k);
    put_floats(f, "top_p", &p->top_p, 1);
    put_floats(f, "min_p", &p->min_p, 1);
    put_floats(f, "repetition", &p->repetition_penalty, 1);
    put_floats(f, "presence", &p->presence_penalty, 1);
    put_floats(f, "frequency", &p->frequency_penalty, 1);
    fprintf(f, "top_logprobs %d\n", (int)p->top_logprobs);
    put_ints(f, "prompt", c->prompt, c->n_prompt);
    put_ints(f, "output", c->output, c->n_output);
    fprintf(f, "bias_tokens");
    for (int32_t i = 0; i < p->n_logit_bias; i++) fprintf(f, " %d", (int)p->logit_bias[i].token);
    fprintf(f, "\nbias_values");
    for (int32_t i = 0; i < p->n_logit_bias; i++) fprintf(f, " %.9g", (double)p->logit_bias[i].bias);
    fprintf(f, "\nbanned");
    for (int32_t i = 0; c->allow && i < c->V; i++)
        if (!((c->allow[i >> 5] >> (i & 31)) & 1u)) fprintf(f, " %d", (int)i);
    fprintf(f, "\n");
    fclose(f);

    snprintf(path, sizeof path, "%s/case_%d.bin", dir, idx);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&c->V, 4, 1, f), 1);
    assert_int_equal(fwrite(c->logits, 4, (size_t)c->V, f), (size_t)c->V);
    for (int32_t i = 0; i < c->V; i++) {
        double e = tide_rng_exp(p->seed, c->position, TIDE_RNG_STREAM_SAMPLE, (uint32_t)i);
        assert_int_equal(fwrite(&e, 8, 1, f), 1);
    }
    fclose(f);
}

static double *read_probs(const char *dir, int idx, int32_t V) {
    char path[4200];
    snprintf(path, sizeof path, "%s/probs_%d.bin", dir, idx);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    double *p = malloc((size_t)V * sizeof *p);
    assert_int_equal(fread(p, 8, (size_t)V, f), (size_t)V);
    fclose(f);
    return p;
}

/* The raw logprobs of the chosen token and the top ones against the
 * reference's float64 log softmax. */
static void check_logprobs(const char *dir, int idx, const rcase *c, const tide_sample_result *res) {
    char path[4200];
    snprintf(path, sizeof path, "%s/logprobs_%d.txt", dir, idx);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int t;
    double lp;
    assert_int_equal(fscanf(f, "%d %lf", &t, &lp), 2);
    assert_int_equal(t, res->token);
    if (!(fabs(lp - res->logprob) <= 1e-4 * (1 + fabs(lp))))
        fail_msg("case %d: logprob of %d = %.9g, reference %.9g", idx, t, (double)res->logprob, lp);
    int32_t n = 0;
    while (fscanf(f, "%d %lf", &t, &lp) == 2) {
        assert_true(n < res->n_top);
        if (res->top_ids[n] != t) fail_msg("case %d: top %d is token %d, reference %d", idx, (int)n, res->top_ids[n], t);
        if (!(isinf(lp) ? isinf(res->top_logprobs[n]) : fabs(lp - res->top_logprobs[n]) <= 1e-4 * (1 + fabs(lp))))
            fail_msg("case %d: top %d logprob %.9g, reference %.9g", idx, (int)n, (double)res->top_logprobs[n], lp);
        n++;
    }
    fclose(f);
    assert_int_equal(n, res->n_top);
    assert_int_equal(n, c->p.top_logprobs < c->V ? c->p.top_logprobs : c->V);
}

static void test_against_numpy(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x5A3D1E};
    char *dir = tu_mkdtemp("sampler");
    assert_non_null(dir);
    rcase *cases = calloc(N_CASES, sizeof *cases);
    for (int i = 0; i < N_CASES; i++) {
        make_case(&cases[i], &r, i);
        write_case(dir, i, &cases[i]);
    }
    char cmd[8400], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s/tools/ref/sampler_ref.py %s %d", TIDE_PYTHON, TIDE_SOURCE_DIR, dir, N_CASES);
    int rc = tu_system(cmd, &out);
    if (rc != 0) fprintf(stderr, "sampler_ref.py failed (%d): %s\n", rc, out ? out : "");
    assert_int_equal(rc, 0);

    tide_sampler_ws ws;
    tide_status st = {0};
    assert_int_equal(tide_sampler_ws_init(&ws, 129280, &st), 0);
    const char *line = out;
    for (int i = 0; i < N_CASES; i++) {
        rcase *c = &cases[i];
        int idx, want;
        assert_int_equal(sscanf(line, "%d %d", &idx, &want), 2);
        assert_int_equal(idx, i);
        line = strchr(line, '\n') + 1;
        /* a workspace of a larger vocabulary serves a smaller one */
        ws.n_vocab = c->V;
        tide_sampler_input in = {.logits = c->logits, .allow = c->allow, .prompt = c->prompt,
                                 .n_prompt = c->n_prompt, .output = c->output, .n_output = c->n_output,
                                 .position = c->position};
        double *ref = read_probs(dir, i, c->V), *got = malloc((size_t)c->V * sizeof *got);
        assert_int_equal(tide_sampler_probs(&ws, &c->p, &in, got, &st), 0);
        int32_t n_ref = 0;
        for (int32_t t = 0; t < c->V; t++) {
            n_ref += ref[t] > 0;
            if ((ref[t] > 0) != (got[t] > 0) || fabs(ref[t] - got[t]) > 1e-9 * (1 + ref[t]))
                fail_msg("case %d (V=%d T=%g k=%d p=%g minp=%g): token %d prob %.17g, reference %.17g", i,
                         (int)c->V, (double)c->p.temperature, (int)c->p.top_k, (double)c->p.top_p,
                         (double)c->p.min_p, (int)t, got[t], ref[t]);
        }
        tide_sample_result res;
        assert_int_equal(tide_sample(&ws, &c->p, &in, &res, &st), 0);
        if (res.token != want)
            fail_msg("case %d: sampled %d, reference %d (T=%g k=%d p=%g)", i, (int)res.token, want,
                     (double)c->p.temperature, (int)c->p.top_k, (double)c->p.top_p);
        assert_int_equal(res.n_candidates, n_ref);
        if (c->p.want_logprobs) check_logprobs(dir, i, c, &res);
        free(ref);
        free(got);
        free_case(c);
    }
    ws.n_vocab = 129280;
    for (int32_t t = 0; t < ws.n_vocab; t++) /* scratch returned to zero */
        if (ws.seen[t] || ws.count[t]) fail_msg("workspace scratch not cleared at %d", (int)t);
    tide_sampler_ws_free(&ws);
    free(cases);
    free(out);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_against_numpy)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
