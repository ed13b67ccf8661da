/* Normalizers: the "normalizer" object of tokenizer.json, flattened into a
 * list of steps applied in order to each piece of text between added tokens.
 *
 * Supported: Sequence, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Replace
 * (String or Regex pattern), Prepend, Strip. DeepSeek ships an empty
 * Sequence, Qwen3 NFC, Llama-3 null. Anything else is refused at load time
 * with the type's name, so an unexpected file fails loudly instead of
 * tokenizing differently from the reference. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tokenizer_internal.h"

/* ---- parsing ---- */

static int add_step(tide_tokenizer *tok, tok_norm step, tide_status *st) {
    tok_norm *v = realloc(tok->norm, (tok->n_norm + 1) * sizeof *v);
    if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "normalizer: out of memory");
    tok->norm = v;
    tok->norm[tok->n_norm++] = step;
    return 0;
}

static int dup_string(json_t *j, const char *what, char **out, size_t *len, tide_status *st) {
    if (!json_is_string(j)) return tide_fail(st, TIDE_ERR_FORMAT, "%s must be a string", what);
    size_t n = json_string_length(j);
    *out = malloc(n + 1);
    if (!*out) return tide_fail(st, TIDE_ERR_NOMEM, "%s: out of memory", what);
    memcpy(*out, json_string_value(j), n);
    (*out)[n] = 0;
    *len = n;
    return 0;
}

static int parse_replace(tide_tokenizer *tok, json_t *j, tide_status *st) {
    tok_norm s = {.type = TOK_NORM_REPLACE};
    json_t *pat = json_object_get(j, "pattern");
    json_t *re = pat ? json_object_get(pat, "Regex") : NULL;
    json_t *lit = pat ? json_object_get(pat, "String") : NULL;
    int rc = 0;
    if (json_is_string(re))
        rc = tok_compile_regex(json_string_value(re), json_string_length(re), &s.re, st);
    else if (json_is_string(lit))
        rc = dup_string(lit, "Replace pattern", &s.pat, &s.pat_len, st);
    else
        return tide_fail(st, TIDE_ERR_FORMAT, "Replace normalizer needs pattern {\"String\"|\"Regex\": ...}");
    if (rc == 0 && s.pat && s.pat_len == 0) rc = tide_fail(st, TIDE_ERR_FORMAT, "Replace pattern is empty");
    if (rc == 0) rc = dup_string(json_object_get(j, "content"), "Replace content", &s.content, &s.content_len, st);
    if (rc == 0) rc = add_step(tok, s, st);
    if (rc != 0) {
        if (s.re) onig_free(s.re);
        free(s.pat);
        free(s.content);
    }
    return rc;
}

static int parse_one(tide_tokenizer *tok, json_t *j, int depth, tide_status *st) {
    if (depth > 16) return tide_fail(st, TIDE_ERR_FORMAT, "normalizer nesting deeper than 16");
    if (!json_is_object(j)) return tide_fail(st, TIDE_ERR_FORMAT, "normalizer must be an object");
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return tide_fail(st, TIDE_ERR_FORMAT, "normalizer has no \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) return tide_fail(st, TIDE_ERR_FORMAT, "Sequence normalizer needs a \"normalizers\" array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (parse_one(tok, v, depth + 1, st) != 0) return tide_fail_ctx(st, "normalizers[%zu]", i);
        }
        return 0;
    }
    static const struct { const char *name; tok_norm_type type; } simple[] = {
        {"NFC", TOK_NORM_NFC}, {"NFD", TOK_NORM_NFD}, {"NFKC", TOK_NORM_NFKC},
        {"NFKD", TOK_NORM_NFKD}, {"Lowercase", TOK_NORM_LOWERCASE},
    };
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) return add_step(tok, (tok_norm){.type = simple[i].type}, st);
    if (!strcmp(type, "Replace")) return parse_replace(tok, j, st);
    if (!strcmp(type, "Prepend")) {
        tok_norm s = {.type = TOK_NORM_PREPEND};
        if (dup_string(json_object_get(j, "prepend"), "Prepend \"prepend\"", &s.content, &s.content_len, st) != 0) return -1;
        if (add_step(tok, s, st) != 0) { free(s.content); return -1; }
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        json_t *l = json_object_get(j, "strip_left"), *r = json_object_get(j, "strip_right");
        return add_step(tok, (tok_norm){.type = TOK_NORM_STRIP, .left = json_is_true(l), .right = json_is_true(r)}, st);
    }
    return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                     "normalizer type \"%s\" is not supported (tide handles Sequence, NFC, NFD, NFKC, "
                     "NFKD, Lowercase, Replace, Prepend, Strip)", type);
}

