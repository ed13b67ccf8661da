/* The sampler: one row of logits + a request's parameters -> one token.
 *
 * Order of transformations (docs/engine.md explains each and where it differs
 * from vLLM):
 *   0. constraint mask (optional bitmask; disallowed tokens get -inf),
 *      NaN logits count as -inf;
 *   1. penalties, as vLLM applies them: repetition (prompt and output tokens:
 *      a positive logit is divided by the penalty, a negative or zero one
 *      multiplied), then frequency (minus penalty x count in the output), then
 *      presence (minus penalty once per distinct output token);
 *   2. logit bias (added);
 *   3. greedy fast path when temperature < TIDE_SAMPLING_GREEDY_EPS or
 *      top_k == 1: the argmax, ties to the lowest token id;
 *   4. temperature: s = l / T;
 *   5. top-k: the k best tokens in the total order (s descending, token id
 *      ascending on ties) — exactly k;
 *   6. top-p: of those, the shortest prefix of that order whose probability
 *      (renormalised over the top-k set) reaches p;
 *   7. min-p: of those, the tokens with p >= min_p * p_max;
 *   8. the exponential race of the official reference: the token maximising
 *      p_i / E_i where E_i ~ Exp(1) is drawn from the counter-based RNG keyed
 *      by (seed, position, token id) — equivalent to sampling from p.
 *
 * Nothing here depends on anything but the row, the parameters, the token
 * history and the position: the result is batch-invariant by construction.
 * The only memory used is the caller's workspace (no allocation per call). */
#ifndef TIDE_ENGINE_SAMPLER_H
#define TIDE_ENGINE_SAMPLER_H

#include <stdint.h>

#include "base/status.h"
#include "engine/sampling_params.h"

typedef struct tide_sampler_cand {
    double s;   /* the scaled logit l / T */
    int32_t id; /* the token */
} tide_sampler_cand;

/* Scratch memory for one sampling call at a time (one per worker thread). */
typedef struct tide_sampler_ws {
    int32_t n_vocab;
    float *logits;            /* [n_vocab] the logits after steps 0-2 */
    tide_sampler_cand *cand;  /* [n_vocab] candidates of steps 4-8 */
    uint8_t *seen;            /* [n_vocab] all zero between calls */
    int32_t *count;           /* [n_vocab] all zero between calls */
    int64_t bad_row;          /* tide_sample_batch: this thread's first failed row, -1 none */
    tide_status bad_st;       /* ... and why */
} tide_sampler_ws;

int tide_sampler_ws_init(tide_sampler_ws *ws, int32_t n_vocab, tide_status *st);
void tide_sampler_ws_free(tide_sampler_ws *ws);

typedef struct tide_sampler_input {
    const float *logits;     /* [n_vocab] */
    const uint32_t *allow;   /* optional: bit (t & 31) of allow[t >> 5] set = token t allowed */
    const int32_t *prompt;   /* the prompt's tokens (repetition penalty only) */
    int64_t n_prompt;
    const int32_t *output;   /* the tokens generated so far */
    int64_t n_output;
    uint64_t position;       /* absolute position of the token being sampled (the RNG counter) */
    int want_logprob;        /* fill tide_sample_result.logprob */
} tide_sampler_input;

typedef struct tide_sample_result {
    int32_t token;
    int32_t n_candidates; /* tokens kept by steps 5-7 (1 when greedy); a few may have a
                           * probability that underflows to 0 in double */
    float logprob;        /* log softmax(raw logits)[token], if want_logprob or
                           * want_logprobs (else 0) */
    /* p->top_logprobs > 0: the n_top best tokens of the raw logits (ties to
     * the lower id) and their log softmax, best first */
    int32_t n_top;
    int32_t top_ids[TIDE_SAMPLING_MAX_TOP_LOGPROBS];
    float top_logprobs[TIDE_SAMPLING_MAX_TOP_LOGPROBS];
} tide_sample_result;

/* Samples one token. Fails (TIDE_ERR_INVALID) on a history token outside the
 * vocabulary, a +inf logit on the sampling path, or when no token is left with
 * a finite logit (everything masked). Assumes tide_sampling_params_check
 * passed for this vocabulary. */
int tide_sample(tide_sampler_ws *ws, const tide_sampling_params *p, const tide_sampler_input *in,
                tide_sample_result *out, tide_status *st);

/* The distribution step 8 samples from, dense: probs[n_vocab], zero outside
 * the candidates (one-hot on the greedy path). For tests, logprobs of the
 * processed distribution and speculative acceptance. */
int tide_sampler_probs(tide_sampler_ws *ws, const tide_sampling_params *p,
                       const tide_sampler_input *in, double *probs, tide_status *st);

/* Samples n rows in parallel on `pool` (NULL = inline): row i with
 * *params[i] and inputs[i] into results[i], using ws[thread] (one workspace
 * per thread of the pool: tide_pool_size(pool) of them, all for the same
 * vocabulary). Rows are independent, so the tokens are those of n single
 * calls, in any order and on any number of threads. On failure every good row
 * is still sampled, failed rows get token -1, and st describes the
 * lowest-numbered failed row. */
struct tide_pool;
int tide_sample_batch(struct tide_pool *pool, tide_sampler_ws *ws, const tide_sampling_params *const *params,
                      const tide_sampler_input *inputs, tide_sample_result *results, int64_t n, tide_status *st);

#endif
