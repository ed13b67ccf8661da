/* Completions output (POST /v1/completions): text_completion chunks and the
 * complete text_completion. The output is raw text (the parser's raw mode:
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

static json_t *choice(const tide_api_out *o, json_t *text, const char *finish) {
    return json_pack("{s:o, s:i, s:n, s:o}", "text", text, "index", o->choice, "logprobs", "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static json_t *envelope(const tide_api_out *o, json_t *choices) {
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", o->id, "object", "text_completion", "created",
                     (json_int_t)o->created, "model", o->model, "choices", choices);
}

static int chunk(tide_api_out *o, json_t *text, const char *finish, tide_status *st) {
    json_t *c = envelope(o, json_pack("[o]", choice(o, text, finish)));
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
    return chunk(o, tide_jstr(text, len), NULL, st);
}

static int done(tide_api_out *o, tide_status *st) { return o->fn ? o->fn(o->ud, NULL, "[DONE]", 6, st) : 0; }

static int finish(tide_api_out *o, tide_status *st) {
    if (chunk(o, json_string(""), tide_api_out_finish_reason(o), st) != 0) return -1;
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
    json_t *r = envelope(o, json_pack("[o]", choice(o, text, tide_api_out_finish_reason(o))));
    if (r) json_object_set_new(r, "usage", usage_json(o));
    return r;
}

const out_api tide_out_completions = {nothing, no_item, delta, no_item, finish, response, tide_out_openai_fail};
