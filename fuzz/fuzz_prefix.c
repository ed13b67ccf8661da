/* Fuzz target for the prefix cache (cache/prefix.h) and its page allocator:
 * the input is a small cache shape (page size, page count, hash bits: 2
 * bits make hash collisions common) and then a sequence of operations by
 * up to 8 sequences that use the cache as the scheduler does: look up a
 * prompt, allocate the missing pages, insert, extend (decode), fork, release,
 * evict, plus misuse that must be refused. A model of the pages beside the
 * cache holds each page's reference count and the tokens its sequence wrote.
 * After every step:
 *   - every page's reference count equals the model's (never negative) and
 *     the free queue is exactly the unreferenced pages, with sound links;
 *   - n_cached counts the entries, n_idle the unreferenced ones (what the
 *     scheduler counts as reclaimable), and the eviction hook has fired once
 *     per evicted entry, each time for a page whose entry is gone;
 * and at each step:
 *   - an allocation only ever hands out an unreferenced page (a referenced
 *     page's contents are never reused);
 *   - a lookup hit is a page that holds those very tokens under that salt;
 *   - a lookup of a sequence just inserted hits all its full pages;
 *   - misuse fails and changes no count.
 * A violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/prefix.h"

#define CHECK(c)                                                                \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "fuzz_prefix: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                            \
        }                                                                       \
    } while (0)

#define MAX_SEQ 8
#define MAX_PT 4                 /* tokens per page */
#define MAX_PAGES 24
#define MAX_TOK (MAX_PAGES * MAX_PT) /* a sequence never needs more pages than exist */

typedef struct seq {
    int live;
    uint64_t salt;
    int32_t tokens[MAX_TOK];
    int64_t n;
    int32_t pages[MAX_PAGES];
    int32_t n_pages;
} seq;

typedef struct model {
    tide_prefix_cache pc;
    int32_t P, n_pages;
    int32_t ref[MAX_PAGES];
    int32_t content[MAX_PAGES][MAX_PT]; /* what the page's writer put there */
    int32_t content_len[MAX_PAGES];
    uint64_t content_salt[MAX_PAGES];
    seq s[MAX_SEQ];
    int64_t hook_calls;        /* on_evict calls: one per evicted entry */
} model;

