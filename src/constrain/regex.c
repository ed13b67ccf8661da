/* ECMAScript regular expressions (the syntax of JSON Schema "pattern") to
 * grammar trees (cgram.h). Supported: literals (UTF-8), ., classes with
 * ranges and negation, the escapes \d \D \w \W \s \S \n \r \t \v \f \0 \xHH
 * \uHHHH \u{H...} \cX and escaped punctuation, groups (plain, (?:...),
 * named), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms match
 * the same strings), and ^ / $ at the ends of a top-level alternative.
 * Refused with a message naming the construct: lookaround, backreferences,
 * \b \B, \p{...}, anchors elsewhere. Matching is over codepoints, UTF-8
 * encoded (ECMAScript's non-u mode counts UTF-16 units: only "." and
 * negated classes over astral characters could tell the difference). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cgram.h"

typedef struct rx {
    cg *g;
    const char *s;
    size_t n, i;
    int jstr;
    int depth;
    tide_status *st;
    int err;
    int search;
} rx;

static int32_t rx_fail(rx *r, tide_code code, const char *what) {
    if (!r->err) {
        r->err = 1;
        tide_fail(r->st, code, "regex at offset %zu: %s", r->i, what);
    }
    return -1;
}

/* Decodes one UTF-8 codepoint at r->i (invalid bytes: the byte itself). */
static int32_t next_cp(rx *r) {
    const unsigned char *p = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    int32_t c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)len > left) len = 1;
    if (len == 1) {
        r->i++;
        return c;
    }
    int32_t v = c & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80) {
            r->i++;
            return c;
        }
        v = (v << 6) | (p[k] & 0x3F);
    }
    r->i += (size_t)len;
    return v;
}

