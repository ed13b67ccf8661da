/* The prefix cache index (src/cache/prefix.c) and its page allocator:
 * hits and misses, chained hashing (the same page after a different prefix is
 * a different entry), salt isolation, reference counts, LRU eviction order,
 * eviction never touching referenced pages, forced hash collisions, bad
 * input, and a long random run against a simple model implementation (linear
 * search, arrays for the queue). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/prefix.h"
#include "testutil.h"

#define P 4 /* tokens per page in these tests */

static tide_status st;

static void init(tide_prefix_cache *pc, int32_t n_pages, int bits) {
    if (tide_prefix_init(pc, P, n_pages, bits, &st)) fail_msg("%s", st.msg);
}

/* Allocates `n` pages for a sequence, failing the test if the pool is full. */
static void alloc_n(tide_prefix_cache *pc, int32_t *pages, int n) {
    for (int i = 0; i < n; i++)
        if (tide_prefix_alloc(pc, &pages[i], &st)) fail_msg("%s", st.msg);
}

static int32_t lookup(tide_prefix_cache *pc, const int32_t *tok, int64_t n, uint64_t salt, int32_t *pages) {
    int32_t hit;
    if (tide_prefix_lookup(pc, tok, n, salt, pages, 64, &hit, &st)) fail_msg("%s", st.msg);
    return hit;
}

static void insert(tide_prefix_cache *pc, const int32_t *tok, int64_t n, uint64_t salt, const int32_t *pages,
                   int64_t np) {
    if (tide_prefix_insert(pc, tok, n, salt, pages, np, &st)) fail_msg("%s", st.msg);
}

static void release(tide_prefix_cache *pc, const int32_t *pages, int64_t n) {
    if (tide_prefix_release(pc, pages, n, &st)) fail_msg("%s", st.msg);
}

static void random_tokens(tu_rng *r, int32_t *t, int n) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(tu_next(r) % 129280);
}

static void test_hit_miss(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x11};
    tide_prefix_cache pc;
    init(&pc, 16, 64);
    int32_t tok[3 * P + 2], pages[4], got[64];
    random_tokens(&r, tok, 3 * P + 2);
    assert_int_equal(lookup(&pc, tok, 3 * P + 2, 7, got), 0); /* empty cache */
    alloc_n(&pc, pages, 4);
    insert(&pc, tok, 3 * P + 2, 7, pages, 4); /* 3 full pages registered, the partial one not */
    tide_prefix_stats s = tide_prefix_get_stats(&pc);
    assert_int_equal(s.n_cached, 3);
    assert_int_equal(s.inserted, 3);
    assert_int_equal(lookup(&pc, tok, 3 * P + 2, 7, got), 3);
    assert_memory_equal(got, pages, 3 * sizeof *got);
    for (int i = 0; i < 3; i++) assert_int_equal(pc.pages.ref[pages[i]], 2);
    assert_int_equal(pc.pages.ref[pages[3]], 1);
    release(&pc, got, 3);
    /* a shorter query sees only its full pages; max_pages bounds the answer */
    assert_int_equal(lookup(&pc, tok, 2 * P + 1, 7, got), 2);
    release(&pc, got, 2);
    int32_t hit;
    assert_int_equal(tide_prefix_lookup(&pc, tok, 3 * P, 7, got, 1, &hit, &st), 0);
    assert_int_equal(hit, 1);
    release(&pc, got, 1);
    assert_int_equal(lookup(&pc, tok, P - 1, 7, got), 0);
    /* a change inside page 1 leaves page 0 only */
    tok[P + 2] ^= 1;
    assert_int_equal(lookup(&pc, tok, 3 * P, 7, got), 1);
    assert_int_equal(got[0], pages[0]);
    release(&pc, got, 1);
    /* inserting again is idempotent */
    tok[P + 2] ^= 1;
    insert(&pc, tok, 3 * P + 2, 7, pages, 4);
    assert_int_equal(tide_prefix_get_stats(&pc).inserted, 3);
    s = tide_prefix_get_stats(&pc);
    assert_int_equal(s.lookups, 6);
    assert_int_equal(s.lookup_pages, 3 + 3 + 2 + 3 + 0 + 3);
    assert_int_equal(s.hit_pages, 0 + 3 + 2 + 1 + 0 + 1);
    assert_int_equal(s.n_in_use, 4);
    assert_int_equal(s.n_free, 12);
    release(&pc, pages, 4);
    assert_int_equal(tide_prefix_get_stats(&pc).n_in_use, 0);
    tide_prefix_free(&pc);
}

