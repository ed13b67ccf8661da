/* Constraints to token masks (constrain.h): the vocabulary trie, compiled
 * grammars and their cache, and the per-request cursor with its mask cache. */
#include "constrain/constrain.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/gbnf.h"
#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "text/tokenizer.h"

/* ---- vocabulary trie ------------------------------------------------------- */

struct tide_cons_vocab {
    int32_t n;                /* vocabulary size (token ids 0..n-1) */
    uint8_t *skip;            /* [n] never allowed */
    uint32_t *off;            /* [n + 1] token bytes in `bytes` */
    uint8_t *bytes;
    /* the trie in preorder: node 0 is the root (empty prefix) */
    int32_t n_nodes;
    uint8_t *nbyte;           /* byte on the edge into the node */
    uint16_t *ndepth;
    int32_t *nend;            /* index just past the node's subtree */
    int32_t *ntok, *nntok;    /* tokens ending here: order[ntok .. ntok+nntok) */
    int32_t *order;
    int max_depth;
};

static const struct tide_cons_vocab *sort_v; /* qsort has no context argument: only read under sort_mu */
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const struct tide_cons_vocab *v = sort_v;
    uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void tide_cons_vocab_free(tide_cons_vocab *v) {
    if (!v) return;
    free(v->skip);
    free(v->off);
    free(v->bytes);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->ntok);
    free(v->nntok);
    free(v->order);
    free(v);
}

int32_t tide_cons_vocab_size(const tide_cons_vocab *v) { return v->n; }

int tide_cons_vocab_new(const uint8_t *const *bytes, const uint32_t *lens, const uint8_t *skip, int32_t n,
                        tide_cons_vocab **out, tide_status *st) {
    *out = NULL;
    if (n <= 0) return tide_fail(st, TIDE_ERR_INVALID, "constraint vocabulary: no tokens");
    tide_cons_vocab *v = calloc(1, sizeof *v);
    if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint vocabulary)");
    v->n = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] > 65535) {
            tide_cons_vocab_free(v);
            return tide_fail(st, TIDE_ERR_INVALID, "constraint vocabulary: token %d is %u bytes long", (int)i, lens[i]);
        }
        total += lens[i];
    }
    if (total >= UINT32_MAX) {
        tide_cons_vocab_free(v);
        return tide_fail(st, TIDE_ERR_INVALID, "constraint vocabulary: too many bytes");
    }
    v->skip = calloc((size_t)n, 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->bytes = malloc(total + 1);
    v->order = malloc((size_t)n * sizeof *v->order);
    size_t cap = total + 1;
    v->nbyte = malloc(cap);
    v->ndepth = malloc(cap * sizeof *v->ndepth);
    v->nend = malloc(cap * sizeof *v->nend);
    v->ntok = malloc(cap * sizeof *v->ntok);
    v->nntok = calloc(cap, sizeof *v->nntok);
    int32_t *path = malloc(65537 * sizeof *path);
    if (!v->skip || !v->off || !v->bytes || !v->order || !v->nbyte || !v->ndepth || !v->nend || !v->ntok || !v->nntok ||
        !path) {
        free(path);
        tide_cons_vocab_free(v);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint vocabulary)");
    }
    uint32_t o = 0;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = o;
        if (lens[i]) memcpy(v->bytes + o, bytes[i], lens[i]);
        o += lens[i];
        v->skip[i] = (uint8_t)((skip && skip[i]) || lens[i] == 0);
        if (!v->skip[i]) v->order[m++] = i;
    }
    v->off[n] = o;
    pthread_mutex_lock(&sort_mu);
    sort_v = v;
    qsort(v->order, (size_t)m, sizeof *v->order, cmp_tok);
    sort_v = NULL;
    pthread_mutex_unlock(&sort_mu);
    /* preorder trie from the sorted tokens */
    int32_t nn = 1, depth = 0;
    v->nbyte[0] = 0;
    v->ndepth[0] = 0;
    v->ntok[0] = 0;
    path[0] = 0;
    int32_t prev = -1;
    for (int32_t k = 0; k < m; k++) {
        int32_t t = v->order[k];
        const uint8_t *b = v->bytes + v->off[t];
        int len = (int)(v->off[t + 1] - v->off[t]);
        int l = 0;
        if (prev >= 0) {
            const uint8_t *pb = v->bytes + v->off[prev];
            int pl = (int)(v->off[prev + 1] - v->off[prev]);
            while (l < pl && l < len && pb[l] == b[l]) l++;
        }
        while (depth > l) v->nend[path[depth--]] = nn;
        while (depth < len) {
            int32_t id = nn++;
            v->nbyte[id] = b[depth];
            v->ndepth[id] = (uint16_t)(depth + 1);
            v->ntok[id] = 0;
            path[++depth] = id;
        }
        int32_t at = path[len];
        if (v->nntok[at] == 0) v->ntok[at] = k;
        v->nntok[at]++;
        if (len > v->max_depth) v->max_depth = len;
        prev = t;
    }
    while (depth > 0) v->nend[path[depth--]] = nn;
    v->nend[0] = nn;
    v->n_nodes = nn;
    free(path);
    *out = v;
    return 0;
}

