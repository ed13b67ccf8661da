/* JSON read as Python's json.loads reads it; see pyjson.h.
 *
 * Why not jansson: tool-call arguments are rendered from what json.loads
 * makes of them, and json.loads holds numbers jansson refuses (integers of
 * any size, 1e400 as infinity, the NaN / Infinity / -Infinity literals).
 * Such numbers become string nodes holding their Python text, listed in
 * doc->raw so that the writer prints them bare; everything else is an
 * ordinary jansson value. A duplicated key keeps its first place and takes
 * its last value, as a Python dict does. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"

/* Python refuses to convert integers of more digits than this (3.11's
 * sys.int_info.default_max_str_digits); json.loads then fails. */
#define PY_MAX_INT_DIGITS 4300

typedef struct lexer {
    const char *s;
    size_t n, i;
    tide_pyjson_doc *doc;
    tide_status *st;
} lexer;

static int not_json(lexer *x, const char *what) {
    return tide_fail(x->st, TIDE_ERR_FORMAT, "not JSON at byte %zu: %s", x->i, what);
}

static int oom(lexer *x) { return tide_fail(x->st, TIDE_ERR_NOMEM, "out of memory reading JSON"); }

static void skip_ws(lexer *x) {
    while (x->i < x->n && (x->s[x->i] == ' ' || x->s[x->i] == '\t' || x->s[x->i] == '\n' || x->s[x->i] == '\r'))
        x->i++;
}

static int at(lexer *x, const char *word) {
    size_t k = strlen(word);
    return x->n - x->i >= k && memcmp(x->s + x->i, word, k) == 0;
}

/* A number node printed as `text` (its Python form). */
static int raw_node(lexer *x, const char *text, json_t **out) {
    tide_pyjson_doc *d = x->doc;
    json_t *v = json_string_nocheck(text);
    if (!v) return oom(x);
    if (d->n_raw == d->cap_raw) {
        size_t cap = d->cap_raw ? 2 * d->cap_raw : 8;
        json_t **raw = realloc(d->raw, cap * sizeof *raw);
        if (!raw) {
            json_decref(v);
            return oom(x);
        }
        d->raw = raw;
        d->cap_raw = cap;
    }
    d->raw[d->n_raw++] = json_incref(v); /* held, so no later node can reuse its address */
    *out = v;
    return 0;
}

static size_t digits(lexer *x) {
    size_t k = 0;
    while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9') x->i++, k++;
    return k;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, Python's number pattern. */
static int number(lexer *x, json_t **out) {
    size_t from = x->i;
    if (x->s[x->i] == '-') x->i++;
    size_t nd = 0;
    if (x->i < x->n && x->s[x->i] == '0') x->i++, nd = 1;
    else nd = digits(x);
    if (nd == 0) return not_json(x, "expected a value");
    int is_float = 0;
    if (x->i + 1 < x->n && x->s[x->i] == '.' && x->s[x->i + 1] >= '0' && x->s[x->i + 1] <= '9') {
        x->i++;
        digits(x);
        is_float = 1;
    }
    if (x->i < x->n && (x->s[x->i] == 'e' || x->s[x->i] == 'E')) {
        size_t e = x->i + 1;
        if (e < x->n && (x->s[e] == '+' || x->s[e] == '-')) e++;
        if (e < x->n && x->s[e] >= '0' && x->s[e] <= '9') {
            x->i = e;
            digits(x);
            is_float = 1;
        }
    }
    size_t len = x->i - from;
    char *text = malloc(len + 1);
    if (!text) return oom(x);
    memcpy(text, x->s + from, len);
    text[len] = 0;
    int rc = 0;
    if (is_float) {
        double d = strtod(text, NULL); /* correctly rounded, as Python's float() */
        if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308)
            rc = raw_node(x, d > 0 ? "Infinity" : "-Infinity", out);
        else if (!(*out = json_real(d)))
            rc = oom(x);
    } else if (nd > PY_MAX_INT_DIGITS) {
        rc = not_json(x, "integer of more digits than Python converts");
    } else {
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        if (errno == ERANGE) rc = raw_node(x, text, out); /* beyond 64 bits: Python keeps every digit */
        else if (!(*out = json_integer(v))) rc = oom(x);
    }
    free(text);
    return rc;
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Appends code point cp as UTF-8; a lone surrogate as its 3-byte form
 * (flagged: no valid prompt can hold it). */
static void put_utf8(tide_sb *b, unsigned cp, tide_pyjson_doc *d) {
    char u[4];
    if (cp == 0) d->has_nul = 1;
    if (cp >= 0xD800 && cp <= 0xDFFF) d->lone_surrogate = 1;
    if (cp < 0x80) {
        u[0] = (char)cp;
        tide_sb_addn(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F));
        tide_sb_addn(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F));
        tide_sb_addn(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F));
        tide_sb_addn(b, u, 4);
    }
}

/* A string body after its opening quote, decoded into b. */
static int string_body(lexer *x, tide_sb *b) {
    for (;;) {
        size_t run = x->i;
        while (x->i < x->n && x->s[x->i] != '"' && x->s[x->i] != '\\' && (unsigned char)x->s[x->i] >= 0x20) {
            /* The 3-byte form of a surrogate (from an outer string decoded here). */
            if ((unsigned char)x->s[x->i] == 0xED && x->i + 1 < x->n && (unsigned char)x->s[x->i + 1] >= 0xA0)
                x->doc->lone_surrogate = 1;
            x->i++;
        }
        tide_sb_addn(b, x->s + run, x->i - run);
        if (x->i >= x->n) return not_json(x, "unterminated string");
        char c = x->s[x->i++];
        if (c == '"') return 0;
        if (c != '\\') return not_json(x, "control character in a string");
        if (x->i >= x->n) return not_json(x, "unterminated string");
        c = x->s[x->i++];
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char MAP[] = "\"\\/\b\f\n\r\t";
            tide_sb_addc(b, MAP[simple - "\"\\/bfnrt"]);
            continue;
        }
        unsigned cp, lo;
        if (c != 'u' || x->n - x->i < 4 || hex4(x->s + x->i, &cp)) return not_json(x, "invalid escape");
        x->i += 4;
        /* A high surrogate followed by an escaped low one is one character. */
        if (cp >= 0xD800 && cp < 0xDC00 && x->n - x->i >= 6 && x->s[x->i] == '\\' && x->s[x->i + 1] == 'u' &&
            hex4(x->s + x->i + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            x->i += 6;
        }
        put_utf8(b, cp, x->doc);
    }
}

