/* JSON Schema (2020-12 vocabulary, the subset docs/structured.md lists) to
 * grammar rules (cgram.h). The output is compact JSON (no whitespace),
 * object members in the schema's `properties` order followed by any
 * additional members, strings with JSON.stringify's escapes. Every
 * keyword is either handled, an annotation, or refused with an error that
 * names it and where it is ("#/properties/a: keyword \"not\" is not
 * supported"). */
#include "constrain/schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/fmt.h"
#include "text/render.h" /* the DSML markers of tool calls */

#define SC_MAX_DEPTH 64     /* schema nesting the compiler follows */
#define SC_MAX_BOUND 1e15   /* integer bounds beyond this are refused */

typedef struct sc_ref { const json_t *target; int32_t rule; } sc_ref;

typedef struct sc {
    cg *g;
    json_t *root;
    tide_status *st;
    sc_ref *refs; int n_refs, cap_refs;
    int32_t any_rule;   /* the rule for "any JSON value", -1 until needed */
    int32_t str_rule;   /* any JSON string */
    int depth;
    json_t *keep;       /* merged allOf schemas, freed with the compiler */
    int err;
} sc;

static int32_t sc_fail(sc *c, tide_code code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int32_t sc_fail(sc *c, tide_code code, const char *path, const char *fmt, ...) {
    if (c->err) return -1;
    c->err = 1;
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    tide_fail(c->st, code, "%s: %s", path[0] ? path : "#", m);
    return -1;
}

static int32_t chk(sc *c, int32_t x) {
    if (x < 0 && !c->err) {
        c->err = 1;
        *c->st = c->g->st;
    }
    return x;
}

/* ---- canonical serialisation (JSON.stringify's) ------------------------- */

typedef struct sbuf_ { char *p; size_t n, cap; int oom; } sbuf_;

static void sb_put(sbuf_ *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf_ *b, const char *s) { sb_put(b, s, strlen(s)); }

void tide_json_number_js(double v, char *out, size_t cap) {
    if (v == 0) {
        snprintf(out, cap, "0");
        return;
    }
    if (!isfinite(v)) {
        snprintf(out, cap, "null");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]xx */
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char dig[24];
    int k = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') dig[k++] = *p;
    while (k > 1 && dig[k - 1] == '0') k--;
    dig[k] = 0;
    int n = atoi(p + 1) + 1;
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (k <= n && n <= 21) {
        PUT("%s", dig);
        for (int i = 0; i < n - k; i++) PUT("0");
    } else if (0 < n && n <= 21) {
        PUT("%.*s.%s", n, dig, dig + n);
    } else if (-6 < n && n <= 0) {
        PUT("0.");
        for (int i = 0; i < -n; i++) PUT("0");
        PUT("%s", dig);
    } else {
        PUT("%c", dig[0]);
        if (k > 1) PUT(".%s", dig + 1);
        PUT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
#undef PUT
}

static void canon_str(sbuf_ *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"') sb_str(b, "\\\"");
        else if (ch == '\\') sb_str(b, "\\\\");
        else if (ch == '\n') sb_str(b, "\\n");
        else if (ch == '\r') sb_str(b, "\\r");
        else if (ch == '\t') sb_str(b, "\\t");
        else if (ch == '\b') sb_str(b, "\\b");
        else if (ch == '\f') sb_str(b, "\\f");
        else if (ch < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", ch);
            sb_str(b, e);
        } else sb_put(b, (const char *)&ch, 1);
    }
    sb_put(b, "\"", 1);
}

static void canon(sbuf_ *b, const json_t *v) {
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        sb_put(b, "{", 1);
        int first = 1;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            if (!first) sb_put(b, ",", 1);
            first = 0;
            canon_str(b, k, strlen(k));
            sb_put(b, ":", 1);
            canon(b, x);
        }
        sb_put(b, "}", 1);
        return;
    }
    case JSON_ARRAY:
        sb_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_put(b, ",", 1);
            canon(b, json_array_get(v, i));
        }
        sb_put(b, "]", 1);
        return;
    case JSON_STRING: canon_str(b, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        sb_str(b, num);
        return;
    case JSON_REAL:
        tide_json_number_js(json_real_value(v), num, sizeof num);
        sb_str(b, num);
        return;
    case JSON_TRUE: sb_str(b, "true"); return;
    case JSON_FALSE: sb_str(b, "false"); return;
    default: sb_str(b, "null"); return;
    }
}

char *tide_json_canon(const json_t *v, size_t *len) {
    sbuf_ b = {0};
    canon(&b, v);
    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    if (len) *len = b.n;
    return b.p;
}

/* ---- small grammar pieces ------------------------------------------------ */

static int32_t lit(sc *c, const char *s) { return chk(c, cg_lit(c->g, s, strlen(s))); }

static int32_t digit(sc *c, char lo, char hi) { return chk(c, cg_byte(c->g, (uint8_t)lo, (uint8_t)hi)); }

/* any JSON string content codepoint */
static int32_t str_char(sc *c) {
    int32_t all[2] = {0, CG_CP_MAX};
    return chk(c, cg_cpset(c->g, all, 1, 1));
}

static int32_t list_a(sc *c, cg_kind kind, int n, const int32_t *kids) { return chk(c, cg_list(c->g, kind, kids, n)); }
/* n trees in sequence / as alternatives */
#define seq(c, n, ...) list_a((c), CA_CAT, (n), (const int32_t[]){__VA_ARGS__})
#define alt(c, n, ...) list_a((c), CA_ALT, (n), (const int32_t[]){__VA_ARGS__})

static int32_t opt(sc *c, int32_t x) { return chk(c, cg_rep(c->g, x, 0, 1)); }
static int32_t star(sc *c, int32_t x) { return chk(c, cg_rep(c->g, x, 0, -1)); }

/* 0|-?[1-9][0-9]* (no "-0": JSON.stringify never writes it) */
static int32_t int_any(sc *c) {
    return alt(c, 2, lit(c, "0"), seq(c, 3, opt(c, lit(c, "-")), digit(c, '1', '9'), star(c, digit(c, '0', '9'))));
}

/* -?(0|[1-9][0-9]*) */
static int32_t int_part(sc *c) {
    return seq(c, 2, opt(c, lit(c, "-")), alt(c, 2, lit(c, "0"), seq(c, 2, digit(c, '1', '9'), star(c, digit(c, '0', '9')))));
}

static int32_t frac_any(sc *c) { return seq(c, 2, lit(c, "."), chk(c, cg_rep(c->g, digit(c, '0', '9'), 1, -1))); }

static int32_t exp_any(sc *c) {
    return seq(c, 3, digit(c, 'E', 'E') >= 0 ? chk(c, cg_list(c->g, CA_ALT, (int32_t[]){lit(c, "e"), lit(c, "E")}, 2)) : -1,
               opt(c, alt(c, 2, lit(c, "+"), lit(c, "-"))), chk(c, cg_rep(c->g, digit(c, '0', '9'), 1, -1)));
}

static int32_t number_any(sc *c) { return seq(c, 3, int_part(c), opt(c, frac_any(c)), opt(c, exp_any(c))); }

/* Decimal strings a..b of the same length (a <= b, digit strings). */
static int32_t same_len(sc *c, const char *a, const char *b, int n) {
    if (n == 0) return chk(c, cg_empty(c->g));
    if (n == 1) return digit(c, a[0], b[0]);
    if (a[0] == b[0]) return seq(c, 2, digit(c, a[0], a[0]), same_len(c, a + 1, b + 1, n - 1));
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    int32_t parts[3];
    int np = 0;
    int a_low = !memcmp(a + 1, zeros, (size_t)n - 1), b_high = !memcmp(b + 1, nines, (size_t)n - 1);
    char lo0 = a_low ? a[0] : (char)(a[0] + 1), hi0 = b_high ? b[0] : (char)(b[0] - 1);
    if (!a_low) parts[np++] = seq(c, 2, digit(c, a[0], a[0]), same_len(c, a + 1, nines, n - 1));
    if (lo0 <= hi0) parts[np++] = seq(c, 2, digit(c, lo0, hi0), chk(c, cg_rep(c->g, digit(c, '0', '9'), n - 1, n - 1)));
    if (!b_high) parts[np++] = seq(c, 2, digit(c, b[0], b[0]), same_len(c, zeros, b + 1, n - 1));
    return chk(c, cg_list(c->g, CA_ALT, parts, np));
}

