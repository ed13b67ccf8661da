/* Lark-style EBNF (the syntax of the lark parser's grammars, as OpenAI's
 * "lark" grammar format and vLLM take it) to grammar rules (cgram.h), the
 * same core GBNF compiles to:
 *
 *   name: alternatives             a rule (lower case); ?name and !name too
 *   NAME: alternatives             a terminal (upper case); may not use rules
 *   name.2: ...                    a priority (read, no effect on the language)
 *   | more alternatives            a definition goes on where a line starts with |
 *   "text"  "text"i                a literal (Python escapes), i: any case
 *   "a".."z"                       a range of characters
 *   /regex/                        an ECMAScript regex (flags refused)
 *   ( ... )  [ ... ]  a | b        grouping, optional, alternation
 *   x? x* x+ x~3 x~2..5            repetition
 *   -> alias                       read, no effect
 *   %import common.NAME [-> A]     tide's own definitions of lark's common terminals
 *   %import common (A, B)
 *   %ignore X                      X may appear between any two terminals
 *   // ...                         a comment
 *
 * The start rule is "start". Matching is scannerless: a text is accepted
 * when the grammar derives it (terminals have no lexer's longest match or
 * priorities). %ignore puts (X)* before every terminal of a rule and after
 * the start rule. Templates, %declare, %override, %extend and imports other
 * than common are refused, as is left recursion (the grammar core). */
#include <stdio.h>
#include <string.h>

#include "constrain/gbnf.h"

#define IGNORE_RULE "%ignore"
#define COMMON_PREFIX "common."

typedef struct lp {
    cg *g;
    const char *s;
    size_t n, i;
    int depth;
    tide_status *st;
    int err;
    int terminal;       /* inside a terminal's definition */
    int32_t ign;        /* the %ignore rule, -1 none */
    const char *prefix; /* rule names' prefix (the common library) */
} lp;

/* tide's definitions of the common terminals lark ships (common.lark), in
 * the same syntax. */
static const char common_lib[] =
    "DIGIT: \"0\"..\"9\"\n"
    "HEXDIGIT: \"a\"..\"f\" | \"A\"..\"F\" | DIGIT\n"
    "INT: DIGIT+\n"
    "SIGNED_INT: [\"+\" | \"-\"] INT\n"
    "DECIMAL: INT \".\" INT? | \".\" INT\n"
    "_EXP: (\"e\" | \"E\") SIGNED_INT\n"
    "FLOAT: INT _EXP | DECIMAL _EXP?\n"
    "SIGNED_FLOAT: [\"+\" | \"-\"] FLOAT\n"
    "NUMBER: FLOAT | INT\n"
    "SIGNED_NUMBER: [\"+\" | \"-\"] NUMBER\n"
    "ESCAPED_STRING: \"\\\"\" (/[^\"\\\\\\n]/ | /\\\\[^\\n]/)* \"\\\"\"\n"
    "LCASE_LETTER: \"a\"..\"z\"\n"
    "UCASE_LETTER: \"A\"..\"Z\"\n"
    "LETTER: UCASE_LETTER | LCASE_LETTER\n"
    "WORD: LETTER+\n"
    "CNAME: (\"_\" | LETTER) (\"_\" | LETTER | DIGIT)*\n"
    "WS_INLINE: (\" \" | /\\t/)+\n"
    "WS: /[ \\t\\f\\r\\n]/+\n"
    "CR: /\\r/\n"
    "LF: /\\n/\n"
    "NEWLINE: (CR? LF)+\n"
    "SH_COMMENT: /#[^\\n]*/\n"
    "CPP_COMMENT: /\\/\\/[^\\n]*/\n"
    "SQL_COMMENT: /--[^\\n]*/\n";

static int32_t lfail(lp *p, const char *what) {
    if (!p->err) {
        p->err = 1;
        tide_gram_fail(p->st, p->s, p->n, p->i, what);
    }
    return -1;
}

static int32_t lchk(lp *p, int32_t x) {
    if (x < 0 && !p->err) {
        p->err = 1;
        *p->st = p->g->st;
    }
    return x;
}

/* spaces and // comments; newlines only when nl */
static void space(lp *p, int nl) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) p->i++;
        else if (c == '/' && p->i + 1 < p->n && p->s[p->i + 1] == '/') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else break;
    }
}

