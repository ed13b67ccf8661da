/* Chat Completions output: chat.completion.chunk events and the complete
 * chat.completion. Stream: a role chunk, delta chunks (reasoning_content,
 * content, tool_calls), a chunk with finish_reason, a usage chunk when
 * stream_options.include_usage asked for it, then data: [DONE]. */
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/out_impl.h"

static json_t *usage_json(const tide_api_out *o) {
    const tide_usage *u = &o->usage;
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u->cached_tokens, "completion_tokens_details", "reasoning_tokens",
                     (json_int_t)u->reasoning_tokens);
}

/* One chunk around `delta` (consumed); finish_reason NULL -> null. */
static int chunk(tide_api_out *o, json_t *delta, const char *finish, tide_status *st) {
    /* the tokens since the last chunk ride with the next text (not the role chunk) */
    json_t *lp = json_object_get(delta, "role") ? NULL : tide_api_out_take_logprobs(o);
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", o->choice, "delta", delta, "logprobs",
                               lp ? json_pack("{s:o}", "content", lp) : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", o->id, "object", "chat.completion.chunk", "created",
                          (json_int_t)o->created, "model", o->model, "choices", choice);
    if (c && o->include_usage) json_object_set_new(c, "usage", json_null());
    return tide_out_emit(o, NULL, c, st);
}

static int begin(tide_api_out *o, tide_status *st) {
    return chunk(o, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, st);
}

static int open_item(tide_api_out *o, size_t i, tide_status *st) {
    const out_item *it = &o->items[i];
    if (it->kind != IT_CALL) return 0;
    json_t *call = json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index", (json_int_t)it->call, "id", it->id, "type",
                             "function", "function", "name", tide_out_call_name(o, it->call), "arguments", "");
    return chunk(o, json_pack("{s:[o]}", "tool_calls", call), NULL, st);
}

static int delta(tide_api_out *o, size_t i, const char *text, size_t len, tide_status *st) {
    const out_item *it = &o->items[i];
    json_t *d;
    if (it->kind == IT_CALL)
        d = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)it->call, "function", "arguments",
                      tide_jstr(text, len));
    else
        d = json_pack("{s:o}", it->kind == IT_REASONING ? "reasoning_content" : "content", tide_jstr(text, len));
    return chunk(o, d, NULL, st);
}

static int close_item(tide_api_out *o, size_t i, tide_status *st) {
    (void)o, (void)i, (void)st;
    return 0;
}

static int done(tide_api_out *o, tide_status *st) {
    return o->fn ? o->fn(o->ud, NULL, "[DONE]", 6, st) : 0;
}

static int finish(tide_api_out *o, tide_status *st) {
    if (chunk(o, json_object(), tide_api_out_finish_reason(o), st) != 0) return -1;
    if (!o->last_choice) return 0; /* n > 1: the last choice to finish closes the stream */
    if (o->include_usage) {
        json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", o->id, "object", "chat.completion.chunk",
                              "created", (json_int_t)o->created, "model", o->model, "choices", "usage", usage_json(o));
        if (tide_out_emit(o, NULL, c, st) != 0) return -1;
    }
    return done(o, st);
}

/* All text of one kind, in item order. */
static json_t *joined(const tide_api_out *o, item_kind kind, int *any) {
    tide_sb b;
    tide_sb_init(&b);
    *any = 0;
    for (size_t i = 0; i < o->n_items; i++)
        if (o->items[i].kind == kind) {
            tide_sb_addn(&b, o->items[i].text.s, o->items[i].text.len);
            *any = 1;
        }
    json_t *s = b.oom ? NULL : tide_jstr(b.s ? b.s : "", b.len);
    tide_sb_free(&b);
    return s;
}

static json_t *response(tide_api_out *o) {
    int any_text, any_reasoning;
    json_t *content = joined(o, IT_TEXT, &any_text), *reasoning = joined(o, IT_REASONING, &any_reasoning);
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_t *calls = json_array();
    for (size_t i = 0; i < o->n_items; i++) {
        const out_item *it = &o->items[i];
        if (it->kind != IT_CALL) continue;
        size_t n;
        const char *args = tide_out_call_args(o, it->call, &n);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", it->id, "type", "function",
                                               "function", "name", tide_out_call_name(o, it->call), "arguments",
                                               tide_jstr(args, n)));
    }
    /* content is null only when the turn is nothing but tool calls */
    json_object_set_new(msg, "content", any_text || json_array_size(calls) == 0 ? content : json_null());
    if (!(any_text || json_array_size(calls) == 0)) json_decref(content);
    if (any_reasoning) json_object_set_new(msg, "reasoning_content", reasoning);
    else json_decref(reasoning);
    if (json_array_size(calls)) json_object_set_new(msg, "tool_calls", calls);
    else json_decref(calls);
    json_t *lp = json_null();
    if (o->logprobs) lp = o->lp_all ? json_pack("{s:O}", "content", o->lp_all) : json_pack("{s:[]}", "content");
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o, s:s}], s:o}", "id", o->id, "object", "chat.completion",
                     "created", (json_int_t)o->created, "model", o->model, "choices", "index", o->choice, "message", msg,
                     "logprobs", lp, "finish_reason", tide_api_out_finish_reason(o), "usage", usage_json(o));
}

/* Also the Completions stream's failure (out_completions.c): both end with
 * an OpenAI error object and [DONE]. */
int tide_out_openai_fail(tide_api_out *o, const char *message, tide_status *st) {
    json_t *e = json_pack("{s:{s:o, s:s, s:n, s:n}}", "error", "message", tide_jstr(message, strlen(message)), "type",
                          "server_error", "param", "code");
    if (tide_out_emit(o, NULL, e, st) != 0) return -1;
    return done(o, st);
}

const out_api tide_out_chat = {begin, open_item, delta, close_item, finish, response, tide_out_openai_fail};
