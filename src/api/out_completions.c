/* Completions output (POST /v1/completions): text_completion chunks and the
 * complete text_completion, with the legacy logprobs object when asked. The output is raw text (the parser's raw mode:
 * no reasoning, no tool calls), so every delta is a text delta. Stream: one
 * chunk per delta, a chunk with finish_reason, a usage chunk when
 * stream_options.include_usage asked for it, then data: [DONE]. */
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/out_impl.h"

static json_t *usage_json(const tide_api_out *o) {
    const tide_usage *u = &o->usage;
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u->cached_tokens);
}

/* The legacy logprobs object of entries [lo, hi): {tokens, token_logprobs,
 * top_logprobs: [{token: logprob}], text_offset}; text_offset counts bytes
 * of the generated text from *off (advanced). NULL: not asked for. */
static json_t *legacy_logprobs(const tide_api_out *o, size_t lo, size_t hi, int64_t *off) {
    if (!o->logprobs) return json_null();
    json_t *r = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    if (!r) return NULL;
    json_t *tokens = json_object_get(r, "tokens"), *lps = json_object_get(r, "token_logprobs"),
           *tops = json_object_get(r, "top_logprobs"), *offs = json_object_get(r, "text_offset");
    for (size_t i = lo; i < hi; i++) {
        json_t *e = tide_out_lp(o, i), *alts = json_object_get(e, "top_logprobs"), *top = json_object(), *a;
        size_t k;
        json_array_foreach(alts, k, a) json_object_set(top, json_string_value(json_object_get(a, "token")),
                                                       json_object_get(a, "logprob"));
        if (json_array_append(tokens, json_object_get(e, "token")) || json_array_append(lps, json_object_get(e, "logprob")) ||
            json_array_append_new(tops, top) || json_array_append_new(offs, json_integer(*off))) {
            json_decref(r);
            return NULL;
        }
        *off += (int64_t)json_array_size(json_object_get(e, "bytes"));
    }
    return r;
}

static json_t *choice(const tide_api_out *o, json_t *text, json_t *logprobs, const char *finish) {
    return json_pack("{s:o, s:i, s:o, s:o}", "text", text, "index", o->choice, "logprobs", logprobs, "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static json_t *envelope(const tide_api_out *o, json_t *choices) {
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", o->id, "object", "text_completion", "created",
                     (json_int_t)o->created, "model", o->model, "choices", choices);
}

/* A chunk carries the entries of the tokens since the previous one (up to
 * hi: the last text's, or all at the finish). */
static int chunk(tide_api_out *o, json_t *text, size_t hi, const char *finish, tide_status *st) {
    json_t *lp = legacy_logprobs(o, o->lp_sent, hi, &o->lp_off);
    o->lp_sent = hi;
    json_t *c = envelope(o, json_pack("[o]", choice(o, text, lp, finish)));
    if (c && o->include_usage) json_object_set_new(c, "usage", json_null());
    return tide_out_emit(o, NULL, c, st);
}

static int nothing(tide_api_out *o, tide_status *st) {
    (void)o, (void)st;
    return 0;
}

static int no_item(tide_api_out *o, size_t i, tide_status *st) {
    (void)o, (void)i, (void)st;
    return 0;
}

static int delta(tide_api_out *o, size_t i, const char *text, size_t len, tide_status *st) {
    (void)i;
    return chunk(o, tide_jstr(text, len), o->lp_mark, NULL, st);
}

static int done(tide_api_out *o, tide_status *st) { return o->fn ? o->fn(o->ud, NULL, "[DONE]", 6, st) : 0; }

static int finish(tide_api_out *o, tide_status *st) {
    size_t n = o->lp_all ? json_array_size(o->lp_all) : 0;
    if (chunk(o, json_string(""), n, tide_api_out_finish_reason(o), st) != 0) return -1;
    if (!o->last_choice) return 0;
    if (o->include_usage) {
        json_t *c = envelope(o, json_array());
        if (c) json_object_set_new(c, "usage", usage_json(o));
        if (tide_out_emit(o, NULL, c, st) != 0) return -1;
    }
    return done(o, st);
}

static json_t *response(tide_api_out *o) {
    tide_sb b;
    tide_sb_init(&b);
    for (size_t i = 0; i < o->n_items; i++)
        if (o->items[i].kind == IT_TEXT) tide_sb_addn(&b, o->items[i].text.s, o->items[i].text.len);
    json_t *text = b.oom ? NULL : tide_jstr(b.s ? b.s : "", b.len);
    tide_sb_free(&b);
    int64_t off = 0;
    json_t *lp = legacy_logprobs(o, 0, o->lp_all ? json_array_size(o->lp_all) : 0, &off);
    json_t *r = envelope(o, json_pack("[o]", choice(o, text, lp, tide_api_out_finish_reason(o))));
    if (r) json_object_set_new(r, "usage", usage_json(o));
    return r;
}

const out_api tide_out_completions = {nothing, no_item, delta, no_item, finish, response, tide_out_openai_fail};
