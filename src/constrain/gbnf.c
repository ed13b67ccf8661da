/* GBNF, the grammar format llama.cpp documents (grammars/README.md there),
 * to grammar rules (cgram.h):
 *
 *   name ::= alternatives          one rule; names are [A-Za-z0-9_-]+
 *   "text"                         a literal (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH)
 *   [a-z0-9_] [^"\\]               character classes (codepoints; the same escapes)
 *   .                              any character
 *   ( ... )  a | b                 grouping, alternation, sequence by juxtaposition
 *   x* x+ x? x{m} x{m,} x{m,n}     repetition
 *   # ...                          a comment to the end of the line
 *
 * A rule ends at a newline unless inside parentheses or right after '|'.
 * The start rule is "root". Token references (<[id]>, <name>) are refused. */
#include "constrain/gbnf.h"

#include <stdio.h>
#include <string.h>

typedef struct gp {
    cg *g;
    const char *s;
    size_t n, i;
    int depth;
    tide_status *st;
    int err;
} gp;

int tide_gram_fail(tide_status *st, const char *s, size_t n, size_t at, const char *what) {
    int line = 1;
    size_t start = 0;
    for (size_t k = 0; k < at && k < n; k++)
        if (s[k] == '\n') {
            line++;
            start = k + 1;
        }
    return tide_fail(st, TIDE_ERR_INVALID, "grammar line %d, column %d: %s", line, (int)(at - start) + 1, what);
}

static int32_t gfail(gp *p, const char *what) {
    if (!p->err) {
        p->err = 1;
        tide_gram_fail(p->st, p->s, p->n, p->i, what);
    }
    return -1;
}

static int32_t gchk(gp *p, int32_t x) {
    if (x < 0 && !p->err) {
        p->err = 1;
        *p->st = p->g->st;
    }
    return x;
}

/* spaces and comments; newlines only when nl */
static void space(gp *p, int nl) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else break;
    }
}

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int32_t rule_id(gp *p, const char *name, size_t len) {
    for (int32_t r = 0; r < p->g->n_rules; r++)
        if (strlen(p->g->rules[r].name) == len && !memcmp(p->g->rules[r].name, name, len)) return r;
    return gchk(p, cg_rule_new(p->g, name, len));
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

int32_t tide_gram_char(const char *s, size_t n, size_t *i, const char **why) {
    if (*i >= n) return *why = "unexpected end of the grammar", -1;
    unsigned char c = (unsigned char)s[*i];
    if (c == '\\') {
        (*i)++;
        if (*i >= n) return *why = "\\ at the end of the grammar", -1;
        char e = s[(*i)++];
        int nd = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'f': return '\f';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return e;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        default: (*i)--; return *why = "unknown escape", -1;
        }
        int32_t v = 0;
        for (int k = 0; k < nd; k++) {
            if (*i >= n || hexv(s[*i]) < 0) return *why = "bad hex escape", -1;
            v = v * 16 + hexv(s[(*i)++]);
            if (v > CG_CP_MAX) return *why = "escape beyond U+10FFFF", -1;
        }
        return v;
    }
    /* UTF-8 */
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n) return *why = "invalid UTF-8", -1;
    int32_t v = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        unsigned char d = (unsigned char)s[*i + (size_t)k];
        if ((d & 0xC0) != 0x80) return *why = "invalid UTF-8", -1;
        v = (v << 6) | (d & 0x3F);
    }
    *i += (size_t)len;
    return v;
}

/* One character of a literal or class (after escapes); -1 error. */
static int32_t one_char(gp *p) {
    const char *why = NULL;
    int32_t v = tide_gram_char(p->s, p->n, &p->i, &why);
    return v < 0 ? gfail(p, why) : v;
}

static int32_t alternatives(gp *p, int nested);

static int32_t primary(gp *p) {
    cg *g = p->g;
    char c = p->s[p->i];
    if (c == '"') {
        p->i++;
        cg_vec v = {0};
        while (p->i < p->n && p->s[p->i] != '"') {
            if (p->s[p->i] == '\n') {
                cg_vec_free(&v);
                return gfail(p, "newline inside a literal");
            }
            int32_t cp = one_char(p);
            if (cp < 0) {
                cg_vec_free(&v);
                return -1;
            }
            int32_t pr[2] = {cp, cp};
            cg_vec_push(g, &v, gchk(p, cg_cpset(g, pr, 1, 0)));
        }
        if (p->i >= p->n) {
            cg_vec_free(&v);
            return gfail(p, "unterminated literal");
        }
        p->i++;
        int32_t x = gchk(p, cg_list(g, CA_CAT, v.v, v.n));
        cg_vec_free(&v);
        return x;
    }
    if (c == '[') {
        p->i++;
        int neg = 0;
        if (p->i < p->n && p->s[p->i] == '^') {
            neg = 1;
            p->i++;
        }
        cg_vec v = {0};
        while (p->i < p->n && p->s[p->i] != ']') {
            int32_t lo = one_char(p), hi = lo;
            if (lo >= 0 && p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                p->i++;
                hi = one_char(p);
                if (hi >= 0 && hi < lo) {
                    cg_vec_free(&v);
                    return gfail(p, "class range out of order");
                }
            }
            if (lo < 0 || hi < 0) {
                cg_vec_free(&v);
                return -1;
            }
            cg_vec_push(g, &v, lo);
            cg_vec_push(g, &v, hi);
        }
        if (p->i >= p->n) {
            cg_vec_free(&v);
            return gfail(p, "unterminated character class");
        }
        p->i++;
        int32_t x = gchk(p, neg ? cg_cpset_not(g, v.v, v.n / 2, 0) : cg_cpset(g, v.v, v.n / 2, 0));
        cg_vec_free(&v);
        return x;
    }
    if (c == '.') {
        p->i++;
        int32_t all[2] = {0, CG_CP_MAX};
        return gchk(p, cg_cpset(g, all, 1, 0));
    }
    if (c == '(') {
        p->i++;
        if (++p->depth > 200) return gfail(p, "groups nested over 200 deep");
        space(p, 1);
        int32_t x = alternatives(p, 1);
        p->depth--;
        if (x < 0) return -1;
        if (p->i >= p->n || p->s[p->i] != ')') return gfail(p, "missing )");
        p->i++;
        return x;
    }
    if (c == '<') return gfail(p, "token references (<...>) are not supported");
    if (is_name(c)) {
        size_t st = p->i;
        while (p->i < p->n && is_name(p->s[p->i])) p->i++;
        int32_t r = rule_id(p, p->s + st, p->i - st);
        return r < 0 ? -1 : gchk(p, cg_call(g, r));
    }
    return gfail(p, "expected a literal, a class, a rule name or (");
}