/* Page Y after X and page Y after Z are different entries; Y alone is neither. */
static void test_chain(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x12};
    tide_prefix_cache pc;
    init(&pc, 16, 64);
    int32_t x[P], y[P], z[P], a[2 * P], b[2 * P], pa[2], pb[2], got[64];
    random_tokens(&r, x, P);
    random_tokens(&r, y, P);
    random_tokens(&r, z, P);
    memcpy(a, x, sizeof x);
    memcpy(a + P, y, sizeof y);
    memcpy(b, z, sizeof z);
    memcpy(b + P, y, sizeof y);
    alloc_n(&pc, pa, 2);
    insert(&pc, a, 2 * P, 0, pa, 2);
    assert_int_equal(lookup(&pc, b, 2 * P, 0, got), 0);
    alloc_n(&pc, pb, 2);
    insert(&pc, b, 2 * P, 0, pb, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_cached, 4);
    assert_int_equal(lookup(&pc, b, 2 * P, 0, got), 2);
    assert_int_equal(got[0], pb[0]);
    assert_int_equal(got[1], pb[1]);
    release(&pc, got, 2);
    assert_int_equal(lookup(&pc, a, 2 * P, 0, got), 2);
    assert_int_equal(got[1], pa[1]);
    release(&pc, got, 2);
    assert_int_equal(lookup(&pc, y, P, 0, got), 0);
    /* the hash itself: order and parent matter */
    uint64_t r0 = tide_prefix_root(0);
    assert_true(tide_prefix_page_hash(r0, a, 2 * P) != tide_prefix_page_hash(r0, b, 2 * P));
    assert_true(tide_prefix_page_hash(tide_prefix_page_hash(r0, x, P), y, P) !=
                tide_prefix_page_hash(tide_prefix_page_hash(r0, z, P), y, P));
    int32_t s1[] = {1, 2, 3}, s2[] = {2, 1, 3}, s3[] = {1, 2};
    assert_true(tide_prefix_page_hash(r0, s1, 3) != tide_prefix_page_hash(r0, s2, 3));
    assert_true(tide_prefix_page_hash(r0, s1, 3) != tide_prefix_page_hash(r0, s3, 2));
    assert_true(tide_prefix_root(0) != tide_prefix_root(1));
    release(&pc, pa, 2);
    release(&pc, pb, 2);
    tide_prefix_free(&pc);
}

static void test_salt(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x13};
    tide_prefix_cache pc;
    init(&pc, 8, 64);
    int32_t tok[2 * P], pages[2], got[64];
    random_tokens(&r, tok, 2 * P);
    uint64_t s1 = tu_next(&r), s2 = s1 ^ 1;
    alloc_n(&pc, pages, 2);
    insert(&pc, tok, 2 * P, s1, pages, 2);
    assert_int_equal(lookup(&pc, tok, 2 * P, s2, got), 0);
    assert_int_equal(lookup(&pc, tok, 2 * P, s1, got), 2);
    release(&pc, got, 2);
    /* the other tenant computes its own copy: a second set of entries */
    int32_t p2[2];
    alloc_n(&pc, p2, 2);
    insert(&pc, tok, 2 * P, s2, p2, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_cached, 4);
    assert_int_equal(lookup(&pc, tok, 2 * P, s2, got), 2);
    assert_int_equal(got[0], p2[0]);
    release(&pc, got, 2);
    release(&pc, pages, 2);
    release(&pc, p2, 2);
    tide_prefix_free(&pc);
}