/* Whether the definition goes on past the newline(s) here: the next line
 * that is not blank starts with '|'. Moves there if so. */
static int continues(lp *p) {
    size_t save = p->i;
    space(p, 1);
    if (p->i < p->n && p->s[p->i] == '|') return 1;
    p->i = save;
    return 0;
}

static int name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
static int is_terminal_name(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && s[k] == '_') k++;
    return k < n && s[k] >= 'A' && s[k] <= 'Z';
}

static int32_t rule_id(lp *p, const char *name, size_t len) {
    char buf[256];
    int w = snprintf(buf, sizeof buf, "%s%.*s", p->prefix, (int)(len < 200 ? len : 200), name);
    if (len >= 200 || w < 0) return lfail(p, "name too long");
    for (int32_t r = 0; r < p->g->n_rules; r++)
        if (!strcmp(p->g->rules[r].name, buf)) return r;
    return lchk(p, cg_rule_new(p->g, buf, (size_t)w));
}

/* A terminal piece in a rule: (ignored)* before it. */
static int32_t tok(lp *p, int32_t x) {
    if (x < 0 || p->terminal || p->ign < 0) return x;
    return lchk(p, cg_cat2(p->g, lchk(p, cg_call(p->g, p->ign)), x));
}

static int32_t one_char(lp *p) {
    const char *why = NULL;
    int32_t v = tide_gram_char(p->s, p->n, &p->i, &why);
    return v < 0 ? lfail(p, why) : v;
}

