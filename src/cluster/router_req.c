/* What the router reads of a generation request's body, without parsing it
 * the way the replicas do (it forwards the body untouched):
 *
 *   - the prefix chain: one hash per prefix unit, each chained on the ones
 *     before. A unit is the request's preamble (system prompt, tools,
 *     instructions), then each message (Chat, Messages, Responses input
 *     items), or each 512-byte / 128-id piece of a Completions prompt. The
 *     next turn of a conversation repeats the previous turn's messages, so
 *     its chain starts with the previous chain: the replica that served the
 *     previous turn holds those pages. This is cheaper than tide's own page
 *     hash (no tokenizer, no rendering in the router) and finds the same
 *     replicas for conversations; what it misses is a shared prefix that
 *     ends inside a message (a long common system prompt is unit 0, so
 *     that one is found).
 *   - an estimate of the prompt's tokens (for the length buckets): the
 *     body's bytes / 4, or the count of a token-id prompt.
 *   - the prefill-only body of the disaggregated path: the same request
 *     with one output token, not streamed. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/router.h"

/* Appends a unit: its hash chained on the previous one, and the prompt
 * tokens covered so far (its canonical JSON's bytes / 4, as the body's). */
static void add_unit(tide_route_req *q, const void *bytes, size_t len) {
    if (q->n_chain == TIDE_ROUTE_MAX_CHAIN) return;
    uint64_t prev = q->n_chain ? q->chain[q->n_chain - 1] : 0;
    int64_t before = q->n_chain ? q->upto[q->n_chain - 1] : 0;
    q->chain[q->n_chain] = tide_route_chain(prev, bytes, len);
    q->upto[q->n_chain++] = before + (int64_t)(len / 4);
}

static void add_json(tide_route_req *q, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    add_unit(q, s ? s : "", s ? strlen(s) : 0);
    free(s);
}

tide_route_api tide_route_api_of_path(const char *path) {
    if (!strcmp(path, "/v1/chat/completions")) return TIDE_ROUTE_API_CHAT;
    if (!strcmp(path, "/v1/completions")) return TIDE_ROUTE_API_COMPLETIONS;
    if (!strcmp(path, "/v1/responses")) return TIDE_ROUTE_API_RESPONSES;
    if (!strcmp(path, "/v1/messages")) return TIDE_ROUTE_API_MESSAGES;
    return TIDE_ROUTE_API_NONE;
}

int tide_route_req_read(tide_route_api api, const char *body, size_t len, tide_route_req *out) {
    memset(out, 0, sizeof *out);
    out->prompt_tokens = (int64_t)(len / 4);
    json_t *root = json_loadb(body, len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return -1; /* the replica will answer the 400 */
    }
    out->stream = json_is_true(json_object_get(root, "stream"));
    json_t *temp = json_object_get(root, "temperature"), *n = json_object_get(root, "n");
    out->resumable = out->stream && api != TIDE_ROUTE_API_RESPONSES &&
                     ((json_is_number(temp) && json_number_value(temp) == 0) ||
                      json_is_integer(json_object_get(root, "seed"))) &&
                     (!n || (json_is_integer(n) && json_integer_value(n) == 1));
    static const char *const pre_keys[] = {"system", "tools", "instructions", "tool_choice", NULL};
    json_t *pre = json_object();
    for (const char *const *k = pre_keys; *k; k++) {
        json_t *v = json_object_get(root, *k);
        if (v) json_object_set(pre, *k, v);
    }
    if (json_object_size(pre)) add_json(out, pre); /* no preamble: no unit (it would match every request) */
    json_decref(pre);
    json_t *items = NULL;
    if (api == TIDE_ROUTE_API_CHAT || api == TIDE_ROUTE_API_MESSAGES) items = json_object_get(root, "messages");
    else if (api == TIDE_ROUTE_API_RESPONSES) items = json_object_get(root, "input");
    if (json_is_array(items)) {
        size_t i;
        json_t *m;
        json_array_foreach(items, i, m) add_json(out, m);
    } else if (json_is_string(items)) {
        add_json(out, items);
    }
    json_t *prompt = json_object_get(root, "prompt");
    if (api == TIDE_ROUTE_API_COMPLETIONS && json_is_string(prompt)) {
        const char *s = json_string_value(prompt);
        size_t n = json_string_length(prompt);
        for (size_t off = 0; off < n && out->n_chain < TIDE_ROUTE_MAX_CHAIN; off += 512)
            add_unit(out, s + off, n - off < 512 ? n - off : 512);
    } else if (api == TIDE_ROUTE_API_COMPLETIONS && json_is_array(prompt)) {
        size_t n = json_array_size(prompt);
        out->prompt_tokens = (int64_t)n;
        int64_t ids[128];
        for (size_t off = 0; off < n && out->n_chain < TIDE_ROUTE_MAX_CHAIN; off += 128) {
            size_t k = 0;
            for (; k < 128 && off + k < n; k++) ids[k] = json_integer_value(json_array_get(prompt, off + k));
            add_unit(out, ids, k * sizeof ids[0]);
            out->upto[out->n_chain - 1] = (int64_t)(off + k); /* token ids: exact */
        }
    }
    json_decref(root);
    return 0;
}