/* Released cached pages are evicted least recently used first, a sequence's
 * deeper pages before the pages they extend, empty pages before any cached
 * one; a hit makes a page recent again; referenced pages are never taken. */
static void test_lru(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x14};
    tide_prefix_cache pc;
    init(&pc, 6, 64);
    int32_t a[2 * P], b[2 * P], pa[2], pb[2], got[64], q;
    random_tokens(&r, a, 2 * P);
    random_tokens(&r, b, 2 * P);
    alloc_n(&pc, pa, 2);
    insert(&pc, a, 2 * P, 0, pa, 2);
    alloc_n(&pc, pb, 2);
    insert(&pc, b, 2 * P, 0, pb, 2);
    release(&pc, pa, 2); /* queue: 2 empty pages, then A1, A0 */
    release(&pc, pb, 2); /* ... B1, B0 */
    /* a hit on A makes A recent: queue: empty, empty, B1, B0, A1, A0 */
    assert_int_equal(lookup(&pc, a, 2 * P, 0, got), 2);
    release(&pc, got, 2);
    int32_t want[] = {pb[1], pb[0], pa[1], pa[0]};
    alloc_n(&pc, got, 2); /* the two empty pages */
    assert_int_equal(tide_prefix_get_stats(&pc).evicted, 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tide_prefix_alloc(&pc, &q, &st), 0);
        assert_int_equal(q, want[i]);
        assert_int_equal(tide_prefix_get_stats(&pc).evicted, i + 1);
        if (i == 0) { /* B lost its second page: only the first one hits */
            int32_t h[64];
            assert_int_equal(lookup(&pc, b, 2 * P, 0, h), 1);
            release(&pc, h, 1); /* B0 is recent again: A1 and A0 go first */
            want[1] = pa[1], want[2] = pa[0], want[3] = pb[0];
        }
    }
    /* everything is referenced now: allocation fails, nothing is taken */
    assert_int_equal(tide_prefix_alloc(&pc, &q, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    assert_non_null(strstr(st.msg, "in use"));
    tide_prefix_stats s = tide_prefix_get_stats(&pc);
    assert_int_equal(s.n_in_use, 6);
    assert_int_equal(s.n_cached, 0);
    tide_prefix_free(&pc);
}

/* A page referenced by one sequence stays cached while others come and go;
 * explicit evict takes only unreferenced pages, LRU first. */
static void test_referenced_survive(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x15};
    tide_prefix_cache pc;
    init(&pc, 4, 64);
    int32_t a[P], b[P], c[P], pa, pb, pc_, got[64];
    random_tokens(&r, a, P);
    random_tokens(&r, b, P);
    random_tokens(&r, c, P);
    alloc_n(&pc, &pa, 1);
    insert(&pc, a, P, 0, &pa, 1);
    assert_int_equal(lookup(&pc, a, P, 0, got), 1); /* a second user of A */
    release(&pc, &pa, 1);                             /* the first leaves; A still referenced */
    alloc_n(&pc, &pb, 1);
    insert(&pc, b, P, 0, &pb, 1);
    release(&pc, &pb, 1);
    alloc_n(&pc, &pc_, 1);
    insert(&pc, c, P, 0, &pc_, 1);
    release(&pc, &pc_, 1);
    for (int i = 0; i < 3; i++) { /* churn through every free page */
        int32_t q;
        assert_int_equal(tide_prefix_alloc(&pc, &q, &st), 0);
        assert_true(q != got[0]);
    }
    assert_int_equal(tide_prefix_get_stats(&pc).n_cached, 1);
    int32_t h[64];
    assert_int_equal(lookup(&pc, a, P, 0, h), 1);
    release(&pc, h, 1);
    assert_int_equal(tide_prefix_evict(&pc, 10), 0); /* A is referenced */
    release(&pc, got, 1);
    assert_int_equal(tide_prefix_evict(&pc, 10), 1);
    assert_int_equal(lookup(&pc, a, P, 0, h), 0);
    tide_prefix_free(&pc);
}