/* "text" (p->i at the quote); *cp the one character when it is one. */
static int32_t literal(lp *p, int32_t *cp, int *n_cp) {
    cg *g = p->g;
    p->i++;
    cg_vec v = {0};
    *n_cp = 0;
    size_t at = p->i;
    while (p->i < p->n && p->s[p->i] != '"') {
        if (p->s[p->i] == '\n') {
            cg_vec_free(&v);
            return lfail(p, "newline inside a literal");
        }
        int32_t c = one_char(p);
        if (c < 0 || cg_vec_push(g, &v, c)) {
            cg_vec_free(&v);
            return lchk(p, -1);
        }
        *cp = c;
        (*n_cp)++;
    }
    if (p->i >= p->n) {
        cg_vec_free(&v);
        p->i = at - 1;
        return lfail(p, "unterminated literal");
    }
    p->i++;
    int fold = p->i < p->n && p->s[p->i] == 'i' && !(p->i + 1 < p->n && name_char(p->s[p->i + 1]));
    if (fold) p->i++;
    cg_vec parts = {0};
    for (int32_t k = 0; k < v.n; k++) {
        int32_t c = v.v[k], pr[4] = {c, c, c, c};
        int np = 1;
        if (fold && c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z')) pr[2] = pr[3] = c ^ 32, np = 2;
        if (cg_vec_push(g, &parts, lchk(p, cg_cpset(g, pr, np, 0)))) break;
    }
    cg_vec_free(&v);
    int32_t x = p->err ? -1 : lchk(p, cg_list(g, CA_CAT, parts.v, parts.n));
    cg_vec_free(&parts);
    return x;
}

/* /regex/ (p->i at the slash); flags refused. */
static int32_t regex(lp *p) {
    size_t at = ++p->i;
    while (p->i < p->n && p->s[p->i] != '/' && p->s[p->i] != '\n') p->i += p->s[p->i] == '\\' && p->i + 1 < p->n ? 2 : 1;
    if (p->i >= p->n || p->s[p->i] != '/') {
        p->i = at - 1;
        return lfail(p, "unterminated regex");
    }
    size_t end = p->i++;
    if (p->i < p->n && name_char(p->s[p->i])) return lfail(p, "regex flags are not supported");
    tide_status rst = {0};
    int32_t x = cg_regex(p->g, p->s + at, end - at, 0, 0, &rst);
    if (x < 0 && !p->err) {
        p->err = 1;
        char m[200];
        snprintf(m, sizeof m, "regex: %.150s", rst.msg[0] ? rst.msg : p->g->st.msg);
        p->i = at;
        tide_gram_fail(p->st, p->s, p->n, p->i, m);
    }
    return x;
}

static int32_t expansions(lp *p, int nested);

static int32_t atom(lp *p) {
    cg *g = p->g;
    if (p->i >= p->n) return lfail(p, "unexpected end of the grammar");
    char c = p->s[p->i];
    if (c == '"') {
        int32_t lo = 0, hi = 0;
        int n1 = 0, n2 = 0;
        int32_t x = literal(p, &lo, &n1);
        if (x < 0) return -1;
        space(p, 0);
        if (p->i + 1 < p->n && p->s[p->i] == '.' && p->s[p->i + 1] == '.') { /* "a".."z" */
            p->i += 2;
            space(p, 0);
            if (p->i >= p->n || p->s[p->i] != '"') return lfail(p, "expected a literal after ..");
            if (literal(p, &hi, &n2) < 0) return -1;
            if (n1 != 1 || n2 != 1) return lfail(p, "a range's ends must be one character each");
            if (hi < lo) return lfail(p, "range out of order");
            int32_t pr[2] = {lo, hi};
            x = lchk(p, cg_cpset(g, pr, 1, 0));
        }
        return tok(p, x);
    }
    if (c == '/') return tok(p, regex(p));
    if (c == '(' || c == '[') {
        p->i++;
        if (++p->depth > 200) return lfail(p, "groups nested over 200 deep");
        space(p, 1);
        int32_t x = expansions(p, 1);
        p->depth--;
        if (x < 0) return -1;
        char close = c == '(' ? ')' : ']';
        if (p->i >= p->n || p->s[p->i] != close) return lfail(p, c == '(' ? "missing )" : "missing ]");
        p->i++;
        return c == '[' ? lchk(p, cg_rep(g, x, 0, 1)) : x;
    }
    if (name_start(c)) {
        size_t st = p->i;
        while (p->i < p->n && name_char(p->s[p->i])) p->i++;
        int term = is_terminal_name(p->s + st, p->i - st);
        if (p->terminal && !term) {
            p->i = st;
            return lfail(p, "a terminal cannot use a rule (lower-case name)");
        }
        if (p->i < p->n && p->s[p->i] == '{') return lfail(p, "templates are not supported");
        int32_t r = rule_id(p, p->s + st, p->i - st);
        if (r < 0) return -1;
        int32_t x = lchk(p, cg_call(g, r));
        return term ? tok(p, x) : x;
    }
    return lfail(p, "expected a literal, a regex, a name, ( or [");
}

static int read_int(lp *p, long *out) { return tide_gram_int(p->s, p->n, &p->i, out); }

static int32_t item(lp *p, int nested) {
    int32_t x = atom(p);
    for (;;) {
        if (x < 0) return -1;
        space(p, nested);
        if (p->i >= p->n) return x;
        char c = p->s[p->i];
        long a, b;
        if (c == '*') a = 0, b = -1;
        else if (c == '+') a = 1, b = -1;
        else if (c == '?') a = 0, b = 1;
        else if (c == '~') {
            p->i++;
            space(p, 0);
            if (!read_int(p, &a)) return lfail(p, "expected a number after ~");
            b = a;
            space(p, 0);
            if (p->i + 1 < p->n && p->s[p->i] == '.' && p->s[p->i + 1] == '.') {
                p->i += 2;
                space(p, 0);
                if (!read_int(p, &b)) return lfail(p, "expected a number after ..");
            }
            if (b < a) return lfail(p, "numbers out of order after ~");
            if (a > CG_MAX_REPEAT || b > CG_MAX_REPEAT) return lfail(p, "repetition bound over the limit of 10000");
            x = lchk(p, cg_rep(p->g, x, (int32_t)a, (int32_t)b));
            continue;
        } else return x;
        p->i++;
        x = lchk(p, cg_rep(p->g, x, (int32_t)a, (int32_t)b));
    }
}

static int at_seq_end(lp *p, int nested) {
    if (p->i >= p->n) return 1;
    char c = p->s[p->i];
    return c == '|' || c == ')' || c == ']' || (!nested && c == '\n') ||
           (c == '-' && p->i + 1 < p->n && p->s[p->i + 1] == '>');
}

static int32_t expansions(lp *p, int nested) {
    cg_vec alts = {0};
    for (;;) {
        cg_vec seq = {0};
        space(p, nested);
        while (!at_seq_end(p, nested)) {
            int32_t x = item(p, nested);
            if (x < 0 || cg_vec_push(p->g, &seq, x)) {
                cg_vec_free(&seq);
                cg_vec_free(&alts);
                return lchk(p, -1);
            }
        }
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] == '>') { /* -> alias */
            p->i += 2;
            space(p, 0);
            while (p->i < p->n && name_char(p->s[p->i])) p->i++;
            space(p, nested);
        }
        int32_t s = lchk(p, cg_list(p->g, CA_CAT, seq.v, seq.n));
        cg_vec_free(&seq);
        if (s < 0 || cg_vec_push(p->g, &alts, s)) {
            cg_vec_free(&alts);
            return lchk(p, -1);
        }
        if (!nested && p->i < p->n && p->s[p->i] == '\n' && continues(p)) {}
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            space(p, 1);
            continue;
        }
        break;
    }
    int32_t x = lchk(p, cg_list(p->g, CA_ALT, alts.v, alts.n));
    cg_vec_free(&alts);
    return x;
}

