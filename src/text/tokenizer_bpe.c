/* BPE: turn one pre-token into ids by applying merges in rank order.
 *
 * A word starts as one symbol per character (its single-character vocabulary
 * entry; byte-fallback "<0xXX>" tokens or the unknown token when missing),
 * then the adjacent pair with the lowest merge rank is merged, leftmost first,
 * until no pair has a merge. Two equivalent loops:
 *   - short words (most of them): an array of symbols with the rank of each
 *     adjacent pair, rescanned for the minimum; after a merge only the two
 *     neighbouring ranks change. O(n^2) but tiny n and no allocation.
 *   - long words: a linked list of symbols and a queue of pending merges
 *     with one bucket per rank (see "the long-word loop" below): the same
 *     order as HF's binary heap, in linear time on runs of any length.
 * Results for short words are kept in the caller's tide_tok_cache, which is
 * cleared whenever it is half full. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "text/tokenizer_internal.h"

#define TOK_SCAN_MAX 48          /* longer words use the long-word loop */
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

/* ---- the long-word loop ----
 * HF applies the pending merge of lowest (rank, position) first, from a
 * binary heap; on a long run (a megabyte of one letter or of spaces) that
 * heap holds millions of entries and every pop is a few cache misses. Here
 * the queue is a bucket per rank holding its entries in position order, and
 * a small heap of the ranks that have entries: a bucket is consumed front
 * to back, which touches the symbols in order. The order of merges is
 * exactly HF's:
 *   - every entry of rank r is applied before any of a higher rank, and
 *     within r by position (a bucket filled out of order is sorted once
 *     when it is taken);
 *   - a merge can make a pair of a rank <= r only in a tokenizer whose
 *     merges list uses a token before it is made; then the bucket is put
 *     back and the lowest rank is taken again, as HF's heap would pop it.
 * Stale entries are skipped by HF's test: the pair at `pos` must still give
 * the merged id the entry was made for. In a well-formed merges list each
 * bucket is taken once, so the loop is linear apart from the sorting and the
 * heap of ranks (each rank is in it at most once). */

enum { BQ_UNSORTED = 1, BQ_IN_HEAP = 2 }; /* bq_state bits */

typedef struct {
    const tide_tokenizer *tok;
    tok_bpe_scratch *sc;
    size_t n_node;  /* nodes handed out so far */
    int32_t free;   /* list of nodes whose entry was taken, linked by next */
    size_t n_heap;
    uint32_t cur;   /* the rank being applied */
    bool interrupt; /* an entry of rank <= cur arrived */
} bq;

static void rank_heap_push(bq *q, uint32_t r) {
    uint32_t *h = q->sc->bq_heap;
    size_t i = q->n_heap++;
    while (i > 0 && h[(i - 1) / 2] > r) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = r;
}

/* Each rank is in the heap at most once (so it needs bq_ranks slots). */
static void rank_heap_add(bq *q, uint32_t r) {
    if (q->sc->bq_state[r] & BQ_IN_HEAP) return;
    q->sc->bq_state[r] |= BQ_IN_HEAP;
    rank_heap_push(q, r);
}

static uint32_t rank_heap_pop(bq *q) {
    uint32_t *h = q->sc->bq_heap, top = h[0], x = h[--q->n_heap];
    size_t i = 0, n = q->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = x;
    q->sc->bq_state[top] &= (uint8_t)~BQ_IN_HEAP;
    return top;
}

static int grow_nodes(tok_bpe_scratch *sc, size_t need, tide_status *st) {
    if (need <= sc->bq_node_cap) return 0;
    size_t cap = sc->bq_node_cap ? sc->bq_node_cap : 1024;
    while (cap < need) cap *= 2;
    tok_bq_node *p = realloc(sc->bq_node, cap * sizeof *p);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "bpe: out of memory (queue of %zu)", cap);
    sc->bq_node = p;
    sc->bq_node_cap = cap;
    return 0;
}