static int ndigits(long long v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros. */
static int32_t nonneg_range(sc *c, long long lo, long long hi) {
    cg_vec v = {0};
    int dl = ndigits(lo), dh = hi < 0 ? dl : ndigits(hi);
    for (int L = dl; L <= dh; L++) {
        long long p = 1;
        for (int i = 1; i < L; i++) p *= 10;
        long long a = L == 1 ? 0 : p, b = p * 10 - 1;
        if (a < lo) a = lo;
        if (hi >= 0 && b > hi) b = hi;
        if (a > b) continue;
        char sa[24], sb[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sb, sizeof sb, "%lld", b);
        cg_vec_push(c->g, &v, same_len(c, sa, sb, L));
    }
    if (hi < 0) /* longer than lo: anything with more digits */
        cg_vec_push(c->g, &v, seq(c, 2, digit(c, '1', '9'), chk(c, cg_rep(c->g, digit(c, '0', '9'), dl, -1))));
    int32_t x = chk(c, cg_list(c->g, CA_ALT, v.v, v.n));
    cg_vec_free(&v);
    return x;
}

/* Integers in [lo, hi]; has_lo / has_hi: bounded on that side. */
static int32_t int_range(sc *c, int has_lo, long long lo, int has_hi, long long hi) {
    if (has_lo && has_hi && lo > hi) return chk(c, cg_none(c->g));
    int32_t parts[2];
    int np = 0;
    /* negative part: -m with m in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        parts[np++] = seq(c, 2, lit(c, "-"), nonneg_range(c, mlo, mhi));
    }
    if (!has_hi || hi >= 0) parts[np++] = nonneg_range(c, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    return chk(c, cg_list(c->g, CA_ALT, parts, np));
}

/* A non-negative decimal bound: integer part and fraction digits (no
 * trailing zeros). */
typedef struct dec { long long ip; char f[24]; int nf; } dec;

/* |v| as a decimal, from its shortest round-trip text; -1 when that text
 * needs an exponent (|v| < 1e-6 or >= 1e21). */
static int to_dec(double v, dec *d) {
    char t[64];
    tide_json_number_js(fabs(v), t, sizeof t);
    if (strchr(t, 'e')) return -1;
    const char *dot = strchr(t, '.');
    d->ip = strtoll(t, NULL, 10);
    d->nf = 0;
    if (dot)
        for (const char *p = dot + 1; *p && d->nf < (int)sizeof d->f - 1; p++) d->f[d->nf++] = *p;
    while (d->nf > 0 && d->f[d->nf - 1] == '0') d->nf--;
    d->f[d->nf] = 0;
    return 0;
}

/* Fraction digits from position i on, given that the digits so far equal
 * lo's (tlo) and / or hi's (thi): the strings keeping the value within the
 * bounds. need: at least one digit (right after the '.'). */
static int32_t frac_digits(sc *c, const dec *lo, int tlo, int lo_in, const dec *hi, int thi, int hi_in, int i, int need) {
    int lo_rest0 = i >= lo->nf, hi_rest0 = !thi || i >= hi->nf;
    int32_t any = chk(c, cg_rep(c->g, digit(c, '0', '9'), need ? 1 : 0, -1));
    if (!tlo && !thi) return any;
    if (tlo && lo_rest0 && !thi) /* >= lo whatever follows; > lo needs a non-zero digit */
        return lo_in ? any : seq(c, 3, star(c, digit(c, '0', '9')), digit(c, '1', '9'), star(c, digit(c, '0', '9')));
    if (thi && hi_rest0 && (!tlo || lo_rest0)) /* only zeros keep it <= hi (== hi) */
        return hi_in && (!tlo || lo_in) ? chk(c, cg_rep(c->g, lit(c, "0"), need ? 1 : 0, -1)) : chk(c, cg_none(c->g));
    cg_vec alts = {0};
    /* the digits may end here: the rest is zero */
    int end_ok = !need && (!tlo || (lo_rest0 && lo_in)) && (!thi || !hi_rest0 || hi_in);
    if (end_ok) cg_vec_push(c->g, &alts, chk(c, cg_empty(c->g)));
    char a = tlo && i < lo->nf ? lo->f[i] : '0', b = thi && i < hi->nf ? hi->f[i] : '9';
    /* digits below a or above b are out; a and b keep their bound tight */
    for (char x = a; x <= b;) {
        int nlo = tlo && x == a, nhi = thi && x == b; /* (in this loop thi implies i < hi->nf) */
        char y = x;
        if (!nlo && !nhi) /* the run of digits that free both bounds */
            while (y + 1 <= b && !(thi && y + 1 == b)) y++;
        cg_vec_push(c->g, &alts, seq(c, 2, digit(c, x, y), frac_digits(c, lo, nlo, lo_in, hi, nhi, hi_in, i + 1, 0)));
        x = (char)(y + 1);
    }
    int32_t r = chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
    return r;
}

/* The optional fraction after an integer part equal to lo's (tlo) and / or
 * hi's (thi). */
static int32_t frac_bounded(sc *c, const dec *lo, int tlo, int lo_in, const dec *hi, int thi, int hi_in) {
    int end_ok = (!tlo || (lo->nf == 0 && lo_in)) && (!thi || hi->nf > 0 || hi_in);
    int32_t more = seq(c, 2, lit(c, "."), frac_digits(c, lo, tlo, lo_in, hi, thi, hi_in, 0, 1));
    return end_ok ? opt(c, more) : more;
}

/* Magnitudes "int(.frac)?" with value in [lo, hi] (hi NULL: unbounded),
 * lo_in / hi_in: inclusive. */
static int32_t mag_range(sc *c, const dec *lo, int lo_in, const dec *hi, int hi_in) {
    cg_vec v = {0};
    char s[24];
    snprintf(s, sizeof s, "%lld", lo->ip);
    if (hi && lo->ip == hi->ip) cg_vec_push(c->g, &v, seq(c, 2, lit(c, s), frac_bounded(c, lo, 1, lo_in, hi, 1, hi_in)));
    else {
        static const dec none = {0, "", 0};
        cg_vec_push(c->g, &v, seq(c, 2, lit(c, s), frac_bounded(c, lo, 1, lo_in, &none, 0, 1)));
        if (!hi || lo->ip + 1 <= hi->ip - 1)
            cg_vec_push(c->g, &v, seq(c, 2, nonneg_range(c, lo->ip + 1, hi ? hi->ip - 1 : -1), opt(c, frac_any(c))));
        if (hi) {
            snprintf(s, sizeof s, "%lld", hi->ip);
            cg_vec_push(c->g, &v, seq(c, 2, lit(c, s), frac_bounded(c, &none, 0, 1, hi, 1, hi_in)));
        }
    }
    int32_t x = chk(c, cg_list(c->g, CA_ALT, v.v, v.n));
    cg_vec_free(&v);
    return x;
}

/* ---- the compiler --------------------------------------------------------- */

static int32_t value(sc *c, const json_t *s, const char *path);

static int32_t rule_of(sc *c, const json_t *s, const char *path) {
    /* a schema as its own rule: big subtrees are lowered once, not copied */
    int32_t r = chk(c, cg_rule_new(c->g, path, strlen(path)));
    if (r < 0) return -1;
    int32_t x = value(c, s, path);
    if (x < 0) return -1;
    c->g->rules[r].ast = x;
    return chk(c, cg_call(c->g, r));
}

static int32_t any_value(sc *c);

static int32_t any_string(sc *c) {
    if (c->str_rule < 0) {
        int32_t r = chk(c, cg_rule_new(c->g, "string", 6));
        if (r < 0) return -1;
        c->str_rule = r;
        c->g->rules[r].ast = seq(c, 3, lit(c, "\""), star(c, str_char(c)), lit(c, "\""));
    }
    return chk(c, cg_call(c->g, c->str_rule));
}

static int32_t any_value(sc *c) {
    if (c->any_rule < 0) {
        int32_t r = chk(c, cg_rule_new(c->g, "value", 5));
        if (r < 0) return -1;
        c->any_rule = r;
        int32_t v = chk(c, cg_call(c->g, r));
        int32_t member = seq(c, 3, any_string(c), lit(c, ":"), v);
        int32_t obj = seq(c, 3, lit(c, "{"), opt(c, seq(c, 2, member, star(c, seq(c, 2, lit(c, ","), member)))), lit(c, "}"));
        int32_t arr = seq(c, 3, lit(c, "["), opt(c, seq(c, 2, v, star(c, seq(c, 2, lit(c, ","), v)))), lit(c, "]"));
        int32_t k[7] = {obj, arr, any_string(c), number_any(c), lit(c, "true"), lit(c, "false"), lit(c, "null")};
        c->g->rules[r].ast = chk(c, cg_list(c->g, CA_ALT, k, 7));
    }
    return chk(c, cg_call(c->g, c->any_rule));
}

int32_t tide_schema_any_object(cg *g, tide_status *st) {
    sc c = {g, NULL, st, NULL, 0, 0, -1, -1, 0, NULL, 0};
    int32_t member = seq(&c, 3, any_string(&c), lit(&c, ":"), any_value(&c));
    return seq(&c, 3, lit(&c, "{"), opt(&c, seq(&c, 2, member, star(&c, seq(&c, 2, lit(&c, ","), member)))), lit(&c, "}"));
}

/* The JSON pointer target of ref within the root, or NULL. */
static const json_t *resolve(sc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && *p == '0') ch = '~', p++;
            else if (ch == '~' && *p == '1') ch = '/', p++;
            else if (ch == '%' && p[0] && p[1]) { /* percent-encoding */
                int hi = p[0], lo = p[1];
                int hv = hi <= '9' ? hi - '0' : (hi | 32) - 'a' + 10, lv = lo <= '9' ? lo - '0' : (lo | 32) - 'a' + 10;
                ch = (char)(hv * 16 + lv);
                p += 2;
            }
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            if (*end || i < 0) return NULL;
            cur = json_array_get(cur, (size_t)i);
        } else return NULL;
        if (!cur) return NULL;
    }
    return cur;
}