static int word(lp *p, const char *w) {
    size_t n = strlen(w);
    if (p->i + n <= p->n && !memcmp(p->s + p->i, w, n) && !(p->i + n < p->n && name_char(p->s[p->i + n]))) {
        p->i += n;
        return 1;
    }
    return 0;
}

/* NAME [-> ALIAS] of %import common: ALIAS (or NAME) calls common.NAME. */
static int import_one(lp *p) {
    space(p, 0);
    size_t at = p->i;
    while (p->i < p->n && name_char(p->s[p->i])) p->i++;
    if (p->i == at) return lfail(p, "expected a name to import");
    size_t an = at, ae = p->i;
    space(p, 0);
    if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] == '>') {
        p->i += 2;
        space(p, 0);
        an = p->i;
        while (p->i < p->n && name_char(p->s[p->i])) p->i++;
        ae = p->i;
        if (ae == an) return lfail(p, "expected a name after ->");
    }
    char lib[256];
    size_t nl = 0; /* the imported name, among the common library's rules */
    while (at + nl < p->n && name_char(p->s[at + nl])) nl++;
    if (nl > 200) return lfail(p, "name too long");
    snprintf(lib, sizeof lib, COMMON_PREFIX "%.*s", (int)nl, p->s + at);
    int32_t target = -1;
    for (int32_t r = 0; r < p->g->n_rules; r++)
        if (!strcmp(p->g->rules[r].name, lib)) target = r;
    if (target < 0) {
        p->i = at;
        return lfail(p, "not a terminal of common (DIGIT, HEXDIGIT, INT, SIGNED_INT, DECIMAL, FLOAT, SIGNED_FLOAT, "
                        "NUMBER, SIGNED_NUMBER, ESCAPED_STRING, LETTER, LCASE_LETTER, UCASE_LETTER, WORD, CNAME, "
                        "WS_INLINE, WS, CR, LF, NEWLINE, SH_COMMENT, CPP_COMMENT, SQL_COMMENT)");
    }
    int32_t r = rule_id(p, p->s + an, ae - an);
    if (r < 0) return -1;
    if (p->g->rules[r].ast >= 0) return lfail(p, "imported name is defined twice");
    p->g->rules[r].ast = lchk(p, cg_call(p->g, target));
    return p->g->rules[r].ast < 0 ? -1 : 0;
}

static int directive(lp *p) {
    size_t at = p->i++;
    if (word(p, "ignore")) {
        space(p, 0);
        int32_t r = p->ign; /* made before the definitions (tide_lark_parse) */
        p->ign = -1;        /* an ignored terminal is not preceded by itself */
        int32_t x = expansions(p, 0);
        p->ign = r;
        if (x < 0 || r < 0) return -1;
        cg *g = p->g;
        /* the rule is (X1 | X2 ...)*: a new %ignore adds an alternative */
        int32_t prev = g->rules[r].ast >= 0 ? g->kids[g->ast[g->rules[r].ast].first] : -1;
        int32_t alt = prev >= 0 ? lchk(p, cg_alt2(g, prev, x)) : x;
        g->rules[r].ast = lchk(p, cg_rep(g, alt, 0, -1));
        return g->rules[r].ast < 0 ? -1 : 0;
    }
    if (word(p, "import")) {
        space(p, 0);
        if (!word(p, "common")) return lfail(p, "only %import common is supported");
        if (p->i < p->n && p->s[p->i] == '.') {
            p->i++;
            return import_one(p);
        }
        space(p, 0);
        if (p->i >= p->n || p->s[p->i] != '(') return lfail(p, "expected common.NAME or common (NAME, ...)");
        p->i++;
        for (;;) {
            if (import_one(p)) return -1;
            space(p, 1);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == ')') {
                p->i++;
                return 0;
            }
            return lfail(p, "expected , or ) in %import");
        }
    }
    p->i = at;
    return lfail(p, "directive not supported (%import common and %ignore are)");
}

