/* The sampler (see sampler.h for the order of transformations).
 *
 * Cost per call on a vocabulary of V tokens: one pass to copy the logits
 * (skipped on the plain greedy path), O(history) for penalties, then either
 * one argmax pass (greedy) or: one pass for the max, O(V log k) for top-k
 * (a k-entry heap that most tokens never enter), a partition by a logit
 * threshold for top-p so that only the tokens that can matter get sorted, and
 * one Philox block per two candidates for the race. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

int tide_sampler_ws_init(tide_sampler_ws *ws, int32_t n_vocab, tide_status *st) {
    memset(ws, 0, sizeof *ws);
    if (n_vocab <= 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler workspace: vocabulary size %d", (int)n_vocab);
    ws->n_vocab = n_vocab;
    ws->logits = malloc((size_t)n_vocab * sizeof *ws->logits);
    ws->cand = malloc((size_t)n_vocab * sizeof *ws->cand);
    ws->seen = calloc((size_t)n_vocab, sizeof *ws->seen);
    ws->count = calloc((size_t)n_vocab, sizeof *ws->count);
    if (!ws->logits || !ws->cand || !ws->seen || !ws->count) {
        tide_sampler_ws_free(ws);
        return tide_fail(st, TIDE_ERR_NOMEM, "sampler workspace: out of memory for %d tokens", (int)n_vocab);
    }
    return 0;
}

void tide_sampler_ws_free(tide_sampler_ws *ws) {
    free(ws->logits);
    free(ws->cand);
    free(ws->seen);
    free(ws->count);
    memset(ws, 0, sizeof *ws);
}

/* ---- steps 0-2: mask, penalties, bias ---------------------------------- */

static int check_history(const int32_t *t, int64_t n, int32_t V, const char *what, tide_status *st) {
    if (n > 0 && !t) return tide_fail(st, TIDE_ERR_INVALID, "sampler: %s has %lld tokens but no array", what, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= V)
            return tide_fail(st, TIDE_ERR_INVALID, "sampler: %s[%lld] = %d is outside the vocabulary [0, %d)",
                             what, (long long)i, (int)t[i], (int)V);
    return 0;
}

static void repel(float *l, int32_t t, float rp) {
    l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
}

/* Repetition penalty once per distinct token of prompt + output; `seen`
 * dedups and is cleared again before returning. */
static void repetition_penalty(tide_sampler_ws *ws, float rp, const tide_sampler_input *in) {
    const int32_t *h[2] = {in->prompt, in->output};
    const int64_t n[2] = {in->n_prompt, in->n_output};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n[k]; i++)
            if (!ws->seen[h[k][i]]) {
                ws->seen[h[k][i]] = 1;
                repel(ws->logits, h[k][i], rp);
            }
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n[k]; i++) ws->seen[h[k][i]] = 0;
}

/* Frequency (per occurrence) and presence (per distinct token) over the
 * output; `count` returns to zero as each token is applied. */
static void output_penalties(tide_sampler_ws *ws, float freq, float pres, const tide_sampler_input *in) {
    for (int64_t i = 0; i < in->n_output; i++) ws->count[in->output[i]]++;
    for (int64_t i = 0; i < in->n_output; i++) {
        int32_t t = in->output[i];
        if (ws->count[t] == 0) continue; /* already applied */
        ws->logits[t] -= freq * (float)ws->count[t];
        ws->logits[t] -= pres;
        ws->count[t] = 0;
    }
}

static int needs_copy(const tide_sampling_params *p, const tide_sampler_input *in) {
    return in->allow || p->n_logit_bias > 0 || p->repetition_penalty != 1.0f ||
           p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
}

/* Points *lp at the logits after steps 0-2: the caller's row when nothing
 * changes it, else the workspace copy. */
static int process_logits(tide_sampler_ws *ws, const tide_sampling_params *p, const tide_sampler_input *in,
                          const float **lp, tide_status *st) {
    const int32_t V = ws->n_vocab;
    if (!in->logits) return tide_fail(st, TIDE_ERR_INVALID, "sampler: no logits");
    if (!needs_copy(p, in)) {
        *lp = in->logits;
        return 0;
    }
    float *l = ws->logits;
    for (int32_t i = 0; i < V; i++) {
        float v = in->logits[i];
        int allowed = !in->allow || ((in->allow[i >> 5] >> (i & 31)) & 1u);
        l[i] = (allowed && v == v) ? v : -INFINITY;
    }
    if (p->repetition_penalty != 1.0f) {
        if (check_history(in->prompt, in->n_prompt, V, "prompt", st) ||
            check_history(in->output, in->n_output, V, "output", st))
            return -1;
        repetition_penalty(ws, p->repetition_penalty, in);
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        if (check_history(in->output, in->n_output, V, "output", st)) return -1;
        output_penalties(ws, p->frequency_penalty, p->presence_penalty, in);
    }
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t < 0 || t >= V)
            return tide_fail(st, TIDE_ERR_INVALID, "sampler: logit_bias token %d outside the vocabulary", (int)t);
        l[t] += p->logit_bias[i].bias;
    }
    *lp = l;
    return 0;
}

