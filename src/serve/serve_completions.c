/* The legacy OpenAI Completions route (/v1/completions): raw prompt text,
 * no chat template, "text_completion" objects. Stop strings are matched by
 * the output parser in content mode, so they behave as in the chat routes. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/json.h"
#include "serve/serve_internal.h"
#include "text/render.h"

#define DEFAULT_MAX_TOKENS 16 /* OpenAI's default for this route */

static int bad(serve_reply *err, const char *param, const char *what) {
    serve_error(err, SERVE_COMPLETIONS, 400, "invalid_request_error", param, "%s: %s", param, what);
    return -1;
}

static int get_number(json_t *o, const char *key, double lo, double hi, double *v, serve_reply *err) {
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x)) return bad(err, key, "expected a number");
    double d = json_number_value(x);
    if (!(d >= lo && d <= hi)) return bad(err, key, "out of range");
    *v = d;
    return 0;
}

static int parse_stops(serve_job *j, json_t *o, serve_reply *err) {
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s)) return 0;
    json_t *one = json_is_string(s) ? s : NULL;
    size_t n = one ? 1 : json_is_array(s) ? json_array_size(s) : (size_t)-1;
    if (n == (size_t)-1) return bad(err, "stop", "expected a string or an array of strings");
    if (n > TIDE_OUTPARSE_MAX_STOPS) return bad(err, "stop", "too many stop sequences");
    for (size_t i = 0; i < n; i++) {
        json_t *e = one ? one : json_array_get(s, i);
        size_t len = json_is_string(e) ? json_string_length(e) : 0;
        if (!len || len > TIDE_OUTPARSE_MAX_STOP_LEN) return bad(err, "stop", "each must be a string of 1..256 bytes");
        j->cgen.stop[j->cgen.n_stop] = strdup(json_string_value(e));
        if (!j->cgen.stop[j->cgen.n_stop]) return bad(err, "stop", "out of memory");
        j->cgen.n_stop++;
    }
    return 0;
}

static int parse_prompt(serve_job *j, json_t *o, serve_reply *err) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!json_is_string(p)) return bad(err, "prompt", "expected a string (or an array of one string)");
    tide_tok_ids ids = {0};
    tide_status st = {0};
    int32_t bos = tide_tokenizer_token_id(j->srv->tok, TIDE_TOK_BOS, strlen(TIDE_TOK_BOS));
    if ((bos >= 0 && tide_tok_ids_push(&ids, bos, &st) != 0) ||
        tide_tokenizer_encode(j->srv->tok, json_string_value(p), json_string_length(p), TIDE_ENCODE_SPLIT_SPECIAL,
                              NULL, &ids, &st) != 0) {
        tide_tok_ids_free(&ids);
        return bad(err, "prompt", st.msg);
    }
    j->prompt = ids.ids;
    j->n_prompt = (int64_t)ids.n;
    return 0;
}

static int parse_body(serve_job *j, json_t *o, serve_reply *err) {
    tide_gen *g = &j->cgen;
    g->temperature = 1.0, g->top_p = 1.0, g->max_tokens = DEFAULT_MAX_TOKENS;
    double v = -1;
    json_t *x = json_object_get(o, "model");
    g->model = strdup(json_is_string(x) ? json_string_value(x) : "");
    if (!g->model) return bad(err, "model", "out of memory");
    if (get_number(o, "temperature", 0, 2, &g->temperature, err) || get_number(o, "top_p", 0, 1, &g->top_p, err))
        return -1;
    if (get_number(o, "max_tokens", 1, 1e9, &v, err)) return -1;
    if (v >= 1) g->max_tokens = (int)v;
    v = -1;
    if (get_number(o, "n", 1, 1, &v, err)) return -1;
    x = json_object_get(o, "seed");
    if (x && !json_is_null(x)) {
        if (!json_is_integer(x)) return bad(err, "seed", "expected an integer");
        g->has_seed = 1, g->seed = (uint64_t)json_integer_value(x);
    }
    x = json_object_get(o, "stream");
    g->stream = json_is_true(x);
    x = json_object_get(json_object_get(o, "stream_options"), "include_usage");
    g->include_usage = json_is_true(x);
    x = json_object_get(o, "echo");
    j->c_echo = json_is_true(x);
    x = json_object_get(o, "logprobs");
    if (x && !json_is_null(x)) return bad(err, "logprobs", "not supported yet");
    if (parse_stops(j, o, err) != 0) return -1;
    return parse_prompt(j, o, err);
}

