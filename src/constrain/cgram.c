/* The grammar form: tree builders and the lowering to a byte-level NFA
 * (cgram.h). Lowering is Thompson's construction written as "extend the
 * automaton from state `from`, return the state reached", so a tree node
 * never needs its own entry state. */
#include "constrain/cgram.h"

#include <stdlib.h>
#include <string.h>

void cg_init(cg *g) {
    memset(g, 0, sizeof *g);
    g->root = -1;
    g->max_depth = 64;
}

void cg_free(cg *g) {
    for (int32_t i = 0; i < g->n_rules; i++) free(g->rules[i].name);
    free(g->ast);
    free(g->kids);
    free(g->cps);
    free(g->rules);
    free(g->states);
    free(g->edges);
    memset(g, 0, sizeof *g);
}

/* Grows *p (elements of size sz) to hold n + 1; 0 ok. */
static int grow(cg *g, void **p, int32_t *cap, int32_t n, size_t sz, int32_t limit, const char *what) {
    if (g->failed) return -1;
    if (n >= limit) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_NOMEM, "constraint too large: more than %d %s", (int)limit, what);
        return -1;
    }
    if (n < *cap) return 0;
    int32_t c = *cap ? *cap * 2 : 64;
    if (c > limit) c = limit;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

int cg_vec_push(cg *g, cg_vec *x, int32_t v) {
    if (grow(g, (void **)&x->v, &x->cap, x->n, sizeof *x->v, INT32_MAX / 8, "list items")) return -1;
    x->v[x->n++] = v;
    return 0;
}

void cg_vec_free(cg_vec *x) {
    free(x->v);
    memset(x, 0, sizeof *x);
}

static int32_t node(cg *g, cg_kind k, int32_t a, int32_t b) {
    if (grow(g, (void **)&g->ast, &g->cap_ast, g->n_ast, sizeof *g->ast, CG_MAX_AST, "grammar nodes")) return -1;
    g->ast[g->n_ast] = (cg_ast){(uint8_t)k, 0, a, b, 0, 0};
    return g->n_ast++;
}

int32_t cg_empty(cg *g) { return node(g, CA_EMPTY, 0, 0); }
int32_t cg_none(cg *g) { return node(g, CA_NONE, 0, 0); }
int32_t cg_byte(cg *g, uint8_t lo, uint8_t hi) { return node(g, CA_BYTES, lo, hi); }
int32_t cg_call(cg *g, int32_t rule) { return node(g, CA_CALL, rule, 0); }

int32_t cg_list(cg *g, cg_kind k, const int32_t *kids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (kids[i] < 0) return -1;
    if (n == 0) return k == CA_CAT ? cg_empty(g) : cg_none(g);
    if (n == 1) return kids[0];
    int32_t x = node(g, k, 0, 0);
    if (x < 0) return -1;
    int32_t first = g->n_kids;
    for (int32_t i = 0; i < n; i++) {
        if (grow(g, (void **)&g->kids, &g->cap_kids, g->n_kids, sizeof *g->kids, CG_MAX_AST * 2, "grammar links"))
            return -1;
        g->kids[g->n_kids++] = kids[i];
    }
    g->ast[x].first = first;
    g->ast[x].n = n;
    return x;
}

int32_t cg_cat2(cg *g, int32_t a, int32_t b) {
    int32_t k[2] = {a, b};
    return cg_list(g, CA_CAT, k, 2);
}

int32_t cg_alt2(cg *g, int32_t a, int32_t b) {
    int32_t k[2] = {a, b};
    return cg_list(g, CA_ALT, k, 2);
}

int32_t cg_lit(cg *g, const char *s, size_t n) {
    if (n == 0) return cg_empty(g);
    cg_vec v = {0};
    for (size_t i = 0; i < n; i++)
        if (cg_vec_push(g, &v, cg_byte(g, (uint8_t)s[i], (uint8_t)s[i]))) break;
    int32_t x = g->failed ? -1 : cg_list(g, CA_CAT, v.v, v.n);
    cg_vec_free(&v);
    return x;
}