int tide_cons_vocab_from_tokenizer(const struct tide_tokenizer *tok, int32_t n_vocab, tide_cons_vocab **out,
                                   tide_status *st) {
    const uint8_t **b = calloc((size_t)n_vocab, sizeof *b);
    uint32_t *lens = calloc((size_t)n_vocab, sizeof *lens);
    uint8_t *skip = calloc((size_t)n_vocab, 1);
    if (!b || !lens || !skip) {
        free(b), free(lens), free(skip);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint vocabulary)");
    }
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len = 0;
        if ((uint32_t)i >= tide_tokenizer_n_ids(tok) || !tide_tokenizer_token_bytes(tok, i, &b[i], &len) ||
            tide_tokenizer_is_added(tok, i)) {
            skip[i] = 1;
            b[i] = NULL;
            len = 0;
        }
        lens[i] = (uint32_t)len;
    }
    int rc = tide_cons_vocab_new(b, lens, skip, n_vocab, out, st);
    free(b), free(lens), free(skip);
    return rc;
}

/* ---- grammars ------------------------------------------------------------------- */

typedef struct cons_rt cons_rt;
static void rt_unref(cons_rt *rt);

struct tide_cons_grammar {
    atomic_int refs;
    cg g;
    /* the runtime new cursors share (matcher, masks); under rt_mu */
    pthread_mutex_t rt_mu;
    cons_rt *rt;
};

tide_cons_grammar *tide_cons_grammar_ref(tide_cons_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void tide_cons_grammar_unref(tide_cons_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    rt_unref(g->rt);
    pthread_mutex_destroy(&g->rt_mu);
    cg_free(&g->g);
    free(g);
}

int tide_cons_compile(tide_cons_kind kind, const char *text, size_t len, tide_cons_grammar **out, tide_status *st) {
    *out = NULL;
    if (len > TIDE_CONS_MAX_TEXT)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "constraint of %zu bytes is over the limit of %u", len,
                         TIDE_CONS_MAX_TEXT);
    tide_cons_grammar *gr = calloc(1, sizeof *gr);
    if (!gr) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory compiling a constraint");
    atomic_init(&gr->refs, 1);
    pthread_mutex_init(&gr->rt_mu, NULL);
    cg *g = &gr->g;
    cg_init(g);
    tide_status lst = {0};
    int32_t root = -1;
    int rc = -1;
    if (kind == TIDE_CONS_GBNF) {
        rc = tide_gbnf_parse(g, text, len, &lst);
    } else {
        int32_t r = cg_rule_new(g, "root", 4);
        if (r >= 0) {
            g->root = r;
            if (kind == TIDE_CONS_REGEX) {
                root = cg_regex(g, text, len, 0, 0, &lst);
                if (root < 0) tide_fail_ctx(&lst, "regex");
            } else if (kind == TIDE_CONS_JSON_OBJECT) {
                g->max_depth = 128;
                root = tide_schema_any_object(g, &lst);
            } else {
                json_error_t je;
                json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &je);
                if (!j) tide_fail(&lst, TIDE_ERR_INVALID, "schema is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
                else if (kind == TIDE_CONS_TOOLS) {
                    root = tide_schema_tool_calls(g, j, &lst);
                    json_decref(j);
                    if (root < 0) tide_fail_ctx(&lst, "tool call");
                } else {
                    root = tide_schema_compile(g, j, &lst);
                    json_decref(j);
                    if (root < 0) tide_fail_ctx(&lst, "JSON schema");
                }
            }
            if (root >= 0) {
                g->rules[r].ast = root;
                rc = 0;
            } else if (!lst.msg[0]) lst = g->st;
        } else lst = g->st;
    }
    if (rc == 0) rc = cg_finish(g, &lst);
    if (rc != 0) {
        if (st) *st = lst;
        if (st && st->code == TIDE_OK) st->code = TIDE_ERR_INVALID;
        tide_cons_grammar_unref(gr);
        return -1;
    }
    *out = gr;
    return 0;
}

