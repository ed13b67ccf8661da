/* Sampling fields the OpenAI APIs share beyond temperature / top_p / top_k /
 * stop, read into tide_gen for the engine's sampler (engine/sampler.h):
 * n, min_p, frequency / presence / repetition penalties, logit_bias,
 * ignore_eos and stop_token_ids (the last three are vLLM's extensions), and
 * Chat Completions' logprobs / top_logprobs.
 * Ranges follow OpenAI's where it has them; token ids are checked against
 * the vocabulary when the request reaches the engine. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"

/* logit_bias: {"<token id>": bias in [-100, 100], ...}. */
static int read_logit_bias(json_t *root, tide_gen *g, tide_api_err *err) {
    json_t *lb;
    if (tide_get_object(root, "logit_bias", "", &lb, err)) return -1;
    if (!lb || json_object_size(lb) == 0) return 0;
    if (json_object_size(lb) > TIDE_GEN_MAX_LOGIT_BIAS)
        return tide_api_bad(err, "logit_bias", "at most %d entries", TIDE_GEN_MAX_LOGIT_BIAS);
    g->logit_bias = calloc(json_object_size(lb), sizeof *g->logit_bias);
    if (!g->logit_bias) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    char p[160];
    json_object_foreach(lb, key, v) {
        tide_path_key(p, sizeof p, "logit_bias", key);
        char *end;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id > INT32_MAX)
            return tide_api_bad(err, p, "the key must be a token id (a non-negative integer)");
        if (!json_is_number(v)) return tide_api_bad(err, p, "expected number, got %s", tide_json_type_name(v));
        double b = json_number_value(v);
        if (!(b >= -100 && b <= 100)) return tide_api_bad(err, p, "must be in [-100, 100], got %g", b);
        g->logit_bias[g->n_logit_bias++] = (tide_logit_bias){(int32_t)id, (float)b};
    }
    return 0;
}

static int read_stop_ids(json_t *root, tide_gen *g, tide_api_err *err) {
    json_t *a;
    if (tide_get_array(root, "stop_token_ids", "", &a, err)) return -1;
    if (!a || json_array_size(a) == 0) return 0;
    if (json_array_size(a) > TIDE_GEN_MAX_STOP_IDS)
        return tide_api_bad(err, "stop_token_ids", "at most %d ids", TIDE_GEN_MAX_STOP_IDS);
    g->stop_token_ids = calloc(json_array_size(a), sizeof *g->stop_token_ids);
    if (!g->stop_token_ids) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    size_t i;
    json_t *v;
    char p[160];
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return tide_api_bad(err, tide_path_idx(p, sizeof p, "stop_token_ids", i), "expected a token id");
        g->stop_token_ids[g->n_stop_token_ids++] = (int32_t)json_integer_value(v);
    }
    return 0;
}

int tide_read_sampling_extras(json_t *root, tide_gen *g, int with_n, tide_api_err *err) {
    long long n = 1;
    if (tide_get_number(root, "min_p", "", 0, 1, &g->min_p, err) ||
        tide_get_number(root, "frequency_penalty", "", -2, 2, &g->frequency_penalty, err) ||
        tide_get_number(root, "presence_penalty", "", -2, 2, &g->presence_penalty, err) ||
        tide_get_number(root, "repetition_penalty", "", 0, 100, &g->repetition_penalty, err) ||
        tide_get_bool(root, "ignore_eos", "", &g->ignore_eos, err) || read_logit_bias(root, g, err) ||
        read_stop_ids(root, g, err) || tide_read_guided(root, g, err))
        return -1;
    if (!(g->repetition_penalty > 0)) return tide_api_bad(err, "repetition_penalty", "must be > 0");
    if (with_n) {
        if (tide_get_int(root, "n", "", 1, TIDE_GEN_MAX_N, &n, err)) return -1;
        g->n = (int)n;
    }
    return 0;
}

int tide_read_chat_logprobs(json_t *root, tide_gen *g, int logprobs, tide_api_err *err) {
    long long top = 0;
    if (tide_get_int(root, "top_logprobs", "", 0, TIDE_GEN_MAX_TOP_LOGPROBS, &top, err)) return -1;
    if (top > 0 && !logprobs) return tide_api_bad(err, "top_logprobs", "needs \"logprobs\": true");
    g->logprobs = logprobs;
    g->top_logprobs = (int)top;
    return 0;
}

int tide_read_completions_logprobs(json_t *root, tide_gen *g, tide_api_err *err) {
    json_t *v = json_object_get(root, "logprobs");
    long long top = 0;
    if (!v || json_is_null(v)) return 0;
    if (json_is_boolean(v)) return tide_api_bad(err, "logprobs", "expected an integer 0..%d (the legacy form), got boolean",
                                                TIDE_GEN_MAX_TOP_LOGPROBS);
    if (tide_get_int(root, "logprobs", "", 0, TIDE_GEN_MAX_TOP_LOGPROBS, &top, err)) return -1;
    g->logprobs = 1;
    g->top_logprobs = (int)top;
    return 0;
}

int tide_read_responses_logprobs(json_t *root, tide_gen *g, tide_api_err *err) {
    long long top = 0;
    json_t *inc, *v;
    size_t i;
    char p[64];
    if (tide_get_int(root, "top_logprobs", "", 0, TIDE_GEN_MAX_TOP_LOGPROBS, &top, err) ||
        tide_get_array(root, "include", "", &inc, err))
        return -1;
    json_array_foreach(inc, i, v) {
        if (!json_is_string(v)) return tide_api_bad(err, tide_path_idx(p, sizeof p, "include", i), "expected string");
        if (!strcmp(json_string_value(v), "message.output_text.logprobs")) g->logprobs = 1;
    }
    if (top > 0) g->logprobs = 1;
    g->top_logprobs = (int)top;
    return 0;
}