static const int32_t R_DIGIT[] = {'0', '9'};
static const int32_t R_WORD[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const int32_t R_SPACE[] = {9, 13, 32, 32, 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029,
                                  0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
static const int32_t R_DOT_NOT[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};

static int push_ranges(cg *g, cg_vec *out, const int32_t *r, size_t n_pairs, int negate) {
    if (negate) return cg_ranges_not(g, r, (int32_t)n_pairs, out);
    for (size_t i = 0; i < 2 * n_pairs; i++)
        if (cg_vec_push(g, out, r[i])) return -1;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int32_t read_hex(rx *r, int ndig) {
    int32_t v = 0;
    for (int k = 0; k < ndig; k++) {
        if (r->i >= r->n || hexval((unsigned char)r->s[r->i]) < 0) return -1;
        v = v * 16 + hexval((unsigned char)r->s[r->i++]);
    }
    return v;
}

/* After a backslash: a class escape (appends its ranges, returns -2) or
 * one codepoint (returns it); -1 on error. in_class: \b is backspace. */
static int32_t escape(rx *r, cg_vec *out, int in_class) {
    if (r->i >= r->n) return rx_fail(r, TIDE_ERR_INVALID, "\\ at the end of the pattern");
    int c = (unsigned char)r->s[r->i];
    cg *g = r->g;
    switch (c) {
    case 'd': case 'D': r->i++;
        return push_ranges(g, out, R_DIGIT, 1, c == 'D') ? -1 : -2;
    case 'w': case 'W': r->i++;
        return push_ranges(g, out, R_WORD, 4, c == 'W') ? -1 : -2;
    case 's': case 'S': r->i++;
        return push_ranges(g, out, R_SPACE, 10, c == 'S') ? -1 : -2;
    case 'n': r->i++; return '\n';
    case 'r': r->i++; return '\r';
    case 't': r->i++; return '\t';
    case 'v': r->i++; return '\v';
    case 'f': r->i++; return '\f';
    case '0':
        r->i++;
        if (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            return rx_fail(r, TIDE_ERR_UNSUPPORTED, "octal escapes are not supported");
        return 0;
    case 'b':
        if (in_class) { r->i++; return '\b'; }
        return rx_fail(r, TIDE_ERR_UNSUPPORTED, "word boundary \\b is not supported");
    case 'B': return rx_fail(r, TIDE_ERR_UNSUPPORTED, "\\B is not supported");
    case 'p': case 'P': return rx_fail(r, TIDE_ERR_UNSUPPORTED, "Unicode property escapes \\p{...} are not supported");
    case 'k': return rx_fail(r, TIDE_ERR_UNSUPPORTED, "named backreferences are not supported");
    case 'x': {
        r->i++;
        int32_t v = read_hex(r, 2);
        return v < 0 ? rx_fail(r, TIDE_ERR_INVALID, "\\x needs two hex digits") : v;
    }
    case 'u': {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '{') {
            r->i++;
            int32_t v = 0;
            int nd = 0;
            while (r->i < r->n && hexval((unsigned char)r->s[r->i]) >= 0 && nd < 7) {
                v = v * 16 + hexval((unsigned char)r->s[r->i++]);
                nd++;
            }
            if (!nd || r->i >= r->n || r->s[r->i] != '}' || v > CG_CP_MAX)
                return rx_fail(r, TIDE_ERR_INVALID, "bad \\u{...} escape");
            r->i++;
            return v;
        }
        int32_t v = read_hex(r, 4);
        if (v < 0) return rx_fail(r, TIDE_ERR_INVALID, "\\u needs four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF && r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
            size_t save = r->i;
            r->i += 2;
            int32_t lo = read_hex(r, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            r->i = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(r, TIDE_ERR_UNSUPPORTED, "lone surrogate escapes are not supported");
        return v;
    }
    case 'c': {
        r->i++;
        if (r->i >= r->n || !((r->s[r->i] | 32) >= 'a' && (r->s[r->i] | 32) <= 'z'))
            return rx_fail(r, TIDE_ERR_INVALID, "\\c needs a letter");
        return r->s[r->i++] % 32;
    }
    default:
        if (c >= '1' && c <= '9') {
            if (in_class) return rx_fail(r, TIDE_ERR_UNSUPPORTED, "octal escapes are not supported");
            return rx_fail(r, TIDE_ERR_UNSUPPORTED, "backreferences are not supported");
        }
        return next_cp(r); /* identity escape */
    }
}

static int32_t parse_alt(rx *r);

static int32_t parse_class(rx *r) {
    cg *g = r->g;
    cg_vec v = {0};
    int neg = 0;
    if (r->i < r->n && r->s[r->i] == '^') {
        neg = 1;
        r->i++;
    }
    for (;;) {
        if (r->i >= r->n) {
            cg_vec_free(&v);
            return rx_fail(r, TIDE_ERR_INVALID, "unterminated character class");
        }
        if (r->s[r->i] == ']') {
            r->i++;
            break;
        }
        int32_t lo;
        if (r->s[r->i] == '\\') {
            r->i++;
            lo = escape(r, &v, 1);
        } else lo = next_cp(r);
        if (lo == -1) {
            cg_vec_free(&v);
            return -1;
        }
        if (lo == -2) continue;
        int32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                hi = escape(r, &v, 1);
                if (hi == -1) {
                    cg_vec_free(&v);
                    return -1;
                }
                if (hi == -2) { /* [a-\d]: '-' literal (Annex B) */
                    if (cg_vec_push(g, &v, lo) || cg_vec_push(g, &v, lo) || cg_vec_push(g, &v, '-') || cg_vec_push(g, &v, '-'))
                        break;
                    continue;
                }
            } else hi = next_cp(r);
            if (hi < lo) {
                cg_vec_free(&v);
                return rx_fail(r, TIDE_ERR_INVALID, "character class range out of order");
            }
        }
        if (cg_vec_push(g, &v, lo) || cg_vec_push(g, &v, hi)) break;
    }
    int32_t x = g->failed ? -1 : neg ? cg_cpset_not(g, v.v, v.n / 2, r->jstr) : cg_cpset(g, v.v, v.n / 2, r->jstr);
    cg_vec_free(&v);
    return x;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Parses {m}, {m,}, {m,n} at r->i (at '{'); 0 = not a quantifier (a literal
 * '{', Annex B), 1 = parsed, -1 = error. */
static int parse_braces(rx *r, int32_t *min, int32_t *max) {
    size_t j = r->i + 1;
    long a = 0, b = -1;
    if (j >= r->n || !is_digit(r->s[j])) return 0;
    while (j < r->n && is_digit(r->s[j])) {
        a = a * 10 + (r->s[j++] - '0');
        if (a > 100000000) a = 100000000;
    }
    if (j < r->n && r->s[j] == ',') {
        j++;
        if (j < r->n && is_digit(r->s[j])) {
            b = 0;
            while (j < r->n && is_digit(r->s[j])) {
                b = b * 10 + (r->s[j++] - '0');
                if (b > 100000000) b = 100000000;
            }
        }
    } else b = a;
    if (j >= r->n || r->s[j] != '}') return 0;
    r->i = j + 1;
    if (b >= 0 && b < a) return rx_fail(r, TIDE_ERR_INVALID, "numbers out of order in {} quantifier"), -1;
    if (a > CG_MAX_REPEAT || b > CG_MAX_REPEAT) {
        char m[96];
        snprintf(m, sizeof m, "repetition bound over the limit of %d", CG_MAX_REPEAT);
        return rx_fail(r, TIDE_ERR_UNSUPPORTED, m), -1;
    }
    *min = (int32_t)a;
    *max = (int32_t)b;
    return 1;
}

static int32_t lit_cp(rx *r, int32_t cp) {
    int32_t p[2] = {cp, cp};
    return cg_cpset(r->g, p, 1, r->jstr);
}

static int32_t parse_atom(rx *r) {
    cg *g = r->g;
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == ':') r->i++;
            else if (r->i < r->n && r->s[r->i] == '<' && r->i + 1 < r->n && r->s[r->i + 1] != '=' && r->s[r->i + 1] != '!') {
                while (r->i < r->n && r->s[r->i] != '>') r->i++;
                if (r->i >= r->n) return rx_fail(r, TIDE_ERR_INVALID, "unterminated group name");
                r->i++;
            } else return rx_fail(r, TIDE_ERR_UNSUPPORTED, "lookaround assertions are not supported");
        }
        if (++r->depth > 200) return rx_fail(r, TIDE_ERR_UNSUPPORTED, "groups nested over 200 deep");
        int32_t x = parse_alt(r);
        r->depth--;
        if (x < 0) return -1;
        if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, TIDE_ERR_INVALID, "missing )");
        r->i++;
        return x;
    }
    if (c == '[') {
        r->i++;
        return parse_class(r);
    }
    if (c == '.') {
        r->i++;
        return cg_cpset_not(g, R_DOT_NOT, 3, r->jstr);
    }
    if (c == '\\') {
        r->i++;
        cg_vec v = {0};
        int32_t e = escape(r, &v, 0);
        int32_t x = e == -1 ? -1 : e == -2 ? cg_cpset(g, v.v, v.n / 2, r->jstr) : lit_cp(r, e);
        cg_vec_free(&v);
        return x;
    }
    if (c == '*' || c == '+' || c == '?') return rx_fail(r, TIDE_ERR_INVALID, "nothing to repeat");
    if (c == '^' || c == '$') return rx_fail(r, TIDE_ERR_UNSUPPORTED, "anchors ^ and $ are supported only at the ends of the pattern");
    if (c == '{') {
        int32_t a, b;
        size_t save = r->i;
        int q = parse_braces(r, &a, &b);
        if (q < 0) return -1;
        if (q > 0) {
            r->i = save;
            return rx_fail(r, TIDE_ERR_INVALID, "nothing to repeat");
        }
    }
    return lit_cp(r, next_cp(r));
}

