/* Streaming output parser; the state machine is described in outparse.h
 * and docs/text.md.
 *
 * Invariance under chunking rests on one rule, applied in every state: scan
 * the unprocessed text for the earliest position where one of the state's
 * markers matches completely OR where the rest of the text is a proper
 * prefix of a marker. A prefix means "wait for more text" (the text before
 * it is safe to hand out); a complete match is taken, preferring the longest
 * marker at that position. Given the whole text, the same decisions are
 * made at the same positions, however the text was split. */
#include "text/outparse.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "text/pyjson.h"
#include "text/render.h"

typedef enum { S_REASONING, S_CONTENT, S_CALLS, S_NAME, S_INVOKE, S_HEAD, S_VALUE, S_DONE } pstate;

typedef enum {
    A_END_THINK, A_EOS, A_CALLS_OPEN, A_STOP, A_INVOKE_OPEN, A_CALLS_CLOSE, A_NAME_END,
    A_PARAM_OPEN, A_INVOKE_CLOSE, A_HEAD_END, A_PARAM_CLOSE,
} action;

typedef struct marker {
    const char *s;
    size_t len;
    action act;
    size_t stop; /* A_STOP: which stop sequence */
} marker;

#define MAX_FIELD 512 /* tool names and parameter heads are cut at this length */
#define MAX_MARKERS (8 + TIDE_OUTPARSE_MAX_STOPS)

struct tide_outparse {
    pstate state;
    tide_parse_end end;
    tide_sb pend; /* text not yet processed */
    tide_sb reasoning, content;
    tide_sb field;  /* tool name or parameter head being read */
    tide_sb value;  /* a string="false" parameter value */
    int value_is_string, n_params, call_open, dropped_call;
    tide_parsed_call calls[TIDE_OUTPARSE_MAX_CALLS];
    size_t n_calls;
    char *stops[TIDE_OUTPARSE_MAX_STOPS];
    size_t n_stops;
    const char *stop_hit;
    int raw; /* completions: no tool markup, only stops and EOS */
    int json_mode, js_started, js_depth, js_in_str, js_esc, js_invalid, js_complete;
    tide_pev_fn fn;
    void *ud;
};

static size_t mk(marker *m, size_t n, const char *s, action a) {
    m[n] = (marker){s, strlen(s), a, 0};
    return n + 1;
}

static size_t markers_for(const tide_outparse *p, marker *m) {
    size_t n = 0;
    n = mk(m, n, TIDE_TOK_EOS, A_EOS);
    switch (p->state) {
    case S_REASONING: n = mk(m, n, TIDE_TOK_END_THINK, A_END_THINK); break;
    case S_CONTENT:
        if (!p->raw) {
            n = mk(m, n, "\n\n" TIDE_DSML_CALLS_OPEN, A_CALLS_OPEN);
            n = mk(m, n, TIDE_DSML_CALLS_OPEN, A_CALLS_OPEN);
        }
        for (size_t i = 0; i < p->n_stops; i++) {
            n = mk(m, n, p->stops[i], A_STOP);
            m[n - 1].stop = i;
        }
        break;
    case S_CALLS:
        n = mk(m, n, TIDE_DSML_INVOKE_OPEN, A_INVOKE_OPEN);
        n = mk(m, n, TIDE_DSML_CALLS_CLOSE, A_CALLS_CLOSE);
        break;
    case S_NAME: n = mk(m, n, "\">", A_NAME_END); break;
    case S_INVOKE:
        n = mk(m, n, TIDE_DSML_PARAM_OPEN, A_PARAM_OPEN);
        n = mk(m, n, TIDE_DSML_INVOKE_CLOSE, A_INVOKE_CLOSE);
        break;
    case S_HEAD: n = mk(m, n, "\">", A_HEAD_END); break;
    case S_VALUE: n = mk(m, n, TIDE_DSML_PARAM_CLOSE, A_PARAM_CLOSE); break;
    case S_DONE: break;
    }
    return n;
}

/* The earliest position with a complete or (unless finishing) partial
 * marker. Returns 0 when there is none; else sets *pos and either *hit
 * (complete, longest) or *partial. */
