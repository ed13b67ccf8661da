/* The matcher: runs a lowered grammar (cgram.h) over bytes.
 *
 * A parse position is a set of stacks of (rule, NFA state) frames. Stacks
 * are interned as nodes (frame + parent node), so a stack is one int; a
 * position is the sorted set of its stacks' top nodes right after a byte
 * (the "kernel"), interned too, so a position is one int (a "set"). Each
 * set keeps its epsilon closure's nodes that have byte edges, whether it
 * accepts, and a lazily filled row of 256 successors: stepping a byte is a
 * table lookup once seen, i.e. the pushdown automaton is determinised
 * lazily, one reached configuration at a time. Recursion deeper than
 * cg.max_depth frames is cut (those branches die). Limits: CM_MAX_NODES,
 * CM_MAX_SETS, with a clear error when exceeded. */
#ifndef TIDE_CONSTRAIN_MATCHER_H
#define TIDE_CONSTRAIN_MATCHER_H

#include <stdint.h>

#include "constrain/cgram.h"

#define CM_MAX_NODES (1 << 22)
#define CM_MAX_SETS (1 << 17)
#define CM_DEAD (-1)
#define CM_ERROR (-2)
#define CM_UNKNOWN (-3)

typedef struct cm_node { int32_t q, parent, depth; } cm_node;

typedef struct cm_set {
    int32_t kfirst, kn; /* kernel nodes in cm.pool */
    int32_t afirst, an; /* active nodes (closure members with byte edges) in cm.pool */
    uint32_t hash;
    uint8_t accept;
    int32_t *row;       /* [256] successors (CM_UNKNOWN until computed); NULL until first step */
    int32_t mask_slot;  /* mask cache (mask.c), -1 none */
} cm_set;

typedef struct cm {
    const cg *g;
    int32_t *rule_of;                 /* [n_states] */
    cm_node *nodes; int32_t n_nodes, cap_nodes;
    int32_t *nh; uint32_t nh_cap;     /* node hash: index+1, 0 empty */
    cm_set *sets; int32_t n_sets, cap_sets;
    int32_t *sh; uint32_t sh_cap;     /* set hash */
    int32_t *pool; int64_t n_pool, cap_pool;
    /* scratch */
    int32_t *work; int32_t cap_work;
    int32_t *kbuf; int32_t cap_kbuf;  /* a step's kernel */
    uint32_t *mark; uint32_t stamp; int32_t cap_mark;
    int32_t root;                     /* the start set */
    /* byte classes: bytes no edge tells apart (every byte edge holds all or
     * none of a class) step every set alike; cls_next links a class's bytes
     * in a ring, so a step fills the row for the whole class */
    uint8_t cls[256], cls_next[256];
    int n_cls;
    tide_status st;                   /* why the last CM_ERROR */
} cm;

int cm_init(cm *m, const cg *g, tide_status *st);
void cm_free(cm *m);
/* The set after byte b from set s: a set, CM_DEAD, or CM_ERROR (m->st). */
int32_t cm_step_slow(cm *m, int32_t s, uint8_t b);
static inline int32_t cm_step(cm *m, int32_t s, uint8_t b) {
    const int32_t *row = m->sets[s].row;
    if (row && row[b] != CM_UNKNOWN) return row[b];
    return cm_step_slow(m, s, b);
}
static inline int cm_accepting(const cm *m, int32_t s) { return m->sets[s].accept; }
/* Whether any byte can follow (some closure member has a byte edge). */
static inline int cm_open(const cm *m, int32_t s) { return m->sets[s].an > 0; }
/* Steps through a byte string; CM_DEAD / CM_ERROR as cm_step. */
int32_t cm_step_bytes(cm *m, int32_t s, const uint8_t *b, size_t n);

#endif