int tide_cons_grammar_matches(tide_cons_grammar *gr, const char *text, size_t len, tide_status *st) {
    cm m;
    if (cm_init(&m, &gr->g, st) != 0) return -1;
    int32_t s = cm_step_bytes(&m, m.root, (const uint8_t *)text, len);
    int r = s >= 0 ? cm_accepting(&m, s) : 0;
    if (s == CM_ERROR) {
        if (st) *st = m.st;
        r = -1;
    }
    cm_free(&m);
    return r;
}

int tide_regex_search(const char *re, const char *s) {
    cg g;
    cg_init(&g);
    tide_status st = {0};
    int32_t r = cg_rule_new(&g, "re", 2);
    int32_t x = r >= 0 ? cg_regex(&g, re, strlen(re), 1, 0, &st) : -1;
    int out = -1;
    if (x >= 0) {
        g.rules[r].ast = x;
        g.root = r;
        cm m;
        if (cg_finish(&g, &st) == 0 && cm_init(&m, &g, &st) == 0) {
            int32_t q = cm_step_bytes(&m, m.root, (const uint8_t *)s, strlen(s));
            out = q >= 0 ? cm_accepting(&m, q) : q == CM_DEAD ? 0 : -1;
            cm_free(&m);
        }
    }
    cg_free(&g);
    return out;
}

/* ---- compile cache ------------------------------------------------------------------ */

typedef struct cache_ent {
    tide_cons_kind kind;
    char *text;
    size_t len;
    tide_cons_grammar *g;
    uint64_t used;
} cache_ent;

struct tide_cons_cache {
    pthread_mutex_t mu;
    cache_ent *e;
    int n, cap;
    uint64_t clock;
};

tide_cons_cache *tide_cons_cache_new(int capacity) {
    tide_cons_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cap = capacity > 0 ? capacity : 1;
    c->e = calloc((size_t)c->cap, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void tide_cons_cache_free(tide_cons_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].text);
        tide_cons_grammar_unref(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int tide_cons_cache_get(tide_cons_cache *c, tide_cons_kind kind, const char *text, size_t len,
                        tide_cons_grammar **out, tide_status *st) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].kind == kind && c->e[i].len == len && !memcmp(c->e[i].text, text, len)) {
            c->e[i].used = ++c->clock;
            *out = tide_cons_grammar_ref(c->e[i].g);
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
    pthread_mutex_unlock(&c->mu);
    /* compile outside the lock (it may take milliseconds) */
    if (tide_cons_compile(kind, text, len, out, st) != 0) return -1;
    char *copy = malloc(len + 1);
    if (!copy) return 0; /* not cached, still compiled */
    memcpy(copy, text, len);
    copy[len] = 0;
    pthread_mutex_lock(&c->mu);
    int slot = c->n < c->cap ? c->n++ : 0;
    if (slot == 0 && c->n == c->cap) {
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].text);
        tide_cons_grammar_unref(c->e[slot].g);
    }
    c->e[slot] = (cache_ent){kind, copy, len, tide_cons_grammar_ref(*out), ++c->clock};
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ---- the shared runtime and the cursor ---------------------------------------------- */

/* A grammar's runtime for one vocabulary: the matcher (its interned stacks
 * and positions) and the mask cache, shared by every cursor of the grammar,
 * so that a position one request has reached is a lookup for the next
 * (cached constraints are reused across requests). A mutex covers it: the
 * engine drives cursors from one thread, but nothing forbids more. When it
 * is half full a fresh one is started for new cursors; the old one lives
 * until its last cursor is freed. */
#define MASK_SLOTS 1024

