/* OpenAI Completions request (POST /v1/completions) -> a raw prompt +
 * settings. The prompt is text (tokenized as is, special tokens matched) or
 * token ids; one prompt per request (arrays of several prompts are refused
 * as not supported). Fields as Chat Completions where the two agree;
 * max_tokens defaults to 16, as OpenAI's does. */
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "api/req_common.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

static int read_ids(json_t *a, const char *path, tide_api_req *req, tide_api_err *err) {
    size_t n = json_array_size(a);
    if (n == 0) return tide_api_bad(err, path, "the prompt must not be empty");
    if (!(req->prompt_ids = calloc(n, sizeof *req->prompt_ids))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    size_t i;
    json_t *v;
    char p[160];
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return tide_api_bad(err, tide_path_idx(p, sizeof p, path, i), "expected a token id");
        req->prompt_ids[req->n_prompt_ids++] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* "prompt": "text" | ["text"] | [ids...] | [[ids...]]. */
static int read_prompt(json_t *root, tide_api_req *req, tide_api_err *err) {
    json_t *v = json_object_get(root, "prompt");
    if (!v || json_is_null(v)) return tide_api_bad(err, "prompt", "required");
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    else if (json_is_array(v) && json_array_size(v) > 1 && !json_is_integer(json_array_get(v, 0)))
        return tide_api_unsupported(err, "prompt", "one prompt per request is supported");
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n > TIDE_CONV_MAX_TEXT) return tide_api_bad(err, "prompt", "longer than %u bytes", TIDE_CONV_MAX_TEXT);
        if (!(req->prompt = malloc(n + 1))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
        memcpy(req->prompt, json_string_value(v), n + 1);
        req->prompt_len = n;
        return 0;
    }
    if (json_is_array(v)) return read_ids(v, "prompt", req, err);
    return tide_api_bad(err, "prompt", "expected string or array, got %s", tide_json_type_name(v));
}

static int refuse_unsupported(json_t *root, tide_api_err *err) {
    json_t *v;
    if ((v = json_object_get(root, "echo")) && json_is_true(v))
        return tide_api_unsupported(err, "echo", "echo is not supported");
    if ((v = json_object_get(root, "suffix")) && !json_is_null(v))
        return tide_api_unsupported(err, "suffix", "suffix is not supported");
    if ((v = json_object_get(root, "best_of")) && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return tide_api_unsupported(err, "best_of", "only best_of = 1 is supported");
    return 0;
}

int tide_convert_completions(json_t *root, tide_api_req *req, tide_api_err *err) {
    tide_gen *g = &req->gen;
    long long top_k = 0, max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS;
    json_t *so;
    const char *model = NULL;
    if (tide_get_string(root, "model", "", &model, err) ||
        tide_get_number(root, "temperature", "", 0, 2, &g->temperature, err) ||
        tide_get_number(root, "top_p", "", 0, 1, &g->top_p, err) ||
        tide_get_int(root, "top_k", "", -1, 1 << 20, &top_k, err) ||
        tide_get_int(root, "max_tokens", "", 1, 1 << 24, &max_tokens, err) || tide_get_stops(root, "stop", g, err) ||
        tide_get_bool(root, "stream", "", &g->stream, err) || tide_get_object(root, "stream_options", "", &so, err) ||
        tide_get_bool(so, "include_usage", "stream_options", &g->include_usage, err) ||
        tide_read_sampling_extras(root, g, 1, err) || tide_get_seed(root, g, err) || refuse_unsupported(root, err) ||
        tide_read_completions_logprobs(root, g, err) || read_prompt(root, req, err))
        return -1;
    g->top_k = top_k < 0 ? 0 : (int)top_k;
    g->max_tokens = (int)max_tokens;
    if (!(g->model = strdup(model ? model : ""))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    return 0;
}
