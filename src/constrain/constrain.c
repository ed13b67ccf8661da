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

/* Slice classes: text whose ASCII bytes are in the class (a bit per byte
 * below 0x80) and whose other bytes, when the class takes them, are
 * well-formed UTF-8 (any codepoint from U+0080, surrogates excluded).
 * Fixed: 0 printable ASCII with tab, newline, carriage return, and the
 * rest; 1 JSON string content (printable ASCII but '"' and '\\', and the
 * rest). More are made on demand from the bytes a position takes (ASCII
 * only, e.g. a hostname's letters, digits, '-' and '.'), up to
 * CONS_NK_MAX per vocabulary. A slice is used for a position where every
 * text of the class up to some number of characters is live (checked by
 * exploring the matcher), so the trie walk skips the subtrees made only of
 * such tokens. */
#define CONS_NK_FIXED 2
#define CONS_NK_MAX 16
#define CONS_PCAP 32 /* characters up to which a slice's bitsets are kept */
typedef struct cons_class {
    uint32_t ascii[4];  /* ASCII bytes of the class */
    int nonascii;       /* and every well-formed non-ASCII character */
    int16_t *kmax;      /* [n_nodes] the most characters a token of the subtree starts if all are of the class, else -1 */
    int16_t *kpath;     /* [n_nodes] characters the node's own bytes start if they are of the class, else -1 */
    uint32_t *pk;       /* [(pcap + 1) * words]: the class's tokens of at most c characters */
    int pcap;
} cons_class;
static int slice_ascii(const cons_class *k, uint8_t b) { return b < 0x80 && (k->ascii[b >> 5] >> (b & 31) & 1); }

/* UTF-8 positions: 0 between characters; else what the next byte may be
 * (the first continuation's range depends on the lead byte). */
enum { U_B, U_1, U_2, U_3, U_E0, U_ED, U_F0, U_F4 };
/* The next position after byte b at position u (-1: not well-formed);
 * *starts: b starts a character. */
static int utf8_next(int u, uint8_t b, int *starts) {
    *starts = 0;
    switch (u) {
    case U_B:
        *starts = 1;
        if (b < 0x80) return U_B;
        if (b >= 0xC2 && b <= 0xDF) return U_1;
        if (b == 0xE0) return U_E0;
        if (b == 0xED) return U_ED;
        if (b >= 0xE1 && b <= 0xEF) return U_2;
        if (b == 0xF0) return U_F0;
        if (b >= 0xF1 && b <= 0xF3) return U_3;
        if (b == 0xF4) return U_F4;
        return -1;
    case U_1: return b >= 0x80 && b <= 0xBF ? U_B : -1;
    case U_2: return b >= 0x80 && b <= 0xBF ? U_1 : -1;
    case U_3: return b >= 0x80 && b <= 0xBF ? U_2 : -1;
    case U_E0: return b >= 0xA0 && b <= 0xBF ? U_1 : -1;
    case U_ED: return b >= 0x80 && b <= 0x9F ? U_1 : -1;
    case U_F0: return b >= 0x90 && b <= 0xBF ? U_2 : -1;
    case U_F4: return b >= 0x80 && b <= 0x8F ? U_2 : -1;
    }
    return -1;
}

/* Characters a byte string starts if it is text of class k, else -1. */
static int slice_count(const cons_class *k, const uint8_t *b, size_t n) {
    int u = U_B, c = 0;
    for (size_t i = 0; i < n; i++) {
        int starts;
        if (u == U_B && (b[i] < 0x80 ? !slice_ascii(k, b[i]) : !k->nonascii)) return -1;
        u = utf8_next(u, b[i], &starts);
        if (u < 0) return -1;
        c += starts;
        if (c > 32000) return -1;
    }
    return c;
}

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
    /* slices (docs/structured.md, "Token masks"): the classes, the first
     * CONS_NK_FIXED made with the trie, more on demand under cls_mu (a
     * class is immutable once n_cls counts it) */
    cons_class cls[CONS_NK_MAX];
    atomic_int n_cls;
    pthread_mutex_t cls_mu;
    int32_t *parent; /* [n_nodes] */
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
    for (int k = 0; k < CONS_NK_MAX; k++) free(v->cls[k].kmax), free(v->cls[k].kpath), free(v->cls[k].pk);
    free(v->parent);
    pthread_mutex_destroy(&v->cls_mu);
    free(v);
}

int32_t tide_cons_vocab_size(const tide_cons_vocab *v) { return v->n; }