/* Two requests prefill the same prefix at once: the first insert wins, the
 * second request's page stays private and is reused first once released. */
static void test_duplicate_insert(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x16};
    tide_prefix_cache pc;
    init(&pc, 4, 64);
    int32_t t[2 * P], p1[2], p2[2], got[64], q;
    random_tokens(&r, t, 2 * P);
    alloc_n(&pc, p1, 2);
    alloc_n(&pc, p2, 2);
    insert(&pc, t, 2 * P, 0, p1, 2);
    insert(&pc, t, 2 * P, 0, p2, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_cached, 2);
    release(&pc, p1, 2);
    release(&pc, p2, 2);
    assert_int_equal(tide_prefix_alloc(&pc, &q, &st), 0);
    assert_true(q == p2[0] || q == p2[1]);
    assert_int_equal(lookup(&pc, t, 2 * P, 0, got), 2);
    assert_memory_equal(got, p1, sizeof p1);
    tide_prefix_free(&pc);
}

/* With 2-bit hashes almost every entry collides; answers stay exact. */
static void test_collisions(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x17};
    tide_prefix_cache pc;
    init(&pc, 64, 2);
    enum { NS = 16 };
    int32_t t[NS][2 * P], pages[NS][2], got[64];
    for (int s = 0; s < NS; s++) {
        for (int i = 0; i < 2 * P; i++) t[s][i] = (int32_t)(tu_next(&r) % 3); /* near-identical pages */
        alloc_n(&pc, pages[s], 2);
        insert(&pc, t[s], 2 * P, (uint64_t)(s % 2), pages[s], 2);
    }
    for (int s = 0; s < NS; s++) {
        int32_t hit = lookup(&pc, t[s], 2 * P, (uint64_t)(s % 2), got);
        assert_int_equal(hit, 2);
        for (int i = 0; i < hit; i++) /* the stored tokens are the query's */
            assert_memory_equal(pc.tokens + (int64_t)got[i] * P, t[s] + i * P, P * sizeof(int32_t));
        release(&pc, got, hit);
    }
    for (int s = 0; s < NS; s++) release(&pc, pages[s], 2);
    tide_prefix_free(&pc);
}

static void test_bad_input(void **state) {
    (void)state;
    tide_prefix_cache pc;
    assert_int_equal(tide_prefix_init(&pc, 0, 4, 64, &st), -1);
    assert_int_equal(tide_prefix_init(&pc, P, 0, 64, &st), -1);
    assert_int_equal(tide_prefix_init(&pc, P, 4, 65, &st), -1);
    init(&pc, 4, 64);
    int32_t t[2 * P] = {1, 2, 3, 4, 5, 6, 7, 8}, u[2 * P] = {9, 9, 9, 9, 9, 9, 9, 9}, p[2], got[4], hit;
    assert_int_equal(tide_prefix_lookup(&pc, NULL, 5, 0, got, 4, &hit, &st), -1);
    assert_int_equal(tide_prefix_lookup(&pc, t, -1, 0, got, 4, &hit, &st), -1);
    assert_int_equal(tide_prefix_lookup(&pc, t, 8, 0, NULL, 4, &hit, &st), -1);
    int32_t bogus[] = {7};
    assert_int_equal(tide_prefix_insert(&pc, t, P, 0, bogus, 1, &st), -1);
    assert_non_null(strstr(st.msg, "not a page id"));
    int32_t unref[] = {0};
    assert_int_equal(tide_prefix_insert(&pc, t, P, 0, unref, 1, &st), -1);
    assert_non_null(strstr(st.msg, "no reference"));
    alloc_n(&pc, p, 2);
    insert(&pc, t, 2 * P, 0, p, 2);
    assert_int_equal(tide_prefix_insert(&pc, u, 2 * P, 0, p, 2, &st), -1); /* cached for t */
    assert_non_null(strstr(st.msg, "different prefix"));
    int32_t twice[] = {p[0], p[0]};
    assert_int_equal(tide_prefix_release(&pc, twice, 2, &st), -1);
    assert_int_equal(tide_prefix_release(&pc, bogus, 1, &st), -1);
    assert_int_equal(tide_prefix_share(&pc, bogus, 1, &st), -1);
    assert_int_equal(tide_prefix_share(&pc, p, 2, &st), 0);
    assert_int_equal(pc.pages.ref[p[1]], 2);
    release(&pc, p, 2);
    release(&pc, p, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_in_use, 0);
    tide_prefix_free(&pc);
}

