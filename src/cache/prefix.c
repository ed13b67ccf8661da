/* The prefix cache index (see prefix.h): a chained hash table over page ids,
 * with the entries' fields in per-page arrays (a page has at most one entry). */
#include "cache/prefix.h"

#include <stdlib.h>
#include <string.h>

/* ---- hashing -------------------------------------------------------------- */

/* MurmurHash3's 64-bit finaliser: a bijection with full avalanche. */
static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t tide_prefix_root(uint64_t salt) { return fmix64(salt ^ 0x7469646570726678ull /* "tideprfx" */); }

/* h <- fmix64(h ^ two tokens) per pair: every step is a bijection of the
 * state, so two inputs that differ in one pair differ afterwards; an odd
 * last token is marked so it cannot alias a pair; the length closes it. */
uint64_t tide_prefix_page_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = fmix64(parent ^ 0x9E3779B97F4A7C15ull);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) h = fmix64(h ^ ((uint64_t)(uint32_t)tokens[i] | (uint64_t)(uint32_t)tokens[i + 1] << 32));
    if (i < n) h = fmix64(h ^ (uint64_t)(uint32_t)tokens[i] ^ 0xA5A5A5A500000000ull);
    return fmix64(h ^ (uint64_t)n);
}

/* ---- the table ------------------------------------------------------------ */

static const int32_t *page_tokens_of(const tide_prefix_cache *pc, int32_t p) {
    return pc->tokens + (int64_t)p * pc->page_tokens;
}

static int32_t find(const tide_prefix_cache *pc, uint64_t h, uint64_t parent, uint64_t salt, const int32_t *tok) {
    for (int32_t p = pc->buckets[h & pc->bucket_mask]; p >= 0; p = pc->chain[p])
        if (pc->hash[p] == h && pc->parent[p] == parent && pc->salt[p] == salt &&
            memcmp(page_tokens_of(pc, p), tok, (size_t)pc->page_tokens * sizeof *tok) == 0)
            return p;
    return -1;
}

static void add_entry(tide_prefix_cache *pc, int32_t p, uint64_t h, uint64_t parent, uint64_t salt,
                      const int32_t *tok) {
    uint64_t b = h & pc->bucket_mask;
    pc->cached[p] = 1;
    pc->hash[p] = h;
    pc->parent[p] = parent;
    pc->salt[p] = salt;
    pc->serial[p] = ++pc->next_serial;
    memcpy(pc->tokens + (int64_t)p * pc->page_tokens, tok, (size_t)pc->page_tokens * sizeof *tok);
    pc->chain[p] = pc->buckets[b];
    pc->buckets[b] = p;
    pc->stats.inserted++;
    pc->stats.n_cached++;
}

/* Children of a dropped entry keep its serial as their parent, which no
 * entry will have again: they become unreachable and age out of the LRU. */
static void drop_entry(tide_prefix_cache *pc, int32_t p) {
    int32_t *link = &pc->buckets[pc->hash[p] & pc->bucket_mask];
    while (*link != p) link = &pc->chain[*link];
    *link = pc->chain[p];
    pc->chain[p] = -1;
    pc->cached[p] = 0;
    pc->serial[p] = 0;
    pc->stats.n_cached--;
}

