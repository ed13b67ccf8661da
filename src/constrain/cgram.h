/* The grammar form every constraint compiles to (docs/structured.md).
 *
 * Front ends (the regex parser, the JSON Schema compiler, the GBNF parser)
 * build trees of cg_ast nodes; each rule of the grammar is one tree, and a
 * tree may call rules (CA_CALL) by index, so recursion ($ref, GBNF rules)
 * is a call, not an expansion. cg_finish lowers every tree to a byte-level
 * Thompson NFA (codepoint sets become UTF-8 byte-range chains, repetition
 * becomes copies), which the matcher (matcher.c) runs as a set of stacks of
 * (rule, NFA state) frames. Every size is capped (CG_MAX_*): a hostile
 * schema or grammar gets an error, never unbounded memory. */
#ifndef TIDE_CONSTRAIN_CGRAM_H
#define TIDE_CONSTRAIN_CGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CG_MAX_AST (1 << 20)       /* tree nodes */
#define CG_MAX_STATES (1 << 21)    /* NFA states over all rules */
#define CG_MAX_RULES (1 << 16)
#define CG_MAX_REPEAT 10000        /* bound of {m,n} / minLength / maxItems */
#define CG_CP_MAX 0x10FFFF

typedef enum cg_kind {
    CA_EMPTY,  /* matches "" */
    CA_NONE,   /* matches nothing */
    CA_BYTES,  /* one byte in [a, b] */
    CA_CPSET,  /* one codepoint in the ranges kids[0..n) (pairs in cg.cps), UTF-8 encoded */
    CA_CAT,    /* kids in sequence */
    CA_ALT,    /* one of kids */
    CA_REP,    /* kids[0] repeated a..b times (b < 0: unbounded) */
    CA_CALL,   /* rule a */
} cg_kind;

typedef struct cg_ast {
    uint8_t k;
    uint8_t jstr;     /* CA_CPSET: inside a JSON string: '"', '\\' and controls as escapes */
    int32_t a, b;
    int32_t first, n; /* children: cg.kids[first .. first+n); CPSET: cg.cps pairs */
} cg_ast;

/* NFA edge kinds */
enum { CE_EPS, CE_BYTE, CE_CALL };

typedef struct cg_edge {
    uint8_t kind, lo, hi;
    int32_t to;
    int32_t rule; /* CE_CALL */
} cg_edge;

typedef struct cg_state {
    int32_t first, n; /* edges */
} cg_state;

typedef struct cg_rule {
    int32_t ast;          /* root tree (-1 until defined) */
    int32_t start, accept; /* NFA states once lowered */
    char *name;           /* for messages (owned) */
} cg_rule;

typedef struct cg {
    cg_ast *ast; int32_t n_ast, cap_ast;
    int32_t *kids; int32_t n_kids, cap_kids;
    int32_t *cps; int32_t n_cps, cap_cps;
    cg_rule *rules; int32_t n_rules, cap_rules;
    cg_state *states; int32_t n_states, cap_states;
    cg_edge *edges; int32_t n_edges, cap_edges;
    int32_t root;          /* the start rule */
    int32_t max_depth;     /* stack frames the matcher allows (recursion limit) */
    int failed;            /* an allocation or limit failed: st says why */
    tide_status st;
} cg;

void cg_init(cg *g);
void cg_free(cg *g);

/* Tree builders; return a node index, or -1 after setting g->failed. */
int32_t cg_empty(cg *g);
int32_t cg_none(cg *g);
int32_t cg_byte(cg *g, uint8_t lo, uint8_t hi);
int32_t cg_lit(cg *g, const char *s, size_t n);          /* a byte string */
int32_t cg_cpset(cg *g, const int32_t *ranges, int32_t n_pairs, int jstr); /* sorted or not */
/* Every codepoint outside the ranges (any order), as a set / appended to out. */
int32_t cg_cpset_not(cg *g, const int32_t *ranges, int32_t n_pairs, int jstr);
struct cg_vec;
int cg_ranges_not(cg *g, const int32_t *ranges, int32_t n_pairs, struct cg_vec *out);
int32_t cg_list(cg *g, cg_kind k, const int32_t *kids, int32_t n); /* CAT or ALT */
int32_t cg_cat2(cg *g, int32_t a, int32_t b);
int32_t cg_alt2(cg *g, int32_t a, int32_t b);
int32_t cg_rep(cg *g, int32_t kid, int32_t min, int32_t max);
int32_t cg_call(cg *g, int32_t rule);
int32_t cg_rule_new(cg *g, const char *name, size_t name_len); /* ast -1 */

/* Lowers every rule to the NFA; fails on an undefined rule, a limit, or an
 * earlier builder failure. */
int cg_finish(cg *g, tide_status *st);

/* A growable int32 vector for the front ends. */
typedef struct cg_vec { int32_t *v; int32_t n, cap; } cg_vec;
int cg_vec_push(cg *g, cg_vec *x, int32_t v);
void cg_vec_free(cg_vec *x);

/* Front ends. The regex is ECMAScript syntax; `search`: unanchored (JSON
 * Schema "pattern": .* around it unless ^ / $ anchor it). jstr: the
 * codepoints are JSON-string content (escaped as JSON.stringify does). */
int32_t cg_regex(cg *g, const char *re, size_t len, int search, int jstr, tide_status *st);
/* Writes the codepoint ranges of a class escape (\d \w \s, upper = negated). */

#endif
