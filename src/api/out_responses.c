/* Responses output. Stream: response.created, response.in_progress, then
 * per output item: response.output_item.added, its deltas
 * (response.reasoning_text.delta / response.content_part.added +
 * response.output_text.delta / response.function_call_arguments.delta),
 * its done events and response.output_item.done; finally
 * response.completed, or response.incomplete when max_output_tokens ran
 * out, or response.failed. Every event carries a sequence_number. With
 * logprobs asked for (include "message.output_text.logprobs" or
 * top_logprobs), output_text parts and their events carry the entries of
 * their tokens ({token, logprob, bytes, top_logprobs}, as Chat's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/out_impl.h"

static json_t *usage_json(const tide_api_out *o) {
    const tide_usage *u = &o->usage;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->prompt_tokens,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens, "output_tokens",
                     (json_int_t)u->completion_tokens, "output_tokens_details", "reasoning_tokens",
                     (json_int_t)u->reasoning_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

static void item_id(const tide_api_out *o, size_t i, char *buf, size_t size) {
    const out_item *it = &o->items[i];
    if (it->kind == IT_CALL) snprintf(buf, size, "fc_%.64s_%zu", o->id, i); /* it->id is the call_id */
    else snprintf(buf, size, "%s", it->id);
}

static json_t *text_json(const out_item *it) { return tide_jstr(it->text.s ? it->text.s : "", it->text.len); }

/* Logprob entries lp_all[lo, hi) as an array ([] when not asked for). */
static json_t *lp_range(const tide_api_out *o, size_t lo, size_t hi) {
    json_t *a = json_array();
    for (size_t i = lo; a && o->logprobs && i < hi; i++)
        if (json_array_append(a, tide_out_lp(o, i)) != 0) json_decref(a), a = NULL;
    return a;
}

/* A text item's entries; the delta events' are those since the last one. */
static json_t *item_lp(const tide_api_out *o, const out_item *it) {
    return lp_range(o, it->lp_set ? it->lp_lo : 0, it->lp_set ? it->lp_hi : 0);
}

static json_t *delta_lp(tide_api_out *o, int text) {
    json_t *a = lp_range(o, o->lp_sent, text ? o->lp_mark : o->lp_sent);
    o->lp_sent = o->lp_mark;
    return a;
}

/* An output item; `done` gives its final form. */
static json_t *item_json(const tide_api_out *o, size_t i, int done) {
    const out_item *it = &o->items[i];
    char id[128];
    item_id(o, i, id, sizeof id);
    const char *status = done ? "completed" : "in_progress";
    switch (it->kind) {
    case IT_REASONING:
        return done ? json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}]}", "id", id, "type", "reasoning", "summary", "content",
                                "type", "reasoning_text", "text", text_json(it))
                    : json_pack("{s:s, s:s, s:[], s:[]}", "id", id, "type", "reasoning", "summary", "content");
    case IT_TEXT:
        return done ? json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[], s:o}]}", "id", id, "type", "message",
                                "status", status, "role", "assistant", "content", "type", "output_text", "text",
                                text_json(it), "annotations", "logprobs", item_lp(o, it))
                    : json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", id, "type", "message", "status", status, "role",
                                "assistant", "content");
    case IT_CALL: {
        size_t n = 0;
        const char *args = done ? tide_out_call_args(o, it->call, &n) : "";
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "function_call", "status", status,
                         "call_id", it->id, "name", tide_out_call_name(o, it->call), "arguments", tide_jstr(args, n));
    }
    }
    return NULL;
}

static json_t *response_json(tide_api_out *o, const char *status, int with_output) {
    json_t *output = json_array();
    for (size_t i = 0; with_output && i < o->n_items; i++) json_array_append_new(output, item_json(o, i, 1));
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:s, s:o, s:b, s:f, s:f, s:i}", "id", o->id, "object",
                          "response", "created_at", (json_int_t)o->created, "status", status, "error",
                          "incomplete_details", "model", o->model, "output", output, "parallel_tool_calls",
                          o->parallel_tool_calls, "temperature", o->temperature, "top_p", o->top_p,
                          "max_output_tokens", o->max_tokens);
    if (!r) return NULL;
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "usage", with_output ? usage_json(o) : json_null());
    return r;
}

static int begin(tide_api_out *o, tide_status *st) {
    if (tide_out_event(o, "response.created", json_pack("{s:o}", "response", response_json(o, "in_progress", 0)), st)) return -1;
    return tide_out_event(o, "response.in_progress", json_pack("{s:o}", "response", response_json(o, "in_progress", 0)), st);
}