static int32_t ref(sc *c, const char *r, const char *path) {
    const json_t *t = resolve(c, r);
    if (!t) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "$ref \"%.200s\" does not point inside this schema", r);
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == t) return chk(c, cg_call(c->g, c->refs[i].rule));
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? 2 * c->cap_refs : 16;
        sc_ref *q = realloc(c->refs, (size_t)cap * sizeof *q);
        if (!q) return sc_fail(c, TIDE_ERR_NOMEM, path, "out of memory");
        c->refs = q;
        c->cap_refs = cap;
    }
    int32_t rule = chk(c, cg_rule_new(c->g, r, strlen(r)));
    if (rule < 0) return -1;
    c->refs[c->n_refs++] = (sc_ref){t, rule};
    char sub[512];
    snprintf(sub, sizeof sub, "%s", r);
    int32_t x = value(c, t, sub);
    if (x < 0) return -1;
    c->g->rules[rule].ast = x;
    return chk(c, cg_call(c->g, rule));
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 - 64 };

static int type_bit(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "number")) return T_NUM;
    if (!strcmp(t, "integer")) return T_INT;
    return 0;
}

static int json_types(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJ;
    case JSON_ARRAY: return T_ARR;
    case JSON_STRING: return T_STR;
    case JSON_INTEGER: return T_NUM | T_INT;
    case JSON_REAL: return T_NUM | (json_real_value(v) == floor(json_real_value(v)) ? T_INT : 0);
    }
    return 0;
}

static int is_annotation(const char *k) {
    static const char *const ann[] = {"$schema", "title", "description", "default", "examples", "$comment",
                                      "deprecated", "readOnly", "writeOnly", "contentEncoding",
                                      "contentMediaType", "$defs", "definitions", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return 1;
    return 0;
}

static const char *const HANDLED[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                      "patternProperties", "items", "prefixItems", "minItems", "maxItems", "anyOf",
                                      "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format",
                                      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "uniqueItems",
                                      "$id", "additionalItems", NULL};

static int is_handled(const char *k) {
    for (int i = 0; HANDLED[i]; i++)
        if (!strcmp(k, HANDLED[i])) return 1;
    return 0;
}

/* Reads a non-negative integer keyword (-1 absent). */
static int get_count(sc *c, const json_t *s, const char *k, const char *path, long long *out) {
    const json_t *v = json_object_get(s, k);
    *out = -1;
    if (!v) return 0;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (d < 0 || d != floor(d)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"%s\" must be a non-negative integer", k);
    if (d > CG_MAX_REPEAT)
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"%s\" of %.0f is over the limit of %d", k, d, CG_MAX_REPEAT);
    *out = (long long)d;
    return 0;
}

static int get_num(sc *c, const json_t *s, const char *k, const char *path, int *has, double *out) {
    const json_t *v = json_object_get(s, k);
    *has = 0;
    if (!v) return 0;
    /* draft 4: exclusiveMinimum / exclusiveMaximum are booleans that make
     * minimum / maximum exclusive */
    int is_min = !strcmp(k, "minimum"), is_max = !strcmp(k, "maximum");
    if (is_min || is_max) {
        const json_t *x = json_object_get(s, is_min ? "exclusiveMinimum" : "exclusiveMaximum");
        if (json_is_true(x)) return 0; /* read as the exclusive bound */
    }
    if (json_is_boolean(v) && (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum"))) {
        if (json_is_false(v)) return 0;
        const json_t *b = json_object_get(s, !strcmp(k, "exclusiveMinimum") ? "minimum" : "maximum");
        if (!b) return 0;
        v = b;
    }
    if (!json_is_number(v)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"%s\" must be a number", k);
    *has = 1;
    *out = json_number_value(v);
    if (fabs(*out) > SC_MAX_BOUND)
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"%s\" of %g is beyond the supported +-1e15", k, *out);
    return 0;
}