/* A class's per-node maxima and per-length bitsets (k's bytes set). */
static int class_build(const tide_cons_vocab *v, cons_class *k) {
    int32_t words = (v->n + 31) / 32;
    const int32_t *parent = v->parent;
    int16_t *km = k->kmax = malloc((size_t)v->n_nodes * sizeof *km);
    int16_t *kp = k->kpath = malloc((size_t)v->n_nodes * sizeof *kp);
    uint8_t *ku = malloc((size_t)v->n_nodes);
    if (!km || !kp || !ku) {
        free(ku);
        return -1;
    }
    kp[0] = 0, ku[0] = U_B;
    for (int32_t i = 1; i < v->n_nodes; i++) { /* parents before children */
        int32_t pa = parent[i];
        uint8_t b = v->nbyte[i];
        int in = ku[pa] != U_B || (b < 0x80 ? slice_ascii(k, b) : k->nonascii);
        int starts, u = kp[pa] < 0 || !in ? -1 : utf8_next(ku[pa], b, &starts);
        kp[i] = (int16_t)(u < 0 || kp[pa] >= 32000 ? -1 : kp[pa] + starts);
        ku[i] = (uint8_t)(u < 0 ? U_B : u);
    }
    free(ku);
    int cmax = 0;
    for (int32_t i = 0; i < v->n_nodes; i++) {
        km[i] = -2; /* no token yet */
        if (v->nntok[i]) { /* the node's own bytes: kp unless cut mid-character */
            int32_t t = v->order[v->ntok[i]];
            int c = slice_count(k, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
            km[i] = (int16_t)c;
            if (c > cmax) cmax = c;
        }
    }
    for (int32_t i = v->n_nodes - 1; i > 0; i--) { /* children before parents */
        int16_t *pa = &km[parent[i]];
        if (km[i] == -1 || *pa == -1) *pa = -1;
        else if (km[i] > *pa) *pa = km[i];
    }
    int pc = k->pcap = cmax < CONS_PCAP ? cmax : CONS_PCAP;
    uint32_t *pk = k->pk = calloc((size_t)(pc + 1) * (size_t)words, sizeof *pk);
    if (!pk) return -1;
    for (int32_t t = 0; t < v->n; t++) {
        if (v->skip[t]) continue;
        int c = slice_count(k, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
        for (int l = c < 0 ? pc + 1 : c; l <= pc; l++) pk[(size_t)l * words + (t >> 5)] |= 1u << (t & 31);
    }
    return 0;
}

/* The trie's parents and the fixed classes (after the trie). */
static int slices_build(tide_cons_vocab *v) {
    int32_t *parent = v->parent = malloc((size_t)v->n_nodes * sizeof *parent),
            *path = malloc(((size_t)v->max_depth + 2) * sizeof *path);
    if (!parent || !path) {
        free(path);
        return -1;
    }
    path[0] = 0;
    parent[0] = -1;
    for (int32_t i = 1; i < v->n_nodes; i++) {
        parent[i] = path[v->ndepth[i] - 1];
        path[v->ndepth[i]] = i;
    }
    free(path);
    for (int k = 0; k < CONS_NK_FIXED; k++) {
        cons_class *c = &v->cls[k];
        for (int b = 0x20; b < 0x7f; b++)
            if (k == 0 || (b != '"' && b != '\\')) c->ascii[b >> 5] |= 1u << (b & 31);
        if (k == 0) c->ascii[0] |= 1u << '\t' | 1u << '\n' | 1u << '\r';
        c->nonascii = 1;
        if (class_build(v, c)) return -1;
    }
    atomic_init(&v->n_cls, CONS_NK_FIXED);
    return 0;
}

/* The class of these ASCII bytes (no others), made on first use; NULL when
 * the vocabulary has CONS_NK_MAX classes already or memory is short. */
static const cons_class *class_get(tide_cons_vocab *v, const uint32_t ascii[4]) {
    int n = atomic_load(&v->n_cls);
    for (int k = CONS_NK_FIXED; k < n; k++)
        if (!v->cls[k].nonascii && !memcmp(v->cls[k].ascii, ascii, sizeof v->cls[k].ascii)) return &v->cls[k];
    pthread_mutex_lock(&v->cls_mu);
    const cons_class *r = NULL;
    n = atomic_load(&v->n_cls);
    for (int k = CONS_NK_FIXED; k < n && !r; k++)
        if (!v->cls[k].nonascii && !memcmp(v->cls[k].ascii, ascii, sizeof v->cls[k].ascii)) r = &v->cls[k];
    if (!r && n < CONS_NK_MAX) {
        cons_class *c = &v->cls[n];
        memcpy(c->ascii, ascii, sizeof c->ascii);
        c->nonascii = 0;
        if (class_build(v, c) == 0) {
            atomic_store(&v->n_cls, n + 1);
            r = c;
        } else {
            free(c->kmax), free(c->kpath), free(c->pk);
            memset(c, 0, sizeof *c);
        }
    }
    pthread_mutex_unlock(&v->cls_mu);
    return r;
}

int tide_cons_vocab_new(const uint8_t *const *bytes, const uint32_t *lens, const uint8_t *skip, int32_t n,
                        tide_cons_vocab **out, tide_status *st) {
    *out = NULL;
    if (n <= 0) return tide_fail(st, TIDE_ERR_INVALID, "constraint vocabulary: no tokens");
    tide_cons_vocab *v = calloc(1, sizeof *v);
    if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint vocabulary)");
    pthread_mutex_init(&v->cls_mu, NULL);
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
    if (slices_build(v) != 0) {
        tide_cons_vocab_free(v);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (constraint vocabulary)");
    }
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
    } else if (kind == TIDE_CONS_LARK) {
        rc = tide_lark_parse(g, text, len, &lst);
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

tide_cons_kind tide_cons_grammar_kind(const char *text, size_t len) {
    for (size_t k = 0; k + 3 <= len; k++)
        if (!memcmp(text + k, "::=", 3)) return TIDE_CONS_GBNF;
    return TIDE_CONS_LARK;
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
    /* slice exploration scratch: (set, UTF-8 position) pairs seen, their
     * fewest characters; the current and next level's pairs */
    int64_t *seen_key; int32_t seen_cap;
    int64_t *lv[2]; int32_t nlv[2];
    uint32_t cdone[256 * 8], cstamp; /* (byte class, UTF-8 position) stepped from the current pair */
};

static void rt_unref(cons_rt *rt) {
    if (!rt || atomic_fetch_sub(&rt->refs, 1) != 1) return;
    cm_free(&rt->m);
    free(rt->masks);
    free(rt->walk);
    free(rt->rows);
    free(rt->seen_key), free(rt->lv[0]), free(rt->lv[1]);
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

/* Whether slices are used (tide_cons_set_slices: the tests compare both). */
static atomic_int use_slices = 1;
void tide_cons_set_slices(int on) { atomic_store(&use_slices, on); }

#define SLICE_PAIRS 1024 /* exploration budget: (set, UTF-8 position) pairs */

/* Records pair (t, u) reached with exactly c characters; whether it is
 * new. Pairs are kept apart by their count (not merged at the fewest), so a
 * level's list is every pair some text of that many characters reaches:
 * what "dead after" needs. */
static int seen_put(cons_rt *rt, int32_t t, int u, int c) {
    int64_t key = ((int64_t)t * 8 + u) * 64 + c; /* c <= CONS_PCAP < 64 */
    uint32_t h = (uint32_t)((uint64_t)key * 0x9E3779B97F4A7C15ull >> 40) & (uint32_t)(rt->seen_cap - 1);
    for (;; h = (h + 1) & (uint32_t)(rt->seen_cap - 1)) {
        if (rt->seen_key[h] == key) return 0;
        if (rt->seen_key[h] < 0) {
            rt->seen_key[h] = key;
            return 1;
        }
    }
}

/* The most characters n <= cap such that every text of slice class k of at
 * most n characters (the last one possibly cut) is live from set s: a
 * breadth-first exploration of (set, UTF-8 position) pairs by characters,
 * stopping at the first dead text; 0 (no slice) when a matcher limit is
 * near. Under rt->mu. */
static int slice_reach(cons_rt *rt, const cons_class *k, int32_t s, int cap, int *dead_after) {
    *dead_after = 0;
    if (!rt->seen_key) {
        rt->seen_cap = 4 * SLICE_PAIRS;
        rt->seen_key = malloc((size_t)rt->seen_cap * sizeof *rt->seen_key);
        rt->lv[0] = malloc(SLICE_PAIRS * sizeof *rt->lv[0]);
        rt->lv[1] = malloc(SLICE_PAIRS * sizeof *rt->lv[1]);
        if (!rt->seen_key || !rt->lv[0] || !rt->lv[1]) return 0; /* no slice: still exact */
    }
    memset(rt->seen_key, 0xff, (size_t)rt->seen_cap * sizeof *rt->seen_key);
    cm *m = &rt->m;
    int minfail = cap + 1, level = 0, pairs = 1, cur = 0;
    rt->nlv[0] = rt->nlv[1] = 0;
    seen_put(rt, s, U_B, 0);
    rt->lv[0][rt->nlv[0]++] = (int64_t)s * 8 + U_B;
    while (rt->nlv[cur] > 0 && level < minfail) {
        int nx = cur ^ 1, live_next = 0;
        for (int32_t idx = 0; idx < rt->nlv[cur]; idx++) {
            int64_t e = rt->lv[cur][idx];
            int32_t x = (int32_t)(e >> 3);
            int u = (int)(e & 7);
            int lo = u == U_B ? 0 : 0x80, hi = u == U_B ? 0xF4 : 0xBF;
            if (++rt->cstamp == 0) {
                memset(rt->cdone, 0, sizeof rt->cdone);
                rt->cstamp = 1;
            }
            for (int b = lo; b <= hi; b++) {
                if (u == U_B && (b < 0x80 ? !slice_ascii(k, (uint8_t)b) : !k->nonascii)) continue;
                int starts, nu = utf8_next(u, (uint8_t)b, &starts);
                if (nu < 0) continue;
                uint32_t *dn = &rt->cdone[m->cls[b] * 8 + nu]; /* a class steps alike */
                if (*dn == rt->cstamp) continue;
                *dn = rt->cstamp;
                int c = level + starts;
                /* past a failure only a new character's first byte matters:
                 * whether every next character is dead */
                if (c > cap || c > minfail || (c == minfail && !starts)) continue;
                /* a limit reached exploring is no slice (the walk meets it
                 * only if it needs those states) */
                if (m->n_sets > CM_MAX_SETS / 2) return 0;
                int32_t t = cm_step(m, x, (uint8_t)b);
                if (t == CM_ERROR) return 0;
                if (t == CM_DEAD) {
                    if (c < minfail) minfail = c;
                    continue;
                }
                if (starts) live_next = 1;
                if (c >= minfail) continue;
                int r = seen_put(rt, t, nu, c);
                if (!r) continue;
                int to = c == level ? cur : nx;
                if (++pairs > SLICE_PAIRS || rt->nlv[to] >= SLICE_PAIRS) { /* budget spent: what is fully explored */
                    int n = minfail - 1 < level - 1 ? minfail - 1 : level - 1;
                    return n > 0 ? n : 0;
                }
                rt->lv[to][rt->nlv[to]++] = (int64_t)t * 8 + nu;
            }
        }
        if (minfail == level + 1 && minfail <= cap) /* every text of this many characters live, and no longer one */
            *dead_after = !live_next;
        rt->nlv[cur] = 0;
        cur = nx;
        level++;
    }
    return minfail - 1;
}

/* Walks the trie from state s into mask. Under rt->mu. With a slice (class
 * k, n characters: every text of the class up to n characters is live from
 * s), the mask starts as the slice's tokens of at most n characters and the
 * walk skips every subtree made only of them; when moreover no text of the
 * class of n + 1 characters is live ("dead after"), it skips every subtree
 * made only of text of the class, and every node whose own bytes are text
 * of the class of more than n characters. */
static int walk(cons_rt *rt, int32_t s, uint32_t *mask, tide_status *st) {
    const tide_cons_vocab *v = rt->v;
    const int16_t *km = NULL, *kp = NULL;
    int kn = 0, kdead = 0;
    if (atomic_load(&use_slices)) {
        int best = 0, bdead = 0;
        const cons_class *bk = NULL;
        for (int k = 0; k <= CONS_NK_FIXED; k++) {
            const cons_class *cl = k < CONS_NK_FIXED ? &v->cls[k] : NULL;
            if (!cl) { /* short of a fixed slice: the class of the ASCII bytes the position takes twice */
                if (best >= 4) break;
                uint32_t ascii[4] = {0};
                int any = 0;
                for (int b = 0; b < 0x80; b++) {
                    int32_t t = rt->m.n_sets > CM_MAX_SETS / 2 ? CM_ERROR : cm_step(&rt->m, s, (uint8_t)b);
                    if (t >= 0) t = cm_step(&rt->m, t, (uint8_t)b);
                    if (t == CM_ERROR) { /* no slice */
                        any = 0;
                        break;
                    }
                    if (t >= 0) ascii[b >> 5] |= 1u << (b & 31), any = 1;
                }
                int n_in = 0; /* worth it for a run of many kinds of character only (not structure) */
                for (int w = 0; w < 4; w++) n_in += __builtin_popcount(ascii[w]);
                if (!any || n_in < 8 || !(cl = class_get((tide_cons_vocab *)v, ascii))) break;
            }
            int dead, n = slice_reach(rt, cl, s, cl->pcap, &dead);
            if (n > best || (n == best && n > 0 && dead && !bdead)) best = n, bk = cl, bdead = dead;
        }
        if (bk) {
            km = bk->kmax;
            kp = bk->kpath;
            kn = best;
            kdead = bdead;
            memcpy(mask, bk->pk + (size_t)best * rt->n_words, (size_t)rt->n_words * sizeof *mask);
        }
    }
    if (!km) memset(mask, 0, (size_t)rt->n_words * sizeof *mask);
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
        if (km && ((km[i] >= 0 && (km[i] <= kn || kdead)) || (kdead && kp[i] > kn))) {
            i = nend[i]; /* all in the slice, or all dead after it */
            continue;
        }
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