static int scan(const char *s, size_t n, const marker *m, size_t nm, int finishing, size_t *pos,
                const marker **hit, int *partial) {
    for (size_t q = 0; q < n; q++) {
        const marker *best = NULL;
        int part = 0;
        for (size_t i = 0; i < nm; i++) {
            if (m[i].s[0] != s[q]) continue;
            size_t avail = n - q;
            if (avail >= m[i].len) {
                if (memcmp(s + q, m[i].s, m[i].len) == 0 && (!best || m[i].len > best->len)) best = &m[i];
            } else if (!finishing && memcmp(s + q, m[i].s, avail) == 0) {
                part = 1;
            }
        }
        if (best || part) {
            *pos = q;
            *hit = part ? NULL : best;
            *partial = part;
            return 1;
        }
    }
    return 0;
}

/* Length of the longest prefix of s[0:n] that does not end inside a UTF-8
 * character (an incomplete character at the end is held back). */
static size_t utf8_cut(const char *s, size_t n) {
    for (size_t k = 0; k < 4 && k < n; k++) {
        unsigned char c = (unsigned char)s[n - 1 - k];
        if ((c & 0xC0) == 0x80) continue;
        if (c < 0x80) return n;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        return k + 1 < need ? n - 1 - k : n;
    }
    return n;
}

static int emit(tide_outparse *p, tide_pev_kind kind, const char *text, size_t len, tide_status *st) {
    if (!p->fn) return 0;
    tide_pev ev = {.kind = kind, .text = text, .len = len, .call = p->n_calls ? p->n_calls - 1 : 0};
    if (kind == TIDE_PEV_CALL_BEGIN) ev.name = p->calls[p->n_calls - 1].name;
    return p->fn(p->ud, &ev, st);
}

static int emit_args(tide_outparse *p, const char *text, size_t len, tide_status *st) {
    if (!p->call_open || p->dropped_call) return 0;
    tide_sb_addn(&p->calls[p->n_calls - 1].args, text, len);
    return emit(p, TIDE_PEV_CALL_ARGS, text, len, st);
}

/* JSON mode: follows the content's bracket structure and returns how many
 * of the n bytes belong to the top-level value (n unless it closes here). */
static size_t json_track(tide_outparse *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p->js_invalid || p->js_complete) return n;
        char c = s[i];
        if (!p->js_started) {
            if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
            if (c == '{' || c == '[') p->js_started = 1, p->js_depth = 1;
            else p->js_invalid = 1;
        } else if (p->js_in_str) {
            if (p->js_esc) p->js_esc = 0;
            else if (c == '\\') p->js_esc = 1;
            else if (c == '"') p->js_in_str = 0;
        } else if (c == '"') {
            p->js_in_str = 1;
        } else if (c == '{' || c == '[') {
            p->js_depth++;
        } else if ((c == '}' || c == ']') && --p->js_depth == 0) {
            p->js_complete = 1;
            return i + 1;
        }
    }
    return n;
}

/* Text that belongs to the current state. */
static int take_text(tide_outparse *p, const char *s, size_t n, tide_status *st) {
    if (n == 0) return 0;
    switch (p->state) {
    case S_REASONING:
        tide_sb_addn(&p->reasoning, s, n);
        return emit(p, TIDE_PEV_REASONING, s, n, st);
    case S_CONTENT: {
        size_t keep = p->json_mode ? json_track(p, s, n) : n;
        tide_sb_addn(&p->content, s, keep);
        if (p->js_complete) p->state = S_DONE, p->end = TIDE_PEND_JSON;
        return emit(p, TIDE_PEV_CONTENT, s, keep, st);
    }
    case S_NAME:
    case S_HEAD:
        if (p->field.len < MAX_FIELD) tide_sb_addn(&p->field, s, n < MAX_FIELD - p->field.len ? n : MAX_FIELD - p->field.len);
        return 0;
    case S_VALUE:
        if (!p->value_is_string) {
            tide_sb_addn(&p->value, s, n);
            return 0;
        }
        {
            tide_sb esc;
            tide_sb_init(&esc);
            tide_pyjson_escape(&esc, s, n);
            int rc = tide_sb_check(&esc, "parsing output", st) == 0 ? emit_args(p, esc.s, esc.len, st) : -1;
            tide_sb_free(&esc);
            return rc;
        }
    default: return 0; /* whitespace between DSML elements */
    }
}

static int begin_call(tide_outparse *p, tide_status *st) {
    p->n_params = 0;
    p->call_open = 1;
    p->dropped_call = p->n_calls >= TIDE_OUTPARSE_MAX_CALLS;
    if (p->dropped_call) return 0;
    tide_parsed_call *c = &p->calls[p->n_calls];
    memset(c, 0, sizeof *c);
    c->name = strndup(p->field.s ? p->field.s : "", p->field.len);
    if (!c->name) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory parsing a tool call");
    p->n_calls++;
    if (emit(p, TIDE_PEV_CALL_BEGIN, NULL, 0, st) != 0) return -1;
    return emit_args(p, "{", 1, st);
}