int32_t cg_rep(cg *g, int32_t kid, int32_t min, int32_t max) {
    if (kid < 0) return -1;
    if (min > CG_MAX_REPEAT || max > CG_MAX_REPEAT) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_UNSUPPORTED, "repetition bound %d is over the limit of %d",
                  (int)(min > max ? min : max), CG_MAX_REPEAT);
        return -1;
    }
    if (max >= 0 && max < min) return cg_none(g);
    if (min == 1 && max == 1) return kid;
    if (max == 0) return cg_empty(g);
    int32_t x = node(g, CA_REP, min, max);
    if (x < 0) return -1;
    if (grow(g, (void **)&g->kids, &g->cap_kids, g->n_kids, sizeof *g->kids, CG_MAX_AST * 2, "grammar links"))
        return -1;
    g->ast[x].first = g->n_kids;
    g->ast[x].n = 1;
    g->kids[g->n_kids++] = kid;
    return x;
}

static int cmp_pair(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* A malloc'd copy of the ranges sorted and merged (clipped to valid
 * codepoints); *m pairs. NULL (g failed) when out of memory. */
static int32_t *merged(cg *g, const int32_t *ranges, int32_t n_pairs, int32_t *m_out) {
    int32_t *tmp = malloc((size_t)(n_pairs ? n_pairs : 1) * 2 * sizeof *tmp);
    if (!tmp) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
        return NULL;
    }
    if (n_pairs > 0) memcpy(tmp, ranges, (size_t)n_pairs * 2 * sizeof *tmp);
    qsort(tmp, (size_t)n_pairs, 2 * sizeof *tmp, cmp_pair);
    int32_t m = 0;
    for (int32_t i = 0; i < n_pairs; i++) {
        int32_t lo = tmp[2 * i], hi = tmp[2 * i + 1];
        if (lo < 0) lo = 0;
        if (hi > CG_CP_MAX) hi = CG_CP_MAX;
        if (lo > hi) continue;
        if (m > 0 && lo <= tmp[2 * m - 1] + 1) {
            if (hi > tmp[2 * m - 1]) tmp[2 * m - 1] = hi;
        } else {
            tmp[2 * m] = lo;
            tmp[2 * m + 1] = hi;
            m++;
        }
    }
    *m_out = m;
    return tmp;
}

int cg_ranges_not(cg *g, const int32_t *ranges, int32_t n_pairs, cg_vec *out) {
    if (g->failed) return -1;
    int32_t m;
    int32_t *r = merged(g, ranges, n_pairs, &m);
    if (!r) return -1;
    int32_t lo = 0;
    int rc = 0;
    for (int32_t i = 0; i < m && rc == 0; i++) {
        if (r[2 * i] > lo) rc = cg_vec_push(g, out, lo) || cg_vec_push(g, out, r[2 * i] - 1);
        lo = r[2 * i + 1] + 1;
    }
    if (rc == 0 && lo <= CG_CP_MAX) rc = cg_vec_push(g, out, lo) || cg_vec_push(g, out, CG_CP_MAX);
    free(r);
    return rc ? -1 : 0;
}

int32_t cg_cpset_not(cg *g, const int32_t *ranges, int32_t n_pairs, int jstr) {
    cg_vec v = {0};
    int32_t x = cg_ranges_not(g, ranges, n_pairs, &v) ? -1 : cg_cpset(g, v.v, v.n / 2, jstr);
    cg_vec_free(&v);
    return x;
}

int32_t cg_cpset(cg *g, const int32_t *ranges, int32_t n_pairs, int jstr) {
    if (g->failed) return -1;
    int32_t m;
    int32_t *tmp = merged(g, ranges, n_pairs, &m);
    if (!tmp) return -1;
    int32_t x = m == 0 ? cg_none(g) : node(g, CA_CPSET, 0, 0);
    if (x >= 0 && m > 0) {
        g->ast[x].jstr = (uint8_t)(jstr != 0);
        g->ast[x].first = g->n_cps;
        g->ast[x].n = m;
        for (int32_t i = 0; i < 2 * m; i++) {
            if (grow(g, (void **)&g->cps, &g->cap_cps, g->n_cps, sizeof *g->cps, CG_MAX_AST * 4, "class ranges")) {
                x = -1;
                break;
            }
            g->cps[g->n_cps++] = tmp[i];
        }
    }
    free(tmp);
    return x;
}