static int32_t parse_quant(rx *r) {
    int32_t x = parse_atom(r);
    while (x >= 0 && r->i < r->n) {
        char c = r->s[r->i];
        int32_t a, b;
        if (c == '*') { a = 0; b = -1; r->i++; }
        else if (c == '+') { a = 1; b = -1; r->i++; }
        else if (c == '?') { a = 0; b = 1; r->i++; }
        else if (c == '{') {
            int q = parse_braces(r, &a, &b);
            if (q < 0) return -1;
            if (q == 0) break;
        } else break;
        if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
        x = cg_rep(r->g, x, a, b);
    }
    return x;
}

/* One alternative: a sequence up to '|' or ')' or the end. At the top level
 * (depth 0) a leading ^ / trailing $ set *anch bits 1 / 2. */
static int32_t parse_seq(rx *r, int *anch) {
    cg_vec v = {0};
    if (r->depth == 0 && r->i < r->n && r->s[r->i] == '^') {
        r->i++;
        *anch |= 1;
    }
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->depth == 0 && r->s[r->i] == '$' && (r->i + 1 == r->n || r->s[r->i + 1] == '|')) {
            r->i++;
            *anch |= 2;
            break;
        }
        int32_t x = parse_quant(r);
        if (x < 0 || cg_vec_push(r->g, &v, x)) {
            cg_vec_free(&v);
            return -1;
        }
    }
    int32_t x = cg_list(r->g, CA_CAT, v.v, v.n);
    cg_vec_free(&v);
    return x;
}

static int32_t any_star(rx *r) {
    int32_t all[2] = {0, CG_CP_MAX};
    return cg_rep(r->g, cg_cpset(r->g, all, 1, r->jstr), 0, -1);
}

static int32_t parse_alt(rx *r) {
    cg_vec v = {0};
    int top = r->depth == 0;
    for (;;) {
        int anch = 0;
        int32_t x = parse_seq(r, &anch);
        if (x >= 0 && top && r->search) {
            if (!(anch & 1)) x = cg_cat2(r->g, any_star(r), x);
            if (!(anch & 2)) x = cg_cat2(r->g, x, any_star(r));
        }
        if (x < 0 || cg_vec_push(r->g, &v, x)) {
            cg_vec_free(&v);
            return -1;
        }
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    int32_t x = cg_list(r->g, CA_ALT, v.v, v.n);
    cg_vec_free(&v);
    return x;
}

int32_t cg_regex(cg *g, const char *re, size_t len, int search, int jstr, tide_status *st) {
    rx r = {g, re, len, 0, jstr, 0, st, 0, search};
    int32_t x = parse_alt(&r);
    if (x >= 0 && r.i < r.n) return rx_fail(&r, TIDE_ERR_INVALID, "unmatched )");
    if (x < 0 && !r.err) {
        if (st) *st = g->st;
        return -1;
    }
    return x;
}