/* The allocator alone: queue order, references, errors. */
static void test_page_alloc(void **state) {
    (void)state;
    tide_page_alloc pa;
    assert_int_equal(tide_page_alloc_init(&pa, 0, &st), -1);
    assert_int_equal(tide_page_alloc_init(&pa, 3, &st), 0);
    int32_t a, b, c, d;
    assert_int_equal(tide_page_alloc_get(&pa, &a, &st), 0);
    assert_int_equal(tide_page_alloc_get(&pa, &b, &st), 0);
    assert_int_equal(tide_page_alloc_get(&pa, &c, &st), 0);
    assert_true(a == 0 && b == 1 && c == 2); /* ids ascending at first */
    assert_int_equal(tide_page_alloc_get(&pa, &d, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_NOMEM);
    tide_page_ref(&pa, b);
    assert_int_equal(tide_page_unref(&pa, b, 1), 1);
    assert_int_equal(tide_page_unref(&pa, b, 1), 0); /* kept: tail */
    assert_int_equal(tide_page_unref(&pa, b, 1), -1); /* no reference left */
    assert_int_equal(tide_page_unref(&pa, a, 1), 0);  /* kept: tail, after b */
    assert_int_equal(tide_page_unref(&pa, c, 0), 0);  /* empty: head */
    assert_int_equal(pa.n_free, 3);
    int32_t order[3];
    for (int i = 0; i < 3; i++) assert_int_equal(tide_page_alloc_get(&pa, &order[i], &st), 0);
    assert_true(order[0] == c && order[1] == b && order[2] == a);
    tide_page_to_head(&pa, a); /* referenced: no effect */
    assert_int_equal(pa.ref[a], 1);
    assert_int_equal(tide_page_unref(&pa, a, 1), 0);
    assert_int_equal(tide_page_unref(&pa, b, 1), 0);
    tide_page_to_head(&pa, b); /* b's contents dropped: reused before a */
    assert_int_equal(tide_page_alloc_get(&pa, &d, &st), 0);
    assert_int_equal(d, b);
    assert_false(tide_page_valid(&pa, -1));
    assert_false(tide_page_valid(&pa, 3));
    tide_page_alloc_free(&pa);
}

/* The page hash separates pages that differ in one token, in order, in
 * length or in parent: no collision among many such pages. */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hash_spread(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x19};
    enum { N = 40000, L = 64 };
    uint64_t *h = malloc(N * sizeof *h);
    int32_t base[L], t[L];
    random_tokens(&r, base, L);
    uint64_t root = tide_prefix_root(tu_next(&r));
    int n = 0;
    for (int i = 0; i < L && n < N; i++) /* every single-token change to small values */
        for (int32_t v = 0; v < 256 && n < N; v++) {
            memcpy(t, base, sizeof t);
            if (t[i] == v) continue;
            t[i] = v;
            h[n++] = tide_prefix_page_hash(root, t, L);
        }
    h[n++] = tide_prefix_page_hash(root, base, L);
    h[n++] = tide_prefix_page_hash(root, base, L - 1);
    h[n++] = tide_prefix_page_hash(root ^ 1, base, L);
    memcpy(t, base, sizeof t);
    t[0] = base[1], t[1] = base[0];
    if (t[0] != t[1]) h[n++] = tide_prefix_page_hash(root, t, L);
    while (n < N) { /* sequential parents, as a chain makes them */
        h[n] = tide_prefix_page_hash(h[n - 1], base, L);
        n++;
    }
    qsort(h, N, sizeof *h, cmp_u64);
    for (int i = 1; i < N; i++) assert_true(h[i] != h[i - 1]);
    /* and the bits are balanced: each bit is set in about half of them */
    for (int bit = 0; bit < 64; bit++) {
        int ones = 0;
        for (int i = 0; i < N; i++) ones += (int)((h[i] >> bit) & 1);
        assert_true(ones > N / 2 - 6 * 100 && ones < N / 2 + 6 * 100); /* sd = 100 */
    }
    free(h);
}