/* Queues the pair starting at symbol pos, if it has a merge. */
static int bq_push(bq *q, int32_t pos, tide_status *st) {
    tok_sym *s = q->sc->syms;
    uint32_t rank;
    int32_t merged;
    if (pos < 0 || s[pos].next < 0 || !tok_merges_get(q->tok, s[pos].id, s[s[pos].next].id, &rank, &merged)) return 0;
    tok_bpe_scratch *sc = q->sc;
    if (rank >= sc->bq_ranks) return tide_fail(st, TIDE_ERR_INTERNAL, "bpe: merge rank %u out of range", rank);
    int32_t k = q->free;
    if (k >= 0) {
        q->free = sc->bq_node[k].next;
    } else {
        if (grow_nodes(sc, q->n_node + 1, st) != 0) return -1;
        k = (int32_t)q->n_node++;
    }
    sc->bq_node[k] = (tok_bq_node){pos, merged, -1};
    if (sc->bq_head[rank] < 0) {
        sc->bq_head[rank] = k;
        sc->bq_state[rank] &= (uint8_t)~BQ_UNSORTED;
        rank_heap_add(q, rank);
    } else {
        int32_t t = sc->bq_tail[rank];
        if (pos < sc->bq_node[t].pos) sc->bq_state[rank] |= BQ_UNSORTED;
        sc->bq_node[t].next = k;
    }
    sc->bq_tail[rank] = k;
    if (rank <= q->cur) q->interrupt = true;
    return 0;
}

static int cmp_pos(const void *a, const void *b) {
    int32_t x = ((const tok_bq_node *)a)->pos, y = ((const tok_bq_node *)b)->pos;
    return (x > y) - (x < y);
}

/* Puts the list of one rank in position order, reusing its nodes. */
static int bq_sort(bq *q, uint32_t r, tide_status *st) {
    tok_bpe_scratch *sc = q->sc;
    size_t k = 0;
    for (int32_t i = sc->bq_head[r]; i >= 0; i = sc->bq_node[i].next) k++;
    if (k > sc->bq_tmp_cap) {
        tok_bq_node *t = realloc(sc->bq_tmp, k * sizeof *t);
        if (t) sc->bq_tmp = t;
        int32_t *x = t ? realloc(sc->bq_idx, k * sizeof *x) : NULL;
        if (!x) return tide_fail(st, TIDE_ERR_NOMEM, "bpe: out of memory (sorting %zu merges)", k);
        sc->bq_idx = x;
        sc->bq_tmp_cap = k;
    }
    k = 0;
    for (int32_t i = sc->bq_head[r]; i >= 0; i = sc->bq_node[i].next) {
        sc->bq_idx[k] = i;
        sc->bq_tmp[k++] = sc->bq_node[i];
    }
    qsort(sc->bq_tmp, k, sizeof *sc->bq_tmp, cmp_pos);
    for (size_t j = 0; j < k; j++) {
        sc->bq_node[sc->bq_idx[j]] = sc->bq_tmp[j];
        sc->bq_node[sc->bq_idx[j]].next = j + 1 < k ? sc->bq_idx[j + 1] : -1;
    }
    sc->bq_head[r] = sc->bq_idx[0];
    sc->bq_tail[r] = sc->bq_idx[k - 1];
    sc->bq_state[r] &= (uint8_t)~BQ_UNSORTED;
    return 0;
}

/* Applies one entry if it is still current (HF's staleness test). */
static int bq_apply(bq *q, const tok_bq_node *e, tide_status *st) {
    tok_sym *s = q->sc->syms, *a = &s[e->pos];
    if (a->len == 0 || a->next < 0) return 0;
    tok_sym *b = &s[a->next];
    uint32_t rank;
    int32_t merged;
    if (!tok_merges_get(q->tok, a->id, b->id, &rank, &merged) || merged != e->merged) return 0;
    a->id = merged;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) s[b->next].prev = e->pos;
    return bq_push(q, a->prev, st) || bq_push(q, e->pos, st) ? -1 : 0;
}