struct cons_rt {
    atomic_int refs;
    pthread_mutex_t mu;
    const tide_cons_vocab *v;
    cm m;
    int32_t n_words;
    uint32_t *masks;        /* [cap_slots][n_words] */
    int32_t slot_owner[MASK_SLOTS];
    uint8_t slot_ref[MASK_SLOTS];
    int n_slots, cap_slots, hand;
    int32_t *walk;          /* [max_depth + 1] states along the trie path */
    const int32_t **rows;   /* [max_depth + 1] their successor rows */
};

static void rt_unref(cons_rt *rt) {
    if (!rt || atomic_fetch_sub(&rt->refs, 1) != 1) return;
    cm_free(&rt->m);
    free(rt->masks);
    free(rt->walk);
    free(rt->rows);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
}

static int rt_full(const cons_rt *rt) {
    return rt->m.n_sets > CM_MAX_SETS / 2 || rt->m.n_nodes > CM_MAX_NODES / 2;
}

/* The grammar's runtime for v (a new reference). */
static cons_rt *rt_get(tide_cons_grammar *g, const tide_cons_vocab *v, tide_status *st) {
    pthread_mutex_lock(&g->rt_mu);
    cons_rt *rt = g->rt;
    if (rt) {
        pthread_mutex_lock(&rt->mu);
        int stale = rt->v != v || rt_full(rt);
        pthread_mutex_unlock(&rt->mu);
        if (stale) {
            rt_unref(rt);
            rt = g->rt = NULL;
        }
    }
    if (!rt) {
        rt = calloc(1, sizeof *rt);
        if (rt) {
            atomic_init(&rt->refs, 1);
            pthread_mutex_init(&rt->mu, NULL);
            rt->v = v;
            rt->n_words = (v->n + 31) / 32;
            rt->walk = malloc(((size_t)v->max_depth + 1) * sizeof *rt->walk);
            rt->rows = malloc(((size_t)v->max_depth + 1) * sizeof *rt->rows);
        }
        if (!rt || !rt->walk || !rt->rows) {
            if (rt) free(rt->walk), free(rt->rows), pthread_mutex_destroy(&rt->mu), free(rt);
            pthread_mutex_unlock(&g->rt_mu);
            tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint)");
            return NULL;
        }
        if (cm_init(&rt->m, &g->g, st) != 0) {
            free(rt->walk), free(rt->rows), pthread_mutex_destroy(&rt->mu), free(rt);
            pthread_mutex_unlock(&g->rt_mu);
            return NULL;
        }
        g->rt = rt;
    }
    atomic_fetch_add(&rt->refs, 1);
    pthread_mutex_unlock(&g->rt_mu);
    return rt;
}

typedef struct hist { int32_t state; uint8_t gated, finished; } hist;

struct tide_cons {
    tide_cons_grammar *gr;
    cons_rt *rt;
    const tide_cons_vocab *v;
    int32_t cur;
    int gated, finished;
    int32_t gate;
    hist *h;
    int64_t n_h, cap_h;
};

int tide_cons_new(tide_cons_grammar *g, const tide_cons_vocab *v, tide_cons **out, tide_status *st) {
    *out = NULL;
    tide_cons *c = calloc(1, sizeof *c);
    if (!c) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint)");
    c->gr = tide_cons_grammar_ref(g);
    c->v = v;
    c->gate = -1;
    if (!(c->rt = rt_get(g, v, st))) {
        tide_cons_grammar_unref(c->gr);
        free(c);
        return -1;
    }
    c->cur = c->rt->m.root;
    *out = c;
    return 0;
}

void tide_cons_free(tide_cons *c) {
    if (!c) return;
    rt_unref(c->rt);
    tide_cons_grammar_unref(c->gr);
    free(c->h);
    free(c);
}

void tide_cons_set_gate(tide_cons *c, int32_t token) {
    c->gate = token;
    c->gated = token >= 0 && c->n_h == 0;
}

