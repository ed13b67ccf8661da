/* Output side of the APIs: parser events -> items -> the API's events; see
 * out.h and out_impl.h. */
#include "api/out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jfield.h"
#include "api/out_impl.h"

static int on_pev(void *ud, const tide_pev *ev, tide_status *st);

int tide_api_out_new(const tide_api_req *req, int in_reasoning, const char *id, int64_t created, tide_sse_fn fn,
                     void *ud, tide_api_out **out, tide_status *st) {
    *out = NULL;
    tide_api_out *o = calloc(1, sizeof *o);
    if (!o) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    o->kind = req->kind;
    static const out_api *const API[] = {&tide_out_chat, &tide_out_responses, &tide_out_messages,
                                         &tide_out_completions};
    o->api = API[req->kind];
    o->last_choice = 1;
    o->id = strdup(id ? id : "");
    o->model = strdup(req->gen.model ? req->gen.model : "");
    o->created = created;
    o->stream = req->gen.stream;
    o->include_usage = req->gen.include_usage;
    o->max_tokens = req->gen.max_tokens;
    o->parallel_tool_calls = req->gen.parallel_tool_calls;
    o->temperature = req->gen.temperature;
    o->top_p = req->gen.top_p;
    o->fn = fn;
    o->ud = ud;
    o->open = -1;
    o->logprobs = req->gen.logprobs;
    tide_outparse_cfg cfg = {.in_reasoning = in_reasoning, .json_mode = req->gen.format != TIDE_FMT_TEXT,
                             .raw = req->kind == TIDE_API_COMPLETIONS,
                             .stops = (const char *const *)req->gen.stop, .n_stops = req->gen.n_stop,
                             .fn = on_pev, .ud = o};
    if (!o->id || !o->model) {
        tide_api_out_free(o);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    if (tide_outparse_new(&cfg, &o->parser, st) != 0) {
        tide_api_out_free(o);
        return -1;
    }
    *out = o;
    return 0;
}

void tide_api_out_free(tide_api_out *o) {
    if (!o) return;
    for (size_t i = 0; i < o->n_items; i++) tide_sb_free(&o->items[i].text);
    free(o->items);
    tide_outparse_free(o->parser);
    json_decref(o->lp_all);
    json_decref(o->lp_pending);
    free(o->id);
    free(o->model);
    free(o);
}

int tide_out_emit(tide_api_out *o, const char *event, json_t *obj, tide_status *st) {
    if (!obj) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory building an event");
    if (o->kind == TIDE_API_RESPONSES) json_object_set_new(obj, "sequence_number", json_integer(o->seq++));
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory writing an event");
    int rc = o->fn ? o->fn(o->ud, event, s, strlen(s), st) : 0;
    free(s);
    return rc;
}

int tide_out_event(tide_api_out *o, const char *type, json_t *obj, tide_status *st) {
    if (obj) { /* "type" first, as OpenAI and Anthropic write it */
        json_t *e = json_pack("{s:s}", "type", type);
        if (e) json_object_update(e, obj);
        json_decref(obj);
        obj = e;
    }
    return tide_out_emit(o, type, obj, st);
}

const char *tide_out_call_args(const tide_api_out *o, size_t call, size_t *len) {
    const tide_parsed_call *c = tide_outparse_call(o->parser, call);
    *len = c ? c->args.len : 0;
    return c && c->args.s ? c->args.s : "{}";
}

const char *tide_out_call_name(const tide_api_out *o, size_t call) {
    const tide_parsed_call *c = tide_outparse_call(o->parser, call);
    return c ? c->name : "";
}

const char *tide_out_stop_seq(const tide_api_out *o) { return tide_outparse_stop_seq(o->parser); }

/* The logprob entries recorded since the last call belong to item i: a
 * token's entry is recorded before its text reaches the parser, so the
 * entries waiting when text (or the item's end) comes are that item's. */
static void lp_attribute(tide_api_out *o, size_t i) {
    size_t n = o->lp_all ? json_array_size(o->lp_all) : 0;
    out_item *it = &o->items[i];
    if (!it->lp_set) it->lp_lo = o->lp_mark, it->lp_set = 1;
    it->lp_hi = n;
    o->lp_mark = n;
}

static int close_open(tide_api_out *o, tide_status *st) {
    if (o->open < 0) return 0;
    size_t i = (size_t)o->open;
    lp_attribute(o, i);
    o->open = -1;
    return o->stream ? o->api->close(o, i, st) : 0;
}

static int open_item(tide_api_out *o, item_kind kind, size_t call, tide_status *st) {
    if (close_open(o, st) != 0) return -1;
    if (o->n_items == o->cap_items) {
        size_t cap = o->cap_items ? o->cap_items * 2 : 4;
        out_item *p = realloc(o->items, cap * sizeof *p);
        if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        o->items = p;
        o->cap_items = cap;
    }
    out_item *it = &o->items[o->n_items];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->call = call;
    static const char *const PREFIX[4][3] = {/* [api][kind] */
                                             {"reasoning", "msg", "call"},
                                             {"rs", "msg", "call"},
                                             {"thinking", "text", "toolu"},
                                             {"reasoning", "text", "call"}};
    snprintf(it->id, sizeof it->id, "%s_%.64s_%zu", PREFIX[o->kind][kind], o->id, kind == IT_CALL ? call : o->n_items);
    o->open = (long)o->n_items++;
    return o->stream ? o->api->open(o, (size_t)o->open, st) : 0;
}

static int text_item(tide_api_out *o, item_kind kind, const char *text, size_t len, tide_status *st) {
    if (len == 0) return 0;
    if (o->open < 0 || o->items[o->open].kind != kind)
        if (open_item(o, kind, 0, st) != 0) return -1;
    out_item *it = &o->items[o->open];
    tide_sb_addn(&it->text, text, len);
    if (tide_sb_check(&it->text, "collecting output", st) != 0) return -1;
    lp_attribute(o, (size_t)o->open);
    return o->stream ? o->api->delta(o, (size_t)o->open, text, len, st) : 0;
}

static int on_pev(void *ud, const tide_pev *ev, tide_status *st) {
    tide_api_out *o = ud;
    if (o->tap && o->tap(o->tap_ud, ev, st) != 0) return -1;
    switch (ev->kind) {
    case TIDE_PEV_REASONING: return text_item(o, IT_REASONING, ev->text, ev->len, st);
    case TIDE_PEV_CONTENT: return text_item(o, IT_TEXT, ev->text, ev->len, st);
    case TIDE_PEV_CALL_BEGIN: return open_item(o, IT_CALL, ev->call, st);
    case TIDE_PEV_CALL_ARGS:
        if (o->open >= 0) lp_attribute(o, (size_t)o->open);
        return o->stream && o->open >= 0 ? o->api->delta(o, (size_t)o->open, ev->text, ev->len, st) : 0;
    case TIDE_PEV_CALL_END: return close_open(o, st);
    }
    return 0;
}

int tide_api_out_begin(tide_api_out *o, const tide_usage *usage, tide_status *st) {
    if (o->begun) return 0;
    o->begun = 1;
    if (usage) o->usage = *usage;
    return o->stream ? o->api->begin(o, st) : 0;
}

int tide_api_out_text(tide_api_out *o, const char *text, size_t len, tide_status *st) {
    if (o->finished || o->failed) return 0;
    if (!o->begun && tide_api_out_begin(o, NULL, st) != 0) return -1;
    return tide_outparse_feed(o->parser, text, len, st);
}

int tide_api_out_ended(const tide_api_out *o) { return tide_outparse_end(o->parser) != TIDE_PEND_NONE; }

int tide_api_out_finish(tide_api_out *o, tide_gen_end end, const tide_usage *usage, tide_status *st) {
    if (o->finished || o->failed) return 0;
    if (!o->begun && tide_api_out_begin(o, usage, st) != 0) return -1;
    if (tide_outparse_finish(o->parser, st) != 0 || close_open(o, st) != 0) return -1;
    o->finished = 1;
    if (usage) o->usage = *usage;
    tide_parse_end pe = tide_outparse_end(o->parser);
    if (pe == TIDE_PEND_STOP) o->fin = FIN_STOP_SEQ;
    else if (end == TIDE_GEN_LENGTH && pe == TIDE_PEND_NONE) o->fin = FIN_LENGTH;
    else if (tide_outparse_ncalls(o->parser) > 0) o->fin = FIN_TOOLS;
    else o->fin = FIN_STOP;
    return o->stream ? o->api->finish(o, st) : 0;
}

char *tide_api_out_response(tide_api_out *o, tide_status *st) {
    if (!o->finished) {
        tide_fail(st, TIDE_ERR_INTERNAL, "the response is not finished");
        return NULL;
    }
    json_t *r = o->api->response(o);
    char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (!s) tide_fail(st, TIDE_ERR_NOMEM, "out of memory writing the response");
    return s;
}

int tide_api_out_fail(tide_api_out *o, const char *message, tide_status *st) {
    if (o->failed || o->finished) return 0;
    o->failed = 1;
    if (!o->stream) return 0;
    if (!o->begun) {
        o->begun = 1;
        if (o->api->begin(o, st) != 0) return -1;
    }
    return o->api->fail(o, message, st);
}

void tide_api_out_set_tap(tide_api_out *o, tide_pev_fn fn, void *ud) {
    o->tap = fn;
    o->tap_ud = ud;
}

const char *tide_api_out_content(const tide_api_out *o, size_t *len) {
    const char *s = tide_outparse_content(o->parser, len);
    return s ? s : "";
}

const char *tide_api_out_reasoning(const tide_api_out *o, size_t *len) {
    const char *s = tide_outparse_reasoning(o->parser, len);
    return s ? s : "";
}

size_t tide_api_out_ncalls(const tide_api_out *o) { return tide_outparse_ncalls(o->parser); }

static json_t *lp_entry(const uint8_t *b, size_t n, float logprob) {
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < n; i++) json_array_append_new(bytes, json_integer(b[i]));
    return json_pack("{s:o, s:f, s:o}", "token", tide_jstr((const char *)b, n), "logprob", (double)logprob, "bytes",
                     bytes);
}

