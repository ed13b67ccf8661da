/* The conversation model; see conv.h. */
#include "text/conv.h"

#include <stdlib.h>
#include <string.h>

void tide_conv_init(tide_conv *c) {
    memset(c, 0, sizeof *c);
    c->effort = TIDE_EFFORT_DEFAULT;
}

static void free_msg(tide_msg *m) {
    free(m->content);
    free(m->reasoning);
    free(m->tool_call_id);
    for (size_t i = 0; i < m->n_calls; i++) {
        free(m->calls[i].id);
        free(m->calls[i].name);
        free(m->calls[i].arguments);
    }
    free(m->calls);
}

static void free_tool(tide_tool *t) {
    free(t->name);
    free(t->description);
    json_decref(t->parameters);
    json_decref(t->shown);
}

void tide_conv_clear_tools(tide_conv *c) {
    for (size_t i = 0; i < c->n_tools; i++) free_tool(&c->tools[i]);
    c->n_tools = 0;
}

void tide_conv_free(tide_conv *c) {
    for (size_t i = 0; i < c->n_msgs; i++) free_msg(&c->msgs[i]);
    free(c->msgs);
    tide_conv_clear_tools(c);
    free(c->tools);
    json_decref(c->response_format);
    for (size_t i = 0; i < c->n_images; i++) free(c->images[i].data);
    free(c->images);
    memset(c, 0, sizeof *c);
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static char *dup0(const char *s) { return s ? dupn(s, strlen(s)) : NULL; }

/* Grows *arr (of elements `size` bytes) to hold one more. */
static int reserve(void **arr, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, nc * size);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* Text the conversation takes: no NUL (strings here are C strings) and no
 * literal image placeholder (the release refuses it: images are content
 * parts) beyond the `images` placeholders the API put for image parts,
 * which must all be there. */
static int check_text(const char *s, size_t n, const char *what, size_t images, tide_status *st) {
    if (s && memchr(s, 0, n)) return tide_fail(st, TIDE_ERR_INVALID, "%s contains a NUL character", what);
    const char *ph = TIDE_CONV_IMAGE_PLACEHOLDER;
    size_t pn = strlen(ph), seen = 0;
    for (size_t i = 0; s && n >= pn && i <= n - pn; i++)
        if (s[i] == ph[0] && memcmp(s + i, ph, pn) == 0 && ++seen > images)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "%s contains the image placeholder %s at byte %zu (images are content parts)", what, ph,
                             i);
    if (seen != images)
        return tide_fail(st, TIDE_ERR_INVALID, "%s holds %zu image placeholders for %zu image parts", what, seen,
                         images);
    return 0;
}

int tide_conv_add_image(tide_conv *c, const void *data, size_t n, tide_status *st) {
    if (c->n_images >= TIDE_CONV_MAX_IMAGES)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d images", TIDE_CONV_MAX_IMAGES);
    if (reserve((void **)&c->images, &c->cap_images, c->n_images, sizeof *c->images) != 0)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory adding an image");
    unsigned char *d = malloc(n ? n : 1);
    if (!d) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory adding an image of %zu bytes", n);
    if (n) memcpy(d, data, n);
    c->images[c->n_images++] = (tide_conv_image){d, n};
    return 0;
}

int tide_conv_add(tide_conv *c, tide_role role, const char *content, size_t n, tide_status *st) {
    if (c->n_msgs >= TIDE_CONV_MAX_MESSAGES)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d messages", TIDE_CONV_MAX_MESSAGES);
    if (n > TIDE_CONV_MAX_TEXT)
        return tide_fail(st, TIDE_ERR_INVALID, "message of %zu bytes exceeds the limit of %u", n,
                         TIDE_CONV_MAX_TEXT);
    if (check_text(content, n, "text", c->n_images - c->n_placed, st) != 0) return -1;
    if (reserve((void **)&c->msgs, &c->cap_msgs, c->n_msgs, sizeof *c->msgs) != 0)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory adding a message");
    tide_msg *m = &c->msgs[c->n_msgs];
    memset(m, 0, sizeof *m);
    m->role = role;
    m->content = dupn(content ? content : "", content ? n : 0);
    if (!m->content) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory adding a message");
    c->n_msgs++;
    c->n_placed = c->n_images;
    return 0;
}

void tide_conv_pop(tide_conv *c) {
    if (c->n_msgs == 0) return;
    free_msg(&c->msgs[--c->n_msgs]);
}

static tide_msg *last_of(tide_conv *c, tide_role role, const char *what, tide_status *st) {
    if (c->n_msgs == 0 || c->msgs[c->n_msgs - 1].role != role) {
        tide_fail(st, TIDE_ERR_INTERNAL, "%s needs a preceding message of the right role", what);
        return NULL;
    }
    return &c->msgs[c->n_msgs - 1];
}

int tide_conv_set_reasoning(tide_conv *c, const char *text, size_t n, tide_status *st) {
    tide_msg *m = last_of(c, TIDE_ROLE_ASSISTANT, "reasoning", st);
    if (!m) return -1;
    if (n > TIDE_CONV_MAX_TEXT) return tide_fail(st, TIDE_ERR_INVALID, "reasoning of %zu bytes is too long", n);
    if (check_text(text, n, "reasoning", 0, st) != 0) return -1;
    free(m->reasoning);
    m->reasoning = dupn(text, n);
    return m->reasoning ? 0 : tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
}