int32_t cg_rule_new(cg *g, const char *name, size_t name_len) {
    if (grow(g, (void **)&g->rules, &g->cap_rules, g->n_rules, sizeof *g->rules, CG_MAX_RULES, "rules")) return -1;
    char *nm = malloc(name_len + 1);
    if (!nm) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
        return -1;
    }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    g->rules[g->n_rules] = (cg_rule){-1, -1, -1, nm};
    return g->n_rules++;
}

/* ---- lowering ------------------------------------------------------------ */

/* edges are collected with their source in `to` of a parallel array, then
 * grouped by source at the end */
typedef struct lower_ctx {
    cg *g;
    int32_t *src; int32_t cap_src;
} lower_ctx;

static int32_t new_state(cg *g) {
    if (grow(g, (void **)&g->states, &g->cap_states, g->n_states, sizeof *g->states, CG_MAX_STATES, "automaton states"))
        return -1;
    g->states[g->n_states] = (cg_state){0, 0};
    return g->n_states++;
}

static int add_edge(lower_ctx *c, int32_t from, uint8_t kind, uint8_t lo, uint8_t hi, int32_t to, int32_t rule) {
    cg *g = c->g;
    if (grow(g, (void **)&g->edges, &g->cap_edges, g->n_edges, sizeof *g->edges, CG_MAX_STATES * 2, "automaton edges"))
        return -1;
    int32_t cap = c->cap_src;
    if (grow(g, (void **)&c->src, &cap, g->n_edges, sizeof *c->src, CG_MAX_STATES * 2, "automaton edges")) return -1;
    c->cap_src = cap;
    c->src[g->n_edges] = from;
    g->edges[g->n_edges++] = (cg_edge){kind, lo, hi, to, rule};
    return 0;
}