/* Walks the trie from state s into mask (cleared first). Under rt->mu. */
static int walk(cons_rt *rt, int32_t s, uint32_t *mask, tide_status *st) {
    const tide_cons_vocab *v = rt->v;
    memset(mask, 0, (size_t)rt->n_words * sizeof *mask);
    int32_t *stk = rt->walk;
    const int32_t **rows = rt->rows; /* rows[d]: stk[d]'s row, read once per node it is the parent of */
    stk[0] = s;
    cm *m = &rt->m;
    rows[0] = m->sets[s].row;
    /* the trie's arrays in locals: stores into mask and rows cannot alias them */
    const uint16_t *ndepth = v->ndepth;
    const uint8_t *nbyte = v->nbyte;
    const int32_t *nend = v->nend, *ntok = v->ntok, *nntok = v->nntok, *order = v->order;
    const int32_t n_nodes = v->n_nodes;
    for (int32_t i = 1; i < n_nodes;) {
        int d = ndepth[i];
        uint8_t b = nbyte[i];
        const int32_t *row = rows[d - 1];
        int32_t t = row ? row[b] : CM_UNKNOWN;
        if (t == CM_UNKNOWN) {
            t = cm_step_slow(m, stk[d - 1], b);
            rows[d - 1] = m->sets[stk[d - 1]].row;
        }
        if (t < 0) {
            if (t == CM_ERROR) {
                if (st) *st = m->st;
                return -1;
            }
            i = nend[i];
            continue;
        }
        stk[d] = t;
        rows[d] = m->sets[t].row;
        for (int32_t k = 0, nt = nntok[i]; k < nt; k++) {
            int32_t id = order[ntok[i] + k];
            mask[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    return 0;
}

/* The cached mask of state s (computing it on a miss). Under rt->mu. */
static const uint32_t *state_mask(cons_rt *rt, int32_t s, tide_status *st) {
    cm_set *set = &rt->m.sets[s];
    if (set->mask_slot >= 0) {
        rt->slot_ref[set->mask_slot] = 1;
        return rt->masks + (size_t)set->mask_slot * rt->n_words;
    }
    int slot;
    if (rt->n_slots < MASK_SLOTS) {
        if (rt->n_slots == rt->cap_slots) {
            int cap = rt->cap_slots ? 2 * rt->cap_slots : 16;
            uint32_t *mk = realloc(rt->masks, (size_t)cap * rt->n_words * sizeof *mk);
            if (!mk) {
                tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint masks)");
                return NULL;
            }
            rt->masks = mk;
            rt->cap_slots = cap;
        }
        slot = rt->n_slots++;
    } else { /* clock */
        while (rt->slot_ref[rt->hand]) {
            rt->slot_ref[rt->hand] = 0;
            rt->hand = (rt->hand + 1) % MASK_SLOTS;
        }
        slot = rt->hand;
        rt->hand = (rt->hand + 1) % MASK_SLOTS;
        rt->m.sets[rt->slot_owner[slot]].mask_slot = -1;
    }
    uint32_t *mask = rt->masks + (size_t)slot * rt->n_words;
    if (walk(rt, s, mask, st) != 0) {
        if (slot == rt->n_slots - 1) rt->n_slots--;
        return NULL;
    }
    rt->m.sets[s].mask_slot = slot; /* sets may have moved during the walk */
    rt->slot_owner[slot] = s;
    rt->slot_ref[slot] = 1;
    return mask;
}

int tide_cons_mask(tide_cons *c, uint32_t *allow, const int32_t *end, int n_end, tide_status *st) {
    if (c->gated) { /* free text, but the answer must still come */
        int32_t n = c->v->n, words = (n + 31) / 32;
        memset(allow, 0xff, (size_t)words * sizeof *allow);
        if (n % 32) allow[words - 1] = (1u << (n % 32)) - 1;
        for (int i = 0; i < n_end; i++)
            if (end[i] >= 0 && end[i] < n && end[i] != c->gate) allow[end[i] >> 5] &= ~(1u << (end[i] & 31));
        return 0;
    }
    if (c->finished) return tide_fail(st, TIDE_ERR_INVALID, "constraint: the output is already complete");
    cons_rt *rt = c->rt;
    pthread_mutex_lock(&rt->mu);
    const uint32_t *mask = state_mask(rt, c->cur, st);
    if (mask) memcpy(allow, mask, (size_t)rt->n_words * sizeof *allow);
    int acc = cm_accepting(&rt->m, c->cur);
    pthread_mutex_unlock(&rt->mu);
    if (!mask) return -1;
    for (int i = 0; i < n_end; i++) {
        int32_t t = end[i];
        if (t < 0 || t >= c->v->n) continue;
        if (acc) allow[t >> 5] |= 1u << (t & 31);
        else allow[t >> 5] &= ~(1u << (t & 31));
    }
    for (int32_t w = 0; w < rt->n_words; w++)
        if (allow[w]) return 0;
    return tide_fail(st, TIDE_ERR_INVALID,
                     "constraint: no token can continue the output (after %lld tokens; no end token is available "
                     "to stop)", (long long)c->n_h);
}

static int push_hist(tide_cons *c, tide_status *st) {
    if (c->n_h == c->cap_h) {
        int64_t cap = c->cap_h ? 2 * c->cap_h : 64;
        hist *h = realloc(c->h, (size_t)cap * sizeof *h);
        if (!h) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint)");
        c->h = h;
        c->cap_h = cap;
    }
    c->h[c->n_h++] = (hist){c->cur, (uint8_t)c->gated, (uint8_t)c->finished};
    return 0;
}

static int is_end(int32_t t, const int32_t *end, int n_end) {
    for (int i = 0; i < n_end; i++)
        if (end[i] == t) return 1;
    return 0;
}

int tide_cons_accept(tide_cons *c, int32_t t, const int32_t *end, int n_end, tide_status *st) {
    if (t < 0 || t >= c->v->n) return tide_fail(st, TIDE_ERR_INVALID, "constraint: token %d outside the vocabulary", (int)t);
    if (c->gated) {
        if (push_hist(c, st)) return -1;
        if (t == c->gate) c->gated = 0;
        return 0;
    }
    if (c->finished) return tide_fail(st, TIDE_ERR_INVALID, "constraint: token %d after the end", (int)t);
    if (is_end(t, end, n_end)) {
        if (!tide_cons_complete(c))
            return tide_fail(st, TIDE_ERR_INVALID, "constraint: end token %d before the output is complete", (int)t);
        if (push_hist(c, st)) return -1;
        c->finished = 1;
        return 0;
    }
    if (c->v->skip[t]) return tide_fail(st, TIDE_ERR_INVALID, "constraint: token %d is not text", (int)t);
    cons_rt *rt = c->rt;
    pthread_mutex_lock(&rt->mu);
    int32_t s = cm_step_bytes(&rt->m, c->cur, c->v->bytes + c->v->off[t], c->v->off[t + 1] - c->v->off[t]);
    if (s == CM_ERROR && st) *st = rt->m.st;
    pthread_mutex_unlock(&rt->mu);
    if (s == CM_ERROR) return -1;
    if (s < 0) return tide_fail(st, TIDE_ERR_INVALID, "constraint: token %d does not continue a valid output", (int)t);
    if (push_hist(c, st)) return -1;
    c->cur = s;
    return 0;
}

int tide_cons_rollback(tide_cons *c, int n, tide_status *st) {
    if (n < 0 || n > c->n_h)
        return tide_fail(st, TIDE_ERR_INVALID, "constraint: cannot roll back %d of %lld tokens", n, (long long)c->n_h);
    if (n == 0) return 0;
    hist h = c->h[c->n_h - n];
    c->n_h -= n;
    c->cur = h.state;
    c->gated = h.gated;
    c->finished = h.finished;
    return 0;
}

/* The position's flags, read under the runtime's lock (other cursors may
 * grow its arrays). */
static void flags(const tide_cons *c, int *accept, int *open) {
    pthread_mutex_lock(&c->rt->mu);
    *accept = cm_accepting(&c->rt->m, c->cur);
    *open = cm_open(&c->rt->m, c->cur);
    pthread_mutex_unlock(&c->rt->mu);
}

int tide_cons_complete(const tide_cons *c) {
    if (c->gated) return 0;
    if (c->finished) return 1;
    int acc, open;
    flags(c, &acc, &open);
    return acc;
}

int tide_cons_done(const tide_cons *c) {
    if (c->gated) return 0;
    if (c->finished) return 1;
    int acc, open;
    flags(c, &acc, &open);
    return acc && !open;
}
int64_t tide_cons_n_accepted(const tide_cons *c) { return c->n_h; }
int32_t tide_cons_vocab_size_of(const tide_cons *c) { return c->v->n; }
