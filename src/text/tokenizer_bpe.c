/* BPE: turn one pre-token into ids by applying merges in rank order.
 *
 * A word starts as one symbol per character (its single-character vocabulary
 * entry; byte-fallback "<0xXX>" tokens or the unknown token when missing),
 * then the adjacent pair with the lowest merge rank is merged, leftmost first,
 * until no pair has a merge. Two equivalent loops:
 *   - short words (most of them): an array of symbols with the rank of each
 *     adjacent pair, rescanned for the minimum; after a merge only the two
 *     neighbouring ranks change. O(n^2) but tiny n and no allocation.
 *   - long words: HF's linked list + binary heap of (rank, position); stale
 *     heap entries are recognised because the pair no longer yields the same
 *     merged id. O(n log n), so a 1 MB run of letters is no problem.
 * Results for short words are kept in the caller's tide_tok_cache, which is
 * cleared whenever it is half full. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "text/tokenizer_internal.h"

#define TOK_SCAN_MAX 48          /* longer words use the heap loop */
#define TOK_CACHE_SLOTS (1u << 17) /* 4 MB of 32-byte slots */
#define TOK_CACHE_MAX (1u << 16)   /* cleared when half full */

/* ---- the word cache ----
 * Open addressing over 32-byte slots keyed by the word's bytes (at most
 * TOK_CACHE_KEY of them, zero-padded) for words of at most TOK_CACHE_IDS
 * tokens: nearly every English word. Others are just recomputed. */

tide_tok_cache *tide_tok_cache_new(void) {
    tide_tok_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    /* 2 MB aligned and, where the kernel allows, backed by huge pages: the
     * lookups are random, and with 4 KB pages each one would also miss the TLB. */
    size_t bytes = TOK_CACHE_SLOTS * sizeof *c->slot;
    void *p = NULL;
    if (posix_memalign(&p, 1 << 21, bytes) != 0) {
        free(c);
        return NULL;
    }
    madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 0, bytes);
    c->slot = p;
    return c;
}

void tide_tok_cache_free(tide_tok_cache *c) {
    if (!c) return;
    free(c->slot);
    tok_encode_scratch_free(&c->scratch);
    free(c);
}

static uint16_t cache_tag(uint64_t h) {
    uint16_t t = (uint16_t)(h >> 48);
    return t ? t : 1;
}

static bool key_equal(const tok_cache_slot *s, const char *padded, size_t n) {
    uint64_t a[2], b[2];
    memcpy(a, s->key, sizeof a);
    memcpy(b, padded, sizeof b);
    return s->key_len == n && a[0] == b[0] && a[1] == b[1];
}

static const tok_cache_slot *cache_get(const tide_tok_cache *c, uint64_t h, const char *padded, size_t n) {
    uint32_t i = (uint32_t)h & (TOK_CACHE_SLOTS - 1);
    uint16_t tag = cache_tag(h);
    for (;; i = (i + 1) & (TOK_CACHE_SLOTS - 1)) {
        const tok_cache_slot *s = &c->slot[i];
        if (!s->tag) return NULL;
        if (s->tag == tag && key_equal(s, padded, n)) return s;
    }
}

static void cache_put(tide_tok_cache *c, uint64_t h, const char *padded, size_t n, const int32_t *ids, size_t k) {
    if (k > TOK_CACHE_IDS) return;
    if (c->n == TOK_CACHE_MAX) {
        memset(c->slot, 0, TOK_CACHE_SLOTS * sizeof *c->slot);
        c->n = 0;
    }
    uint32_t i = (uint32_t)h & (TOK_CACHE_SLOTS - 1);
    while (c->slot[i].tag) i = (i + 1) & (TOK_CACHE_SLOTS - 1);
    tok_cache_slot *s = &c->slot[i];
    s->tag = cache_tag(h);
    s->key_len = (uint8_t)n;
    s->n_ids = (uint8_t)k;
    memcpy(s->key, padded, TOK_CACHE_KEY);
    if (k) memcpy(s->ids, ids, k * sizeof *ids); /* a word of dropped characters has no ids (and ids may be NULL) */
    c->n++;
}

/* ---- initial symbols ---- */