int tide_gram_int(const char *s, size_t n, size_t *i, long *out) {
    if (*i >= n || s[*i] < '0' || s[*i] > '9') return 0;
    long v = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        v = v * 10 + (s[(*i)++] - '0');
        if (v > 1000000) v = 1000000;
    }
    *out = v;
    return 1;
}

static int read_int(gp *p, long *out) { return tide_gram_int(p->s, p->n, &p->i, out); }

static int32_t postfix(gp *p, int nested) {
    int32_t x = primary(p);
    for (;;) {
        if (x < 0) return -1;
        space(p, nested);
        if (p->i >= p->n) return x;
        char c = p->s[p->i];
        long a, b;
        if (c == '*') a = 0, b = -1;
        else if (c == '+') a = 1, b = -1;
        else if (c == '?') a = 0, b = 1;
        else if (c == '{') {
            p->i++;
            space(p, 0);
            if (!read_int(p, &a)) return gfail(p, "expected a number in {}");
            space(p, 0);
            b = a;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                space(p, 0);
                if (!read_int(p, &b)) b = -1;
                space(p, 0);
            }
            if (p->i >= p->n || p->s[p->i] != '}') return gfail(p, "expected }");
            if (b >= 0 && b < a) return gfail(p, "numbers out of order in {}");
            if (a > CG_MAX_REPEAT || b > CG_MAX_REPEAT) return gfail(p, "repetition bound over the limit of 10000");
        } else return x;
        p->i++;
        x = gchk(p, cg_rep(p->g, x, (int32_t)a, (int32_t)b));
    }
}

static int at_seq_end(gp *p, int nested) {
    if (p->i >= p->n) return 1;
    char c = p->s[p->i];
    return c == '|' || c == ')' || (!nested && c == '\n');
}

static int32_t alternatives(gp *p, int nested) {
    cg_vec alts = {0};
    for (;;) {
        cg_vec seq = {0};
        space(p, nested);
        while (!at_seq_end(p, nested)) {
            /* a new rule starts on this line: name ::= (the caller ends the rule) */
            int32_t x = postfix(p, nested);
            if (x < 0 || cg_vec_push(p->g, &seq, x)) {
                cg_vec_free(&seq);
                cg_vec_free(&alts);
                return -1;
            }
        }
        int32_t s = gchk(p, cg_list(p->g, CA_CAT, seq.v, seq.n));
        cg_vec_free(&seq);
        if (s < 0 || cg_vec_push(p->g, &alts, s)) {
            cg_vec_free(&alts);
            return -1;
        }
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            space(p, 1);
            continue;
        }
        break;
    }
    int32_t x = gchk(p, cg_list(p->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
    return x;
}

int tide_gbnf_parse(cg *g, const char *text, size_t len, tide_status *st) {
    gp p = {g, text, len, 0, 0, st, 0};
    for (;;) {
        space(&p, 1);
        if (p.i >= p.n) break;
        size_t at = p.i;
        while (p.i < p.n && is_name(p.s[p.i])) p.i++;
        if (p.i == at) return gfail(&p, "expected a rule name"), -1;
        size_t name_end = p.i;
        space(&p, 0);
        if (p.i + 3 > p.n || memcmp(p.s + p.i, "::=", 3)) return gfail(&p, "expected ::="), -1;
        p.i += 3;
        space(&p, 1);
        int32_t r = rule_id(&p, p.s + at, name_end - at);
        if (r < 0) return -1;
        if (g->rules[r].ast >= 0) {
            p.i = at;
            char m[160];
            snprintf(m, sizeof m, "rule \"%.64s\" is defined twice", g->rules[r].name);
            return gfail(&p, m), -1;
        }
        int32_t x = alternatives(&p, 0);
        if (x < 0) return -1;
        if (p.i < p.n && p.s[p.i] == ')') return gfail(&p, "unmatched )"), -1;
        g->rules[r].ast = x;
    }
    for (int32_t r = 0; r < g->n_rules; r++)
        if (!strcmp(g->rules[r].name, "root")) {
            g->root = r;
            return 0;
        }
    return tide_fail(st, TIDE_ERR_INVALID, "grammar: no \"root\" rule");
}