/* ---- random operations against a model ---------------------------------- */

#define MP 24   /* pages */
#define MAXP 6  /* pages per sequence */

typedef struct {
    int valid;
    uint64_t serial, parent, salt;
    int32_t tok[P];
} mentry;

typedef struct {
    mentry e[MP];
    int32_t ref[MP];
    int32_t q[MP], qn; /* the free queue, head first */
    uint64_t serial;
    int64_t evicted;
} model;

static void mq_remove(model *m, int32_t p) {
    for (int i = 0; i < m->qn; i++)
        if (m->q[i] == p) {
            memmove(m->q + i, m->q + i + 1, (size_t)(m->qn - i - 1) * sizeof *m->q);
            m->qn--;
            return;
        }
    fail_msg("model: page %d not queued", (int)p);
}

static int32_t m_find(const model *m, uint64_t parent, uint64_t salt, const int32_t *tok) {
    for (int32_t p = 0; p < MP; p++)
        if (m->e[p].valid && m->e[p].parent == parent && m->e[p].salt == salt &&
            !memcmp(m->e[p].tok, tok, sizeof m->e[p].tok))
            return p;
    return -1;
}

static int m_lookup(model *m, const int32_t *tok, int n, uint64_t salt, int32_t *out) {
    uint64_t parent = 0;
    int k = 0;
    for (int i = 0; i < n / P; i++) {
        int32_t p = m_find(m, parent, salt, tok + i * P);
        if (p < 0) break;
        if (m->ref[p]++ == 0) mq_remove(m, p);
        out[k++] = p;
        parent = m->e[p].serial;
    }
    return k;
}

static int32_t m_alloc(model *m) {
    if (m->qn == 0) return -1;
    int32_t p = m->q[0];
    mq_remove(m, p);
    m->ref[p] = 1;
    if (m->e[p].valid) m->evicted++;
    m->e[p].valid = 0;
    return p;
}

static void m_insert(model *m, const int32_t *tok, int n, uint64_t salt, const int32_t *pages, int np) {
    uint64_t parent = 0;
    for (int i = 0; i < n / P && i < np; i++) {
        int32_t p = pages[i], e = m_find(m, parent, salt, tok + i * P);
        if (m->e[p].valid && e != p) { /* a stale chain: same tokens, evicted ancestor */
            assert_int_equal(m->e[p].salt, salt);
            assert_memory_equal(m->e[p].tok, tok + i * P, sizeof m->e[p].tok);
            m->e[p].valid = 0;
        }
        if (e < 0) {
            m->e[p] = (mentry){1, ++m->serial, parent, salt, {0}};
            memcpy(m->e[p].tok, tok + i * P, sizeof m->e[p].tok);
            e = p;
        }
        parent = m->e[e].serial;
    }
}

static void m_release(model *m, const int32_t *pages, int n) {
    for (int i = n - 1; i >= 0; i--) {
        int32_t p = pages[i];
        if (--m->ref[p] == 0) {
            if (m->e[p].valid) m->q[m->qn++] = p;
            else {
                memmove(m->q + 1, m->q, (size_t)m->qn * sizeof *m->q);
                m->q[0] = p;
                m->qn++;
            }
        }
    }
}

