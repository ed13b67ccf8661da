/* Added tokens: finding "<｜User｜>", "<think>" and friends in text before
 * anything else runs.
 *
 * HF matches all added tokens at once with Aho-Corasick, leftmost-longest; a
 * byte trie gives the same answer (at each position, the longest token that
 * starts there; scanning left to right). A 256-bit first-byte filter skips
 * most positions without touching the trie. Then HF's per-token flags apply:
 * single_word (the match must not touch word characters), lstrip / rstrip
 * (the match swallows whitespace on that side). Tokens with normalized=false
 * are matched on the raw text; normalized=true ones on each normalized piece,
 * by their normalized content. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

/* The string a trie matches: the content, or for normalized tokens in the
 * normalized trie, the content after the normalizer (as HF does). */
static const char *match_string(const tide_tokenizer *tok, int32_t i, bool content, size_t *n) {
    const tok_added *a = &tok->added[i];
    *n = content ? a->content_len : a->match_len;
    return tok->arena + (content ? a->content_off : a->match_off);
}

/* ---- trie construction: a first-child / next-sibling tree while inserting,
 * then compacted into per-node edge runs sorted by byte ---- */

typedef struct {
    uint32_t first_child, next_sibling; /* 0 = none (the root is never a child) */
    int32_t added;
    uint8_t byte;
} build_node;

typedef struct {
    build_node *v;
    size_t n, cap;
} build_trie;

static int64_t bt_new(build_trie *b, uint8_t byte) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        build_node *v = realloc(b->v, cap * sizeof *v);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n] = (build_node){0, 0, -1, byte};
    return (int64_t)b->n++;
}

static int64_t bt_child(build_trie *b, uint32_t node, uint8_t c) {
    uint32_t k = b->v[node].first_child;
    for (; k; k = b->v[k].next_sibling)
        if (b->v[k].byte == c) return k;
    int64_t nn = bt_new(b, c);
    if (nn < 0) return -1;
    b->v[nn].next_sibling = b->v[node].first_child;
    b->v[node].first_child = (uint32_t)nn;
    return nn;
}

static int cmp_edge(const void *x, const void *y) {
    const tok_trie_edge *a = x, *b = y;
    return (int)a->byte - (int)b->byte;
}

int tok_trie_build(tok_trie *t, const tide_tokenizer *tok, bool want_normalized, bool all, tide_status *st) {
    memset(t, 0, sizeof *t);
    build_trie b = {0};
    if (bt_new(&b, 0) < 0) return tide_fail(st, TIDE_ERR_NOMEM, "added tokens: out of memory");
    for (size_t i = 0; i < tok->n_added; i++) {
        if (!all && tok->added[i].normalized != want_normalized) continue;
        size_t n;
        const char *s = match_string(tok, (int32_t)i, all, &n);
        if (n == 0) continue;
        uint32_t node = 0;
        for (size_t k = 0; k < n; k++) {
            int64_t nx = bt_child(&b, node, (uint8_t)s[k]);
            if (nx < 0) goto oom;
            node = (uint32_t)nx;
        }
        /* Two tokens with the same content: the first keeps it. */
        if (b.v[node].added < 0) b.v[node].added = (int32_t)i;
        t->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    }
    t->nodes = malloc(b.n * sizeof *t->nodes);
    t->edges = malloc((b.n ? b.n : 1) * sizeof *t->edges);
    if (!t->nodes || !t->edges) goto oom;
    t->n_nodes = (uint32_t)b.n;
    uint32_t e = 0;
    for (size_t i = 0; i < b.n; i++) {
        t->nodes[i] = (tok_trie_node){e, 0, b.v[i].added};
        for (uint32_t k = b.v[i].first_child; k; k = b.v[k].next_sibling)
            t->edges[e++] = (tok_trie_edge){b.v[k].byte, k};
        t->nodes[i].n_edges = e - t->nodes[i].first_edge;
        qsort(t->edges + t->nodes[i].first_edge, t->nodes[i].n_edges, sizeof *t->edges, cmp_edge);
    }
    t->n_edges = e;
    free(b.v);
    return 0;
oom:
    free(b.v);
    tok_trie_free(t);
    return tide_fail(st, TIDE_ERR_NOMEM, "added tokens: out of memory building the trie");
}

void tok_trie_free(tok_trie *t) {
    free(t->nodes);
    free(t->edges);
    memset(t, 0, sizeof *t);
}

