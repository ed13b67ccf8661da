/* The sampler (see sampler.h for the order of transformations).
 *
 * Cost per call on a vocabulary of V tokens: one pass to copy the logits
 * (skipped on the plain greedy path), O(history) for penalties, then either
 * one argmax pass (greedy) or: one pass to collect the finite tokens,
 * a k-entry heap for a small top-k, expected O(V) quickselects for a large
 * top-k (by count) and for top-p (by probability mass) — nothing is ever
 * sorted — and, for the race, one exp, one log and
 * one Philox block per candidate (half a block when candidates come in token
 * order, as they do without top-k or top-p). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "engine/rng.h"

int tide_sampler_ws_init(tide_sampler_ws *ws, int32_t n_vocab, tide_status *st) {
    memset(ws, 0, sizeof *ws);
    if (n_vocab <= 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler workspace: vocabulary size %d", (int)n_vocab);
    ws->n_vocab = n_vocab;
    ws->bad_row = -1;
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
    if (n > 0 && !t)
        return tide_fail(st, TIDE_ERR_INVALID, "sampler: %s has %lld tokens but no array", what, (long long)n);
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
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return tide_fail(st, TIDE_ERR_INVALID, "sampler: %d logit biases but no array", (int)p->n_logit_bias);
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

/* The total order: higher s first, then lower token id. Every pair of
 * distinct tokens is ordered, so "the best k" and "the shortest prefix with
 * mass p" are sets defined without ties, found without sorting. */
static int better(const tide_sampler_cand *a, const tide_sampler_cand *b) {
    return a->s > b->s || (a->s == b->s && a->id < b->id);
}

static void swap(tide_sampler_cand *c, int32_t i, int32_t j) {
    tide_sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Partitions c[lo..hi) around a median-of-three pivot: better ones first,
 * then the pivot; returns the pivot's index. With m non-NULL, *mass gets the
 * better ones' sum of exp(s - m). */
static int32_t partition(tide_sampler_cand *c, int32_t lo, int32_t hi, const double *m, double *mass) {
    int32_t a = lo, b = lo + (hi - lo) / 2, z = hi - 1;
    if (better(&c[b], &c[a])) swap(c, a, b);
    if (better(&c[z], &c[b])) swap(c, b, z);
    if (better(&c[b], &c[a])) swap(c, a, b);
    swap(c, b, z); /* the median becomes the pivot, at the end */
    const tide_sampler_cand pv = c[z];
    int32_t f = lo;
    double sum = 0;
    for (int32_t i = lo; i < z; i++)
        if (better(&c[i], &pv)) {
            swap(c, i, f);
            if (m) sum += exp(c[f].s - *m);
            f++;
        }
    swap(c, f, z);
    if (mass) *mass = sum;
    return f;
}

/* Top-k by quickselect: moves the best k of c[0..n) to the front. */
static void select_k(tide_sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        int32_t f = partition(c, lo, hi, NULL, NULL);
        if (f + 1 == k || f == k) return;
        if (f > k) hi = f;
        else lo = f + 1;
    }
}

/* Top-p by a quickselect on probability mass: the shortest prefix of the
 * order with mass >= p * Z ends up in c[0..returned). Invariant: c[0..lo)
 * is kept, with mass acc < target; the boundary lies in c[lo..hi). */
static int32_t top_p(tide_sampler_cand *c, int32_t n, double m, double p) {
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp(c[i].s - m);
    const double target = p * z;
    double acc = 0;
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        double mass;
        int32_t f = partition(c, lo, hi, &m, &mass);
        if (acc + mass >= target) {
            hi = f;
            continue;
        }
        acc += mass + exp(c[f].s - m);
        if (acc >= target) return f + 1;
        lo = f + 1;
    }
    return hi; /* only when rounding kept a sum a hair short of p * Z */
}

/* Min-p: drops tokens with s < m + log(min_p), i.e. p < min_p * p_max. */
static int32_t min_p(tide_sampler_cand *c, int32_t n, double m, double mp) {
    double tau = m + log(mp);
    int32_t f = 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i].s >= tau) c[f++] = c[i];
    return f;
}

/* A small top-k is cheaper with a k-entry heap that most tokens never enter
 * (one comparison each) than with a quickselect over all of them. */
#define TOPK_HEAP_MAX 1024