int tide_prefix_init(tide_prefix_cache *pc, int32_t page_tokens, int32_t n_pages, int hash_bits,
                     tide_status *st) {
    memset(pc, 0, sizeof *pc);
    if (page_tokens <= 0) return tide_fail(st, TIDE_ERR_INVALID, "prefix cache: page_tokens = %d", (int)page_tokens);
    if (hash_bits < 1 || hash_bits > 64)
        return tide_fail(st, TIDE_ERR_INVALID, "prefix cache: hash_bits = %d", hash_bits);
    if (tide_page_alloc_init(&pc->pages, n_pages, st)) return tide_fail_ctx(st, "prefix cache");
    pc->page_tokens = page_tokens;
    pc->hash_mask = hash_bits == 64 ? ~0ull : (1ull << hash_bits) - 1;
    uint64_t nb = 16;
    while (nb < 2 * (uint64_t)n_pages) nb *= 2;
    pc->bucket_mask = nb - 1;
    size_t n = (size_t)n_pages;
    pc->cached = calloc(n, 1);
    pc->hash = calloc(n, sizeof *pc->hash);
    pc->salt = calloc(n, sizeof *pc->salt);
    pc->serial = calloc(n, sizeof *pc->serial);
    pc->parent = calloc(n, sizeof *pc->parent);
    pc->tokens = calloc(n * (size_t)page_tokens, sizeof *pc->tokens);
    pc->chain = malloc(n * sizeof *pc->chain);
    pc->buckets = malloc((size_t)nb * sizeof *pc->buckets);
    if (!pc->cached || !pc->hash || !pc->salt || !pc->serial || !pc->parent || !pc->tokens || !pc->chain ||
        !pc->buckets) {
        tide_prefix_free(pc);
        return tide_fail(st, TIDE_ERR_NOMEM, "prefix cache: out of memory for %d pages of %d tokens",
                         (int)n_pages, (int)page_tokens);
    }
    memset(pc->chain, 0xff, n * sizeof *pc->chain);
    memset(pc->buckets, 0xff, (size_t)nb * sizeof *pc->buckets);
    pc->stats.n_pages = n_pages;
    return 0;
}

void tide_prefix_free(tide_prefix_cache *pc) {
    tide_page_alloc_free(&pc->pages);
    free(pc->cached);
    free(pc->hash);
    free(pc->salt);
    free(pc->serial);
    free(pc->parent);
    free(pc->tokens);
    free(pc->chain);
    free(pc->buckets);
    memset(pc, 0, sizeof *pc);
}

/* ---- operations ----------------------------------------------------------- */

static int check_tokens(const int32_t *tokens, int64_t n, const char *fn, tide_status *st) {
    if (n < 0) return tide_fail(st, TIDE_ERR_INVALID, "prefix %s: negative token count %lld", fn, (long long)n);
    if (n > 0 && !tokens)
        return tide_fail(st, TIDE_ERR_INVALID, "prefix %s: %lld tokens but no array", fn, (long long)n);
    return 0;
}

static int check_pages(const tide_prefix_cache *pc, const int32_t *pages, int64_t n, const char *fn,
                       tide_status *st) {
    if (n < 0 || (n > 0 && !pages))
        return tide_fail(st, TIDE_ERR_INVALID, "prefix %s: bad page list (%lld pages)", fn, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (!tide_page_valid(&pc->pages, pages[i]))
            return tide_fail(st, TIDE_ERR_INVALID, "prefix %s: pages[%lld] = %d is not a page id (0..%d)", fn,
                             (long long)i, (int)pages[i], (int)pc->pages.n_pages - 1);
        if (pc->pages.ref[pages[i]] <= 0)
            return tide_fail(st, TIDE_ERR_INVALID, "prefix %s: page %d (pages[%lld]) has no reference", fn,
                             (int)pages[i], (long long)i);
    }
    return 0;
}

int tide_prefix_lookup(tide_prefix_cache *pc, const int32_t *tokens, int64_t n, uint64_t salt, int32_t *pages,
                       int32_t max_pages, int32_t *n_hit, tide_status *st) {
    *n_hit = 0;
    if (check_tokens(tokens, n, "lookup", st)) return -1;
    if (max_pages < 0 || (max_pages > 0 && !pages))
        return tide_fail(st, TIDE_ERR_INVALID, "prefix lookup: bad output array (%d pages)", (int)max_pages);
    const int32_t P = pc->page_tokens;
    int64_t full = n / P;
    pc->stats.lookups++;
    pc->stats.lookup_pages += full;
    uint64_t h = tide_prefix_root(salt), parent = 0;
    int32_t k = 0;
    for (int64_t i = 0; i < full && k < max_pages; i++) {
        const int32_t *tok = tokens + i * P;
        h = tide_prefix_page_hash(h, tok, P);
        int32_t p = find(pc, h & pc->hash_mask, parent, salt, tok);
        if (p < 0) break;
        if (pc->pages.ref[p] == 0) pc->n_idle--;
        tide_page_ref(&pc->pages, p);
        pages[k++] = p;
        parent = pc->serial[p];
    }
    pc->stats.hit_pages += k;
    *n_hit = k;
    return 0;
}