int tok_parse_normalizer(tide_tokenizer *tok, json_t *j, tide_status *st) {
    if (!j || json_is_null(j)) return 0;
    if (parse_one(tok, j, 0, st) != 0) return tide_fail_ctx(st, "normalizer");
    return 0;
}

void tok_free_normalizer(tide_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_norm; i++) {
        if (tok->norm[i].re) onig_free(tok->norm[i].re);
        free(tok->norm[i].pat);
        free(tok->norm[i].content);
    }
    free(tok->norm);
    tok->norm = NULL;
    tok->n_norm = 0;
}

/* ---- applying ---- */

static int unicode_form(tok_norm_type type, const char *s, size_t n, tok_buf *out, tide_status *st) {
    int opt = UTF8PROC_STABLE;
    switch (type) {
    case TOK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TOK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TOK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &res, (utf8proc_option_t)opt);
    if (m < 0) return tide_fail(st, TIDE_ERR_INVALID, "normalizer: %s", utf8proc_errmsg(m));
    int rc = tok_buf_append(out, res, (size_t)m, st);
    free(res);
    return rc;
}

static int lowercase(const char *s, size_t n, tok_buf *out, tide_status *st) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l) return tide_fail(st, TIDE_ERR_INVALID, "normalizer: invalid UTF-8");
        i += (size_t)l;
        char enc[8];
        int k;
        if (cp == 0x130) { /* 'İ': the one full (multi-char) mapping, "i" + U+0307 */
            memcpy(enc, "i\xCC\x87", 3);
            k = 3;
        } else {
            k = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
        }
        if (tok_buf_append(out, enc, (size_t)k, st) != 0) return -1;
    }
    return 0;
}

/* Appends the text before a match and the replacement, unless that would
 * pass `limit`: a replacement longer than its pattern can multiply the text
 * (and a Sequence of them, exponentially), so the output is bounded. */
static int replace_piece(const tok_norm *nm, const char *before, size_t bn, size_t limit, tok_buf *out,
                         tide_status *st) {
    if (out->n + bn + nm->content_len > limit)
        return tide_fail(st, TIDE_ERR_NOMEM, "the text grows past the limit of %zu bytes", limit);
    if (tok_buf_append(out, before, bn, st) || tok_buf_append(out, nm->content, nm->content_len, st)) return -1;
    return 0;
}

static int replace(const tok_norm *nm, const char *s, size_t n, size_t limit, tok_buf *out, tide_status *st) {
    size_t pos = 0;
    if (nm->pat) {
        while (pos < n) {
            const char *hit = memmem(s + pos, n - pos, nm->pat, nm->pat_len);
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (replace_piece(nm, s + pos, at - pos, limit, out, st) != 0) return -1;
            pos = at + nm->pat_len;
        }
        return tok_buf_append(out, s + pos, n - pos, st);
    }
    OnigRegion *reg = onig_region_new();
    OnigMatchParam *mp = onig_new_match_param();
    if (!reg || !mp) {
        if (reg) onig_region_free(reg, 1);
        if (mp) onig_free_match_param(mp);
        return tide_fail(st, TIDE_ERR_NOMEM, "normalizer: out of memory");
    }
    const UChar *b = (const UChar *)s;
    size_t from = 0;
    int rc = 0;
    while (from <= n) {
        int r = tok_regex_search(nm->re, s, n, from, reg, mp);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) { rc = tok_regex_fail(st, r, "step input", from); break; }
        size_t ms = (size_t)reg->beg[0], me = (size_t)reg->end[0];
        if (replace_piece(nm, s + pos, ms - pos, limit, out, st) != 0) { rc = -1; break; }
        pos = me;
        if (me == ms) { /* empty match: step over one character */
            if (me >= n) break;
            uint32_t cp;
            int l = tok_utf8_decode(b + me, n - me, &cp);
            size_t step = l ? (size_t)l : 1;
            if (tok_buf_append(out, s + me, step, st)) { rc = -1; break; }
            pos = me + step;
        }
        from = pos;
    }
    onig_region_free(reg, 1);
    onig_free_match_param(mp);
    if (rc == 0 && pos < n) rc = tok_buf_append(out, s + pos, n - pos, st);
    return rc;
}