typedef struct {
    int32_t tok[MAXP * P + P];
    int n;
    uint64_t salt;
    int32_t pages[MAXP + 1];
    int np;
} mseq;

static void compare(const tide_prefix_cache *pc, const model *m) {
    int32_t i = 0;
    for (int32_t p = pc->pages.head; p >= 0; p = pc->pages.next[p], i++) {
        assert_true(i < m->qn);
        assert_int_equal(p, m->q[i]);
    }
    assert_int_equal(i, m->qn);
    int cached = 0, idle = 0;
    for (int32_t p = 0; p < MP; p++) {
        assert_int_equal(pc->pages.ref[p], m->ref[p]);
        assert_int_equal(pc->cached[p], m->e[p].valid);
        cached += m->e[p].valid;
        idle += m->e[p].valid && m->ref[p] == 0;
    }
    tide_prefix_stats s = tide_prefix_get_stats(pc);
    assert_int_equal(s.n_cached, cached);
    assert_int_equal(s.n_idle, idle); /* what the scheduler counts as reclaimable */
    assert_int_equal(s.evicted, m->evicted);
}

static void test_random_vs_model(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x18};
    for (int run = 0; run < 4; run++) {
        tide_prefix_cache pc;
        init(&pc, MP, run % 2 ? 3 : 64);
        static model m;
        memset(&m, 0, sizeof m);
        for (int32_t p = 0; p < MP; p++) m.q[m.qn++] = p;
        /* documents over a 3-token alphabet: pages repeat across prefixes */
        int32_t docs[5][MAXP * P + P];
        for (int d = 0; d < 5; d++)
            for (int i = 0; i < MAXP * P + P; i++) docs[d][i] = (int32_t)(tu_next(&r) % 3);
        mseq live[8];
        int n_live = 0;
        for (int op = 0; op < 4000; op++) {
            int kind = (int)(tu_next(&r) % 10);
            if (kind < 4 && n_live < 8) { /* a new request: lookup, then allocate the rest */
                mseq *s = &live[n_live];
                int d = (int)(tu_next(&r) % 5);
                s->n = 1 + (int)(tu_next(&r) % (MAXP * P + P - 1));
                memcpy(s->tok, docs[d], sizeof s->tok);
                if (tu_next(&r) % 3 == 0) s->tok[tu_next(&r) % (uint64_t)s->n] = 7; /* diverge */
                s->salt = tu_next(&r) % 2;
                int32_t mp[MAXP + 1];
                int want = m_lookup(&m, s->tok, s->n, s->salt, mp);
                int32_t hit;
                assert_int_equal(tide_prefix_lookup(&pc, s->tok, s->n, s->salt, s->pages, MAXP + 1, &hit, &st), 0);
                assert_int_equal(hit, want);
                assert_memory_equal(s->pages, mp, (size_t)hit * sizeof *mp);
                s->np = hit;
                int need = (s->n + P - 1) / P;
                while (s->np < need) {
                    int32_t q, mq = m_alloc(&m);
                    int rc = tide_prefix_alloc(&pc, &q, &st);
                    assert_int_equal(rc, mq < 0 ? -1 : 0);
                    if (rc) break;
                    assert_int_equal(q, mq);
                    s->pages[s->np++] = q;
                }
                if (s->np < need) { /* no room: give everything back */
                    m_release(&m, s->pages, s->np);
                    release(&pc, s->pages, s->np);
                } else n_live++;
            } else if (kind < 7 && n_live > 0) { /* prefill done: insert (a random prefix of it) */
                mseq *s = &live[tu_next(&r) % (uint64_t)n_live];
                int n = 1 + (int)(tu_next(&r) % (uint64_t)s->n);
                m_insert(&m, s->tok, n, s->salt, s->pages, s->np);
                insert(&pc, s->tok, n, s->salt, s->pages, s->np);
            } else if (kind < 9 && n_live > 0) { /* finish */
                int i = (int)(tu_next(&r) % (uint64_t)n_live);
                m_release(&m, live[i].pages, live[i].np);
                release(&pc, live[i].pages, live[i].np);
                live[i] = live[--n_live];
            } else if (kind == 9) { /* explicit eviction of one LRU cached page */
                int32_t want = -1;
                for (int i = 0; i < m.qn && want < 0; i++)
                    if (m.e[m.q[i]].valid) want = m.q[i];
                assert_int_equal(tide_prefix_evict(&pc, 1), want >= 0);
                if (want >= 0) {
                    m.e[want].valid = 0;
                    m.evicted++;
                    mq_remove(&m, want);
                    memmove(m.q + 1, m.q, (size_t)m.qn * sizeof *m.q);
                    m.q[0] = want;
                    m.qn++;
                }
            }
            compare(&pc, &m);
        }
        for (int i = 0; i < n_live; i++) release(&pc, live[i].pages, live[i].np);
        assert_int_equal(tide_prefix_get_stats(&pc).n_in_use, 0);
        assert_true(tide_prefix_get_stats(&pc).hit_pages > 0);
        tide_prefix_free(&pc);
    }
}