static void on_evict(void *ctx, int32_t page) {
    model *m = ctx;
    CHECK(page >= 0 && page < m->n_pages && !m->pc.cached[page]);
    m->hook_calls++;
}

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t next(input *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

static void check_invariants(const model *m) {
    const tide_page_alloc *pa = &m->pc.pages;
    int32_t n_zero = 0, n_cached = 0, n_idle = 0;
    for (int32_t p = 0; p < m->n_pages; p++) {
        CHECK(pa->ref[p] >= 0);
        CHECK(pa->ref[p] == m->ref[p]);
        n_zero += pa->ref[p] == 0;
        n_cached += m->pc.cached[p] != 0;
        n_idle += m->pc.cached[p] && pa->ref[p] == 0;
    }
    CHECK(pa->n_free == n_zero);
    CHECK(m->pc.stats.n_cached == n_cached);
    CHECK(m->pc.n_idle == n_idle); /* the evictable count the scheduler relies on */
    CHECK(m->hook_calls == m->pc.stats.evicted);
    int32_t seen = 0, prev = -1;
    for (int32_t p = pa->head; p >= 0; p = pa->next[p]) {
        CHECK(p < m->n_pages && seen < m->n_pages); /* no cycle */
        CHECK(pa->ref[p] == 0);
        CHECK(pa->prev[p] == prev);
        prev = p;
        seen++;
    }
    CHECK(pa->tail == prev);
    CHECK(seen == n_zero);
}

/* A hit page must hold the tokens of page i of `tokens` under `salt`. */
static void check_hit(const model *m, int32_t page, const int32_t *tokens, int64_t i, uint64_t salt) {
    CHECK(page >= 0 && page < m->n_pages);
    CHECK(m->content_len[page] == m->P && m->content_salt[page] == salt);
    CHECK(memcmp(m->content[page], tokens + i * m->P, (size_t)m->P * sizeof *tokens) == 0);
}

static int alloc_page(model *m, seq *s) {
    tide_status st = {0};
    int32_t p;
    if (tide_prefix_alloc(&m->pc, &p, &st) != 0) {
        CHECK(st.code == TIDE_ERR_NOMEM);
        for (int32_t q = 0; q < m->n_pages; q++) CHECK(m->ref[q] > 0); /* only when all are taken */
        return -1;
    }
    CHECK(p >= 0 && p < m->n_pages && m->ref[p] == 0);
    m->ref[p] = 1;
    m->content_len[p] = 0;
    m->content_salt[p] = s->salt;
    s->pages[s->n_pages++] = p;
    return 0;
}

/* Writes the sequence's tokens into its own (non-full) pages: the KV. */
static void write_pages(model *m, seq *s) {
    for (int32_t i = 0; i < s->n_pages; i++) {
        int32_t p = s->pages[i];
        int64_t len = s->n - (int64_t)i * m->P;
        if (len > m->P) len = m->P;
        if (m->content_len[p] == m->P || len <= m->content_len[p]) continue; /* full pages are immutable */
        memcpy(m->content[p], s->tokens + (int64_t)i * m->P, (size_t)len * sizeof(int32_t));
        m->content_len[p] = (int32_t)len;
    }
}

static void release_seq(model *m, seq *s) {
    tide_status st = {0};
    CHECK(tide_prefix_release(&m->pc, s->pages, s->n_pages, &st) == 0);
    for (int32_t i = 0; i < s->n_pages; i++) m->ref[s->pages[i]]--;
    s->live = 0;
}

/* Registers the full pages, then a lookup of the whole sequence must hit
 * every one of them (the references it takes are dropped again). */
static void insert_and_check(model *m, seq *s) {
    tide_status st = {0};
    CHECK(tide_prefix_insert(&m->pc, s->tokens, s->n, s->salt, s->pages, s->n_pages, &st) == 0);
    int32_t hit[MAX_PAGES], n_hit;
    CHECK(tide_prefix_lookup(&m->pc, s->tokens, s->n, s->salt, hit, MAX_PAGES, &n_hit, &st) == 0);
    CHECK(n_hit == s->n / m->P);
    for (int32_t i = 0; i < n_hit; i++) {
        check_hit(m, hit[i], s->tokens, i, s->salt);
        m->ref[hit[i]]++;
    }
    check_invariants(m);
    CHECK(tide_prefix_release(&m->pc, hit, n_hit, &st) == 0);
    for (int32_t i = 0; i < n_hit; i++) m->ref[hit[i]]--;
}

/* Appends tokens, allocating pages as they fill; gives up (and ends the
 * sequence) when the cache is out of pages. */
static void extend(model *m, seq *s, input *in, int64_t count, int alphabet) {
    for (int64_t k = 0; k < count && s->n < MAX_TOK; k++) {
        if (s->n == (int64_t)s->n_pages * m->P && alloc_page(m, s) != 0) {
            release_seq(m, s);
            return;
        }
        s->tokens[s->n++] = next(in) % alphabet;
    }
    write_pages(m, s);
    insert_and_check(m, s);
}

static void op_new(model *m, seq *s, input *in) {
    tide_status st = {0};
    memset(s, 0, sizeof *s);
    s->live = 1;
    s->salt = next(in) % 2;
    int alphabet = 1 + next(in) % 3; /* few distinct tokens: prefixes are shared */
    int64_t n = 1 + next(in) % (MAX_TOK / 2);
    for (int64_t i = 0; i < n; i++) s->tokens[i] = next(in) % alphabet;
    int32_t n_hit;
    /* leave at least one token to compute */
    CHECK(tide_prefix_lookup(&m->pc, s->tokens, n - 1, s->salt, s->pages, MAX_PAGES, &n_hit, &st) == 0);
    CHECK(n_hit >= 0 && n_hit <= (n - 1) / m->P);
    for (int32_t i = 0; i < n_hit; i++) {
        check_hit(m, s->pages[i], s->tokens, i, s->salt);
        m->ref[s->pages[i]]++;
    }
    s->n_pages = n_hit;
    while ((int64_t)s->n_pages * m->P < n) /* pages for the rest of the prompt */
        if (alloc_page(m, s) != 0) {
            release_seq(m, s);
            return;
        }
    s->n = n;
    write_pages(m, s);
    insert_and_check(m, s);
}

/* A fork shares the parent's full pages and continues on its own. */
static void op_fork(model *m, const seq *parent, seq *child) {
    tide_status st = {0};
    int32_t full = (int32_t)(parent->n / m->P);
    if (full > parent->n_pages) full = parent->n_pages;
    CHECK(tide_prefix_share(&m->pc, parent->pages, full, &st) == 0);
    memset(child, 0, sizeof *child);
    child->live = 1;
    child->salt = parent->salt;
    child->n = (int64_t)full * m->P;
    memcpy(child->tokens, parent->tokens, (size_t)child->n * sizeof(int32_t));
    memcpy(child->pages, parent->pages, (size_t)full * sizeof(int32_t));
    child->n_pages = full;
    for (int32_t i = 0; i < full; i++) m->ref[child->pages[i]]++;
}

/* Misuse: releasing, sharing or inserting a page nobody holds must fail and
 * leave every count as it was. */
static void op_misuse(model *m, input *in) {
    tide_status st = {0};
    int32_t p = (int32_t)(next(in) % (MAX_PAGES + 2)) - 1; /* -1 and out of range too */
    if (p >= 0 && p < m->n_pages && m->ref[p] > 0) return;
    int32_t tokens[MAX_PT] = {0};
    int which = next(in) % 3;
    int rc = which == 0   ? tide_prefix_release(&m->pc, &p, 1, &st)
             : which == 1 ? tide_prefix_share(&m->pc, &p, 1, &st)
                          : tide_prefix_insert(&m->pc, tokens, m->P, 0, &p, 1, &st);
    CHECK(rc == -1 && st.msg[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    input in = {data, size};
    model *m = calloc(1, sizeof *m);
    CHECK(m != NULL);
    m->P = 1 + next(&in) % MAX_PT;
    m->n_pages = 1 + next(&in) % MAX_PAGES;
    int hash_bits = next(&in) % 2 ? 64 : 2;
    tide_status st = {0};
    CHECK(tide_prefix_init(&m->pc, m->P, m->n_pages, hash_bits, &st) == 0);
    m->pc.on_evict = on_evict;
    m->pc.evict_ctx = m;
    for (int steps = 0; in.n > 0 && steps < 200; steps++) {
        uint8_t op = next(&in);
        seq *s = &m->s[(op >> 3) % MAX_SEQ];
        switch (op % 6) {
        case 0:
            if (!s->live) op_new(m, s, &in);
            break;
        case 1:
            if (s->live) extend(m, s, &in, 1 + next(&in) % 6, 1 + next(&in) % 3);
            break;
        case 2: {
            seq *child = &m->s[(op >> 6) % MAX_SEQ];
            if (s->live && !child->live && child != s) op_fork(m, s, child);
            break;
        }
        case 3:
            if (s->live) release_seq(m, s);
            break;
        case 4: {
            int32_t want = next(&in) % 4, cached_free = 0;
            for (int32_t p = 0; p < m->n_pages; p++) cached_free += m->ref[p] == 0 && m->pc.cached[p];
            int32_t done = tide_prefix_evict(&m->pc, want);
            CHECK(done == (want < cached_free ? want : cached_free));
            break;
        }
        default: op_misuse(m, &in); break;
        }
        check_invariants(m);
    }
    for (int i = 0; i < MAX_SEQ; i++)
        if (m->s[i].live) release_seq(m, &m->s[i]);
    check_invariants(m);
    CHECK(m->pc.pages.n_free == m->n_pages);
    tide_prefix_free(&m->pc);
    free(m);
    return 0;
}
