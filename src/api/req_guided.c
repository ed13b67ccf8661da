/* The constraint extensions other servers accept (vLLM's guided_* fields
 * and its structured_outputs object; a grammar is GBNF or Lark-style EBNF,
 * told apart by GBNF's "::="), read into tide_gen.guided: the
 * generation layer compiles them (api/gen_session.c, constrain/). Exactly
 * one constraint per request: two of them, or one with a JSON
 * response_format, is a 400 naming both. */
#include <stdlib.h>
#include <string.h>

#include "api/convert.h"
#include "api/jfield.h"
#include "constrain/constrain.h"

static int set(tide_gen *g, tide_cons_kind kind, const char *text, size_t len, const char *param, tide_api_err *err) {
    if (g->guided)
        return tide_api_bad(err, param, "only one output constraint per request (%s is given too)", g->guided_param);
    if (!(g->guided_text = malloc(len + 1))) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    memcpy(g->guided_text, text, len);
    g->guided_text[len] = 0;
    g->guided = 1 + (int)kind;
    g->guided_param = param;
    return 0;
}

static int set_string(json_t *v, tide_gen *g, tide_cons_kind kind, const char *param, tide_api_err *err) {
    if (!json_is_string(v)) return tide_api_bad(err, param, "expected string, got %s", tide_json_type_name(v));
    if (kind == TIDE_CONS_GBNF) /* a grammar: GBNF or Lark, told apart by "::=" */
        kind = tide_cons_grammar_kind(json_string_value(v), json_string_length(v));
    return set(g, kind, json_string_value(v), json_string_length(v), param, err);
}

/* A schema: an object, or a string holding one (vLLM accepts both). */
static int set_schema(json_t *v, tide_gen *g, const char *param, tide_api_err *err) {
    if (json_is_string(v)) return set(g, TIDE_CONS_JSON_SCHEMA, json_string_value(v), json_string_length(v), param, err);
    if (!json_is_object(v) && !json_is_boolean(v))
        return tide_api_bad(err, param, "expected a JSON schema (object), got %s", tide_json_type_name(v));
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
    int rc = set(g, TIDE_CONS_JSON_SCHEMA, t, strlen(t), param, err);
    free(t);
    return rc;
}

/* A choice of strings as a regex of escaped literals. */
static int set_choice(json_t *v, tide_gen *g, const char *param, tide_api_err *err) {
    if (!json_is_array(v) || !json_array_size(v))
        return tide_api_bad(err, param, "expected a non-empty array of strings");
    size_t cap = 16, n = 0;
    char *re = malloc(cap);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x)) {
            free(re);
            char p[160];
            return tide_api_bad(err, tide_path_idx(p, sizeof p, param, i), "expected string, got %s", tide_json_type_name(x));
        }
        const char *s = json_string_value(x);
        size_t len = json_string_length(x);
        if (n + 2 * len + 4 > cap) {
            while (n + 2 * len + 4 > cap) cap *= 2;
            char *q = re ? realloc(re, cap) : NULL;
            if (!q) {
                free(re);
                return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
            }
            re = q;
        }
        if (!re) return tide_fail(&err->st, TIDE_ERR_NOMEM, "out of memory");
        if (i) re[n++] = '|';
        for (size_t k = 0; k < len; k++) {
            if (strchr("\\^$.|?*+()[]{}/", s[k]) && s[k]) re[n++] = '\\';
            re[n++] = s[k];
        }
    }
    int rc = set(g, TIDE_CONS_REGEX, re, n, param, err);
    free(re);
    return rc;
}

int tide_read_guided(json_t *root, tide_gen *g, tide_api_err *err) {
    json_t *v;
    if ((v = json_object_get(root, "guided_regex")) && !json_is_null(v) &&
        set_string(v, g, TIDE_CONS_REGEX, "guided_regex", err))
        return -1;
    if ((v = json_object_get(root, "guided_grammar")) && !json_is_null(v) &&
        set_string(v, g, TIDE_CONS_GBNF, "guided_grammar", err))
        return -1;
    if ((v = json_object_get(root, "guided_json")) && !json_is_null(v) && set_schema(v, g, "guided_json", err)) return -1;
    if ((v = json_object_get(root, "guided_choice")) && !json_is_null(v) && set_choice(v, g, "guided_choice", err))
        return -1;
    json_t *so;
    if (tide_get_object(root, "structured_outputs", "", &so, err)) return -1;
    if (so) {
        const char *k;
        json_object_foreach(so, k, v) {
            if (json_is_null(v)) continue;
            if (!strcmp(k, "json")) {
                if (set_schema(v, g, "structured_outputs.json", err)) return -1;
            } else if (!strcmp(k, "regex")) {
                if (set_string(v, g, TIDE_CONS_REGEX, "structured_outputs.regex", err)) return -1;
            } else if (!strcmp(k, "grammar")) {
                if (set_string(v, g, TIDE_CONS_GBNF, "structured_outputs.grammar", err)) return -1;
            } else if (!strcmp(k, "choice")) {
                if (set_choice(v, g, "structured_outputs.choice", err)) return -1;
            } else {
                char p[160];
                return tide_api_unsupported(err, tide_path_key(p, sizeof p, "structured_outputs", k),
                                            "not supported (json, regex, grammar and choice are)");
            }
        }
    }
    return 0;
}
