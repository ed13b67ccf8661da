/* The matcher (matcher.h): interned stacks and sets, closure, stepping. */
#include "constrain/matcher.h"

#include <stdlib.h>
#include <string.h>

static uint32_t mix(uint32_t h, uint32_t v) {
    h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
    return h;
}

static int fail_nomem(cm *m) {
    tide_fail(&m->st, TIDE_ERR_NOMEM, "out of memory in the constraint matcher");
    return CM_ERROR;
}

static int grow(void **p, int64_t *cap, int64_t need, size_t sz) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int grow32(void **p, int32_t *cap, int64_t need, size_t sz) {
    int64_t c = *cap;
    int rc = grow(p, &c, need, sz);
    *cap = (int32_t)c;
    return rc;
}

static int rehash(int32_t **tab, uint32_t *cap, uint32_t need, uint32_t (*hf)(cm *, int32_t), cm *m, int32_t n) {
    if (*cap && (uint64_t)need * 2 < *cap) return 0;
    uint32_t c = *cap ? *cap * 2 : 1024;
    while ((uint64_t)need * 2 >= c) c *= 2;
    int32_t *t = calloc(c, sizeof *t);
    if (!t) return -1;
    for (int32_t i = 0; i < n; i++) {
        uint32_t h = hf(m, i) & (c - 1);
        while (t[h]) h = (h + 1) & (c - 1);
        t[h] = i + 1;
    }
    free(*tab);
    *tab = t;
    *cap = c;
    return 0;
}

static uint32_t node_hash_v(int32_t q, int32_t parent) { return mix(mix(17, (uint32_t)q), (uint32_t)parent); }
static uint32_t node_hash(cm *m, int32_t i) { return node_hash_v(m->nodes[i].q, m->nodes[i].parent); }
static uint32_t set_hash(cm *m, int32_t i) { return m->sets[i].hash; }

