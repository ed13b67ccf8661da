/* Validation of sampling parameters (once, at admission) and the stop test
 * (after every sampled token). */
#include "engine/sampling_params.h"

#include <math.h>

static int bad(tide_status *st, const char *field, double v, const char *want) {
    return tide_fail(st, TIDE_ERR_INVALID, "sampling parameter %s = %g: must be %s", field, v, want);
}

static int check_tokens(const int32_t *ids, int32_t n, int32_t n_vocab, const char *what,
                        tide_status *st) {
    if (n < 0) return tide_fail(st, TIDE_ERR_INVALID, "%s: negative count %d", what, (int)n);
    if (n > 0 && !ids) return tide_fail(st, TIDE_ERR_INVALID, "%s: %d entries but no array", what, (int)n);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return tide_fail(st, TIDE_ERR_INVALID, "%s[%d]: token id %d outside the vocabulary [0, %d)",
                             what, (int)i, (int)ids[i], (int)n_vocab);
    return 0;
}

int tide_sampling_params_check(const tide_sampling_params *p, int32_t n_vocab, tide_status *st) {
    if (!p) return tide_fail(st, TIDE_ERR_INVALID, "sampling parameters: NULL");
    if (n_vocab <= 0) return tide_fail(st, TIDE_ERR_INVALID, "sampling parameters: vocabulary size %d", (int)n_vocab);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return bad(st, "temperature", p->temperature, "finite and >= 0");
    if (!(p->top_p > 0 && p->top_p <= 1)) return bad(st, "top_p", p->top_p, "in (0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return bad(st, "min_p", p->min_p, "in [0, 1]");
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0)
        return bad(st, "repetition_penalty", p->repetition_penalty, "finite and > 0");
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return bad(st, "presence_penalty", p->presence_penalty, "in [-2, 2]");
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return bad(st, "frequency_penalty", p->frequency_penalty, "in [-2, 2]");
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return tide_fail(st, TIDE_ERR_INVALID, "logit_bias: %d entries but no array", (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const tide_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return tide_fail(st, TIDE_ERR_INVALID, "logit_bias[%d]: token id %d outside the vocabulary [0, %d)",
                             (int)i, (int)b->token, (int)n_vocab);
        if (!(b->bias >= -100 && b->bias <= 100))
            return tide_fail(st, TIDE_ERR_INVALID, "logit_bias[%d] (token %d) = %g: must be in [-100, 100]",
                             (int)i, (int)b->token, (double)b->bias);
    }
    if (p->top_logprobs < 0 || p->top_logprobs > TIDE_SAMPLING_MAX_TOP_LOGPROBS)
        return tide_fail(st, TIDE_ERR_INVALID, "top_logprobs = %d: must be in [0, %d]", (int)p->top_logprobs,
                         TIDE_SAMPLING_MAX_TOP_LOGPROBS);
    return check_tokens(p->stop_tokens, p->n_stop_tokens, n_vocab, "stop_tokens", st);
}

tide_stop_reason tide_sampling_stop(const tide_sampling_params *p, int32_t token, int64_t n_generated) {
    for (int32_t i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] == token) return TIDE_STOP_TOKEN;
    if (p->max_tokens > 0 && n_generated >= p->max_tokens) return TIDE_STOP_LENGTH;
    return TIDE_STOP_NONE;
}