int tide_prefix_alloc(tide_prefix_cache *pc, int32_t *page, tide_status *st) {
    if (tide_page_alloc_get(&pc->pages, page, st)) return tide_fail_ctx(st, "prefix cache");
    if (pc->cached[*page]) {
        pc->n_idle--;
        drop_entry(pc, *page);
        pc->stats.evicted++;
        if (pc->on_evict) pc->on_evict(pc->evict_ctx, *page);
    }
    return 0;
}

int tide_prefix_insert(tide_prefix_cache *pc, const int32_t *tokens, int64_t n, uint64_t salt,
                       const int32_t *pages, int64_t n_pages, tide_status *st) {
    if (check_tokens(tokens, n, "insert", st)) return -1;
    const int32_t P = pc->page_tokens;
    int64_t full = n / P < n_pages ? n / P : n_pages;
    if (check_pages(pc, pages, full, "insert", st)) return -1;
    uint64_t h = tide_prefix_root(salt), parent = 0;
    for (int64_t i = 0; i < full; i++) {
        const int32_t *tok = tokens + i * P;
        h = tide_prefix_page_hash(h, tok, P);
        uint64_t hm = h & pc->hash_mask;
        int32_t p = pages[i], e = find(pc, hm, parent, salt, tok);
        if (pc->cached[p] && e != p) {
            /* p holds these tokens but hangs off an ancestor entry that was
             * evicted since (possible when an earlier page of this sequence
             * duplicated another request's entry): unreachable, so re-link.
             * Other tokens mean the caller mixed up its pages. */
            if (pc->salt[p] != salt ||
                memcmp(page_tokens_of(pc, p), tok, (size_t)P * sizeof *tok) != 0)
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "prefix insert: page %d (pages[%lld]) is cached for a different prefix", (int)p,
                                 (long long)i);
            drop_entry(pc, p);
        }
        if (e < 0) {
            add_entry(pc, p, hm, parent, salt, tok);
            e = p;
        }
        parent = pc->serial[e];
    }
    return 0;
}

int tide_prefix_share(tide_prefix_cache *pc, const int32_t *pages, int64_t n, tide_status *st) {
    if (check_pages(pc, pages, n, "share", st)) return -1;
    for (int64_t i = 0; i < n; i++) tide_page_ref(&pc->pages, pages[i]);
    return 0;
}

/* All or nothing: a page listed more often than it is referenced fails the
 * call before any count changes (a dry run on the counts, then undone). */
static int check_release(tide_prefix_cache *pc, const int32_t *pages, int64_t n, tide_status *st) {
    int64_t i = 0;
    for (; i < n && pc->pages.ref[pages[i]] > 0; i++) pc->pages.ref[pages[i]]--;
    for (int64_t j = 0; j < i; j++) pc->pages.ref[pages[j]]++;
    if (i < n)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "prefix release: page %d (pages[%lld]) released more often than referenced", (int)pages[i],
                         (long long)i);
    return 0;
}

int tide_prefix_release(tide_prefix_cache *pc, const int32_t *pages, int64_t n, tide_status *st) {
    if (check_pages(pc, pages, n, "release", st) || check_release(pc, pages, n, st)) return -1;
    for (int64_t i = n - 1; i >= 0; i--)
        if (tide_page_unref(&pc->pages, pages[i], pc->cached[pages[i]]) == 0 && pc->cached[pages[i]])
            pc->n_idle++;
    return 0;
}

int32_t tide_prefix_evict(tide_prefix_cache *pc, int32_t max_pages) {
    int32_t done = 0;
    for (int32_t p = pc->pages.head; p >= 0 && done < max_pages;) {
        int32_t next = pc->pages.next[p];
        if (pc->cached[p]) {
            drop_entry(pc, p);
            tide_page_to_head(&pc->pages, p);
            pc->n_idle--;
            pc->stats.evicted++;
            done++;
            if (pc->on_evict) pc->on_evict(pc->evict_ctx, p);
        }
        p = next;
    }
    return done;
}

tide_prefix_stats tide_prefix_get_stats(const tide_prefix_cache *pc) {
    tide_prefix_stats s = pc->stats;
    s.n_free = pc->pages.n_free;
    s.n_in_use = pc->pages.n_pages - pc->pages.n_free;
    s.n_idle = pc->n_idle;
    return s;
}
