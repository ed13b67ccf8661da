/* Anthropic Messages output. Stream: message_start, then per content block
 * content_block_start, content_block_delta (thinking_delta, text_delta or
 * input_json_delta) and content_block_stop, then message_delta (stop_reason,
 * stop_sequence, usage) and message_stop. Content block index = item index. */
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/out_impl.h"

static json_t *input_json(const tide_api_out *o, size_t call) {
    size_t n;
    const char *args = tide_out_call_args(o, call, &n);
    json_t *v = json_loadb(args, n, 0, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_object();
    }
    return v;
}

static json_t *block_json(const tide_api_out *o, size_t i, int done) {
    const out_item *it = &o->items[i];
    const char *s = done && it->text.s ? it->text.s : "";
    size_t n = done ? it->text.len : 0;
    switch (it->kind) {
    case IT_REASONING: return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking", tide_jstr(s, n), "signature", "");
    case IT_TEXT: return json_pack("{s:s, s:o}", "type", "text", "text", tide_jstr(s, n));
    case IT_CALL:
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", it->id, "name",
                         tide_out_call_name(o, it->call), "input", done ? input_json(o, it->call) : json_object());
    }
    return NULL;
}

static json_t *stop_sequence(const tide_api_out *o) {
    const char *s = o->fin == FIN_STOP_SEQ ? tide_out_stop_seq(o) : NULL;
    return s ? json_string(s) : json_null();
}

static json_t *message_json(tide_api_out *o, int done) {
    json_t *content = json_array();
    for (size_t i = 0; done && i < o->n_items; i++) json_array_append_new(content, block_json(o, i, 1));
    json_t *usage = json_pack("{s:I, s:I, s:I}", "input_tokens", (json_int_t)o->usage.prompt_tokens, "output_tokens",
                              (json_int_t)(done ? o->usage.completion_tokens : 0), "cache_read_input_tokens",
                              (json_int_t)o->usage.cached_tokens);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", o->id, "type", "message", "role", "assistant",
                     "model", o->model, "content", content, "stop_reason",
                     done ? json_string(tide_api_out_finish_reason(o)) : json_null(), "stop_sequence",
                     done ? stop_sequence(o) : json_null(), "usage", usage);
}

static int begin(tide_api_out *o, tide_status *st) {
    return tide_out_event(o, "message_start", json_pack("{s:o}", "message", message_json(o, 0)), st);
}

static int open_item(tide_api_out *o, size_t i, tide_status *st) {
    return tide_out_event(o, "content_block_start", json_pack("{s:I, s:o}", "index", (json_int_t)i, "content_block",
                                                              block_json(o, i, 0)), st);
}

static int delta(tide_api_out *o, size_t i, const char *text, size_t len, tide_status *st) {
    static const char *const TYPE[] = {"thinking_delta", "text_delta", "input_json_delta"};
    static const char *const FIELD[] = {"thinking", "text", "partial_json"};
    item_kind k = o->items[i].kind;
    return tide_out_event(o, "content_block_delta", json_pack("{s:I, s:{s:s, s:o}}", "index", (json_int_t)i, "delta", "type",
                                                              TYPE[k], FIELD[k], tide_jstr(text, len)), st);
}

static int close_item(tide_api_out *o, size_t i, tide_status *st) {
    return tide_out_event(o, "content_block_stop", json_pack("{s:I}", "index", (json_int_t)i), st);
}

static int finish(tide_api_out *o, tide_status *st) {
    json_t *d = json_pack("{s:{s:s, s:o}, s:{s:I}}", "delta", "stop_reason", tide_api_out_finish_reason(o),
                          "stop_sequence", stop_sequence(o), "usage", "output_tokens",
                          (json_int_t)o->usage.completion_tokens);
    if (tide_out_event(o, "message_delta", d, st) != 0) return -1;
    return tide_out_event(o, "message_stop", json_object(), st);
}

static json_t *response(tide_api_out *o) { return message_json(o, 1); }

static int fail(tide_api_out *o, const char *message, tide_status *st) {
    return tide_out_event(o, "error", json_pack("{s:{s:s, s:o}}", "error", "type", "api_error", "message",
                                                tide_jstr(message, strlen(message))), st);
}

const out_api tide_out_messages = {begin, open_item, delta, close_item, finish, response, fail};