/* ---- step 3: greedy ------------------------------------------------------ */

static int is_greedy(const tide_sampling_params *p) {
    return p->temperature < TIDE_SAMPLING_GREEDY_EPS || p->top_k == 1;
}

/* First index of the maximum; NaN and -inf never win. -1 if none is finite. */
static int32_t argmax(const float *l, int32_t V) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > bv) {
            bv = l[i];
            best = i;
        }
    return best;
}

/* ---- steps 4-7: candidates ---------------------------------------------- */

/* The total order: higher s first, then lower token id. */
static int better(const tide_sampler_cand *a, const tide_sampler_cand *b) {
    return a->s > b->s || (a->s == b->s && a->id < b->id);
}

static int cmp_cand(const void *pa, const void *pb) {
    const tide_sampler_cand *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Min-heap on `better` (root = the worst kept candidate). */
static void sift_down(tide_sampler_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t w = i, a = 2 * i + 1, b = a + 1;
        if (a < n && better(&h[w], &h[a])) w = a;
        if (b < n && better(&h[w], &h[b])) w = b;
        if (w == i) return;
        tide_sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void sift_up(tide_sampler_cand *h, int32_t i) {
    while (i > 0) {
        int32_t up = (i - 1) / 2;
        if (!better(&h[up], &h[i])) return;
        tide_sampler_cand t = h[i];
        h[i] = h[up];
        h[up] = t;
        i = up;
    }
}

/* Fills c[0..*n) with the finite tokens' scaled logits — the best k only when
 * k > 0 (sorted then). */
static int collect(const float *l, int32_t V, double inv_t, int32_t k, tide_sampler_cand *c, int32_t *n,
                   int *sorted, tide_status *st) {
    int32_t m = 0;
    for (int32_t i = 0; i < V; i++) {
        float v = l[i];
        if (!(v > -INFINITY)) continue; /* -inf and NaN */
        if (v == INFINITY)
            return tide_fail(st, TIDE_ERR_INVALID, "sampler: logit of token %d is +inf", (int)i);
        tide_sampler_cand x = {(double)v * inv_t, i};
        if (k <= 0 || m < k) {
            c[m] = x;
            if (k > 0) sift_up(c, m);
            m++;
        } else if (better(&x, &c[0])) {
            c[0] = x;
            sift_down(c, m, 0);
        }
    }
    if (m == 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler: no token has a finite logit (all masked?)");
    *sorted = k > 0;
    if (*sorted) qsort(c, (size_t)m, sizeof *c, cmp_cand);
    *n = m;
    return 0;
}

static double max_s(const tide_sampler_cand *c, int32_t n) {
    double m = c[0].s;
    for (int32_t i = 1; i < n; i++)
        if (c[i].s > m) m = c[i].s;
    return m;
}

/* Moves the candidates with s >= tau to the front, starting at `from`;
 * returns the new front length and adds their mass to *mass. */
static int32_t partition(tide_sampler_cand *c, int32_t from, int32_t n, double tau, double m, double *mass) {
    int32_t f = from;
    for (int32_t i = from; i < n; i++)
        if (c[i].s >= tau) {
            tide_sampler_cand t = c[f];
            c[f] = c[i];
            c[i] = t;
            *mass += exp(c[f].s - m);
            f++;
        }
    return f;
}

/* Top-p: keeps the shortest prefix of the total order with mass >= p * Z.
 * An unsorted set is first cut by a falling logit threshold: a set {s >= tau}
 * is itself a prefix of the order, so once its mass reaches p*Z the answer
 * lies inside it, and only it needs sorting. */
static int32_t top_p(tide_sampler_cand *c, int32_t n, int sorted, double m, double p) {
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp(c[i].s - m);
    double target = p * z;
    if (!sorted) {
        int32_t f = 0;
        double mass = 0;
        for (double gap = 8; f < n; gap *= 2) {
            double tau = gap > 1e6 ? -INFINITY : m - gap;
            f = partition(c, f, n, tau, m, &mass);
            if (mass >= target) break;
        }
        n = f;
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
    }
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += exp(c[i].s - m);
        if (cum >= target) return i + 1;
    }
    return n; /* rounding kept the sum a hair short of p*Z: keep everything */
}

/* Min-p: drops tokens with s < m + log(min_p), i.e. p < min_p * p_max
 * (keeps the order of the rest). */
static int32_t min_p(tide_sampler_cand *c, int32_t n, double m, double mp) {
    double tau = m + log(mp);
    int32_t f = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].s >= tau) c[f++] = c[i];
    return f;
}

