/* JSONL request lines (request_jsonl.h): one JSON object per line turned
 * into a tide_request with its own arrays. Shared by `tide run --input` and
 * `tide bench offline --input`, and fuzzed by fuzz/fuzz_request_jsonl.c. */
#include "engine/request_jsonl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

static int get_num(json_t *o, const char *k, double lo, double hi, float *out, tide_status *st) {
    json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected a number, got %s", k, tide_json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": %g is outside [%g, %g]", k, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out, tide_status *st) {
    json_t *v = json_object_get(o, k);
    if (!v) return 0;
    if (!json_is_integer(v)) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected an integer, got %s", k, tide_json_kind(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": %lld is outside [%lld, %lld]", k, x, lo, hi);
    *out = x;
    return 0;
}

/* A non-negative integer field (seed, cache_salt); absent leaves *out. */
static int get_u64(json_t *o, const char *k, uint64_t *out, int *present, tide_status *st) {
    json_t *v = json_object_get(o, k);
    if (present) *present = v != NULL;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected a non-negative integer", k);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* A list of token ids with `extra` free slots after it; *out is malloc'd
 * (NULL when there is nothing to hold). */
static int get_ids(json_t *o, const char *k, size_t extra, int32_t **out, int64_t *n, tide_status *st) {
    *out = NULL;
    *n = 0;
    json_t *v = json_object_get(o, k);
    if (v && !json_is_array(v))
        return tide_fail(st, TIDE_ERR_INVALID, "\"%s\": expected an array of token ids, got %s", k, tide_json_kind(v));
    size_t len = v ? json_array_size(v) : 0;
    if (len + extra == 0) return 0;
    int32_t *ids = malloc((len + extra) * sizeof *ids);
    if (!ids) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN || json_integer_value(x) > INT32_MAX) {
            free(ids);
            return tide_fail(st, TIDE_ERR_INVALID, "\"%s\"[%zu]: expected a token id, got %s", k, i, tide_json_kind(x));
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    *out = ids;
    *n = (int64_t)len;
    return 0;
}

static const char *const known_keys[] = {"id", "prompt_ids", "max_tokens", "temperature", "top_p", "top_k",
                                         "min_p", "repetition_penalty", "presence_penalty",
                                         "frequency_penalty", "seed", "stop_token_ids", "ignore_eos", "cache_salt",
                                         NULL};

static int check_keys(json_t *o, tide_status *st) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        int ok = 0;
        for (int i = 0; known_keys[i] && !ok; i++) ok = !strcmp(key, known_keys[i]);
        if (!ok && !strcmp(key, "prompt"))
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "text prompts are not supported yet: give \"prompt_ids\"");
        if (!ok) return tide_fail(st, TIDE_ERR_INVALID, "unknown field \"%s\"", key);
    }
    return 0;
}

/* The fields of one request object into out (arrays owned by out). */
static int parse_fields(json_t *o, const tide_jsonl_defaults *d, tide_jsonl_request *out, tide_status *st) {
    if (check_keys(o, st) != 0) return -1;
    tide_request *r = &out->req;
    tide_sampling_params *p = &r->sampling;
    long long max_tokens = d->max_tokens, top_k = 0;
    int64_t n_prompt = 0, n_stop = 0;
    json_t *ie = json_object_get(o, "ignore_eos");
    int ignore_eos = ie && json_is_boolean(ie) ? json_is_true(ie) : d->ignore_eos;
    if (get_ids(o, "prompt_ids", 0, &out->prompt, &n_prompt, st) != 0 ||
        get_ids(o, "stop_token_ids", 0, &out->stop, &n_stop, st) != 0 ||
        get_int(o, "max_tokens", LLONG_MIN, LLONG_MAX, &max_tokens, st) != 0 ||
        get_int(o, "top_k", -1, INT32_MAX, &top_k, st) != 0 || get_num(o, "temperature", 0, 1e6, &p->temperature, st) != 0 ||
        get_num(o, "top_p", -1e30, 1e30, &p->top_p, st) != 0 || get_num(o, "min_p", -1e30, 1e30, &p->min_p, st) != 0 ||
        get_num(o, "repetition_penalty", -1e30, 1e30, &p->repetition_penalty, st) != 0 ||
        get_num(o, "presence_penalty", -1e30, 1e30, &p->presence_penalty, st) != 0 ||
        get_num(o, "frequency_penalty", -1e30, 1e30, &p->frequency_penalty, st) != 0 ||
        get_u64(o, "seed", &p->seed, &r->has_seed, st) != 0 || get_u64(o, "cache_salt", &r->cache_salt, NULL, st) != 0)
        return -1;
    if (ie && !json_is_boolean(ie))
        return tide_fail(st, TIDE_ERR_INVALID, "\"ignore_eos\": expected a boolean, got %s", tide_json_kind(ie));
    if (!json_object_get(o, "prompt_ids")) return tide_fail(st, TIDE_ERR_MISSING, "missing \"prompt_ids\"");
    if (n_stop > INT32_MAX / 2) return tide_fail(st, TIDE_ERR_INVALID, "\"stop_token_ids\": too many (%lld)", (long long)n_stop);
    r->stop_at_eos = !ignore_eos;
    p->top_k = (int32_t)top_k;
    p->max_tokens = max_tokens;
    p->stop_tokens = out->stop;
    p->n_stop_tokens = (int32_t)n_stop;
    r->prompt = out->prompt;
    r->n_prompt = n_prompt;
    return 0;
}

int tide_jsonl_request_parse(const char *line, size_t len, int64_t lineno, const tide_jsonl_defaults *d,
                             tide_jsonl_request *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    out->req = tide_request_default();
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    json_t *id = j && json_is_object(j) ? json_object_get(j, "id") : NULL;
    out->id = id ? json_incref(id) : json_integer(lineno);
    int rc = -1;
    if (!j)
        tide_fail(st, TIDE_ERR_FORMAT, "not JSON (%s at column %d)", je.text, je.column);
    else if (!json_is_object(j))
        tide_fail(st, TIDE_ERR_INVALID, "expected an object, got %s", tide_json_kind(j));
    else
        rc = parse_fields(j, d, out, st);
    json_decref(j);
    if (rc != 0) {
        free(out->prompt);
        free(out->stop);
        out->prompt = out->stop = NULL;
        out->req.prompt = out->req.sampling.stop_tokens = NULL;
        out->req.n_prompt = 0;
        out->req.sampling.n_stop_tokens = 0;
        return tide_fail_ctx(st, "line %lld", (long long)lineno);
    }
    return 0;
}

void tide_jsonl_request_free(tide_jsonl_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->stop);
    json_decref(r->id);
    memset(r, 0, sizeof *r);
}

int tide_jsonl_next_line(FILE *in, char **line, size_t *cap, size_t *len, int64_t *lineno) {
    ssize_t n;
    while ((n = getline(line, cap, in)) > 0) {
        ++*lineno;
        char *s = *line;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
        if (n == 0) continue;
        *len = (size_t)n;
        return 1;
    }
    return ferror(in) ? -1 : 0;
}