/* The eviction hook (how the scheduler frees a page's KV blocks) fires once
 * per evicted entry, for reuse by alloc and for tide_prefix_evict, never for
 * a page that stays cached; n_idle counts the evictable pages throughout. */
typedef struct {
    int32_t pages[64];
    int n;
} evict_log;

static void log_evict(void *ctx, int32_t page) {
    evict_log *l = ctx;
    l->pages[l->n++] = page;
}

static void test_evict_hook(void **state) {
    (void)state;
    tu_rng r = {tu_seed() ^ 0x77};
    tide_prefix_cache pc;
    init(&pc, 4, 64);
    evict_log log = {{0}, 0};
    pc.on_evict = log_evict;
    pc.evict_ctx = &log;
    int32_t a[2 * P], b[2 * P], pa[2], pb[2], got[64];
    random_tokens(&r, a, 2 * P);
    random_tokens(&r, b, 2 * P);
    alloc_n(&pc, pa, 2);
    insert(&pc, a, 2 * P, 0, pa, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 0); /* referenced */
    release(&pc, pa, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 2);
    assert_int_equal(lookup(&pc, a, 2 * P, 0, got), 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 0);
    release(&pc, got, 2);
    alloc_n(&pc, pb, 2); /* the two empty pages: no eviction */
    assert_int_equal(log.n, 0);
    insert(&pc, b, 2 * P, 0, pb, 2);
    release(&pc, pb, 2);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 4);
    int32_t one;
    alloc_n(&pc, &one, 1); /* reuses the LRU page: a's deeper page */
    assert_int_equal(log.n, 1);
    assert_int_equal(log.pages[0], one);
    assert_int_equal(one, pa[1]);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 3);
    release(&pc, &one, 1); /* uncached: not idle */
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 3);
    assert_int_equal(tide_prefix_evict(&pc, 64), 3);
    assert_int_equal(log.n, 4);
    assert_int_equal(tide_prefix_get_stats(&pc).n_idle, 0);
    assert_int_equal(tide_prefix_get_stats(&pc).n_cached, 0);
    tide_prefix_free(&pc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss),       cmocka_unit_test(test_chain),
        cmocka_unit_test(test_salt),           cmocka_unit_test(test_lru),
        cmocka_unit_test(test_referenced_survive), cmocka_unit_test(test_duplicate_insert),
        cmocka_unit_test(test_collisions),     cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_page_alloc),     cmocka_unit_test(test_hash_spread),
        cmocka_unit_test(test_random_vs_model), cmocka_unit_test(test_evict_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
