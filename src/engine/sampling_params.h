/* The sampling parameters of one request, as the api layer fills them and the
 * sampler reads them. Plain data: the arrays are borrowed (the request owns
 * them) and must outlive the request.
 *
 * Defaults (tide_sampling_params_default) switch every transformation off and
 * sample from softmax(logits) at temperature 1: the OpenAI defaults. A request
 * without a seed gets one from the engine at admission (tide_rng_derive_seed),
 * so every request is reproducible from its recorded seed. */
#ifndef TIDE_ENGINE_SAMPLING_PARAMS_H
#define TIDE_ENGINE_SAMPLING_PARAMS_H

#include <stdint.h>

#include "base/status.h"

/* Below this temperature the sampler takes the greedy path (vLLM's
 * _SAMPLING_EPS; the reference divides by max(T, 1e-5), the same limit). */
#define TIDE_SAMPLING_GREEDY_EPS 1e-5f
/* Alternatives a request may ask log probabilities for (OpenAI's limit). */
#define TIDE_SAMPLING_MAX_TOP_LOGPROBS 20

typedef struct tide_logit_bias {
    int32_t token;
    float bias; /* added to the logit; OpenAI allows [-100, 100] */
} tide_logit_bias;

typedef struct tide_sampling_params {
    float temperature;        /* < TIDE_SAMPLING_GREEDY_EPS: greedy (argmax) */
    float top_p;              /* (0, 1]; 1 = off */
    int32_t top_k;            /* <= 0 = off; 1 = greedy */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off; prompt and output tokens */
    float presence_penalty;   /* [-2, 2]; 0 = off; output tokens */
    float frequency_penalty;  /* [-2, 2]; 0 = off; output tokens */
    uint64_t seed;
    const tide_logit_bias *logit_bias; /* n_logit_bias entries; a token may repeat (adds up) */
    int32_t n_logit_bias;
    const int32_t *stop_tokens;        /* n_stop_tokens ids that end the request (EOS included by the caller) */
    int32_t n_stop_tokens;
    int64_t max_tokens;                /* generated tokens at most; <= 0 = no limit here */
    /* Log probabilities of the raw logits (the model's distribution, before
     * any of the transformations), as OpenAI's logprobs report them. */
    int want_logprobs;                 /* the chosen token's */
    int32_t top_logprobs;              /* and the best 0..TIDE_SAMPLING_MAX_TOP_LOGPROBS tokens' */
} tide_sampling_params;

static inline tide_sampling_params tide_sampling_params_default(void) {
    tide_sampling_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

/* Checks every field against a vocabulary of n_vocab tokens (ranges above,
 * finite numbers, token ids in [0, n_vocab)). Called once at admission so the
 * hot path does not re-validate. */
int tide_sampling_params_check(const tide_sampling_params *p, int32_t n_vocab, tide_status *st);

/* Why a request ends after emitting `token` as its n_generated-th token
 * (1-based count, the token included). */
typedef enum tide_stop_reason {
    TIDE_STOP_NONE = 0,
    TIDE_STOP_TOKEN,  /* token is one of stop_tokens (checked first) */
    TIDE_STOP_LENGTH, /* max_tokens reached */
} tide_stop_reason;

tide_stop_reason tide_sampling_stop(const tide_sampling_params *p, int32_t token, int64_t n_generated);

#endif