static int32_t numbers(sc *c, const json_t *s, int integer, const char *path) {
    int hmin, hmax, hxmin, hxmax;
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    if (get_num(c, s, "minimum", path, &hmin, &mn) || get_num(c, s, "maximum", path, &hmax, &mx) ||
        get_num(c, s, "exclusiveMinimum", path, &hxmin, &xmn) || get_num(c, s, "exclusiveMaximum", path, &hxmax, &xmx))
        return -1;
    if (!hmin && !hmax && !hxmin && !hxmax) return integer ? int_any(c) : number_any(c);
    if (integer) {
        long long lo = 0, hi = 0;
        int has_lo = 0, has_hi = 0;
        if (hmin) { lo = (long long)ceil(mn); has_lo = 1; }
        if (hxmin) { long long l = (long long)floor(xmn) + 1; if (!has_lo || l > lo) lo = l; has_lo = 1; }
        if (hmax) { hi = (long long)floor(mx); has_hi = 1; }
        if (hxmax) { long long h = (long long)ceil(xmx) - 1; if (!has_hi || h < hi) hi = h; has_hi = 1; }
        return int_range(c, has_lo, lo, has_hi, hi);
    }
    /* numbers with bounds: plain decimal form (no exponent), sign and magnitude */
    double lo = -INFINITY, hi = INFINITY;
    int lo_in = 1, hi_in = 1;
    if (hmin) lo = mn;
    if (hxmin && xmn >= lo) { lo = xmn; lo_in = 0; }
    if (hmax) hi = mx;
    if (hxmax && xmx <= hi) { hi = xmx; hi_in = 0; }
    dec dlo = {0, "", 0}, dhi = {0, "", 0};
    if ((isfinite(lo) && to_dec(lo, &dlo)) || (isfinite(hi) && to_dec(hi, &dhi)))
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path,
                       "number bounds [%g, %g]: bounds below 1e-6 in magnitude are not supported", lo, hi);
    if (lo > hi || (lo == hi && !(lo_in && hi_in))) return chk(c, cg_none(c->g));
    static const dec zero = {0, "", 0};
    int32_t parts[2];
    int np = 0;
    if (hi > 0 || (hi == 0 && hi_in)) /* x >= 0: magnitude in [max(lo, 0), hi] */
        parts[np++] = mag_range(c, lo > 0 ? &dlo : &zero, lo >= 0 ? lo_in : 1, isfinite(hi) ? &dhi : NULL, hi_in);
    if (lo < 0) /* x < 0: magnitude in (max(-hi, 0), -lo] */
        parts[np++] = seq(c, 2, lit(c, "-"), mag_range(c, hi < 0 ? &dhi : &zero, hi < 0 ? hi_in : 0,
                                                     isfinite(lo) ? &dlo : NULL, lo_in));
    return chk(c, cg_list(c->g, CA_ALT, parts, np));
}

static int32_t strings(sc *c, const json_t *s, const char *path) {
    long long mn, mx;
    if (get_count(c, s, "minLength", path, &mn) || get_count(c, s, "maxLength", path, &mx)) return -1;
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"pattern\" must be a string");
    if (fmt && !json_is_string(fmt)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"format\" must be a string");
    int32_t body;
    if (pat || fmt) {
        if (pat && fmt)
            return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"pattern\" together with \"format\" is not supported");
        if (mn >= 0 || mx >= 0)
            return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"%s\" together with \"minLength\"/\"maxLength\" is not supported",
                           pat ? "pattern" : "format");
        if (pat) {
            tide_status rst = {0};
            body = cg_regex(c->g, json_string_value(pat), json_string_length(pat), 1, 1, &rst);
            if (body < 0) {
                if (!c->err) {
                    c->err = 1;
                    tide_fail(c->st, rst.code ? rst.code : TIDE_ERR_INVALID, "%s/pattern: %s", path, rst.msg);
                }
                return -1;
            }
        } else {
            const char *re = tide_format_regex(json_string_value(fmt));
            if (!re)
                return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "format \"%.64s\" is not supported", json_string_value(fmt));
            tide_status rst = {0};
            body = cg_regex(c->g, re, strlen(re), 0, 1, &rst);
            if (body < 0) return sc_fail(c, TIDE_ERR_INTERNAL, path, "format regex: %s", rst.msg);
        }
    } else body = chk(c, cg_rep(c->g, str_char(c), mn < 0 ? 0 : (int32_t)mn, mx < 0 ? -1 : (int32_t)mx));
    return seq(c, 3, lit(c, "\""), body, lit(c, "\""));
}

static int32_t json_key(sc *c, const char *k) {
    json_t *ks = json_string(k);
    if (!ks) return sc_fail(c, TIDE_ERR_NOMEM, "", "out of memory");
    size_t n;
    char *t = tide_json_canon(ks, &n);
    json_decref(ks);
    if (!t) return sc_fail(c, TIDE_ERR_NOMEM, "", "out of memory");
    int32_t x = seq(c, 2, chk(c, cg_lit(c->g, t, n)), lit(c, ":"));
    free(t);
    return x;
}

/* Decodes one UTF-8 codepoint from s (valid UTF-8: jansson's strings). */
static int32_t utf8_cp(const char **s) {
    const unsigned char *p = (const unsigned char *)*s;
    int32_t c = p[0];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    int32_t v = n == 1 ? c : c & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) v = (v << 6) | (p[i] & 0x3F);
    *s += n;
    return v;
}

/* JSON string content that is none of names[0..n) (each at offset off). */
static int32_t not_in(sc *c, const char **names, int n, size_t off, int depth) {
    /* the distinct next codepoints of names at this offset */
    int32_t cps[256];
    int ncp = 0, ends = 0;
    for (int i = 0; i < n; i++) {
        const char *p = names[i] + off;
        if (!*p) {
            ends = 1;
            continue;
        }
        int32_t cp = utf8_cp(&p);
        int seen = 0;
        for (int j = 0; j < ncp; j++) seen |= cps[j] == cp;
        if (!seen && ncp < 256) cps[ncp++] = cp;
    }
    if (depth > 256) return sc_fail(c, TIDE_ERR_UNSUPPORTED, "", "property name over 256 characters");
    cg_vec alts = {0};
    if (!ends) cg_vec_push(c->g, &alts, chk(c, cg_empty(c->g)));
    /* a codepoint that no name continues with, then anything */
    cg_vec r = {0};
    for (int j = 0; j < ncp; j++) cg_vec_push(c->g, &r, cps[j]), cg_vec_push(c->g, &r, cps[j]);
    int32_t other = chk(c, cg_cpset_not(c->g, r.v, r.n / 2, 1));
    cg_vec_free(&r);
    cg_vec_push(c->g, &alts, seq(c, 2, other, star(c, str_char(c))));
    for (int j = 0; j < ncp && !c->err; j++) {
        const char *sub[64];
        int ns = 0;
        size_t step = 0;
        for (int i = 0; i < n && ns < 64; i++) {
            const char *p = names[i] + off;
            if (!*p) continue;
            const char *q = p;
            if (utf8_cp(&q) == cps[j]) {
                sub[ns++] = names[i];
                step = (size_t)(q - p);
            }
        }
        int32_t one[2] = {cps[j], cps[j]};
        cg_vec_push(c->g, &alts, seq(c, 2, chk(c, cg_cpset(c->g, one, 1, 1)), not_in(c, sub, ns, off + step, depth + 1)));
    }
    int32_t x = chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
    return x;
}

static int32_t dsml_param(sc *c, const char *k, const json_t *ps, const char *path);

/* An object's members: JSON ({"k":v,...}) or, dsml set, tool-call
 * parameters (<｜DSML｜ parameter name="k" string="...">v</｜DSML｜ parameter>
 * joined by newlines, only the declared ones). */