static int open_item(tide_api_out *o, size_t i, tide_status *st) {
    if (tide_out_event(o, "response.output_item.added", json_pack("{s:I, s:o}", "output_index", (json_int_t)i, "item",
                                                                  item_json(o, i, 0)), st))
        return -1;
    if (o->items[i].kind != IT_TEXT) return 0;
    char id[128];
    item_id(o, i, id, sizeof id);
    return tide_out_event(o, "response.content_part.added",
                          json_pack("{s:s, s:I, s:i, s:{s:s, s:s, s:[]}}", "item_id", id, "output_index", (json_int_t)i,
                                    "content_index", 0, "part", "type", "output_text", "text", "", "annotations"), st);
}

static int delta(tide_api_out *o, size_t i, const char *text, size_t len, tide_status *st) {
    char id[128];
    item_id(o, i, id, sizeof id);
    switch (o->items[i].kind) {
    case IT_REASONING:
        json_decref(delta_lp(o, 0));
        return tide_out_event(o, "response.reasoning_text.delta",
                              json_pack("{s:s, s:I, s:i, s:o}", "item_id", id, "output_index", (json_int_t)i, "content_index", 0,
                                        "delta", tide_jstr(text, len)), st);
    case IT_TEXT:
        return tide_out_event(o, "response.output_text.delta",
                              json_pack("{s:s, s:I, s:i, s:o, s:o}", "item_id", id, "output_index", (json_int_t)i,
                                        "content_index", 0, "delta", tide_jstr(text, len), "logprobs", delta_lp(o, 1)), st);
    case IT_CALL:
        json_decref(delta_lp(o, 0));
        return tide_out_event(o, "response.function_call_arguments.delta",
                              json_pack("{s:s, s:I, s:o}", "item_id", id, "output_index", (json_int_t)i, "delta",
                                        tide_jstr(text, len)), st);
    }
    return 0;
}

static int close_item(tide_api_out *o, size_t i, tide_status *st) {
    const out_item *it = &o->items[i];
    char id[128];
    item_id(o, i, id, sizeof id);
    int rc = 0;
    if (it->kind == IT_REASONING) {
        rc = tide_out_event(o, "response.reasoning_text.done",
                            json_pack("{s:s, s:I, s:i, s:o}", "item_id", id, "output_index", (json_int_t)i, "content_index", 0,
                                      "text", text_json(it)), st);
    } else if (it->kind == IT_TEXT) {
        rc = tide_out_event(o, "response.output_text.done",
                            json_pack("{s:s, s:I, s:i, s:o, s:o}", "item_id", id, "output_index", (json_int_t)i,
                                      "content_index", 0, "text", text_json(it), "logprobs", item_lp(o, it)), st);
        if (!rc)
            rc = tide_out_event(o, "response.content_part.done",
                                json_pack("{s:s, s:I, s:i, s:{s:s, s:o, s:[], s:o}}", "item_id", id, "output_index",
                                          (json_int_t)i, "content_index", 0, "part", "type", "output_text", "text",
                                          text_json(it), "annotations", "logprobs", item_lp(o, it)),
                                st);
    } else {
        size_t n;
        const char *args = tide_out_call_args(o, it->call, &n);
        rc = tide_out_event(o, "response.function_call_arguments.done",
                            json_pack("{s:s, s:I, s:s, s:o}", "item_id", id, "output_index", (json_int_t)i, "name",
                                      tide_out_call_name(o, it->call), "arguments", tide_jstr(args, n)), st);
    }
    if (rc) return -1;
    return tide_out_event(o, "response.output_item.done",
                          json_pack("{s:I, s:o}", "output_index", (json_int_t)i, "item", item_json(o, i, 1)), st);
}

static int finish(tide_api_out *o, tide_status *st) {
    int incomplete = o->fin == FIN_LENGTH;
    return tide_out_event(o, incomplete ? "response.incomplete" : "response.completed",
                          json_pack("{s:o}", "response", response_json(o, incomplete ? "incomplete" : "completed", 1)), st);
}

static json_t *response(tide_api_out *o) {
    return response_json(o, o->fin == FIN_LENGTH ? "incomplete" : "completed", 1);
}

static int fail(tide_api_out *o, const char *message, tide_status *st) {
    json_t *r = response_json(o, "failed", 1);
    if (r) json_object_set_new(r, "error", json_pack("{s:s, s:o}", "code", "server_error", "message",
                                                     tide_jstr(message, strlen(message))));
    return tide_out_event(o, "response.failed", json_pack("{s:o}", "response", r), st);
}

const out_api tide_out_responses = {begin, open_item, delta, close_item, finish, response, fail};