/* The node (q, parent), interned; CM_ERROR past the limit. */
static int32_t intern_node(cm *m, int32_t q, int32_t parent) {
    uint32_t h = node_hash_v(q, parent);
    if (m->nh_cap) {
        for (uint32_t k = h & (m->nh_cap - 1);; k = (k + 1) & (m->nh_cap - 1)) {
            int32_t e = m->nh[k];
            if (!e) break;
            if (m->nodes[e - 1].q == q && m->nodes[e - 1].parent == parent) return e - 1;
        }
    }
    if (m->n_nodes >= CM_MAX_NODES) {
        tide_fail(&m->st, TIDE_ERR_NOMEM, "constraint: more than %d parser stacks (grammar too ambiguous or deep)",
                  CM_MAX_NODES);
        return CM_ERROR;
    }
    if (grow32((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes)) return fail_nomem(m);
    int32_t id = m->n_nodes++;
    m->nodes[id] = (cm_node){q, parent, parent < 0 ? 0 : m->nodes[parent].depth + 1};
    if (rehash(&m->nh, &m->nh_cap, (uint32_t)m->n_nodes, node_hash, m, m->n_nodes - 1)) return fail_nomem(m);
    uint32_t k = h & (m->nh_cap - 1);
    while (m->nh[k]) k = (k + 1) & (m->nh_cap - 1);
    m->nh[k] = id + 1;
    return id;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int mark_reset(cm *m) {
    int32_t old = m->cap_mark;
    if (grow32((void **)&m->mark, &m->cap_mark, m->n_nodes + 1, sizeof *m->mark)) return -1;
    if (m->cap_mark > old) memset(m->mark + old, 0, (size_t)(m->cap_mark - old) * sizeof *m->mark);
    if (++m->stamp == 0) {
        memset(m->mark, 0, (size_t)m->cap_mark * sizeof *m->mark);
        m->stamp = 1;
    }
    return 0;
}

/* marks node n, growing the mark array for new nodes */
static int mark_new(cm *m, int32_t n) {
    if (n >= m->cap_mark) {
        int32_t old = m->cap_mark;
        if (grow32((void **)&m->mark, &m->cap_mark, n + 1, sizeof *m->mark)) return -1;
        memset(m->mark + old, 0, (size_t)(m->cap_mark - old) * sizeof *m->mark);
    }
    if (m->mark[n] == m->stamp) return 0;
    m->mark[n] = m->stamp;
    return 1;
}

/* Interns the set of kernel nodes k[0..n) (sorted, unique); computes its
 * closure when new. */
static int32_t intern_set(cm *m, const int32_t *k, int32_t n) {
    uint32_t h = 7;
    for (int32_t i = 0; i < n; i++) h = mix(h, (uint32_t)k[i]);
    if (m->sh_cap) {
        for (uint32_t j = h & (m->sh_cap - 1);; j = (j + 1) & (m->sh_cap - 1)) {
            int32_t e = m->sh[j];
            if (!e) break;
            const cm_set *s = &m->sets[e - 1];
            if (s->hash == h && s->kn == n && !memcmp(m->pool + s->kfirst, k, (size_t)n * sizeof *k)) return e - 1;
        }
    }
    if (m->n_sets >= CM_MAX_SETS) {
        tide_fail(&m->st, TIDE_ERR_NOMEM, "constraint: more than %d parser states (grammar too ambiguous)", CM_MAX_SETS);
        return CM_ERROR;
    }
    /* closure: worklist over nodes */
    const cg *g = m->g;
    if (mark_reset(m)) return fail_nomem(m);
    int32_t nw = 0, head = 0;
    if (grow32((void **)&m->work, &m->cap_work, n + 16, sizeof *m->work)) return fail_nomem(m);
    for (int32_t i = 0; i < n; i++) {
        if (mark_new(m, k[i]) < 0) return fail_nomem(m);
        m->work[nw++] = k[i];
    }
    int accept = 0;
    int64_t kfirst = m->n_pool;
    if (grow((void **)&m->pool, &m->cap_pool, m->n_pool + n, sizeof *m->pool)) return fail_nomem(m);
    memcpy(m->pool + kfirst, k, (size_t)n * sizeof *k);
    m->n_pool += n;
    int64_t afirst = m->n_pool;
    while (head < nw) {
        int32_t id = m->work[head++];
        cm_node nd = m->nodes[id];
        const cg_state *qs = &g->states[nd.q];
        int active = 0;
        for (int32_t e = qs->first; e < qs->first + qs->n; e++) {
            const cg_edge *ed = &g->edges[e];
            int32_t nn;
            if (ed->kind == CE_BYTE) {
                active = 1;
                continue;
            } else if (ed->kind == CE_EPS) {
                nn = intern_node(m, ed->to, nd.parent);
            } else {
                if (nd.depth + 1 > g->max_depth) continue;
                int32_t ret = intern_node(m, ed->to, nd.parent);
                if (ret < 0) return CM_ERROR;
                nn = intern_node(m, g->rules[ed->rule].start, ret);
            }
            if (nn < 0) return CM_ERROR;
            int mk = mark_new(m, nn);
            if (mk < 0) return fail_nomem(m);
            if (mk) {
                if (grow32((void **)&m->work, &m->cap_work, nw + 1, sizeof *m->work)) return fail_nomem(m);
                m->work[nw++] = nn;
            }
        }
        int32_t r = m->rule_of[nd.q];
        if (g->rules[r].accept == nd.q) {
            if (nd.parent < 0) accept = 1;
            else {
                int mk = mark_new(m, nd.parent);
                if (mk < 0) return fail_nomem(m);
                if (mk) {
                    if (grow32((void **)&m->work, &m->cap_work, nw + 1, sizeof *m->work)) return fail_nomem(m);
                    m->work[nw++] = nd.parent;
                }
            }
        }
        if (active) {
            if (grow((void **)&m->pool, &m->cap_pool, m->n_pool + 1, sizeof *m->pool)) return fail_nomem(m);
            m->pool[m->n_pool++] = id;
        }
    }
    if (grow32((void **)&m->sets, &m->cap_sets, m->n_sets + 1, sizeof *m->sets)) return fail_nomem(m);
    int32_t sid = m->n_sets++;
    m->sets[sid] = (cm_set){(int32_t)kfirst, n, (int32_t)afirst, (int32_t)(m->n_pool - afirst), h, (uint8_t)accept, NULL, -1};
    if (rehash(&m->sh, &m->sh_cap, (uint32_t)m->n_sets, set_hash, m, m->n_sets - 1)) return fail_nomem(m);
    uint32_t j = h & (m->sh_cap - 1);
    while (m->sh[j]) j = (j + 1) & (m->sh_cap - 1);
    m->sh[j] = sid + 1;
    return sid;
}

int32_t cm_step_slow(cm *m, int32_t s, uint8_t b) {
    if (!m->sets[s].row) {
        int32_t *row = malloc(256 * sizeof *row);
        if (!row) return fail_nomem(m);
        for (int i = 0; i < 256; i++) row[i] = CM_UNKNOWN;
        m->sets[s].row = row;
    }
    const cg *g = m->g;
    int32_t nk = 0;
    int32_t afirst = m->sets[s].afirst, an = m->sets[s].an;
    /* the kernel in m->kbuf (not the pool: interning may grow the pool) */
    for (int32_t i = 0; i < an; i++) {
        cm_node nd = m->nodes[m->pool[afirst + i]];
        const cg_state *qs = &g->states[nd.q];
        for (int32_t e = qs->first; e < qs->first + qs->n; e++) {
            const cg_edge *ed = &g->edges[e];
            if (ed->kind != CE_BYTE || b < ed->lo || b > ed->hi) continue;
            int32_t nn = intern_node(m, ed->to, nd.parent);
            if (nn < 0) return CM_ERROR;
            if (grow32((void **)&m->kbuf, &m->cap_kbuf, nk + 1, sizeof *m->kbuf)) return fail_nomem(m);
            m->kbuf[nk++] = nn;
        }
    }
    int32_t r = CM_DEAD;
    if (nk > 0) {
        int32_t *k = m->kbuf;
        if (nk <= 16) { /* the usual case: a few stacks */
            for (int32_t i = 1; i < nk; i++)
                for (int32_t j = i; j > 0 && k[j - 1] > k[j]; j--) {
                    int32_t t = k[j];
                    k[j] = k[j - 1];
                    k[j - 1] = t;
                }
        } else qsort(k, (size_t)nk, sizeof *k, cmp_i32);
        int32_t u = 1;
        for (int32_t i = 1; i < nk; i++)
            if (k[i] != k[u - 1]) k[u++] = k[i];
        r = intern_set(m, k, u);
    }
    if (r == CM_ERROR) return r;
    int32_t *row = m->sets[s].row;
    uint8_t x = b;
    do {
        row[x] = r;
        x = m->cls_next[x];
    } while (x != b);
    return r;
}

int32_t cm_step_bytes(cm *m, int32_t s, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n && s >= 0; i++) s = cm_step(m, s, b[i]);
    return s;
}

int cm_init(cm *m, const cg *g, tide_status *st) {
    memset(m, 0, sizeof *m);
    m->g = g;
    m->rule_of = malloc((size_t)(g->n_states ? g->n_states : 1) * sizeof *m->rule_of);
    if (!m->rule_of) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory in the constraint matcher");
    for (int32_t i = 0; i < g->n_states; i++) m->rule_of[i] = 0;
    /* rules' states are contiguous from their start, in rule order */
    for (int32_t r = 0; r < g->n_rules; r++) {
        int32_t end = r + 1 < g->n_rules ? g->rules[r + 1].start : g->n_states;
        for (int32_t q = g->rules[r].start; q < end; q++) m->rule_of[q] = r;
    }
    /* byte classes: a byte's signature is the set of edge boundaries below
     * it; bytes between two consecutive boundaries form a class */
    uint8_t cut[257] = {0};
    for (int32_t e = 0; e < g->n_edges; e++)
        if (g->edges[e].kind == CE_BYTE) cut[g->edges[e].lo] = cut[g->edges[e].hi + 1] = 1;
    int c = -1;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || cut[b]) c++;
        m->cls[b] = (uint8_t)c;
    }
    m->n_cls = c + 1;
    for (int b = 0; b < 256; b++) {
        int nx = b + 1 < 256 && m->cls[b + 1] == m->cls[b] ? b + 1 : b;
        if (nx == b) /* the last of its class: back to the first */
            while (nx > 0 && m->cls[nx - 1] == m->cls[b]) nx--;
        m->cls_next[b] = (uint8_t)nx;
    }
    int32_t n0 = intern_node(m, g->rules[g->root].start, -1);
    m->root = n0 < 0 ? n0 : intern_set(m, &n0, 1);
    if (m->root < 0) {
        if (st) *st = m->st;
        cm_free(m);
        return -1;
    }
    return 0;
}

void cm_free(cm *m) {
    for (int32_t i = 0; i < m->n_sets; i++) free(m->sets[i].row);
    free(m->rule_of);
    free(m->nodes);
    free(m->nh);
    free(m->sets);
    free(m->sh);
    free(m->pool);
    free(m->work);
    free(m->kbuf);
    free(m->mark);
    memset(m, 0, sizeof *m);
}