static int32_t members(sc *c, const json_t *s, const char *path, int dsml) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties"), *pprops = json_object_get(s, "patternProperties");
    if (props && !json_is_object(props)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"properties\" must be an object");
    if (req && !json_is_array(req)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"required\" must be an array");
    if (pprops && !json_is_object(pprops)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"patternProperties\" must be an object");
    if (pprops && json_object_size(pprops) && !json_is_false(addl))
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path,
                       "\"patternProperties\" is supported only with \"additionalProperties\": false");
    size_t np = props ? json_object_size(props) : 0;
    if (np > 1000) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "more than 1000 properties");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"required\" entries must be strings");
        if (!props || !json_object_get(props, json_string_value(r))) {
            /* a required name without a schema: it must appear, with any value */
            if (json_is_false(addl) && !pprops)
                return chk(c, cg_none(c->g));
            return sc_fail(c, TIDE_ERR_UNSUPPORTED, path,
                           "required property \"%.64s\" is not in \"properties\" (list it there)", json_string_value(r));
        }
    }
    /* members: declared properties in order */
    int32_t *mem = calloc(np + 1, sizeof *mem);
    uint8_t *isreq = calloc(np + 1, 1);
    const char **names = calloc(np + 1, sizeof *names);
    if (!mem || !isreq || !names) {
        free(mem), free(isreq), free(names);
        return sc_fail(c, TIDE_ERR_NOMEM, path, "out of memory");
    }
    size_t i = 0;
    const char *k;
    json_t *ps;
    if (props) json_object_foreach((json_t *)props, k, ps) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/properties/%.200s", path, k);
        names[i] = k;
        mem[i] = dsml ? dsml_param(c, k, ps, sub) : seq(c, 2, json_key(c, k), rule_of(c, ps, sub));
        for (size_t j = 0; req && j < json_array_size(req); j++)
            if (!strcmp(json_string_value(json_array_get(req, j)), k)) isreq[i] = 1;
        i++;
    }
    /* extra members (tool calls: only the declared parameters, a subset
     * of what the schema allows) */
    int32_t extra = -1;
    const char *sep = dsml ? "\n" : ",";
    if (dsml) {
    } else if (pprops && json_object_size(pprops)) {
        cg_vec alts = {0};
        json_object_foreach((json_t *)pprops, k, ps) {
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/patternProperties/%.200s", path, k);
            tide_status rst = {0};
            int32_t key = cg_regex(c->g, k, strlen(k), 1, 1, &rst);
            if (key < 0) {
                if (!c->err) {
                    c->err = 1;
                    tide_fail(c->st, rst.code ? rst.code : TIDE_ERR_INVALID, "%s: %s", sub, rst.msg);
                }
                break;
            }
            for (size_t j = 0; j < np; j++)
                if (tide_regex_search(k, names[j]) != 0) {
                    sc_fail(c, TIDE_ERR_UNSUPPORTED, sub, "pattern matches the declared property \"%.64s\"", names[j]);
                    break;
                }
            /* names already declared may not repeat as extras */
            cg_vec_push(c->g, &alts, seq(c, 4, lit(c, "\""), key, lit(c, "\":"), rule_of(c, ps, sub)));
        }
        extra = chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
        cg_vec_free(&alts);
    } else if (!json_is_false(addl)) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        int32_t key = np ? not_in(c, names, (int)np, 0, 0) : star(c, str_char(c));
        int32_t val = addl && !json_is_true(addl) ? rule_of(c, addl, sub) : any_value(c);
        extra = seq(c, 4, lit(c, "\""), key, lit(c, "\":"), val);
    }
    /* T_i: members i.. after something was written; S_i: nothing yet */
    int32_t tail = extra >= 0 ? star(c, seq(c, 2, lit(c, sep), extra)) : chk(c, cg_empty(c->g));
    int32_t first = extra >= 0 ? opt(c, seq(c, 2, extra, tail)) : chk(c, cg_empty(c->g));
    int32_t T = tail, S = first;
    for (size_t j = np; j-- > 0 && !c->err;) {
        /* T as a rule keeps the tree linear (S_j and T_j both use T_{j+1}) */
        int32_t tr = chk(c, cg_rule_new(c->g, path, strlen(path)));
        if (tr < 0) break;
        c->g->rules[tr].ast = T;
        int32_t Tc = chk(c, cg_call(c->g, tr));
        int32_t m = mem[j];
        int32_t nT = isreq[j] ? seq(c, 3, lit(c, sep), m, Tc) : seq(c, 2, opt(c, seq(c, 2, lit(c, sep), m)), Tc);
        int32_t nS = isreq[j] ? seq(c, 2, m, Tc) : alt(c, 2, seq(c, 2, m, Tc), S);
        T = nT;
        S = nS;
    }
    free(mem), free(isreq), free(names);
    return dsml ? S : seq(c, 3, lit(c, "{"), S, lit(c, "}"));
}

static int32_t objects(sc *c, const json_t *s, const char *path) { return members(c, s, path, 0); }

/* ---- tool calls (DSML, text/render.h) -------------------------------------- */


/* A string-only schema: a string="true" parameter, its value raw. */
static int raw_string(const json_t *ps) {
    if (!json_is_object(ps)) return 0;
    const json_t *t = json_object_get(ps, "type");
    const json_t *en = json_object_get(ps, "enum"), *cst = json_object_get(ps, "const");
    if (t ? !json_is_string(t) || strcmp(json_string_value(t), "string") : !en && !cst) return 0;
    if (cst && !json_is_string(cst)) return 0;
    if (en && !json_is_array(en)) return 0;
    for (size_t i = 0; i < json_array_size(en); i++)
        if (!json_is_string(json_array_get(en, i))) return 0;
    return 1;
}

/* A raw string value: the literal values of enum/const, a pattern or format
 * as raw text, else codepoints other than '<' (a raw value ends at the
 * first "</｜DSML｜"). */
static int32_t raw_value(sc *c, const json_t *ps, const char *path) {
    const json_t *en = json_object_get(ps, "enum"), *cst = json_object_get(ps, "const");
    if (en || cst) {
        cg_vec alts = {0};
        for (size_t i = 0; i < (cst ? 1 : json_array_size(en)); i++) {
            const json_t *v = cst ? cst : json_array_get(en, i);
            cg_vec_push(c->g, &alts, chk(c, cg_lit(c->g, json_string_value(v), json_string_length(v))));
        }
        int32_t x = chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
        cg_vec_free(&alts);
        return x;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)ps, k, v) if (!is_annotation(k) && strcmp(k, "type") && strcmp(k, "minLength") &&
                                                 strcmp(k, "maxLength") && strcmp(k, "pattern") && strcmp(k, "format"))
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "keyword \"%.64s\" on a string tool parameter is not supported", k);
    const json_t *pat = json_object_get(ps, "pattern"), *fmt = json_object_get(ps, "format");
    long long mn, mx;
    if (get_count(c, ps, "minLength", path, &mn) || get_count(c, ps, "maxLength", path, &mx)) return -1;
    if ((pat || fmt) && (mn >= 0 || mx >= 0 || (pat && fmt)))
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"pattern\"/\"format\" with other string keywords is not supported");
    if (pat || fmt) {
        const char *re = pat ? json_string_value(pat) : tide_format_regex(json_string_value(fmt) ? json_string_value(fmt) : "");
        if (!re) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "format \"%.64s\" is not supported", json_string_value(fmt));
        tide_status rst = {0};
        int32_t x = cg_regex(c->g, re, strlen(re), pat != NULL, 0, &rst);
        if (x < 0 && !c->err) {
            c->err = 1;
            tide_fail(c->st, rst.code ? rst.code : TIDE_ERR_INVALID, "%s/pattern: %s", path, rst.msg);
        }
        return x;
    }
    int32_t lt[2] = {'<', '<'};
    return chk(c, cg_rep(c->g, chk(c, cg_cpset_not(c->g, lt, 1, 0)), mn < 0 ? 0 : (int32_t)mn, mx < 0 ? -1 : (int32_t)mx));
}

static int dsml_name_ok(const char *k) { return *k && !strpbrk(k, "\"<>\n"); }

static int32_t dsml_param(sc *c, const char *k, const json_t *ps, const char *path) {
    if (!dsml_name_ok(k)) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "a parameter name with '\"', '<', '>' or a newline");
    int raw = raw_string(ps);
    char head[512];
    snprintf(head, sizeof head, TIDE_DSML_PARAM_OPEN "%s\" string=\"%s\">", k, raw ? "true" : "false");
    if (strlen(head) >= sizeof head - 1) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "parameter name too long");
    int32_t v = raw ? raw_value(c, ps, path) : rule_of(c, ps, path);
    return seq(c, 3, lit(c, head), v, lit(c, TIDE_DSML_PARAM_CLOSE));
}