static int64_t step(const tok_trie *t, uint32_t node, uint8_t c) {
    const tok_trie_node *nd = &t->nodes[node];
    uint32_t lo = nd->first_edge, hi = lo + nd->n_edges;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (t->edges[mid].byte < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo < nd->first_edge + nd->n_edges && t->edges[lo].byte == c) return t->edges[lo].child;
    return -1;
}

int32_t tok_trie_longest(const tok_trie *t, const tide_tokenizer *tok, const char *s, size_t n, size_t *mlen) {
    (void)tok;
    if (!t->n_nodes || n == 0) return -1;
    uint8_t c0 = (uint8_t)s[0];
    if (!(t->first[c0 >> 3] & (1u << (c0 & 7)))) return -1;
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t k = 0; k < n; k++) {
        int64_t nx = step(t, node, (uint8_t)s[k]);
        if (nx < 0) break;
        node = (uint32_t)nx;
        if (t->nodes[node].added >= 0) {
            best = t->nodes[node].added;
            *mlen = k + 1;
        }
    }
    return best;
}

bool tok_trie_is_prefix(const tok_trie *t, const char *s, size_t n) {
    if (!t->n_nodes) return false;
    uint32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        int64_t nx = step(t, node, (uint8_t)s[k]);
        if (nx < 0) return false;
        node = (uint32_t)nx;
    }
    return t->nodes[node].n_edges > 0;
}

/* ---- splitting text on added tokens ---- */

static int seg_push(tok_segments *o, size_t off, size_t len, int32_t added, tide_status *st) {
    if (o->spans.n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        int32_t *a = realloc(o->added, cap * sizeof *a);
        if (!a) return tide_fail(st, TIDE_ERR_NOMEM, "added tokens: out of memory");
        o->added = a;
        o->cap = cap;
    }
    o->added[o->spans.n] = added;
    return tok_spans_push(&o->spans, (uint32_t)off, (uint32_t)len, st);
}

void tok_segments_free(tok_segments *s) {
    tok_spans_free(&s->spans);
    free(s->added);
    memset(s, 0, sizeof *s);
}

static bool last_char_is_word(const char *s, size_t n) {
    if (n == 0) return false;
    size_t k = n - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    return tok_utf8_decode((const uint8_t *)s + k, n - k, &cp) && tok_is_word(cp);
}

static bool first_char_is_word(const char *s, size_t n) {
    uint32_t cp;
    return n && tok_utf8_decode((const uint8_t *)s, n, &cp) && tok_is_word(cp);
}

int tok_split_added(const tide_tokenizer *tok, const tok_trie *t, const char *text, size_t len,
                    unsigned flags, tok_segments *out, tide_status *st) {
    size_t emitted = 0; /* text before this offset is already in out */
    size_t i = 0;
    while (i < len) {
        uint8_t c = (uint8_t)text[i];
        if (!(t->first[c >> 3] & (1u << (c & 7)))) { i++; continue; } /* the common case, inline */
        size_t mlen = 0;
        int32_t a = tok_trie_longest(t, tok, text + i, len - i, &mlen);
        if (a < 0) { i++; continue; }
        const tok_added *ad = &tok->added[a];
        size_t start = i, stop = i + mlen;
        /* A rejected match is skipped whole, as HF's find_iter has moved past it. */
        if ((flags & TIDE_ENCODE_PLAIN) || ((flags & TIDE_ENCODE_SPLIT_SPECIAL) && ad->special) ||
            (ad->single_word && (last_char_is_word(text, start) || first_char_is_word(text + stop, len - stop)))) {
            i = stop;
            continue;
        }
        if (ad->lstrip) {
            while (start > emitted) {
                size_t k = start - 1;
                while (k > emitted && ((uint8_t)text[k] & 0xC0) == 0x80) k--;
                uint32_t cp;
                if (!tok_utf8_decode((const uint8_t *)text + k, start - k, &cp) || !tok_is_whitespace(cp)) break;
                start = k;
            }
        }
        if (ad->rstrip) {
            while (stop < len) {
                uint32_t cp;
                int l = tok_utf8_decode((const uint8_t *)text + stop, len - stop, &cp);
                if (!l || !tok_is_whitespace(cp)) break;
                stop += (size_t)l;
            }
        }
        if (start > emitted && seg_push(out, emitted, start - emitted, -1, st) != 0) return -1;
        if (seg_push(out, start, stop - start, a, st) != 0) return -1;
        emitted = i = stop;
    }
    if (emitted < len) return seg_push(out, emitted, len - emitted, -1, st);
    return 0;
}