int tide_api_out_logprob(tide_api_out *o, const uint8_t *bytes, size_t len, float logprob,
                         const uint8_t *const *alt_bytes, const size_t *alt_len, const float *alt_logprob, int n_alt,
                         tide_status *st) {
    if (!o->logprobs || o->finished || o->failed) return 0;
    if (!o->lp_all) o->lp_all = json_array();
    if (!o->lp_pending) o->lp_pending = json_array();
    json_t *e = lp_entry(bytes, len, logprob), *top = json_array();
    for (int i = 0; top && i < n_alt; i++) json_array_append_new(top, lp_entry(alt_bytes[i], alt_len[i], alt_logprob[i]));
    if (!o->lp_all || !o->lp_pending || !e || !top || json_object_set_new(e, "top_logprobs", top) != 0) {
        json_decref(e);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory recording logprobs");
    }
    json_array_append(o->lp_all, e);
    json_array_append_new(o->lp_pending, e);
    return 0;
}

json_t *tide_api_out_take_logprobs(tide_api_out *o) {
    json_t *p = o->lp_pending;
    o->lp_pending = NULL;
    if (p && json_array_size(p) == 0) {
        json_decref(p);
        p = NULL;
    }
    return p;
}

void tide_api_out_set_choice(tide_api_out *o, int index, int last) {
    o->choice = index;
    o->last_choice = last;
}

const char *tide_api_out_finish_reason(const tide_api_out *o) {
    switch (o->kind) {
    case TIDE_API_COMPLETIONS: return o->fin == FIN_LENGTH ? "length" : "stop";
    case TIDE_API_CHAT: return o->fin == FIN_LENGTH ? "length" : o->fin == FIN_TOOLS ? "tool_calls" : "stop";
    case TIDE_API_MESSAGES:
        return o->fin == FIN_LENGTH ? "max_tokens" : o->fin == FIN_TOOLS ? "tool_use"
               : o->fin == FIN_STOP_SEQ ? "stop_sequence" : "end_turn";
    case TIDE_API_RESPONSES: return o->fin == FIN_LENGTH ? "incomplete" : "completed";
    }
    return "stop";
}