/* Codepoints other than the given ones, one or more of the first before
 * one of the rest: ("<"+ [^<...]) with not = "<..." */
static int32_t not_cps(sc *c, const int32_t *cps, int n) {
    int32_t r[8];
    for (int i = 0; i < n && i < 4; i++) r[2 * i] = r[2 * i + 1] = cps[i];
    return chk(c, cg_cpset_not(c->g, r, n, 0));
}

/* A non-strict tool's parameters with tool_choice auto: any number of
 * parameters, any names, raw or JSON, any value without "</". */
static int32_t free_params(sc *c) {
    static const int32_t lt[] = {'<'}, lt_slash[] = {'<', '/'}, name_not[] = {'"', '<', '>', '\n'};
    int32_t val = star(c, alt(c, 2, not_cps(c, lt, 1), seq(c, 2, chk(c, cg_rep(c->g, lit(c, "<"), 1, -1)), not_cps(c, lt_slash, 2))));
    int32_t name = chk(c, cg_rep(c->g, not_cps(c, name_not, 4), 1, -1));
    int32_t one = seq(c, 6, lit(c, TIDE_DSML_PARAM_OPEN), name, lit(c, "\" string=\""), alt(c, 2, lit(c, "true"), lit(c, "false")),
                      lit(c, "\">"), seq(c, 2, val, lit(c, TIDE_DSML_PARAM_CLOSE)));
    return opt(c, seq(c, 2, one, star(c, seq(c, 2, lit(c, "\n"), one))));
}

/* Text before the calls with tool_choice auto: anything without "<｜"
 * (the DSML markers' start), so the calls block cannot begin inside it. */
static int32_t text_before_calls(sc *c) {
    static const int32_t lt[] = {'<'}, lt_bar[] = {'<', 0xFF5C};
    int32_t lts = chk(c, cg_rep(c->g, lit(c, "<"), 1, -1));
    return seq(c, 2, star(c, alt(c, 2, not_cps(c, lt, 1), seq(c, 2, lts, not_cps(c, lt_bar, 2)))), star(c, lit(c, "<")));
}

int32_t tide_schema_tool_calls(cg *g, json_t *spec, tide_status *st) {
    sc c = {g, spec, st, NULL, 0, 0, -1, -1, 0, json_array(), 0};
    if (!c.keep) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    g->max_depth = 128;
    const json_t *tools = json_object_get(spec, "tools");
    int parallel = json_is_true(json_object_get(spec, "parallel"));
    int is_auto = json_is_true(json_object_get(spec, "auto")); /* text, then maybe calls; only strict tools' schemas */
    cg_vec alts = {0};
    for (size_t i = 0; i < json_array_size(tools) && !c.err; i++) {
        const json_t *t = json_array_get(tools, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        const json_t *params = json_object_get(t, "parameters");
        char path[256];
        snprintf(path, sizeof path, "tools[%zu].parameters", i);
        if (!name || !dsml_name_ok(name)) {
            sc_fail(&c, TIDE_ERR_UNSUPPORTED, path, "a tool name with '\"', '<', '>' or a newline cannot be constrained");
            break;
        }
        /* the schema's own $refs resolve inside it */
        c.root = (json_t *)params;
        c.n_refs = 0;
        int32_t body;
        if (is_auto && !json_is_true(json_object_get(t, "strict"))) body = free_params(&c);
        else if (!params || json_is_true(params)) body = chk(&c, cg_empty(g));
        else {
            const json_t *ty = json_object_get(params, "type");
            if (!json_is_object(params) || (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "object")))) {
                sc_fail(&c, TIDE_ERR_UNSUPPORTED, path, "tool parameters must be an object schema to be constrained");
                break;
            }
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)params, k, v) if (!is_annotation(k) && strcmp(k, "type") && strcmp(k, "properties") &&
                                                           strcmp(k, "required") && strcmp(k, "additionalProperties") &&
                                                           strcmp(k, "$schema") && strcmp(k, "strict")) {
                sc_fail(&c, TIDE_ERR_UNSUPPORTED, path, "keyword \"%.64s\" at the top of tool parameters is not supported", k);
                break;
            }
            body = c.err ? -1 : members(&c, params, path, 1);
        }
        char head[512];
        snprintf(head, sizeof head, TIDE_DSML_INVOKE_OPEN "%s\">\n", name);
        /* an invoke with no parameters is its head and close with one newline between */
        int32_t inv = seq(&c, 4, lit(&c, head), body, lit(&c, "\n"), lit(&c, TIDE_DSML_INVOKE_CLOSE));
        cg_vec_push(g, &alts, inv);
    }
    int32_t x = -1;
    if (!c.err) {
        int32_t r = chk(&c, cg_rule_new(g, "invoke", 6));
        if (r >= 0) {
            g->rules[r].ast = chk(&c, cg_list(g, CA_ALT, alts.v, alts.n));
            int32_t one = chk(&c, cg_call(g, r));
            int32_t calls = parallel ? seq(&c, 2, one, star(&c, seq(&c, 2, lit(&c, "\n"), chk(&c, cg_call(g, r))))) : one;
            x = seq(&c, 3, lit(&c, TIDE_DSML_CALLS_OPEN "\n"), calls, lit(&c, "\n" TIDE_DSML_CALLS_CLOSE));
            if (is_auto) x = seq(&c, 2, text_before_calls(&c), opt(&c, x));
        }
    }
    cg_vec_free(&alts);
    free(c.refs);
    json_decref(c.keep);
    if (x < 0 && !c.err) *st = g->st;
    return c.err ? -1 : x;
}

static int32_t arrays(sc *c, const json_t *s, const char *path) {
    long long mn, mx;
    if (get_count(c, s, "minItems", path, &mn) || get_count(c, s, "maxItems", path, &mx)) return -1;
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *uniq = json_object_get(s, "uniqueItems");
    if (json_is_true(uniq)) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "keyword \"uniqueItems\": true is not supported");
    if (json_is_array(items)) { /* draft 4-2019 tuples: items [...] + additionalItems */
        if (prefix) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"items\" as an array together with \"prefixItems\"");
        prefix = items;
        items = json_object_get(s, "additionalItems");
    }
    if (prefix && !json_is_array(prefix)) return sc_fail(c, TIDE_ERR_INVALID, path, "\"prefixItems\" must be an array");
    long long p = prefix ? (long long)json_array_size(prefix) : 0;
    if (p > 1000) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "more than 1000 prefixItems");
    if (mn < 0) mn = 0;
    if (json_is_false(items) && (mx < 0 || mx > p)) mx = p;
    if (mx >= 0 && mn > mx) return chk(c, cg_none(c->g));
    int32_t it = -1;
    if (mx < 0 || mx > p) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/items", path);
        it = items && !json_is_true(items) ? rule_of(c, items, sub) : any_value(c);
    }
    /* A: what follows the first i0 elements (all further ones are `items`) */
    long long i0 = p > 0 ? p : 1;
    int32_t A;
    if (mx >= 0 && i0 >= mx) A = chk(c, cg_empty(c->g));
    else A = chk(c, cg_rep(c->g, seq(c, 2, lit(c, ","), it), (int32_t)(mn > i0 ? mn - i0 : 0), mx < 0 ? -1 : (int32_t)(mx - i0)));
    /* A now stands for "after max(p,1) elements"; build down to 1 */
    for (long long i = (p > 0 ? p : 1) - 1; i >= 1 && !c->err; i--) {
        /* after i elements, the next is element i+1 (prefix i if i < p) */
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/prefixItems/%lld", path, i);
        int32_t e = rule_of(c, json_array_get(prefix, (size_t)i), sub);
        int32_t step = seq(c, 3, lit(c, ","), e, A);
        A = i >= mn ? (mx >= 0 && i >= mx ? chk(c, cg_empty(c->g)) : opt(c, step)) : step;
    }
    int32_t e1;
    if (p > 0) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/prefixItems/0", path);
        e1 = rule_of(c, json_array_get(prefix, 0), sub);
    } else e1 = it;
    int32_t body;
    if (mx == 0 || e1 < 0) body = chk(c, cg_empty(c->g));
    else {
        body = seq(c, 2, e1, A);
        if (mn == 0) body = opt(c, body);
    }
    return seq(c, 3, lit(c, "["), body, lit(c, "]"));
}