/* Steps 4-7 over the processed logits l: candidates in ws->cand[0..*n), their
 * max scaled logit in *m. */
static int candidates(tide_sampler_ws *ws, const tide_sampling_params *p, const float *l, int32_t *n,
                      double *m, tide_status *st) {
    int sorted = 0;
    int32_t k = p->top_k > 0 && p->top_k < ws->n_vocab ? p->top_k : 0;
    if (collect(l, ws->n_vocab, 1.0 / (double)p->temperature, k, ws->cand, n, &sorted, st)) return -1;
    *m = max_s(ws->cand, *n);
    if (p->top_p < 1.0f) *n = top_p(ws->cand, *n, sorted, *m, (double)p->top_p);
    if (p->min_p > 0.0f) *n = min_p(ws->cand, *n, *m, (double)p->min_p);
    return 0;
}

/* ---- step 8: the exponential race --------------------------------------- */

/* argmax_i exp(s_i - m) / E_i over the candidates (the normaliser is common
 * to all and dropped); ties to the lower token id. Consecutive candidates
 * that share a Philox block reuse it. */
static int32_t race(const tide_sampler_cand *c, int32_t n, double m, uint64_t seed, uint64_t pos) {
    int32_t best = -1;
    double bq = -1;
    uint32_t pair = UINT32_MAX;
    uint64_t w[2] = {0, 0};
    for (int32_t i = 0; i < n; i++) {
        uint32_t id = (uint32_t)c[i].id;
        if ((id >> 1) != pair) {
            pair = id >> 1;
            tide_rng_words(seed, pos, TIDE_RNG_STREAM_SAMPLE, pair, w);
        }
        double e = -log(tide_rng_u01(w[id & 1]));
        double q = exp(c[i].s - m) / e;
        if (q > bq || (q == bq && c[i].id < best)) {
            bq = q;
            best = c[i].id;
        }
    }
    return best;
}

static float raw_logprob(const float *l, int32_t V, int32_t t) {
    float m = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > m) m = l[i];
    double z = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) z += exp((double)l[i] - m);
    return (float)((double)l[t] - m - log(z));
}

int tide_sample(tide_sampler_ws *ws, const tide_sampling_params *p, const tide_sampler_input *in,
                tide_sample_result *out, tide_status *st) {
    const float *l;
    if (process_logits(ws, p, in, &l, st)) return -1;
    if (is_greedy(p)) {
        out->token = argmax(l, ws->n_vocab);
        if (out->token < 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler: no token has a finite logit (all masked?)");
        out->n_candidates = 1;
    } else {
        int32_t n;
        double m;
        if (candidates(ws, p, l, &n, &m, st)) return -1;
        out->token = race(ws->cand, n, m, p->seed, in->position);
        out->n_candidates = n;
    }
    out->logprob = in->want_logprob ? raw_logprob(in->logits, ws->n_vocab, out->token) : 0.0f;
    return 0;
}

int tide_sampler_probs(tide_sampler_ws *ws, const tide_sampling_params *p, const tide_sampler_input *in,
                       double *probs, tide_status *st) {
    const float *l;
    if (process_logits(ws, p, in, &l, st)) return -1;
    memset(probs, 0, (size_t)ws->n_vocab * sizeof *probs);
    if (is_greedy(p)) {
        int32_t t = argmax(l, ws->n_vocab);
        if (t < 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler: no token has a finite logit (all masked?)");
        probs[t] = 1.0;
        return 0;
    }
    int32_t n;
    double m, z = 0;
    if (candidates(ws, p, l, &n, &m, st)) return -1;
    for (int32_t i = 0; i < n; i++) z += exp(ws->cand[i].s - m);
    for (int32_t i = 0; i < n; i++) probs[ws->cand[i].id] = exp(ws->cand[i].s - m) / z;
    return 0;
}