/* Sizes the per-rank tables for this tokenizer; every list starts empty. */
static int bq_reserve(const tide_tokenizer *tok, tok_bpe_scratch *sc, tide_status *st) {
    size_t ranks = tok->merge_rank_end;
    if (ranks <= sc->bq_ranks) return 0;
    free(sc->bq_head);
    free(sc->bq_tail);
    free(sc->bq_state);
    free(sc->bq_heap);
    sc->bq_ranks = 0;
    sc->bq_head = malloc(ranks * sizeof *sc->bq_head);
    sc->bq_tail = malloc(ranks * sizeof *sc->bq_tail);
    sc->bq_state = malloc(ranks);
    sc->bq_heap = malloc(ranks * sizeof *sc->bq_heap);
    if (!sc->bq_head || !sc->bq_tail || !sc->bq_state || !sc->bq_heap)
        return tide_fail(st, TIDE_ERR_NOMEM, "bpe: out of memory (queue of %zu ranks)", ranks);
    memset(sc->bq_head, 0xFF, ranks * sizeof *sc->bq_head);
    memset(sc->bq_state, 0, ranks);
    sc->bq_ranks = ranks;
    return 0;
}

/* The queue's loop; on failure the lists are left as they are. */
static int bq_run(bq *q, size_t n, tide_status *st) {
    tok_bpe_scratch *sc = q->sc;
    for (size_t i = 0; i + 1 < n; i++)
        if (bq_push(q, (int32_t)i, st) != 0) return -1;
    while (q->n_heap) {
        uint32_t r = rank_heap_pop(q);
        if ((sc->bq_state[r] & BQ_UNSORTED) && bq_sort(q, r, st) != 0) return -1;
        q->cur = r;
        q->interrupt = false;
        while (sc->bq_head[r] >= 0 && !q->interrupt) {
            int32_t k = sc->bq_head[r];
            tok_bq_node e = sc->bq_node[k];
            sc->bq_head[r] = e.next;
            sc->bq_node[k].next = q->free; /* reused by the next push */
            q->free = k;
            if (bq_apply(q, &e, st) != 0) return -1;
        }
        if (sc->bq_head[r] >= 0) rank_heap_add(q, r); /* interrupted: put back */
    }
    return 0;
}

static int64_t merge_long(const tide_tokenizer *tok, tok_bpe_scratch *sc, size_t n, tide_status *st) {
    if (n > INT32_MAX / 4) return tide_fail(st, TIDE_ERR_INVALID, "bpe: a word of %zu symbols is too long", n);
    if (bq_reserve(tok, sc, st) != 0) return -1;
    tok_sym *s = sc->syms;
    for (size_t i = 0; i < n; i++) {
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    bq q = {.tok = tok, .sc = sc, .free = -1, .cur = UINT32_MAX};
    if (bq_run(&q, n, st) != 0) {
        /* Empty every list again for the next word (bq_run fails only after
         * a merge was found, so the tables exist). */
        memset(sc->bq_head, 0xFF, sc->bq_ranks * sizeof *sc->bq_head);
        memset(sc->bq_state, 0, sc->bq_ranks);
        return -1;
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
    else k = merge_long(tok, sc, (size_t)k, st);
    if (k < 0) return -1;
    size_t first = out->n;
    for (int64_t i = 0; i < k; i++)
        if (tide_tok_ids_push(out, sc->syms[i].id, st) != 0) return -1;
    if (cacheable) cache_put(cache, h, padded, n, out->ids + first, (size_t)k);
    return 0;
}

void tok_bpe_scratch_free(tok_bpe_scratch *sc) {
    free(sc->syms);
    free(sc->bq_head);
    free(sc->bq_tail);
    free(sc->bq_state);
    free(sc->bq_node);
    free(sc->bq_heap);
    free(sc->bq_tmp);
    free(sc->bq_idx);
    memset(sc, 0, sizeof *sc);
}