/* allOf: the subschemas merged into one where their keywords do not clash. */
static int32_t all_of(sc *c, const json_t *s, const char *path);

static int32_t enum_values(sc *c, const json_t *vals, int types, const char *path) {
    cg_vec alts = {0};
    for (size_t i = 0; i < json_array_size(vals) && !c->err; i++) {
        const json_t *v = json_array_get(vals, i);
        if (!(json_types(v) & types)) continue;
        size_t n;
        char *t = tide_json_canon(v, &n);
        if (!t) return sc_fail(c, TIDE_ERR_NOMEM, path, "out of memory");
        cg_vec_push(c->g, &alts, chk(c, cg_lit(c->g, t, n)));
        free(t);
    }
    int32_t x = chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
    return x;
}

static int merge_into(sc *c, json_t *m, const json_t *s, const char *path);

static int32_t value(sc *c, const json_t *s, const char *path) {
    if (c->err) return -1;
    if (json_is_true(s)) return any_value(c);
    if (json_is_false(s)) return chk(c, cg_none(c->g));
    if (!json_is_object(s)) return sc_fail(c, TIDE_ERR_INVALID, path, "a schema must be an object or a boolean");
    if (++c->depth > SC_MAX_DEPTH) return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "schema nested over %d levels", SC_MAX_DEPTH);
    int32_t out = -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_annotation(k) && !is_handled(k)) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "keyword \"%.64s\" is not supported", k);
            goto done;
        }
    }
    const json_t *id = json_object_get(s, "$id");
    if (id && s != c->root) {
        sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "keyword \"$id\" is supported only at the root");
        goto done;
    }
    if (json_object_get(s, "allOf")) {
        out = all_of(c, s, path);
        goto done;
    }
    const json_t *r = json_object_get(s, "$ref");
    if (r) {
        if (!json_is_string(r)) {
            sc_fail(c, TIDE_ERR_INVALID, path, "\"$ref\" must be a string");
            goto done;
        }
        json_object_foreach((json_t *)s, k, v) if (!is_annotation(k) && strcmp(k, "$ref") && strcmp(k, "$id")) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "keyword \"%.64s\" beside \"$ref\" is not supported", k);
            goto done;
        }
        out = ref(c, json_string_value(r), path);
        goto done;
    }
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any || one) {
        const json_t *list = any ? any : one;
        if (any && one) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"anyOf\" together with \"oneOf\" is not supported");
            goto done;
        }
        if (!json_is_array(list) || !json_array_size(list)) {
            sc_fail(c, TIDE_ERR_INVALID, path, "\"%s\" must be a non-empty array", any ? "anyOf" : "oneOf");
            goto done;
        }
        int siblings = 0;
        json_object_foreach((json_t *)s, k, v) siblings |= !is_annotation(k) && strcmp(k, any ? "anyOf" : "oneOf") && strcmp(k, "$id");
        if (siblings) { /* base keywords beside the branches: merged into each branch */
            json_t *base = json_object(), *branches = json_array();
            json_array_append_new(c->keep, base);
            json_array_append_new(c->keep, branches);
            json_object_foreach((json_t *)s, k, v) if (strcmp(k, any ? "anyOf" : "oneOf")) json_object_set(base, k, v);
            for (size_t i = 0; i < json_array_size(list); i++) {
                json_t *m = json_object();
                json_array_append_new(branches, m);
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s/%zu", path, any ? "anyOf" : "oneOf", i);
                if (merge_into(c, m, base, sub) || merge_into(c, m, json_array_get(list, i), sub)) goto done;
            }
            list = branches;
        }
        if (one && tide_schema_branches_disjoint(list) != 1) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path,
                    "\"oneOf\" whose branches may overlap is not supported (it equals \"anyOf\" only when they are "
                    "disjoint: give each branch a different type or const/enum values)");
            goto done;
        }
        cg_vec alts = {0};
        for (size_t i = 0; i < json_array_size(list) && !c->err; i++) {
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s/%zu", path, any ? "anyOf" : "oneOf", i);
            cg_vec_push(c->g, &alts, value(c, json_array_get(list, i), sub));
        }
        out = c->err ? -1 : chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
        cg_vec_free(&alts);
        goto done;
    }
    int types = T_ALL;
    const json_t *t = json_object_get(s, "type");
    if (t) {
        types = 0;
        if (json_is_string(t)) types = type_bit(json_string_value(t));
        else if (json_is_array(t))
            for (size_t i = 0; i < json_array_size(t); i++) {
                const json_t *e = json_array_get(t, i);
                int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
                if (!b) {
                    types = 0;
                    break;
                }
                types |= b;
            }
        if (!types) {
            sc_fail(c, TIDE_ERR_INVALID, path, "\"type\" must be a type name or an array of them");
            goto done;
        }
        if (types & T_NUM) types &= ~T_INT;
    }
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst || en) {
        json_t *vals = cst ? json_pack("[O]", cst) : json_incref((json_t *)en);
        if (!json_is_array(vals)) {
            json_decref(vals);
            sc_fail(c, TIDE_ERR_INVALID, path, "\"enum\" must be an array");
            goto done;
        }
        if (cst && en) {
            int found = 0;
            for (size_t i = 0; i < json_array_size(en); i++) found |= json_equal(json_array_get(en, i), cst);
            if (!found) json_array_clear(vals);
        }
        int tt = types;
        if (tt & T_NUM) tt |= T_INT;
        out = enum_values(c, vals, tt & T_NUM ? tt : tt, path);
        json_decref(vals);
        goto done;
    }
    cg_vec alts = {0};
    if (types & T_OBJ) cg_vec_push(c->g, &alts, objects(c, s, path));
    if (types & T_ARR) cg_vec_push(c->g, &alts, arrays(c, s, path));
    if (types & T_STR) cg_vec_push(c->g, &alts, strings(c, s, path));
    if (types & T_NUM) cg_vec_push(c->g, &alts, numbers(c, s, 0, path));
    if (types & T_INT) cg_vec_push(c->g, &alts, numbers(c, s, 1, path));
    if (types & T_BOOL) cg_vec_push(c->g, &alts, alt(c, 2, lit(c, "true"), lit(c, "false")));
    if (types & T_NULL) cg_vec_push(c->g, &alts, lit(c, "null"));
    out = c->err ? -1 : chk(c, cg_list(c->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
done:
    c->depth--;
    return c->err ? -1 : out;
}

/* ---- allOf ------------------------------------------------------------------ */

static const json_t *deref(sc *c, const json_t *s, const char *path) {
    for (int i = 0; i < 16 && json_is_object(s) && json_object_get(s, "$ref"); i++) {
        if (json_object_size(s) != 1) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"allOf\" over a \"$ref\" with sibling keywords is not supported");
            return NULL;
        }
        const json_t *t = resolve(c, json_string_value(json_object_get(s, "$ref")) ? json_string_value(json_object_get(s, "$ref")) : "");
        if (!t) {
            sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "$ref does not point inside this schema");
            return NULL;
        }
        s = t;
    }
    return s;
}