static int grow_syms(tok_bpe_scratch *sc, size_t need, tide_status *st) {
    if (need <= sc->syms_cap) return 0;
    size_t cap = sc->syms_cap ? sc->syms_cap : 64;
    while (cap < need) cap *= 2;
    tok_sym *p = realloc(sc->syms, cap * sizeof *p);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "bpe: out of memory (%zu symbols)", cap);
    sc->syms = p;
    sc->syms_cap = cap;
    return 0;
}

static int32_t char_id(const tide_tokenizer *tok, const char *w, size_t n, size_t i, size_t l, uint32_t cp) {
    bool pre = tok->cont_prefix && i > 0, suf = tok->eow_suffix && i + l == n;
    if (!pre && !suf) {
        if (cp < 0x800) return tok->small_char_id[cp];
        return tok_strmap_get(&tok->vocab, tok, w + i, l);
    }
    char buf[256];
    size_t pl = pre ? strlen(tok->cont_prefix) : 0, sl = suf ? strlen(tok->eow_suffix) : 0;
    if (pl + l + sl > sizeof buf) return -1;
    memcpy(buf, tok->cont_prefix ? tok->cont_prefix : "", pl);
    memcpy(buf + pl, w + i, l);
    memcpy(buf + pl + l, tok->eow_suffix ? tok->eow_suffix : "", sl);
    return tok_strmap_get(&tok->vocab, tok, buf, pl + l + sl);
}

/* Fills sc->syms with the word's starting symbols; returns how many. */
static int64_t initial_symbols(const tide_tokenizer *tok, tok_bpe_scratch *sc, const char *w, size_t n,
                               tide_status *st) {
    if (grow_syms(sc, n + 1, st) != 0) return -1;
    size_t k = 0;
    bool prev_unk = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        int l = tok_utf8_decode((const uint8_t *)w + i, n - i, &cp);
        if (!l) return tide_fail(st, TIDE_ERR_INVALID, "bpe: invalid UTF-8 in pre-token at byte %zu", i);
        int32_t id = char_id(tok, w, n, i, (size_t)l, cp);
        if (id >= 0) {
            sc->syms[k++] = (tok_sym){id, (uint32_t)l, 0, 0};
            prev_unk = false;
        } else {
            bool done = false;
            if (tok->byte_fallback) {
                bool all = true;
                for (int b = 0; b < l; b++) all = all && tok->byte_ids[(uint8_t)w[i + b]] >= 0;
                if (all) {
                    if (grow_syms(sc, k + (size_t)l + (n - i), st) != 0) return -1;
                    for (int b = 0; b < l; b++) sc->syms[k++] = (tok_sym){tok->byte_ids[(uint8_t)w[i + b]], 1, 0, 0};
                    done = true;
                    prev_unk = false;
                }
            }
            if (!done && tok->unk_id >= 0) {
                if (tok->fuse_unk && prev_unk) sc->syms[k - 1].len += (uint32_t)l;
                else sc->syms[k++] = (tok_sym){tok->unk_id, (uint32_t)l, 0, 0};
                prev_unk = true;
            }
            /* With neither, HF drops the character; so do we. */
        }
        i += (size_t)l;
    }
    return (int64_t)k;
}

/* ---- merge loops ---- */

static size_t merge_scan(const tide_tokenizer *tok, tok_sym *s, size_t n) {
    uint32_t rank[TOK_SCAN_MAX];
    int32_t merged[TOK_SCAN_MAX];
    for (size_t i = 0; i + 1 < n; i++)
        if (!tok_merges_get(tok, s[i].id, s[i + 1].id, &rank[i], &merged[i])) rank[i] = UINT32_MAX;
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == UINT32_MAX) break;
        s[best].id = merged[best];
        s[best].len += s[best + 1].len;
        memmove(s + best + 1, s + best + 2, (n - best - 2) * sizeof *s);
        memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (n - best - 2) * sizeof *merged);
        n--;
        if (best > 0 && !tok_merges_get(tok, s[best - 1].id, s[best].id, &rank[best - 1], &merged[best - 1]))
            rank[best - 1] = UINT32_MAX;
        if (best + 1 < n && !tok_merges_get(tok, s[best].id, s[best + 1].id, &rank[best], &merged[best]))
            rank[best] = UINT32_MAX;
    }
    return n;
}