int tide_conv_check_name(const char *name, tide_status *st) {
    size_t n = strlen(name);
    if (n == 0 || n > TIDE_CONV_MAX_NAME)
        return tide_fail(st, TIDE_ERR_INVALID, "name must be 1 to %d bytes", TIDE_CONV_MAX_NAME);
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-' || ch == '.' || ch == ':';
        if (!ok)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "name \"%.64s\" has a character outside [A-Za-z0-9_.:-] at byte %zu", name, i);
    }
    return 0;
}

int tide_conv_add_call(tide_conv *c, const char *id, const char *name, const char *arguments,
                       tide_status *st) {
    tide_msg *m = last_of(c, TIDE_ROLE_ASSISTANT, "a tool call", st);
    if (!m) return -1;
    if (m->n_calls >= TIDE_CONV_MAX_CALLS)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d tool calls in one message", TIDE_CONV_MAX_CALLS);
    if (tide_conv_check_name(name, st) != 0) return -1;
    tide_tool_call *calls = realloc(m->calls, (m->n_calls + 1) * sizeof *calls);
    if (!calls) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    m->calls = calls;
    tide_tool_call *t = &calls[m->n_calls];
    t->id = dup0(id);
    t->name = dup0(name);
    t->arguments = dup0(arguments ? arguments : "{}");
    if ((id && !t->id) || !t->name || !t->arguments) {
        free(t->id), free(t->name), free(t->arguments);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    m->n_calls++;
    return 0;
}

int tide_conv_set_call_id(tide_conv *c, const char *id, tide_status *st) {
    tide_msg *m = last_of(c, TIDE_ROLE_TOOL, "a tool call id", st);
    if (!m) return -1;
    free(m->tool_call_id);
    m->tool_call_id = dup0(id);
    return (!id || m->tool_call_id) ? 0 : tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
}

int tide_conv_add_tool(tide_conv *c, const char *name, const char *description, json_t *parameters,
                       tide_status *st) {
    if (c->n_tools >= TIDE_CONV_MAX_TOOLS)
        return tide_fail(st, TIDE_ERR_INVALID, "more than %d tools", TIDE_CONV_MAX_TOOLS);
    if (tide_conv_check_name(name, st) != 0) return -1;
    for (size_t i = 0; i < c->n_tools; i++)
        if (strcmp(c->tools[i].name, name) == 0)
            return tide_fail(st, TIDE_ERR_INVALID, "tool \"%s\" is defined twice", name);
    if (reserve((void **)&c->tools, &c->cap_tools, c->n_tools, sizeof *c->tools) != 0)
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    tide_tool *t = &c->tools[c->n_tools];
    t->name = dup0(name);
    t->description = dup0(description);
    t->parameters = parameters ? json_incref(parameters) : NULL;
    t->shown = NULL;
    t->strict = 0;
    if (!t->name || (description && !t->description)) {
        free_tool(t);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    c->n_tools++;
    return 0;
}

void tide_conv_set_tool_shown(tide_conv *c, json_t *shown) {
    if (c->n_tools == 0) return;
    tide_tool *t = &c->tools[c->n_tools - 1];
    json_decref(t->shown);
    t->shown = shown ? json_incref(shown) : NULL;
}

int tide_conv_keep_tool(tide_conv *c, const char *name, tide_status *st) {
    size_t keep = c->n_tools;
    for (size_t i = 0; i < c->n_tools; i++)
        if (strcmp(c->tools[i].name, name) == 0) keep = i;
    if (keep == c->n_tools) return tide_fail(st, TIDE_ERR_INVALID, "no tool named \"%.128s\"", name);
    for (size_t i = 0; i < c->n_tools; i++)
        if (i != keep) free_tool(&c->tools[i]);
    c->tools[0] = c->tools[keep];
    c->n_tools = 1;
    return 0;
}

/* THE table: the release's encoder (encoding/encoding.py): low 50, high 75,
 * max 100, default high; it refuses other names. "minimal", "medium",
 * "xhigh" (OpenAI's and vLLM's names) and "maximum" are tide's aliases,
 * placed on the nearest of the release's levels (docs/text.md). */
static const struct { const char *name; int effort; } EFFORTS[] = {
    {"low", 50},     {"high", 75},   {"max", 100},    {"minimal", 50},
    {"medium", 75},  {"xhigh", 100}, {"maximum", 100},
};

int tide_effort_from_name(const char *name, int *effort, tide_status *st) {
    for (size_t i = 0; i < sizeof EFFORTS / sizeof EFFORTS[0]; i++)
        if (strcmp(EFFORTS[i].name, name) == 0) {
            *effort = EFFORTS[i].effort;
            return 0;
        }
    return tide_fail(st, TIDE_ERR_INVALID,
                     "unknown reasoning effort \"%.32s\" (expected low, high, max, an integer 1..100, or none; "
                     "minimal, medium and xhigh are accepted as aliases)",
                     name);
}

const char *tide_effort_name(int effort) {
    if (effort <= 50) return "low";
    if (effort <= 75) return "high";
    return "max";
}

int tide_conv_default_max_tokens(const tide_conv *c) {
    return c->thinking ? TIDE_MAX_TOKENS_THINKING : TIDE_MAX_TOKENS_CHAT;
}
