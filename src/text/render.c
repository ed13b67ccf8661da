/* V4.1 prompt rendering; see render.h, and docs/text.md for the rules.
 *
 * Rendering works on "units": the conversation's messages after runs of
 * user messages and tool results are merged into one user turn (tool
 * results become <tool_result> blocks, sorted into the order of the calls
 * that asked for them). A unit then renders by its role, followed by the
 * transition into the assistant's turn when an assistant speaks next or the
 * prompt ends. */
#include "text/render.h"

#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"
#include "text/sbuf.h"

typedef enum { U_SYSTEM, U_USER, U_ASSISTANT } unit_kind;

typedef struct unit {
    unit_kind kind;
    const tide_msg *msg;    /* system / assistant; first message of a user run */
    size_t first, count;    /* user runs: conv->msgs[first .. first+count) */
    int opening;            /* the system unit that carries tools / format */
} unit;

static const char TOOLS_HEAD[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"" TIDE_DSML_CALLS_OPEN "\" block like the following:\n\n"
    TIDE_DSML_CALLS_OPEN "\n"
    TIDE_DSML_INVOKE_OPEN "$TOOL_NAME\">\n"
    TIDE_DSML_PARAM_OPEN "$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE" TIDE_DSML_PARAM_CLOSE "\n"
    "...\n"
    TIDE_DSML_INVOKE_CLOSE "\n"
    TIDE_DSML_INVOKE_OPEN "$TOOL_NAME2\">\n"
    "...\n"
    TIDE_DSML_INVOKE_CLOSE "\n"
    TIDE_DSML_CALLS_CLOSE "\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

static const char TOOLS_TAIL[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

static const char FORMAT_HEAD[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

/* The prompt being built, and the spans of it that came from the client
 * (message text, names, schemas): the tokenizer must encode those as plain
 * text, so that a message spelling "<｜User｜>" cannot forge a turn. */
typedef struct rbuf {
    tide_sb b;
    tide_text_span *sp;
    size_t n, cap;
    int oom;
} rbuf;

/* Marks [from, end of the text) as client text. */
static void plain(rbuf *r, size_t from) {
    size_t to = r->b.len;
    if (to == from) return;
    if (r->n && r->sp[r->n - 1].off + r->sp[r->n - 1].len == from) { /* extend the previous span */
        r->sp[r->n - 1].len += to - from;
        return;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        tide_text_span *p = realloc(r->sp, cap * sizeof *p);
        if (!p) { r->oom = 1; return; }
        r->sp = p;
        r->cap = cap;
    }
    r->sp[r->n++] = (tide_text_span){from, to - from};
}

static void add_plain(rbuf *r, const char *s, size_t n) {
    size_t at = r->b.len;
    tide_sb_addn(&r->b, s, n);
    plain(r, at);
}

/* A message's content: client text, except the image placeholders that
 * tide_conv_add_image's parts put there (conv.c refuses any other), which
 * are markup, so that they become the image token. */
static void add_content(rbuf *r, const char *s, size_t n) {
    const char *ph = TIDE_CONV_IMAGE_PLACEHOLDER;
    size_t pn = strlen(ph), from = 0;
    for (size_t i = 0; n >= pn && i <= n - pn;)
        if (s[i] == ph[0] && memcmp(s + i, ph, pn) == 0) {
            add_plain(r, s + from, i - from);
            tide_sb_addn(&r->b, ph, pn);
            i = from = i + pn;
        } else {
            i++;
        }
    add_plain(r, s + from, n - from);
}

static int render_tools(rbuf *r, const tide_conv *c, tide_status *st) {
    tide_sb *b = &r->b;
    tide_sb_add(b, TOOLS_HEAD);
    for (size_t i = 0; i < c->n_tools; i++) {
        const tide_tool *t = &c->tools[i];
        if (i) tide_sb_addc(b, '\n');
        size_t at = b->len;
        if (t->shown) { /* the client's own definition, as the release writes it */
            if (tide_pyjson_dump(b, t->shown, st) != 0) return tide_fail_ctx(st, "tool \"%s\"", t->name);
            plain(r, at);
            continue;
        }
        tide_sb_add(b, "{\"name\": ");
        tide_pyjson_string(b, t->name, strlen(t->name));
        if (t->description) {
            tide_sb_add(b, ", \"description\": ");
            tide_pyjson_string(b, t->description, strlen(t->description));
        }
        if (t->parameters) {
            tide_sb_add(b, ", \"parameters\": ");
            if (tide_pyjson_dump(b, t->parameters, st) != 0)
                return tide_fail_ctx(st, "tool \"%s\" parameters", t->name);
        }
        tide_sb_addc(b, '}');
        plain(r, at);
    }
    tide_sb_add(b, TOOLS_TAIL);
    return 0;
}

/* The arguments as the release reads them: json.loads, applied once more
 * when the first gives a string (double-encoded). 0 with *doc holding an
 * object to render key by key; 0 with doc->root NULL when they are to be
 * passed whole (not JSON, or not an object); -1 when tide refuses them. */
static int load_arguments(const char *arguments, tide_pyjson_doc *doc, tide_status *st) {
    if (tide_pyjson_load(arguments, strlen(arguments), doc, st) != 0)
        return st->code == TIDE_ERR_FORMAT ? 0 : -1;
    if (json_is_string(doc->root)) {
        tide_pyjson_doc inner;
        int rc = tide_pyjson_load(json_string_value(doc->root), json_string_length(doc->root), &inner, st);
        tide_pyjson_doc_free(doc);
        if (rc != 0) return st->code == TIDE_ERR_FORMAT ? 0 : -1;
        *doc = inner;
    }
    if (!json_is_object(doc->root)) {
        tide_pyjson_doc_free(doc);
        return 0;
    }
    if (doc->has_nul || doc->lone_surrogate) { /* no prompt can hold them */
        const char *what = doc->has_nul ? "a NUL character" : "an unpaired surrogate (\\ud800-\\udfff)";
        tide_pyjson_doc_free(doc);
        return tide_fail(st, TIDE_ERR_INVALID, "the arguments hold %s", what);
    }
    return 0;
}

/* Arguments as DSML parameters. A JSON object (possibly double-encoded as
 * a JSON string) gives one parameter per key, strings raw and the rest as
 * JSON; anything else is passed whole as a string parameter "arguments". */
static int render_arguments(rbuf *r, const char *arguments, tide_status *st) {
    tide_sb *b = &r->b;
    tide_pyjson_doc doc;
    if (load_arguments(arguments, &doc, st) != 0) return -1;
    if (!doc.root) {
        tide_sb_add(b, TIDE_DSML_PARAM_OPEN "arguments\" string=\"true\">");
        add_plain(r, arguments, strlen(arguments));
        tide_sb_add(b, TIDE_DSML_PARAM_CLOSE);
        return 0;
    }
    const char *key;
    json_t *x;
    int first = 1, rc = 0;
    json_object_foreach(doc.root, key, x) {
        if (!first) tide_sb_addc(b, '\n');
        first = 0;
        tide_sb_add(b, TIDE_DSML_PARAM_OPEN);
        add_plain(r, key, strlen(key));
        if (json_is_string(x) && !tide_pyjson_doc_is_raw(&doc, x)) {
            tide_sb_add(b, "\" string=\"true\">");
            add_plain(r, json_string_value(x), json_string_length(x));
        } else {
            tide_sb_add(b, "\" string=\"false\">");
            size_t at = b->len;
            if ((rc = tide_pyjson_doc_dump(b, &doc, x, st)) != 0) break;
            plain(r, at);
        }
        tide_sb_add(b, TIDE_DSML_PARAM_CLOSE);
    }
    tide_pyjson_doc_free(&doc);
    return rc;
}

static int render_calls(rbuf *r, const tide_msg *m, tide_status *st) {
    tide_sb *b = &r->b;
    tide_sb_add(b, "\n\n" TIDE_DSML_CALLS_OPEN "\n");
    for (size_t i = 0; i < m->n_calls; i++) {
        if (i) tide_sb_addc(b, '\n');
        tide_sb_add(b, TIDE_DSML_INVOKE_OPEN);
        add_plain(r, m->calls[i].name, strlen(m->calls[i].name));
        tide_sb_add(b, "\">\n");
        if (render_arguments(r, m->calls[i].arguments, st) != 0)
            return tide_fail_ctx(st, "tool call \"%s\" arguments", m->calls[i].name);
        tide_sb_add(b, "\n" TIDE_DSML_INVOKE_CLOSE);
    }
    tide_sb_add(b, "\n" TIDE_DSML_CALLS_CLOSE);
    return 0;
}

/* Position of a tool result among the calls of the latest assistant message
 * that made calls; unknown ids sort as call 0 and, when calls share an id,
 * the last of them decides (the release maps each id to its last index). */
static size_t call_rank(const tide_msg *calls_msg, const tide_msg *result) {
    if (!calls_msg || !result->tool_call_id || !result->tool_call_id[0]) return 0;
    size_t rank = 0;
    for (size_t i = 0; i < calls_msg->n_calls; i++)
        if (calls_msg->calls[i].id && strcmp(calls_msg->calls[i].id, result->tool_call_id) == 0) rank = i;
    return rank;
}

static int has_ids(const tide_msg *m) {
    for (size_t i = 0; m && i < m->n_calls; i++)
        if (m->calls[i].id && m->calls[i].id[0]) return 1;
    return 0;
}

/* One user turn: its user texts and tool results in message order, except
 * that the tool results are stably sorted into call order among the slots
 * they occupy. */
static int render_user(rbuf *r, const tide_conv *c, const unit *u, const tide_msg *calls_msg,
                       tide_status *st) {
    tide_sb *b = &r->b;
    size_t n = u->count, nt = 0;
    const tide_msg **tools = malloc((n ? n : 1) * sizeof *tools);
    if (!tools) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory rendering a user turn");
    for (size_t i = 0; i < n; i++)
        if (c->msgs[u->first + i].role == TIDE_ROLE_TOOL) tools[nt++] = &c->msgs[u->first + i];
    if (nt > 1 && has_ids(calls_msg)) {
        for (size_t i = 1; i < nt; i++) { /* stable insertion sort */
            const tide_msg *x = tools[i];
            size_t r = call_rank(calls_msg, x), j = i;
            while (j > 0 && call_rank(calls_msg, tools[j - 1]) > r) {
                tools[j] = tools[j - 1];
                j--;
            }
            tools[j] = x;
        }
    }
    tide_sb_add(b, TIDE_TOK_USER);
    size_t ti = 0;
    for (size_t i = 0; i < n; i++) {
        const tide_msg *m = &c->msgs[u->first + i];
        if (i) tide_sb_add(b, "\n\n");
        if (m->role == TIDE_ROLE_TOOL) {
            tide_sb_add(b, "<tool_result>");
            add_content(r, tools[ti]->content, strlen(tools[ti]->content));
            ti++;
            tide_sb_add(b, "</tool_result>");
        } else {
            add_content(r, m->content, strlen(m->content));
        }
    }
    free(tools);
    return 0;
}

/* Splits the conversation into units; returns the count or -1. */
static long build_units(const tide_conv *c, unit *units, tide_status *st) {
    size_t n = 0, i = 0;
    int needs_opening = c->n_tools > 0 || c->response_format != NULL;
    if (needs_opening && (c->n_msgs == 0 || c->msgs[0].role != TIDE_ROLE_SYSTEM))
        units[n++] = (unit){.kind = U_SYSTEM, .msg = NULL, .opening = 1};
    while (i < c->n_msgs) {
        const tide_msg *m = &c->msgs[i];
        if (m->role == TIDE_ROLE_SYSTEM) {
            units[n++] = (unit){.kind = U_SYSTEM, .msg = m, .opening = i == 0};
            i++;
        } else if (m->role == TIDE_ROLE_ASSISTANT) {
            units[n++] = (unit){.kind = U_ASSISTANT, .msg = m};
            i++;
        } else {
            size_t j = i;
            while (j < c->n_msgs && (c->msgs[j].role == TIDE_ROLE_USER || c->msgs[j].role == TIDE_ROLE_TOOL)) j++;
            units[n++] = (unit){.kind = U_USER, .msg = m, .first = i, .count = j - i};
            i = j;
        }
    }
    if (n == 0) return tide_fail(st, TIDE_ERR_INVALID, "the conversation has no messages");
    return (long)n;
}

static void effort_line(tide_sb *b, int effort) {
    tide_sb_addf(b, "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                 effort);
}

static int render_units(rbuf *r, const tide_conv *c, const unit *u, size_t n, int *in_reasoning,
                        tide_status *st) {
    tide_sb *b = &r->b;
    int thinking = c->thinking != 0;
    int drop = c->n_tools == 0; /* reasoning is kept whole when tools are present */
    long last_user = -1;        /* a mid-conversation system message counts as a user turn */
    for (size_t i = 0; i < n; i++)
        if (u[i].kind == U_USER || (u[i].kind == U_SYSTEM && i > 0)) last_user = (long)i;
    const tide_msg *calls_msg = NULL;
    *in_reasoning = 0;
    tide_sb_add(b, TIDE_TOK_BOS);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && thinking) {
            tide_sb_add(b, TIDE_TOK_SYSTEM);
            effort_line(b, c->effort);
        } else if (i == 0 && u[i].kind == U_SYSTEM) {
            tide_sb_add(b, TIDE_TOK_SYSTEM);
        }
        int is_last = i + 1 == n;
        switch (u[i].kind) {
        case U_SYSTEM:
            if (i > 0) tide_sb_add(b, TIDE_TOK_SYSTEM);
            if (u[i].msg) add_content(r, u[i].msg->content, strlen(u[i].msg->content));
            if (u[i].opening && c->n_tools > 0) {
                tide_sb_add(b, "\n\n");
                if (render_tools(r, c, st) != 0) return -1;
            }
            if (u[i].opening && c->response_format) {
                tide_sb_add(b, "\n\n");
                tide_sb_add(b, FORMAT_HEAD);
                size_t at = b->len;
                if (tide_pyjson_dump(b, c->response_format, st) != 0)
                    return tide_fail_ctx(st, "response format");
                plain(r, at);
            }
            break;
        case U_USER:
            if (render_user(r, c, &u[i], calls_msg, st) != 0) return -1;
            break;
        case U_ASSISTANT: {
            const tide_msg *m = u[i].msg;
            if (thinking && (!drop || (long)i > last_user)) {
                if (m->reasoning) add_plain(r, m->reasoning, strlen(m->reasoning));
                tide_sb_add(b, TIDE_TOK_END_THINK);
            }
            add_content(r, m->content, strlen(m->content));
            if (m->n_calls && render_calls(r, m, st) != 0) return -1;
            if (!is_last || !c->continue_final) tide_sb_add(b, TIDE_TOK_EOS); /* unless continued (prefill) */
            if (m->n_calls) calls_msg = m;
            break;
        }
        }
        /* The assistant's header follows a user turn (or a later system
         * message) when the assistant speaks next or the prompt ends. */
        if (!is_last && u[i + 1].kind != U_ASSISTANT) continue;
        if (u[i].kind == U_USER || (u[i].kind == U_SYSTEM && i > 0)) {
            tide_sb_add(b, TIDE_TOK_ASSISTANT);
            int open = thinking && (!drop || (long)i >= last_user);
            tide_sb_add(b, open ? TIDE_TOK_THINK : TIDE_TOK_END_THINK);
            if (is_last) *in_reasoning = open;
        }
    }
    /* Continuing an assistant message that has not closed its reasoning
     * cannot happen: a kept reasoning is always followed by </think>. */
    return 0;
}

int tide_render(const tide_conv *c, tide_prompt *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (c->thinking && (c->effort < 1 || c->effort > 100))
        return tide_fail(st, TIDE_ERR_INVALID, "reasoning effort %d is outside 1..100", c->effort);
    unit *units = malloc((c->n_msgs + 1) * sizeof *units);
    if (!units) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory rendering the prompt");
    rbuf r;
    memset(&r, 0, sizeof r);
    long n = build_units(c, units, st);
    int rc = -1;
    if (n > 0 && render_units(&r, c, units, (size_t)n, &out->in_reasoning, st) == 0 &&
        tide_sb_check(&r.b, "rendering the prompt", st) == 0) {
        if (r.oom) {
            tide_fail(st, TIDE_ERR_NOMEM, "out of memory rendering the prompt");
        } else {
            out->len = r.b.len;
            out->text = tide_sb_take(&r.b);
            out->plain = r.sp;
            out->n_plain = r.n;
            r.sp = NULL;
            rc = out->text ? 0 : tide_fail(st, TIDE_ERR_NOMEM, "out of memory rendering the prompt");
        }
    }
    tide_sb_free(&r.b);
    free(r.sp);
    free(units);
    if (rc != 0) tide_prompt_free(out);
    return rc;
}

void tide_prompt_free(tide_prompt *p) {
    free(p->text);
    free(p->plain);
    memset(p, 0, sizeof *p);
}