static int string(lexer *x, json_t **out) {
    tide_sb b;
    tide_sb_init(&b);
    x->i++; /* the quote */
    int rc = string_body(x, &b);
    if (rc == 0 && b.oom) rc = oom(x);
    if (rc == 0 && !(*out = json_stringn_nocheck(b.s ? b.s : "", b.len))) rc = oom(x);
    tide_sb_free(&b);
    return rc;
}

static int value(lexer *x, int depth, json_t **out);

static int element(lexer *x, int depth, json_t *a) {
    json_t *v;
    if (value(x, depth + 1, &v) != 0) return -1;
    return json_array_append_new(a, v) == 0 ? 0 : oom(x);
}

static int member(lexer *x, int depth, json_t *o) {
    json_t *k, *v = NULL;
    skip_ws(x);
    if (x->i >= x->n || x->s[x->i] != '"') return not_json(x, "expected a key");
    if (string(x, &k) != 0) return -1;
    skip_ws(x);
    int rc = x->i < x->n && x->s[x->i] == ':' ? 0 : not_json(x, "expected :");
    if (rc == 0) x->i++, rc = value(x, depth + 1, &v);
    /* Replacing keeps the key's first place: a Python dict's rule. */
    if (rc == 0 && json_object_setn_new_nocheck(o, json_string_value(k), json_string_length(k), v) != 0)
        rc = oom(x);
    json_decref(k);
    return rc;
}

/* An array or an object: members separated by commas, up to the bracket. */
static int container(lexer *x, int depth, json_t **out) {
    int is_obj = x->s[x->i] == '{';
    char close = is_obj ? '}' : ']';
    json_t *c = is_obj ? json_object() : json_array();
    if (!c) return oom(x);
    x->i++;
    skip_ws(x);
    int more = !(x->i < x->n && x->s[x->i] == close);
    while (more) {
        if ((is_obj ? member(x, depth, c) : element(x, depth, c)) != 0) {
            json_decref(c);
            return -1;
        }
        skip_ws(x);
        if (x->i < x->n && x->s[x->i] == ',') {
            x->i++;
            continue;
        }
        if (x->i < x->n && x->s[x->i] == close) break;
        json_decref(c);
        return not_json(x, is_obj ? "expected , or }" : "expected , or ]");
    }
    x->i++; /* the closing bracket */
    *out = c;
    return 0;
}

static int value(lexer *x, int depth, json_t **out) {
    if (depth > TIDE_PYJSON_MAX_DEPTH)
        return tide_fail(x->st, TIDE_ERR_INVALID, "JSON nested deeper than %d levels", TIDE_PYJSON_MAX_DEPTH);
    skip_ws(x);
    if (x->i >= x->n) return not_json(x, "expected a value");
    static const struct { const char *word; const char *raw; } WORDS[] = {
        {"null", NULL}, {"true", NULL}, {"false", NULL}, {"NaN", "NaN"}, {"Infinity", "Infinity"},
        {"-Infinity", "-Infinity"},
    };
    for (size_t k = 0; k < sizeof WORDS / sizeof WORDS[0]; k++) {
        if (!at(x, WORDS[k].word)) continue;
        x->i += strlen(WORDS[k].word);
        if (WORDS[k].raw) return raw_node(x, WORDS[k].raw, out);
        *out = k == 0 ? json_null() : k == 1 ? json_true() : json_false();
        return 0;
    }
    char c = x->s[x->i];
    if (c == '{' || c == '[') return container(x, depth, out);
    if (c == '"') return string(x, out);
    if (c == '-' || (c >= '0' && c <= '9')) return number(x, out);
    return not_json(x, "expected a value");
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (json_t *const *)a, y = (uintptr_t) * (json_t *const *)b;
    return x < y ? -1 : x > y;
}

int tide_pyjson_load(const char *s, size_t n, tide_pyjson_doc *doc, tide_status *st) {
    memset(doc, 0, sizeof *doc);
    lexer x = {s, n, 0, doc, st};
    json_t *v = NULL;
    if (value(&x, 1, &v) == 0) {
        skip_ws(&x);
        if (x.i == n) {
            doc->root = v;
            if (doc->n_raw) qsort(doc->raw, doc->n_raw, sizeof *doc->raw, by_address);
            return 0;
        }
        json_decref(v);
        not_json(&x, "extra data after the value");
    }
    tide_pyjson_doc_free(doc);
    return -1;
}

void tide_pyjson_doc_free(tide_pyjson_doc *doc) {
    for (size_t i = 0; i < doc->n_raw; i++) json_decref(doc->raw[i]);
    free(doc->raw);
    json_decref(doc->root);
    memset(doc, 0, sizeof *doc);
}

int tide_pyjson_doc_is_raw(const tide_pyjson_doc *doc, const json_t *v) {
    if (!doc || doc->n_raw == 0 || !json_is_string(v)) return 0;
    return bsearch(&v, doc->raw, doc->n_raw, sizeof *doc->raw, by_address) != NULL;
}