/* Min-heap on `better`: the root is the worst kept candidate. */
static void sift_down(tide_sampler_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t w = i, a = 2 * i + 1, b = a + 1;
        if (a < n && better(&h[w], &h[a])) w = a;
        if (b < n && better(&h[w], &h[b])) w = b;
        if (w == i) return;
        swap(h, i, w);
        i = w;
    }
}

static void sift_up(tide_sampler_cand *h, int32_t i) {
    while (i > 0 && better(&h[(i - 1) / 2], &h[i])) {
        swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

/* Collects the finite tokens' scaled logits into c: all of them (heap_k == 0)
 * or the best heap_k. Returns the count, or -1 with st set. */
static int32_t collect(const float *l, int32_t V, double inv_t, int32_t heap_k, tide_sampler_cand *c,
                       tide_status *st) {
    int32_t k = 0;
    for (int32_t i = 0; i < V; i++) {
        float v = l[i];
        if (!(v > -INFINITY)) continue; /* -inf and NaN */
        if (v == INFINITY) return tide_fail(st, TIDE_ERR_INVALID, "sampler: logit of token %d is +inf", (int)i);
        tide_sampler_cand x = {(double)v * inv_t, i};
        if (heap_k == 0) {
            c[k++] = x;
        } else if (k < heap_k) {
            c[k] = x;
            sift_up(c, k++);
        } else if (better(&x, &c[0])) {
            c[0] = x;
            sift_down(c, k, 0);
        }
    }
    if (k == 0) return tide_fail(st, TIDE_ERR_INVALID, "sampler: no token has a finite logit (all masked?)");
    return k;
}

/* Steps 4-7 over the processed logits l: candidates in ws->cand[0..*n) (in
 * no particular order), their max scaled logit in *m. */
static int candidates(tide_sampler_ws *ws, const tide_sampling_params *p, const float *l, int32_t *n,
                      double *m, tide_status *st) {
    tide_sampler_cand *c = ws->cand;
    int32_t top_k = p->top_k > 0 && p->top_k < ws->n_vocab ? p->top_k : 0;
    int32_t heap_k = top_k <= TOPK_HEAP_MAX ? top_k : 0;
    int32_t k = collect(l, ws->n_vocab, 1.0 / (double)p->temperature, heap_k, c, st);
    if (k < 0) return -1;
    if (top_k > 0 && top_k < k) { /* a large k: quickselect */
        select_k(c, k, top_k);
        k = top_k;
    }
    double best = c[0].s;
    for (int32_t i = 1; i < k; i++)
        if (c[i].s > best) best = c[i].s;
    if (p->top_p < 1.0f) k = top_p(c, k, best, (double)p->top_p);
    if (p->min_p > 0.0f) k = min_p(c, k, best, (double)p->min_p);
    *n = k;
    *m = best;
    return 0;
}

/* ---- step 8: the exponential race --------------------------------------- */

/* argmax_i exp(s_i - m) / E_i over the candidates (the normaliser is common
 * to all and dropped); ties to the lower token id. Consecutive candidates
 * that share a Philox block reuse it.
 *
 * Our E lies in [1.1e-16, 36.74] (rng.h), so the best token's q is at least
 * 1 / 36.74 = 0.027 and a token with s < m - RACE_CUT has q at most
 * exp(-RACE_CUT) / 1.1e-16 = 0.014: it cannot win and needs no draw. The
 * result is exactly the same, and low temperatures skip most of the vocab. */
#define RACE_CUT 41.0

static int32_t race(const tide_sampler_cand *c, int32_t n, double m, uint64_t seed, uint64_t pos) {
    int32_t best = -1;
    double bq = -1;
    uint32_t pair = UINT32_MAX;
    uint64_t w[2] = {0, 0};
    for (int32_t i = 0; i < n; i++) {
        if (c[i].s < m - RACE_CUT) continue;
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

/* The max and the log of the softmax denominator of the raw logits: the
 * log probability of t is l[t] - m - logz. */
static void raw_logz(const float *l, int32_t V, float *m_out, double *logz) {
    float m = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > m) m = l[i];
    double z = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) z += exp((double)l[i] - m);
    *m_out = m;
    *logz = log(z);
}

/* A raw logit as ranked and reported: NaN counts as -inf (step 0). */
static inline float raw_val(const float *l, int32_t t) { return l[t] == l[t] ? l[t] : -INFINITY; }

/* The k best raw logits by insertion into a sorted list of k: one pass,
 * O(V) for the small k OpenAI allows. Every comparison goes through
 * raw_val: a NaN compared raw would never be displaced from the list (seen
 * as a NaN token reported as the best one, test_sampler_ref seed
 * 1883413251536005). */
static void raw_top(const float *l, int32_t V, int32_t k, float m, double logz, tide_sample_result *out) {
    int32_t n = 0;
    for (int32_t t = 0; t < V; t++) {
        float x = raw_val(l, t);
        if (n == k && !(x > raw_val(l, out->top_ids[n - 1]))) continue;
        int32_t j = n < k ? n++ : k - 1;
        while (j > 0 && x > raw_val(l, out->top_ids[j - 1])) { /* strictly greater: ties keep the lower id first */
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_ids[j] = t;
    }
    out->n_top = n;
    for (int32_t i = 0; i < n; i++) out->top_logprobs[i] = (float)((double)raw_val(l, out->top_ids[i]) - m - logz);
}

int tide_sample(tide_sampler_ws *ws, const tide_sampling_params *p, const tide_sampler_input *in,
                tide_sample_result *out, tide_status *st) {
    const float *l;
    if (process_logits(ws, p, in, &l, st)) return -1;
    if (is_greedy(p)) {
        out->token = argmax(l, ws->n_vocab);
        if (out->token < 0)
            return tide_fail(st, TIDE_ERR_INVALID, "sampler: no token has a finite logit (all masked?)");
        out->n_candidates = 1;
    } else {
        int32_t n;
        double m;
        if (candidates(ws, p, l, &n, &m, st)) return -1;
        out->token = race(ws->cand, n, m, p->seed, in->position);
        out->n_candidates = n;
    }
    out->logprob = 0.0f;
    out->n_top = 0;
    if (in->want_logprob || p->want_logprobs || p->top_logprobs > 0) {
        float m;
        double logz;
        raw_logz(in->logits, ws->n_vocab, &m, &logz);
        out->logprob = (float)((double)in->logits[out->token] - m - logz);
        if (p->top_logprobs > 0) raw_top(in->logits, ws->n_vocab, p->top_logprobs, m, logz, out);
    }
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

/* ---- batches -------------------------------------------------------------- */

typedef struct {
    tide_sampler_ws *ws;
    const tide_sampling_params *const *params;
    const tide_sampler_input *inputs;
    tide_sample_result *results;
} batch_job;

/* Each thread records its first failure in its own workspace (a thread gets
 * rows in increasing order, so that is its lowest failed row). */
static void batch_row(void *arg, int64_t row, int thread) {
    batch_job *job = arg;
    tide_sampler_ws *ws = &job->ws[thread];
    tide_status st = {0};
    if (tide_sample(ws, job->params[row], &job->inputs[row], &job->results[row], &st) == 0) return;
    job->results[row].token = -1;
    if (ws->bad_row < 0 || row < ws->bad_row) {
        ws->bad_row = row;
        ws->bad_st = st;
    }
}

int tide_sample_batch(struct tide_pool *pool, tide_sampler_ws *ws, const tide_sampling_params *const *params,
                      const tide_sampler_input *inputs, tide_sample_result *results, int64_t n, tide_status *st) {
    int threads = tide_pool_size(pool);
    if (n < 0 || (n > 0 && (!ws || !params || !inputs || !results)))
        return tide_fail(st, TIDE_ERR_INVALID, "sampler batch: bad arguments (%lld rows)", (long long)n);
    for (int t = 0; t < threads; t++) ws[t].bad_row = -1;
    batch_job job = {ws, params, inputs, results};
    tide_pool_for(pool, n, batch_row, &job);
    int bad = -1;
    for (int t = 0; t < threads; t++)
        if (ws[t].bad_row >= 0 && (bad < 0 || ws[t].bad_row < ws[bad].bad_row)) bad = t;
    if (bad < 0) return 0;
    tide_fail(st, ws[bad].bad_st.code, "%s", ws[bad].bad_st.msg);
    return tide_fail_ctx(st, "sampler batch row %lld", (long long)ws[bad].bad_row);
}