/* The definitions of text into p->g (names prefixed by p->prefix). */
static int definitions(lp *p) {
    for (;;) {
        space(p, 1);
        if (p->i >= p->n) return 0;
        if (p->s[p->i] == '%') {
            if (directive(p)) return -1;
            continue;
        }
        size_t at = p->i;
        if (p->s[p->i] == '?' || p->s[p->i] == '!') p->i++;
        size_t ns = p->i;
        while (p->i < p->n && name_char(p->s[p->i])) p->i++;
        if (p->i == ns || !name_start(p->s[ns])) return lfail(p, "expected a rule or terminal name");
        size_t ne = p->i;
        if (p->i < p->n && p->s[p->i] == '{') return lfail(p, "templates are not supported");
        if (p->i < p->n && p->s[p->i] == '.') { /* priority */
            p->i++;
            if (p->i < p->n && p->s[p->i] == '-') p->i++;
            long pr;
            if (!read_int(p, &pr)) return lfail(p, "expected a priority number");
        }
        space(p, 0);
        if (p->i >= p->n || p->s[p->i] != ':') return lfail(p, "expected :");
        p->i++;
        int32_t r = rule_id(p, p->s + ns, ne - ns);
        if (r < 0) return -1;
        if (p->g->rules[r].ast >= 0) {
            p->i = at;
            return lfail(p, "defined twice");
        }
        p->terminal = is_terminal_name(p->s + ns, ne - ns);
        if (p->terminal && at != ns) {
            p->i = at;
            return lfail(p, "? and ! apply to rules only");
        }
        int32_t x = expansions(p, 0);
        p->terminal = 0;
        if (x < 0) return -1;
        if (p->i < p->n && (p->s[p->i] == ')' || p->s[p->i] == ']')) return lfail(p, "unmatched bracket");
        p->g->rules[r].ast = x;
    }
}

int tide_lark_parse(cg *g, const char *text, size_t len, tide_status *st) {
    lp p = {g, text, len, 0, 0, st, 0, 0, -1, ""};
    /* the common library first (when imported), the %ignore rule before the
     * rules that use it (%ignore usually comes last) */
    int imp = 0, ign = 0;
    for (size_t k = 0; k + 7 <= len; k++) {
        imp |= !memcmp(text + k, "%import", 7);
        ign |= !memcmp(text + k, "%ignore", 7);
    }
    if (imp) {
        lp c = {g, common_lib, sizeof common_lib - 1, 0, 0, st, 0, 0, -1, COMMON_PREFIX};
        if (definitions(&c)) return -1;
    }
    if (ign && (p.ign = cg_rule_new(g, IGNORE_RULE, strlen(IGNORE_RULE))) < 0) return *st = g->st, -1;
    if (definitions(&p)) return -1;
    if (p.ign >= 0 && g->rules[p.ign].ast < 0) /* "%ignore" inside a literal or comment only */
        if ((g->rules[p.ign].ast = cg_empty(g)) < 0) return *st = g->st, -1;
    int32_t start = -1;
    for (int32_t r = 0; r < g->n_rules; r++)
        if (!strcmp(g->rules[r].name, "start")) start = r;
    if (start < 0) return tide_fail(st, TIDE_ERR_INVALID, "grammar: no \"start\" rule");
    if (p.ign < 0) {
        g->root = start;
        return 0;
    }
    /* ignored text may also end the output */
    int32_t root = cg_rule_new(g, "%root", 5);
    if (root < 0) return *st = g->st, -1;
    g->rules[root].ast = cg_cat2(g, cg_call(g, start), cg_call(g, p.ign));
    if (g->rules[root].ast < 0) return *st = g->st, -1;
    g->root = root;
    return 0;
}