char *tide_route_prefill_body(tide_route_api api, const char *body, size_t len, size_t *out_len) {
    json_t *root = json_loadb(body, len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    json_object_set_new(root, "stream", json_false());
    json_object_del(root, "stream_options");
    json_object_del(root, "n");
    switch (api) {
    case TIDE_ROUTE_API_CHAT:
        json_object_del(root, "max_tokens");
        json_object_set_new(root, "max_completion_tokens", json_integer(1));
        break;
    case TIDE_ROUTE_API_RESPONSES:
        json_object_set_new(root, "max_output_tokens", json_integer(1));
        break;
    default:
        json_object_set_new(root, "max_tokens", json_integer(1));
        break;
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (s) *out_len = strlen(s);
    return s;
}

int tide_route_event_text(tide_route_api api, const char *data, size_t len, char **text) {
    *text = NULL;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) return 0;
    json_t *o = json_loadb(data, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return -1;
    }
    int ok = 0;
    const char *t = NULL;
    if (api == TIDE_ROUTE_API_MESSAGES) {
        const char *type = json_string_value(json_object_get(o, "type"));
        json_t *d = json_object_get(o, "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (type && (!strcmp(type, "message_start") || !strcmp(type, "ping"))) ok = 1;
        else if (type && !strcmp(type, "content_block_start")) {
            const char *bt = json_string_value(json_object_get(json_object_get(o, "content_block"), "type"));
            ok = bt && (!strcmp(bt, "text") || !strcmp(bt, "thinking"));
        } else if (type && !strcmp(type, "content_block_delta") && dt) {
            ok = !strcmp(dt, "text_delta") || !strcmp(dt, "thinking_delta");
            t = json_string_value(json_object_get(d, !strcmp(dt, "text_delta") ? "text" : "thinking"));
        }
    } else {
        json_t *choices = json_object_get(o, "choices");
        json_t *c0 = json_array_get(choices, 0);
        json_t *fin = json_object_get(c0, "finish_reason");
        if (json_array_size(choices) == 1 && (!fin || json_is_null(fin))) {
            if (api == TIDE_ROUTE_API_COMPLETIONS) {
                t = json_string_value(json_object_get(c0, "text"));
                ok = t != NULL;
            } else {
                json_t *d = json_object_get(c0, "delta");
                ok = json_is_object(d) && !json_object_get(d, "tool_calls");
                const char *c = json_string_value(json_object_get(d, "content"));
                const char *rc = json_string_value(json_object_get(d, "reasoning_content"));
                t = c && *c ? c : rc;
                if (c && *c && rc && *rc) ok = 0; /* both in one chunk: not told apart */
            }
        }
    }
    if (ok && t && *t && !(*text = strdup(t))) ok = -1;
    json_decref(o);
    return ok;
}