static int end_call(tide_outparse *p, int complete, tide_status *st) {
    if (!p->call_open) return 0;
    p->call_open = 0;
    if (p->dropped_call) return 0;
    p->call_open = 1; /* so emit_args still writes */
    int rc = emit_args(p, "}", 1, st);
    p->call_open = 0;
    p->calls[p->n_calls - 1].complete = complete;
    return rc ? rc : emit(p, TIDE_PEV_CALL_END, NULL, 0, st);
}

/* `name" string="true` -> the key, and whether the value is raw text. */
static int begin_param(tide_outparse *p, tide_status *st) {
    const char *h = p->field.s ? p->field.s : "";
    size_t n = p->field.len, klen = n;
    static const char SEP[] = "\" string=\"";
    p->value_is_string = 1;
    for (size_t i = n; i-- > 0;)
        if (n - i >= sizeof SEP - 1 && memcmp(h + i, SEP, sizeof SEP - 1) == 0) {
            klen = i;
            const char *flag = h + i + sizeof SEP - 1;
            p->value_is_string = !(n - i - (sizeof SEP - 1) == 5 && memcmp(flag, "false", 5) == 0);
            break;
        }
    tide_sb pre;
    tide_sb_init(&pre);
    if (p->n_params++) tide_sb_add(&pre, ", ");
    tide_pyjson_string(&pre, h, klen);
    tide_sb_add(&pre, p->value_is_string ? ": \"" : ": ");
    int rc = tide_sb_check(&pre, "parsing output", st) == 0 ? emit_args(p, pre.s, pre.len, st) : -1;
    tide_sb_free(&pre);
    tide_sb_reset(&p->value);
    return rc;
}

static int end_param(tide_outparse *p, tide_status *st) {
    if (p->value_is_string) return emit_args(p, "\"", 1, st);
    tide_sb out;
    tide_sb_init(&out);
    json_t *v = json_loadb(p->value.s ? p->value.s : "", p->value.len, JSON_DECODE_ANY, NULL);
    tide_status ignore;
    if (!v || tide_pyjson_dump(&out, v, &ignore) != 0) { /* not JSON: keep the text as a string */
        tide_sb_reset(&out);
        tide_pyjson_string(&out, p->value.s ? p->value.s : "", p->value.len);
    }
    json_decref(v);
    int rc = tide_sb_check(&out, "parsing output", st) == 0 ? emit_args(p, out.s, out.len, st) : -1;
    tide_sb_free(&out);
    tide_sb_reset(&p->value);
    return rc;
}

static int apply(tide_outparse *p, action a, tide_status *st) {
    switch (a) {
    case A_END_THINK: p->state = S_CONTENT; return 0;
    case A_CALLS_OPEN: p->state = S_CALLS; return 0;
    case A_CALLS_CLOSE: p->state = S_CONTENT; return 0;
    case A_INVOKE_OPEN: p->state = S_NAME; tide_sb_reset(&p->field); return 0;
    case A_NAME_END: p->state = S_INVOKE; return begin_call(p, st);
    case A_PARAM_OPEN: p->state = S_HEAD; tide_sb_reset(&p->field); return 0;
    case A_HEAD_END: p->state = S_VALUE; return begin_param(p, st);
    case A_PARAM_CLOSE: p->state = S_INVOKE; return end_param(p, st);
    case A_INVOKE_CLOSE: p->state = S_CALLS; return end_call(p, 1, st);
    case A_STOP: p->state = S_DONE; p->end = TIDE_PEND_STOP; return 0;
    case A_EOS: break;
    }
    /* End of turn, possibly inside a tool call. */
    int rc = 0;
    if (p->state == S_VALUE) rc = end_param(p, st);
    if (!rc) rc = end_call(p, 1, st);
    p->state = S_DONE;
    p->end = TIDE_PEND_EOS;
    return rc;
}

