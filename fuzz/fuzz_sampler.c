/* Fuzz target for the sampler (engine/sampler.h): a header picks the
 * vocabulary size and the parameters, the rest of the input is the logits
 * (f32, NaN and infinities included; repeated to fill the vocabulary, which
 * makes ties common), the allow mask and the token history. Parameters that
 * tide_sampling_params_check refuses are dropped (the sampler assumes it
 * passed). Every call must return without a fault, and a chosen token must:
 *   - be in the vocabulary and allowed by the mask, with a logit that is
 *     neither NaN nor -inf;
 *   - be the same on a second call (the draw is a function of the inputs);
 *   - without penalties and bias (the logits are then the processed ones):
 *     be the argmax (lowest id on ties) on the greedy path, else lie in the
 *     top-k, inside the top-p prefix and above the min-p threshold, each
 *     recomputed here by plain sorting.
 * A violation aborts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

#define CHECK(c)                                                                 \
    do {                                                                         \
        if (!(c)) {                                                              \
            fprintf(stderr, "fuzz_sampler: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                             \
        }                                                                        \
    } while (0)

#define HDR 10
#define MAX_HIST 64

typedef struct rank {
    double s;
    int32_t id;
} rank;

/* The sampler's total order: s descending, then token id ascending. */
static int cmp_rank(const void *a, const void *b) {
    const rank *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int allowed(const uint32_t *allow, int32_t t) { return !allow || (allow[t >> 5] >> (t & 31) & 1); }

/* The filters recomputed from the logits (no penalties, no bias). */
static void check_filters(const tide_sampling_params *p, const float *l, const uint32_t *allow, int32_t V,
                          int32_t token) {
    rank *r = malloc((size_t)V * sizeof *r);
    CHECK(r != NULL);
    int greedy = p->temperature < TIDE_SAMPLING_GREEDY_EPS || p->top_k == 1;
    double inv_t = greedy ? 1.0 : 1.0 / (double)p->temperature;
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (allowed(allow, i) && l[i] > -INFINITY) r[n++] = (rank){(double)l[i] * inv_t, i};
    qsort(r, (size_t)n, sizeof *r, cmp_rank);
    int32_t pos = 0;
    while (pos < n && r[pos].id != token) pos++;
    CHECK(pos < n);
    if (greedy) {
        CHECK(pos == 0);
    } else {
        int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
        CHECK(pos < k);
        double z = 0, before = 0;
        for (int32_t i = 0; i < k; i++) z += exp(r[i].s - r[0].s);
        for (int32_t i = 0; i < pos; i++) before += exp(r[i].s - r[0].s);
        if (p->top_p < 1.0f) CHECK(before < (double)p->top_p * z * (1 + 1e-9));
        if (p->min_p > 0.0f) CHECK(r[pos].s >= r[0].s + log((double)p->min_p));
    }
    free(r);
}

static float pick(const float *table, size_t n, uint8_t b) { return table[b % n]; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HDR + 4) return 0;
    static const float temps[] = {0, 1e-6f, 1e-5f, 0.1f, 0.7f, 1, 1.5f, 2, 1e6f};
    static const float top_ps[] = {1, 1, 0.95f, 0.5f, 1e-6f, 0, 1.5f};
    static const float min_ps[] = {0, 0, 0.05f, 0.5f, 1, -0.1f};
    const uint8_t *h = data;
    const int32_t V = 1 + (int32_t)((h[0] | h[1] << 8) % 1500); /* > 1024 reaches the quickselect */
    const uint8_t flags = h[6];
    const int penalties = flags & 1, bias = flags & 2, mask = flags & 4;
    tide_sampling_params p = tide_sampling_params_default();
    p.temperature = pick(temps, sizeof temps / sizeof *temps, h[2]);
    static const int32_t ks[] = {0, 1, 2, 5, 50, 1024, 1025};
    p.top_k = h[3] < 200 ? ks[h[3] % 7] : V - 1 + h[3] % 3;
    p.top_p = pick(top_ps, sizeof top_ps / sizeof *top_ps, h[4]);
    p.min_p = pick(min_ps, sizeof min_ps / sizeof *min_ps, h[5]);
    p.seed = h[7];
    if (penalties) {
        p.repetition_penalty = 0.25f + (float)(h[8] % 8) * 0.25f;
        p.presence_penalty = (float)(h[9] % 9) * 0.5f - 2;
        p.frequency_penalty = (float)(h[8] >> 4) * 0.25f - 2;
    }
    const uint8_t *body = data + HDR;
    size_t nb = size - HDR;

    float *logits = malloc((size_t)V * sizeof *logits);
    uint32_t *allow = calloc((size_t)(V + 31) / 32, sizeof *allow);
    tide_logit_bias lb[8];
    int32_t prompt[MAX_HIST], output[MAX_HIST];
    CHECK(logits && allow);
    size_t nf = nb / 4;
    for (int32_t i = 0; i < V; i++) { /* the input's floats, cycled; an index shift breaks some ties */
        size_t j = (size_t)i % nf;
        memcpy(&logits[i], body + 4 * j, 4);
        if (flags & 8 && isfinite(logits[i])) logits[i] += (float)(i / (int32_t)nf);
    }
    for (int32_t i = 0; i < V; i++)
        if (body[(size_t)i % nb] & 1) allow[i >> 5] |= 1u << (i & 31);
    int64_t n_prompt = body[0] % MAX_HIST, n_output = body[nb - 1] % MAX_HIST;
    for (int64_t i = 0; i < n_prompt; i++) prompt[i] = (int32_t)(body[(size_t)i % nb] * 7 % V);
    for (int64_t i = 0; i < n_output; i++) output[i] = (int32_t)(body[(size_t)(i + 3) % nb] * 13 % V);
    if (flags & 16 && n_output > 0) output[0] = (flags & 32) ? V : -1; /* must be refused */
    if (bias) {
        for (int i = 0; i < 8; i++) /* biases past +-100 are refused by the check */
            lb[i] = (tide_logit_bias){(int32_t)(body[(size_t)i % nb] % V), (float)(int8_t)body[(size_t)(i + 1) % nb]};
        p.logit_bias = lb;
        p.n_logit_bias = 8;
    }

    tide_status st = {0};
    tide_sampler_ws ws;
    if (tide_sampling_params_check(&p, V, &st) != 0 || tide_sampler_ws_init(&ws, V, &st) != 0) goto out;
    tide_sampler_input in = {logits, mask ? allow : NULL, prompt, n_prompt, output, n_output,
                             (uint64_t)h[7] * 1000003u, (flags & 64) != 0};
    tide_sample_result res, again;
    if (tide_sample(&ws, &p, &in, &res, &st) == 0) {
        int32_t t = res.token;
        CHECK(t >= 0 && t < V);
        CHECK(allowed(in.allow, t));
        CHECK(!isnan(logits[t]) && logits[t] > -INFINITY);
        CHECK(res.n_candidates >= 1);
        CHECK(tide_sample(&ws, &p, &in, &again, &st) == 0 && again.token == t);
        if (!penalties && !bias) check_filters(&p, logits, in.allow, V, t);
        double *probs = malloc((size_t)V * sizeof *probs);
        CHECK(probs != NULL);
        if (tide_sampler_probs(&ws, &p, &in, probs, &st) == 0) {
            double sum = 0;
            for (int32_t i = 0; i < V; i++) {
                CHECK(probs[i] >= 0 && probs[i] <= 1);
                CHECK(probs[i] == 0 || allowed(in.allow, i));
                sum += probs[i];
            }
            CHECK(fabs(sum - 1) < 1e-6);
        }
        free(probs);
    } else {
        CHECK(st.msg[0] != 0); /* a refusal says why */
    }
    tide_sampler_ws_free(&ws);
out:
    free(logits);
    free(allow);
    return 0;
}