typedef struct {
    uint32_t rank, pos;
    int32_t merged;
} heap_item;

static bool heap_less(const heap_item *a, const heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

static int try_push(const tide_tokenizer *tok, tok_sym *s, heap_item *h, size_t *hn, int32_t pos) {
    uint32_t rank;
    int32_t merged;
    if (pos < 0 || s[pos].next < 0) return 0;
    if (tok_merges_get(tok, s[pos].id, s[s[pos].next].id, &rank, &merged))
        heap_push(h, hn, (heap_item){rank, (uint32_t)pos, merged});
    return 0;
}

static int64_t merge_heap(const tide_tokenizer *tok, tok_bpe_scratch *sc, size_t n, tide_status *st) {
    tok_sym *s = sc->syms;
    /* Each merge pushes at most two entries: n initial + 2n later. */
    size_t need = 3 * n + 1;
    if (need > sc->heap_cap) {
        heap_item *p = realloc(sc->heap, need * sizeof *p);
        if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "bpe: out of memory (heap of %zu)", need);
        sc->heap = p;
        sc->heap_cap = need;
    }
    heap_item *h = sc->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) try_push(tok, s, h, &hn, (int32_t)i);
    while (hn) {
        heap_item top = heap_pop(h, &hn);
        tok_sym *a = &s[top.pos];
        if (a->len == 0 || a->next < 0) continue;
        tok_sym *b = &s[a->next];
        uint32_t rank;
        int32_t merged;
        if (!tok_merges_get(tok, a->id, b->id, &rank, &merged) || merged != top.merged) continue;
        a->id = merged;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) s[b->next].prev = (int32_t)top.pos;
        try_push(tok, s, h, &hn, a->prev);
        try_push(tok, s, h, &hn, (int32_t)top.pos);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0 && (size_t)i < n; i = s[i].next) s[k++] = s[i];
    return (int64_t)k;
}

int tok_bpe_word(const tide_tokenizer *tok, tok_bpe_scratch *sc, tide_tok_cache *cache, const char *w, size_t n,
                 tide_tok_ids *out, tide_status *st) {
    if (n == 0) return 0;
    uint64_t h = 0;
    char padded[TOK_CACHE_KEY] = {0};
    bool cacheable = cache && n <= TOK_CACHE_KEY;
    if (cacheable) {
        memcpy(padded, w, n);
        h = tok_hash_bytes(padded, TOK_CACHE_KEY);
        const tok_cache_slot *s = cache_get(cache, h, padded, n);
        if (s) {
            if (out->n + s->n_ids > out->cap) {
                for (uint8_t i = 0; i < s->n_ids; i++)
                    if (tide_tok_ids_push(out, s->ids[i], st) != 0) return -1;
                return 0;
            }
            if (s->n_ids) memcpy(out->ids + out->n, s->ids, s->n_ids * sizeof *s->ids);
            out->n += s->n_ids;
            return 0;
        }
    }
    if (tok->ignore_merges) {
        int32_t id = tok_strmap_get(&tok->vocab, tok, w, n);
        if (id >= 0) {
            if (cacheable) cache_put(cache, h, padded, n, &id, 1);
            return tide_tok_ids_push(out, id, st);
        }
    }
    int64_t k = initial_symbols(tok, sc, w, n, st);
    if (k < 0) return -1;
    if (k <= TOK_SCAN_MAX && !sc->force_heap) k = (int64_t)merge_scan(tok, sc->syms, (size_t)k);
    else k = merge_heap(tok, sc, (size_t)k, st);
    if (k < 0) return -1;
    size_t first = out->n;
    for (int64_t i = 0; i < k; i++)
        if (tide_tok_ids_push(out, sc->syms[i].id, st) != 0) return -1;
    if (cacheable) cache_put(cache, h, padded, n, out->ids + first, (size_t)k);
    return 0;
}

void tok_bpe_scratch_free(tok_bpe_scratch *sc) {
    free(sc->syms);
    free(sc->heap);
    memset(sc, 0, sizeof *sc);
}