static int run(tide_outparse *p, int finishing, tide_status *st) {
    marker m[MAX_MARKERS];
    size_t at = 0; /* processed bytes of pend; removed once at the end (no quadratic copying) */
    while (p->state != S_DONE && at < p->pend.len) {
        size_t nm = markers_for(p, m), pos = 0, n = p->pend.len - at;
        const marker *hit = NULL;
        int partial = 0;
        const char *s = p->pend.s + at;
        if (!scan(s, n, m, nm, finishing, &pos, &hit, &partial)) {
            size_t k = finishing ? n : utf8_cut(s, n);
            if (take_text(p, s, k, st) != 0) return -1;
            at += k;
            break;
        }
        if (take_text(p, s, pos, st) != 0) return -1;
        if (p->state == S_DONE) break; /* JSON mode closed the value */
        if (partial) {
            at += pos;
            break;
        }
        at += pos + hit->len;
        if (hit->act == A_STOP) p->stop_hit = p->stops[hit->stop];
        if (apply(p, hit->act, st) != 0) return -1;
    }
    if (p->state == S_DONE) tide_sb_reset(&p->pend);
    else tide_sb_consume(&p->pend, at);
    return tide_sb_check(&p->pend, "parsing output", st);
}

int tide_outparse_new(const tide_outparse_cfg *cfg, tide_outparse **out, tide_status *st) {
    *out = NULL;
    if (cfg->n_stops > TIDE_OUTPARSE_MAX_STOPS)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d stop sequences", TIDE_OUTPARSE_MAX_STOPS);
    tide_outparse *p = calloc(1, sizeof *p);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    p->raw = cfg->raw;
    p->state = cfg->in_reasoning && !cfg->raw ? S_REASONING : S_CONTENT;
    p->json_mode = cfg->json_mode;
    p->fn = cfg->fn;
    p->ud = cfg->ud;
    for (size_t i = 0; i < cfg->n_stops; i++) {
        size_t n = strlen(cfg->stops[i]);
        if (n == 0 || n > TIDE_OUTPARSE_MAX_STOP_LEN) {
            tide_outparse_free(p);
            return tide_fail(st, TIDE_ERR_INVALID, "stop sequence %zu must be 1 to %d bytes", i,
                             TIDE_OUTPARSE_MAX_STOP_LEN);
        }
        if (!(p->stops[p->n_stops++] = strdup(cfg->stops[i]))) {
            tide_outparse_free(p);
            return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        }
    }
    *out = p;
    return 0;
}

void tide_outparse_free(tide_outparse *p) {
    if (!p) return;
    tide_sb_free(&p->pend), tide_sb_free(&p->reasoning), tide_sb_free(&p->content);
    tide_sb_free(&p->field), tide_sb_free(&p->value);
    for (size_t i = 0; i < p->n_calls; i++) free(p->calls[i].name), tide_sb_free(&p->calls[i].args);
    for (size_t i = 0; i < p->n_stops; i++) free(p->stops[i]);
    free(p);
}

int tide_outparse_feed(tide_outparse *p, const char *text, size_t len, tide_status *st) {
    if (p->state == S_DONE || len == 0) return 0;
    tide_sb_addn(&p->pend, text, len);
    return run(p, 0, st);
}

int tide_outparse_finish(tide_outparse *p, tide_status *st) {
    if (run(p, 1, st) != 0) return -1;
    int rc = 0;
    switch (p->state) { /* cut off inside a tool call: close what was opened */
    case S_VALUE: rc = end_param(p, st); /* fallthrough */
    case S_HEAD:
    case S_INVOKE: if (!rc) rc = end_call(p, 0, st); break;
    default: break;
    }
    if (p->state != S_DONE) p->state = S_DONE;
    return rc ? rc : tide_sb_check(&p->content, "parsing output", st) | tide_sb_check(&p->reasoning, "parsing output", st);
}

tide_parse_end tide_outparse_end(const tide_outparse *p) { return p->end; }

const char *tide_outparse_reasoning(const tide_outparse *p, size_t *len) {
    if (len) *len = p->reasoning.len;
    return p->reasoning.s ? p->reasoning.s : "";
}

const char *tide_outparse_content(const tide_outparse *p, size_t *len) {
    if (len) *len = p->content.len;
    return p->content.s ? p->content.s : "";
}

size_t tide_outparse_ncalls(const tide_outparse *p) { return p->n_calls; }

const tide_parsed_call *tide_outparse_call(const tide_outparse *p, size_t i) {
    return i < p->n_calls ? &p->calls[i] : NULL;
}

const char *tide_outparse_stop_seq(const tide_outparse *p) { return p->stop_hit; }

int tide_outparse_json_ok(const tide_outparse *p) {
    if (!p->js_complete) return 0;
    json_t *v = json_loadb(p->content.s, p->content.len, JSON_DECODE_ANY, NULL);
    json_decref(v);
    return v != NULL;
}