int serve_completions_parse(serve_job *j, const char *body, size_t len, serve_reply *err) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        serve_error(err, SERVE_COMPLETIONS, 400, "invalid_request_error", NULL, "body: %s",
                    o ? "expected a JSON object" : je.text);
        return -1;
    }
    int rc = tide_json_depth(o, TIDE_API_MAX_DEPTH) > TIDE_API_MAX_DEPTH ? bad(err, "body", "nested too deeply")
                                                                        : parse_body(j, o, err);
    if (rc == 0 && j->c_echo) {
        json_t *p = json_object_get(o, "prompt");
        if (json_is_array(p)) p = json_array_get(p, 0);
        j->c_prompt = strdup(json_string_value(p));
    }
    json_decref(o);
    if (rc) return -1;
    tide_outparse_cfg pc = {.stops = (const char *const *)j->cgen.stop, .n_stops = j->cgen.n_stop};
    tide_status st = {0};
    if (tide_outparse_new(&pc, &j->cparse, &st) != 0) {
        serve_error(err, SERVE_COMPLETIONS, 500, "api_error", NULL, "%s", st.msg);
        return -1;
    }
    return 0;
}

/* One text_completion object with one choice (text, finish_reason). */
static json_t *chunk(const serve_job *j, const char *text, size_t len, const char *finish) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:s%, s:n, s:s?}]}", "id", j->id, "object", "text_completion",
                     "created", (json_int_t)j->created, "model", j->cgen.model, "choices", "index", 0, "text", text,
                     len, "logprobs", "finish_reason", finish);
}

static json_t *usage_json(const tide_usage *u) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u->cached_tokens);
}

static int emit(serve_job *j, json_t *o, tide_status *st) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "completions: out of memory");
    int rc = serve_job_sse(j, NULL, s, strlen(s), st);
    free(s);
    return rc;
}

/* Content from the parser: streamed as a chunk, or kept for the response. */
static int collect(serve_job *j, tide_status *st) {
    size_t n;
    const char *c = tide_outparse_content(j->cparse, &n);
    if (n <= j->ctext.len) return 0;
    size_t from = j->ctext.len;
    tide_sb_addn(&j->ctext, c + from, n - from);
    if (tide_sb_check(&j->ctext, "completion text", st) != 0) return -1;
    return j->stream ? emit(j, chunk(j, c + from, n - from, NULL), st) : 0;
}

int serve_completions_text(serve_job *j, const char *text, size_t len, tide_status *st) {
    if (tide_outparse_feed(j->cparse, text, len, st) != 0) return -1;
    if (tide_outparse_end(j->cparse) != TIDE_PEND_NONE) j->ended = 1;
    return collect(j, st);
}

int serve_completions_finish(serve_job *j, const char *finish, const tide_usage *u, tide_status *st) {
    if (tide_outparse_finish(j->cparse, st) != 0 || collect(j, st) != 0) return -1;
    if (j->stream) {
        if (emit(j, chunk(j, "", 0, finish), st) != 0) return -1;
        if (j->cgen.include_usage) {
            json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object", "text_completion",
                                  "created", (json_int_t)j->created, "model", j->cgen.model, "choices", "usage",
                                  usage_json(u));
            if (emit(j, o, st) != 0) return -1;
        }
        return serve_job_sse(j, NULL, "[DONE]", 6, st);
    }
    tide_sb all;
    tide_sb_init(&all);
    if (j->c_echo && j->c_prompt) tide_sb_add(&all, j->c_prompt);
    tide_sb_addn(&all, j->ctext.s ? j->ctext.s : "", j->ctext.len);
    if (tide_sb_check(&all, "completion", st) != 0) {
        tide_sb_free(&all);
        return -1;
    }
    json_t *o = chunk(j, all.s ? all.s : "", all.len, finish);
    tide_sb_free(&all);
    if (o) json_object_set_new(o, "usage", usage_json(u));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "completions: out of memory");
    pthread_mutex_lock(&j->srv->mu);
    tide_sb_add(&j->buf, s);
    j->status = 200;
    pthread_mutex_unlock(&j->srv->mu);
    free(s);
    return 0;
}