static int merge_types(json_t *m, const json_t *t) {
    int a = 0, b = 0;
    const json_t *mt = json_object_get(m, "type");
    for (int pass = 0; pass < 2; pass++) {
        const json_t *x = pass ? t : mt;
        int *o = pass ? &b : &a;
        if (json_is_string(x)) *o = type_bit(json_string_value(x));
        else for (size_t i = 0; i < json_array_size(x); i++) *o |= type_bit(json_string_value(json_array_get(x, i)) ? json_string_value(json_array_get(x, i)) : "");
        if (*o & T_NUM) *o |= T_INT;
    }
    int both = a & b;
    if ((a & T_NUM) && !(b & T_NUM)) both &= ~T_NUM;
    if ((b & T_NUM) && !(a & T_NUM)) both &= ~T_NUM;
    json_t *arr = json_array();
    static const char *const nm[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    for (int i = 0; i < 7; i++)
        if (both & (1 << i)) json_array_append_new(arr, json_string(nm[i]));
    if (!json_array_size(arr)) json_array_append_new(arr, json_string("null")), json_object_set_new(m, "enum", json_array());
    json_object_set_new(m, "type", arr);
    return 0;
}

static int merge_into(sc *c, json_t *m, const json_t *s, const char *path) {
    s = deref(c, s, path);
    if (!s) return -1;
    if (json_is_true(s)) return 0;
    if (json_is_false(s)) {
        json_object_set_new(m, "enum", json_array());
        return 0;
    }
    if (!json_is_object(s)) return sc_fail(c, TIDE_ERR_INVALID, path, "allOf entries must be schemas");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(k) || !strcmp(k, "$id")) continue;
        if (!strcmp(k, "allOf")) {
            for (size_t i = 0; i < json_array_size(v); i++)
                if (merge_into(c, m, json_array_get(v, i), path)) return -1;
            continue;
        }
        json_t *have = json_object_get(m, k);
        if (!have) {
            json_object_set(m, k, v);
            continue;
        }
        if (json_equal(have, v)) continue;
        if (!strcmp(k, "type")) merge_types(m, v);
        else if (!strcmp(k, "required")) {
            for (size_t i = 0; i < json_array_size(v); i++) json_array_append(have, json_array_get(v, i));
        } else if (!strcmp(k, "properties") && json_is_object(v) && json_is_object(have)) {
            if (json_object_get(m, "additionalProperties") || json_object_get(s, "additionalProperties"))
                return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"allOf\" over \"properties\" with \"additionalProperties\" is not supported");
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *h = json_object_get(have, pk);
                if (!h) json_object_set(have, pk, pv);
                else if (!json_equal(h, pv)) json_object_set_new(have, pk, json_pack("{s:[O,O]}", "allOf", h, pv));
            }
        } else if (!strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "minLength") ||
                   !strcmp(k, "minItems")) {
            if (json_number_value(v) > json_number_value(have)) json_object_set(m, k, v);
        } else if (!strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum") || !strcmp(k, "maxLength") ||
                   !strcmp(k, "maxItems")) {
            if (json_number_value(v) < json_number_value(have)) json_object_set(m, k, v);
        } else if (!strcmp(k, "enum") && json_is_array(v) && json_is_array(have)) {
            json_t *keep = json_array();
            for (size_t i = 0; i < json_array_size(have); i++)
                for (size_t j = 0; j < json_array_size(v); j++)
                    if (json_equal(json_array_get(have, i), json_array_get(v, j))) {
                        json_array_append(keep, json_array_get(have, i));
                        break;
                    }
            json_object_set_new(m, k, keep);
        } else if (!strcmp(k, "const")) {
            json_object_set_new(m, "enum", json_array()); /* two different consts: nothing */
        } else
            return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"allOf\" cannot intersect two different \"%.64s\" keywords", k);
    }
    return 0;
}

static int32_t all_of(sc *c, const json_t *s, const char *path) {
    const json_t *list = json_object_get(s, "allOf");
    if (!json_is_array(list) || !json_array_size(list))
        return sc_fail(c, TIDE_ERR_INVALID, path, "\"allOf\" must be a non-empty array");
    json_t *m = json_object();
    if (!m) return sc_fail(c, TIDE_ERR_NOMEM, path, "out of memory");
    json_array_append_new(c->keep, m); /* lives as long as the compiler (refs point into it) */
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/allOf", path);
    if (merge_into(c, m, s, sub)) return -1;
    json_object_del(m, "allOf");
    if (json_object_get(m, "anyOf") || json_object_get(m, "oneOf"))
        return sc_fail(c, TIDE_ERR_UNSUPPORTED, path, "\"allOf\" combined with \"anyOf\"/\"oneOf\" is not supported");
    return value(c, m, path);
}

/* ---- oneOf disjointness ------------------------------------------------------- */

static int branch_types(const json_t *b) {
    if (!json_is_object(b)) return T_ALL | T_INT;
    const json_t *en = json_object_get(b, "enum"), *cst = json_object_get(b, "const");
    (void)en;
    (void)cst;
    const json_t *t = json_object_get(b, "type");
    int x = 0;
    if (!t) return T_ALL | T_INT;
    if (json_is_string(t)) x = type_bit(json_string_value(t));
    else for (size_t i = 0; i < json_array_size(t); i++) {
        const char *n = json_string_value(json_array_get(t, i));
        x |= n ? type_bit(n) : 0;
    }
    if (x & T_NUM) x |= T_INT;
    if (x & T_INT) x |= T_NUM; /* integers are numbers: overlap */
    return x;
}

/* Values of a const/enum branch, or NULL. */
static json_t *branch_values(const json_t *b) {
    if (!json_is_object(b)) return NULL;
    const json_t *cst = json_object_get(b, "const");
    if (cst) return json_pack("[O]", cst);
    const json_t *en = json_object_get(b, "enum");
    return json_is_array(en) ? json_incref((json_t *)en) : NULL;
}

/* Whether a value could satisfy both lists of values (const/enum). */
static int values_meet(const json_t *va, const json_t *vb) {
    for (size_t x = 0; x < json_array_size(va); x++)
        for (size_t y = 0; y < json_array_size(vb); y++)
            if (json_equal(json_array_get(va, x), json_array_get(vb, y))) return 1;
    return 0;
}

static int is_required(const json_t *b, const char *k) {
    const json_t *req = json_object_get(b, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), k)) return 1;
    return 0;
}

/* Two object-only branches told apart by a discriminator: a property both
 * require, with const/enum values no value satisfies in both. */
static int discriminated(const json_t *a, const json_t *b) {
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const char *k;
    json_t *sa;
    json_object_foreach((json_t *)pa, k, sa) {
        const json_t *sb = json_object_get(pb, k);
        if (!sb || !is_required(a, k) || !is_required(b, k)) continue;
        json_t *va = branch_values(sa), *vb = branch_values(sb);
        int apart = va && vb && !values_meet(va, vb);
        json_decref(va);
        json_decref(vb);
        if (apart) return 1;
    }
    return 0;
}

int tide_schema_branches_disjoint(const json_t *list) {
    size_t n = json_array_size(list);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            const json_t *a = json_array_get(list, i), *b = json_array_get(list, j);
            if (!(branch_types(a) & branch_types(b))) continue;
            json_t *va = branch_values(a), *vb = branch_values(b);
            int ok = (va && vb && !values_meet(va, vb)) ||
                     (branch_types(a) == T_OBJ && branch_types(b) == T_OBJ && discriminated(a, b));
            json_decref(va);
            json_decref(vb);
            if (!ok) return 0;
        }
    return 1;
}

int32_t tide_schema_compile(cg *g, json_t *schema, tide_status *st) {
    sc c = {g, schema, st, NULL, 0, 0, -1, -1, 0, json_array(), 0};
    if (!c.keep) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    g->max_depth = 128;
    int32_t x = value(&c, schema, "#");
    free(c.refs);
    json_decref(c.keep);
    if (x < 0 && !c.err) *st = g->st;
    return x;
}