static int utf8_enc(int32_t cp, uint8_t *b) {
    if (cp < 0x80) { b[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { b[0] = (uint8_t)(0xC0 | (cp >> 6)); b[1] = (uint8_t)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | (cp >> 12)); b[1] = (uint8_t)(0x80 | ((cp >> 6) & 63)); b[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | (cp >> 18)); b[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    b[2] = (uint8_t)(0x80 | ((cp >> 6) & 63)); b[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

/* One range of codepoints of the same UTF-8 length whose continuation
 * bytes each span a full aligned block: a chain of byte ranges from->to. */
static int utf8_split(lower_ctx *c, int32_t lo, int32_t hi, int32_t from, int32_t to) {
    uint8_t a[4], b[4];
    int n = utf8_enc(lo, a);
    for (int i = 1; i < n; i++) {
        int32_t m = (1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_split(c, lo, lo | m, from, to) || utf8_split(c, (lo | m) + 1, hi, from, to) ? -1 : 0;
            if ((hi & m) != m)
                return utf8_split(c, lo, (hi & ~m) - 1, from, to) || utf8_split(c, hi & ~m, hi, from, to) ? -1 : 0;
        }
    }
    utf8_enc(hi, b);
    int32_t s = from;
    for (int i = 0; i < n; i++) {
        int32_t t = i == n - 1 ? to : new_state(c->g);
        if (t < 0 || add_edge(c, s, CE_BYTE, a[i], b[i], t, 0)) return -1;
        s = t;
    }
    return 0;
}

static int cp_range(lower_ctx *c, int32_t lo, int32_t hi, int32_t from, int32_t to) {
    static const int32_t cut[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (int k = 0; k < 4; k++) {
        int32_t l = lo > cut[k][0] ? lo : cut[k][0], h = hi < cut[k][1] ? hi : cut[k][1];
        if (l > h) continue;
        if (k == 2) { /* no surrogates in UTF-8 */
            if (l < 0xD800 && utf8_split(c, l, h < 0xD7FF ? h : 0xD7FF, from, to)) return -1;
            if (h > 0xDFFF && utf8_split(c, l > 0xE000 ? l : 0xE000, h, from, to)) return -1;
            continue;
        }
        if (utf8_split(c, l, h, from, to)) return -1;
    }
    return 0;
}

static int lit_path(lower_ctx *c, const char *s, int32_t from, int32_t to) {
    size_t n = strlen(s);
    int32_t cur = from;
    for (size_t i = 0; i < n; i++) {
        int32_t t = i + 1 == n ? to : new_state(c->g);
        if (t < 0 || add_edge(c, cur, CE_BYTE, (uint8_t)s[i], (uint8_t)s[i], t, 0)) return -1;
        cur = t;
    }
    return 0;
}

/* The escape JSON.stringify writes for a codepoint that JSON needs escaped. */
static void json_escape(int32_t cp, char *out) {
    switch (cp) {
    case '"': strcpy(out, "\\\""); return;
    case '\\': strcpy(out, "\\\\"); return;
    case '\b': strcpy(out, "\\b"); return;
    case '\f': strcpy(out, "\\f"); return;
    case '\n': strcpy(out, "\\n"); return;
    case '\r': strcpy(out, "\\r"); return;
    case '\t': strcpy(out, "\\t"); return;
    default: {
        static const char hx[] = "0123456789abcdef";
        out[0] = '\\'; out[1] = 'u'; out[2] = '0'; out[3] = '0';
        out[4] = hx[(cp >> 4) & 15]; out[5] = hx[cp & 15]; out[6] = 0;
    }
    }
}

static int lower_cpset(lower_ctx *c, const cg_ast *x, int32_t from, int32_t to) {
    const int32_t *r = c->g->cps + x->first;
    for (int32_t i = 0; i < x->n; i++) {
        int32_t lo = r[2 * i], hi = r[2 * i + 1];
        if (!x->jstr) {
            if (cp_range(c, lo, hi, from, to)) return -1;
            continue;
        }
        /* raw codepoints: all but controls, '"' and '\\' */
        int32_t cuts[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, CG_CP_MAX}};
        for (int k = 0; k < 3; k++) {
            int32_t l = lo > cuts[k][0] ? lo : cuts[k][0], h = hi < cuts[k][1] ? hi : cuts[k][1];
            if (l <= h && cp_range(c, l, h, from, to)) return -1;
        }
        for (int32_t cp = lo; cp <= hi && cp <= 0x5C; cp++) {
            if (!(cp < 0x20 || cp == '"' || cp == '\\')) continue;
            char e[8];
            json_escape(cp, e);
            if (lit_path(c, e, from, to)) return -1;
        }
    }
    return 0;
}

/* Extends the automaton with tree x from state `from`; returns the exit
 * state or -1. depth guards the recursion on the tree. */
static int32_t lower(lower_ctx *c, int32_t xi, int32_t from, int depth) {
    cg *g = c->g;
    if (depth > 2000) {
        g->failed = 1;
        tide_fail(&g->st, TIDE_ERR_UNSUPPORTED, "constraint nested too deeply (over 2000 levels)");
        return -1;
    }
    const cg_ast x = g->ast[xi];
    switch (x.k) {
    case CA_EMPTY: return from;
    case CA_NONE: return new_state(g); /* unreachable exit */
    case CA_BYTES: {
        int32_t t = new_state(g);
        if (t < 0 || add_edge(c, from, CE_BYTE, (uint8_t)x.a, (uint8_t)x.b, t, 0)) return -1;
        return t;
    }
    case CA_CPSET: {
        int32_t t = new_state(g);
        if (t < 0 || lower_cpset(c, &g->ast[xi], from, t)) return -1;
        return t;
    }
    case CA_CALL: {
        int32_t t = new_state(g);
        if (t < 0 || add_edge(c, from, CE_CALL, 0, 0, t, x.a)) return -1;
        return t;
    }
    case CA_CAT: {
        int32_t cur = from;
        for (int32_t i = 0; i < x.n && cur >= 0; i++) cur = lower(c, g->kids[x.first + i], cur, depth + 1);
        return cur;
    }
    case CA_ALT: {
        int32_t t = new_state(g);
        if (t < 0) return -1;
        for (int32_t i = 0; i < x.n; i++) {
            /* a private entry per branch keeps loops of one branch out of the others */
            int32_t s = new_state(g);
            if (s < 0 || add_edge(c, from, CE_EPS, 0, 0, s, 0)) return -1;
            int32_t e = lower(c, g->kids[x.first + i], s, depth + 1);
            if (e < 0 || add_edge(c, e, CE_EPS, 0, 0, t, 0)) return -1;
        }
        return t;
    }
    case CA_REP: {
        int32_t kid = g->kids[x.first], cur = from;
        for (int32_t i = 0; i < x.a; i++) {
            int32_t s = new_state(g);
            if (s < 0 || add_edge(c, cur, CE_EPS, 0, 0, s, 0)) return -1;
            cur = lower(c, kid, s, depth + 1);
            if (cur < 0) return -1;
        }
        if (x.b < 0) { /* star: a private loop state */
            int32_t loop = new_state(g);
            if (loop < 0 || add_edge(c, cur, CE_EPS, 0, 0, loop, 0)) return -1;
            int32_t s = new_state(g);
            if (s < 0 || add_edge(c, loop, CE_EPS, 0, 0, s, 0)) return -1;
            int32_t e = lower(c, kid, s, depth + 1);
            if (e < 0 || add_edge(c, e, CE_EPS, 0, 0, loop, 0)) return -1;
            int32_t out = new_state(g);
            if (out < 0 || add_edge(c, loop, CE_EPS, 0, 0, out, 0)) return -1;
            return out;
        }
        int32_t end = new_state(g);
        if (end < 0) return -1;
        for (int32_t i = x.a; i < x.b; i++) {
            if (add_edge(c, cur, CE_EPS, 0, 0, end, 0)) return -1;
            int32_t s = new_state(g);
            if (s < 0 || add_edge(c, cur, CE_EPS, 0, 0, s, 0)) return -1;
            cur = lower(c, kid, s, depth + 1);
            if (cur < 0) return -1;
        }
        if (add_edge(c, cur, CE_EPS, 0, 0, end, 0)) return -1;
        return end;
    }
    }
    return -1;
}

/* ---- left recursion ------------------------------------------------------ */

/* Whether tree x can match "" (nullable rules in nul[]); when lead is set,
 * marks in lead[] the rules x can call before consuming a byte. */
static int nullable(const cg *g, int32_t xi, const uint8_t *nul, uint8_t *lead, int depth) {
    if (depth > 2000) return 0;
    const cg_ast *x = &g->ast[xi];
    switch (x->k) {
    case CA_EMPTY: return 1;
    case CA_NONE: case CA_BYTES: case CA_CPSET: return 0;
    case CA_CALL:
        if (lead) lead[x->a] = 1;
        return nul[x->a];
    case CA_CAT:
        for (int32_t i = 0; i < x->n; i++)
            if (!nullable(g, g->kids[x->first + i], nul, lead, depth + 1)) return 0;
        return 1;
    case CA_ALT: {
        int any = 0;
        for (int32_t i = 0; i < x->n; i++) any |= nullable(g, g->kids[x->first + i], nul, lead, depth + 1);
        return any;
    }
    case CA_REP: return nullable(g, g->kids[x->first], nul, lead, depth + 1) || x->a == 0;
    }
    return 0;
}

/* Refuses a rule that can call itself before consuming a byte: the matcher
 * would only cut it at its depth limit. */
static int left_recursion(cg *g, tide_status *st) {
    int32_t n = g->n_rules;
    uint8_t *nul = calloc((size_t)n, 1), *lead = calloc((size_t)n * (size_t)n, 1), *seen = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * sizeof *stack);
    int rc = 0;
    if (!nul || !lead || !seen || !stack) {
        rc = tide_fail(st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
        goto done;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < n; r++)
            if (!nul[r] && g->rules[r].ast >= 0 && nullable(g, g->rules[r].ast, nul, NULL, 0)) nul[r] = changed = 1;
    }
    for (int32_t r = 0; r < n; r++)
        if (g->rules[r].ast >= 0) nullable(g, g->rules[r].ast, nul, lead + (size_t)r * n, 0);
    for (int32_t r = 0; r < n && rc == 0; r++) { /* can r reach r through lead edges? */
        memset(seen, 0, (size_t)n);
        int32_t top = 0;
        for (int32_t t = 0; t < n; t++)
            if (lead[(size_t)r * n + t] && !seen[t]) seen[t] = 1, stack[top++] = t;
        while (top > 0 && !seen[r]) {
            int32_t u = stack[--top];
            for (int32_t t = 0; t < n; t++)
                if (lead[(size_t)u * n + t] && !seen[t]) seen[t] = 1, stack[top++] = t;
        }
        if (seen[r])
            rc = tide_fail(st, TIDE_ERR_UNSUPPORTED,
                           "rule \"%s\" can reach itself without consuming input (left recursion is not supported)",
                           g->rules[r].name);
    }
done:
    free(nul), free(lead), free(seen), free(stack);
    return rc;
}

int cg_finish(cg *g, tide_status *st) {
    if (g->failed) {
        if (st) *st = g->st;
        return -1;
    }
    if (g->root < 0 || g->root >= g->n_rules) return tide_fail(st, TIDE_ERR_INTERNAL, "constraint: no start rule");
    for (int32_t r = 0; r < g->n_rules; r++)
        if (g->rules[r].ast < 0)
            return tide_fail(st, TIDE_ERR_INVALID, "rule \"%s\" is used but never defined", g->rules[r].name);
    if (g->n_rules > 4096)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "constraint has %d rules, over the limit of 4096", (int)g->n_rules);
    if (left_recursion(g, st) != 0) return -1;
    lower_ctx c = {g, NULL, 0};
    for (int32_t r = 0; r < g->n_rules && !g->failed; r++) {
        if (g->rules[r].ast < 0) {
            free(c.src);
            return tide_fail(st, TIDE_ERR_INVALID, "rule \"%s\" is used but never defined", g->rules[r].name);
        }
        int32_t s = new_state(g);
        if (s < 0) break;
        /* the accepting state must not be the entry: entry edges would loop back */
        int32_t e = lower(&c, g->rules[r].ast, s, 0);
        if (e < 0) break;
        int32_t acc = new_state(g);
        if (acc < 0 || add_edge(&c, e, CE_EPS, 0, 0, acc, 0)) break;
        g->rules[r].start = s;
        g->rules[r].accept = acc;
    }
    for (int32_t i = 0; i < g->n_edges && !g->failed; i++)
        if (g->edges[i].kind == CE_CALL && (g->edges[i].rule < 0 || g->edges[i].rule >= g->n_rules)) {
            g->failed = 1;
            tide_fail(&g->st, TIDE_ERR_INTERNAL, "constraint: call of rule %d", (int)g->edges[i].rule);
        }
    if (g->failed) {
        free(c.src);
        if (st) *st = g->st;
        return -1;
    }
    /* group the edges by source state (counting sort) */
    cg_edge *sorted = malloc((size_t)(g->n_edges ? g->n_edges : 1) * sizeof *sorted);
    if (!sorted) {
        free(c.src);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
    }
    for (int32_t i = 0; i < g->n_states; i++) g->states[i].n = 0;
    for (int32_t i = 0; i < g->n_edges; i++) g->states[c.src[i]].n++;
    int32_t acc = 0;
    for (int32_t i = 0; i < g->n_states; i++) {
        g->states[i].first = acc;
        acc += g->states[i].n;
        g->states[i].n = 0;
    }
    for (int32_t i = 0; i < g->n_edges; i++) {
        cg_state *s = &g->states[c.src[i]];
        sorted[s->first + s->n++] = g->edges[i];
    }
    free(g->edges);
    g->edges = sorted;
    g->cap_edges = g->n_edges;
    free(c.src);
    return 0;
}