static int strip(const tok_norm *nm, const char *s, size_t n, tok_buf *out, tide_status *st) {
    size_t a = 0, b = n;
    while (nm->left && a < b) {
        uint32_t cp;
        int l = tok_utf8_decode((const uint8_t *)s + a, b - a, &cp);
        if (!l || !tok_is_whitespace(cp)) break;
        a += (size_t)l;
    }
    while (nm->right && b > a) {
        size_t k = b - 1;
        while (k > a && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        int l = tok_utf8_decode((const uint8_t *)s + k, b - k, &cp);
        if (!l || !tok_is_whitespace(cp)) break;
        b = k;
    }
    return tok_buf_append(out, s + a, b - a, st);
}

static bool all_ascii(const char *s, size_t n) {
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++) any |= (uint8_t)s[i];
    return any < 0x80;
}

static int apply(const tok_norm *nm, const char *s, size_t n, size_t limit, tok_buf *out, tide_status *st) {
    switch (nm->type) {
    case TOK_NORM_NFC: case TOK_NORM_NFD: case TOK_NORM_NFKC: case TOK_NORM_NFKD:
        /* ASCII is invariant under all four forms: skip utf8proc's allocation. */
        if (all_ascii(s, n)) return tok_buf_append(out, s, n, st);
        return n ? unicode_form(nm->type, s, n, out, st) : 0;
    case TOK_NORM_LOWERCASE: return lowercase(s, n, out, st);
    case TOK_NORM_REPLACE: return replace(nm, s, n, limit, out, st);
    case TOK_NORM_PREPEND:
        if (n && tok_buf_append(out, nm->content, nm->content_len, st) != 0) return -1;
        return tok_buf_append(out, s, n, st);
    case TOK_NORM_STRIP: return strip(nm, s, n, out, st);
    }
    return tide_fail(st, TIDE_ERR_INTERNAL, "normalizer: bad step type");
}

static const char *step_name(tok_norm_type t) {
    static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Replace", "Prepend", "Strip"};
    return (size_t)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* One step, then the size check that the steps other than Replace need only
 * once (they grow the text by a bounded factor). */
static int apply_bounded(const tok_norm *nm, size_t i, const char *s, size_t n, size_t orig, size_t limit,
                         tok_buf *out, tide_status *st) {
    int rc = apply(nm, s, n, limit, out, st);
    if (rc == 0 && out->n > limit)
        rc = tide_fail(st, TIDE_ERR_NOMEM, "the text grows past the limit of %zu bytes", limit);
    if (rc != 0)
        return tide_fail_ctx(st, "normalizer step %zu (%s) of a %zu-byte text (at most %u times its length + %u bytes)",
                             i, step_name(nm->type), orig, TOK_NORM_GROWTH, TOK_NORM_SLACK);
    return 0;
}

int tok_normalize(const tide_tokenizer *tok, const char *s, size_t n, tok_buf *out, tide_status *st) {
    out->n = 0;
    if (n == 0) return 0; /* every normalizer maps "" to "" (Prepend skips empty text) */
    if (tok->n_norm == 0) return tok_buf_append(out, s, n, st);
    size_t limit = n > (SIZE_MAX - TOK_NORM_SLACK) / TOK_NORM_GROWTH ? SIZE_MAX : n * TOK_NORM_GROWTH + TOK_NORM_SLACK;
    if (tok->n_norm == 1) return apply_bounded(&tok->norm[0], 0, s, n, n, limit, out, st);
    tok_buf tmp = {0};
    int rc = tok_buf_append(&tmp, s, n, st);
    for (size_t i = 0; rc == 0 && i < tok->n_norm; i++) {
        out->n = 0;
        rc = apply_bounded(&tok->norm[i], i, tmp.p, tmp.n, n, limit, out, st);
        if (rc == 0 && i + 1 < tok->n_norm) {
            tmp.n = 0;
            rc = tok_buf_append(&tmp, out->p, out->n, st);
        }
    }
    tok_buf_free(&tmp);
    return rc;
}
