/* The persistent KV store (docs/kvstore.md): 12 node directories under a
 * temp dir, 10+2 Reed-Solomon. Round trips are bit-exact, also after the
 * index is rebuilt by reopening; any 2 of 12 shards deleted or corrupted
 * (every pair, one page each) still read correctly and verify repairs them;
 * 3 lost shards are a clean miss; TTL per traffic class with a fake clock;
 * LRU eviction under a capacity; a full disk (a small tmpfs) fails writes
 * cleanly while reads go on; kill -9 of a writer at random points (50
 * trials) never leaves a page that reads back wrong; bad configurations
 * and malformed shard files are refused with a message. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/kvstore.h"
#include "cache/kvstore_ec.h"
#include "cache/kvstore_tiers.h"
#include "testutil.h"

enum { NODES = 12 };

typedef struct {
    char *dir;
    char node[NODES][512];
    const char *nodes[NODES];
    int64_t now;
    tu_rng r;
} fx;

static int64_t fake_clock(void *ctx) { return *(int64_t *)ctx; }

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_mkdtemp("kvstore");
    for (int i = 0; i < NODES; i++) {
        snprintf(f->node[i], sizeof f->node[i], "%s/node%02d", f->dir, i);
        f->nodes[i] = f->node[i];
    }
    f->now = 1700000000;
    f->r.s = tu_seed();
    *state = f;
    return f->dir ? 0 : -1;
}

static int teardown(void **state) {
    fx *f = *state;
    umount(f->node[0]); /* the disk-full test's tmpfs, if it failed midway */
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static tide_kvstore *open_store_sync(fx *f, int n, uint64_t capacity, int sync) {
    tide_kvstore_cfg c = {0};
    c.no_sync = !sync;
    c.nodes = f->nodes;
    c.n_nodes = n;
    c.fingerprint = 42;
    c.capacity_bytes = capacity;
    c.clock = fake_clock;
    c.clock_ctx = &f->now;
    tide_kvstore *s;
    tide_status st = {0};
    if (tide_kvstore_open(&c, &s, &st) != 0) fail_msg("%s", st.msg);
    return s;
}

/* Without fsync (the disk's latency would dominate the suite); the round
 * trip and the disk-full test keep it on. A process killed with -9 is
 * covered either way: see tide_kvstore_cfg.no_sync. */
static tide_kvstore *open_store(fx *f, int n, uint64_t capacity) { return open_store_sync(f, n, capacity, 0); }

static tide_kvs_key key_of(uint64_t i) { return (tide_kvs_key){0x1234, i}; }

/* Page i's bytes: a function of i alone (the crash test checks against it). */
static void page_of(uint64_t i, uint8_t *p, uint64_t n) {
    uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
    for (uint64_t j = 0; j < n; j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[j] = (uint8_t)x;
    }
}

static uint64_t size_of(uint64_t i) { return 1 + (i * 7919) % 20000; }

static void put_page(tide_kvstore *s, uint64_t i, int klass) {
    uint64_t n = size_of(i);
    uint8_t *p = malloc(n);
    page_of(i, p, n);
    tide_status st = {0};
    if (tide_kvstore_put(s, key_of(i), i, p, n, klass, 0, &st) != 0) fail_msg("%s", st.msg);
    free(p);
}

/* 1 = read back exactly, 0 = miss; fails the test on wrong data. */
static int read_page(tide_kvstore *s, uint64_t i) {
    uint64_t n = size_of(i), got = 0;
    uint8_t *p = malloc(n), *want = malloc(n);
    int found = 0;
    tide_status st = {0};
    if (tide_kvstore_get(s, key_of(i), p, n, &got, &found, &st) != 0) fail_msg("%s", st.msg);
    page_of(i, want, n);
    if (found && (got != n || memcmp(p, want, n) != 0)) fail_msg("page %llu read back wrong", (unsigned long long)i);
    free(p);
    free(want);
    return found;
}

/* Empties the node directories (cheaper than tu_rmtree's rm -rf, which
 * the kill -9 test would run 50 times). */
static void clear_nodes(const fx *f) {
    for (int i = 0; i < NODES; i++) {
        DIR *d = opendir(f->node[i]);
        if (!d) continue;
        struct dirent *de;
        char p[1024];
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", f->node[i], de->d_name);
                unlink(p);
            }
        closedir(d);
    }
}

static void shard_file(const fx *f, uint64_t i, int shard, char *out, size_t n) {
    char hex[33];
    tide_kvs_key_hex(key_of(i), hex);
    snprintf(out, n, "%s/%s.%d", f->node[shard], hex, shard);
}

static void test_round_trip(void **state) {
    fx *f = *state;
    tide_kvstore *s = open_store_sync(f, NODES, 0, 1); /* a few pages with fsync, the rest without */
    uint64_t base = tu_next(&f->r) % 100000;
    for (uint64_t i = base; i < base + 3; i++) put_page(s, i, TIDE_KV_CHAT);
    tide_kvstore_close(s);
    s = open_store(f, NODES, 0);
    for (uint64_t i = base + 3; i < base + 40; i++) put_page(s, i, TIDE_KV_CHAT);
    for (uint64_t i = base; i < base + 40; i++) assert_int_equal(read_page(s, i), 1);
    assert_int_equal(read_page(s, base + 1000), 0);
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.pages, 40);
    assert_int_equal(ss.hits, 40);
    assert_int_equal(ss.puts, 37);
    assert_int_equal(ss.misses, 1);
    assert_true(ss.encode_bytes > 0 && ss.bytes_written > 0);
    tide_kvstore_close(s);
    s = open_store(f, NODES, 0); /* the index rebuilt from the headers */
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.pages, 40);
    assert_int_equal(ss.degraded, 0);
    for (uint64_t i = base; i < base + 40; i++) assert_int_equal(read_page(s, i), 1);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static void corrupt(const char *path, tu_rng *r) {
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    long at = (long)(tu_next(r) % (uint64_t)(128 + 64)); /* the header or the first data bytes */
    if (at >= n) at = n - 1;
    fseek(fp, at, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, at, SEEK_SET);
    fputc(c ^ (1 << (tu_next(r) % 8)), fp);
    fclose(fp);
}

static void test_any_two_lost(void **state) {
    fx *f = *state;
    tide_kvstore *s = open_store(f, NODES, 0);
    int n = 0;
    for (int a = 0; a < NODES; a++)
        for (int b = a + 1; b < NODES; b++, n++) {
            put_page(s, (uint64_t)n, TIDE_KV_CHAT);
            char p[1024];
            shard_file(f, (uint64_t)n, a, p, sizeof p);
            if (n % 2) corrupt(p, &f->r);
            else unlink(p);
            shard_file(f, (uint64_t)n, b, p, sizeof p);
            if (n % 3) corrupt(p, &f->r);
            else unlink(p);
        }
    for (int i = 0; i < n; i++) assert_int_equal(read_page(s, (uint64_t)i), 1);
    tide_kvstore_report r;
    tide_status st = {0};
    assert_int_equal(tide_kvstore_verify(s, &r, &st), 0);
    assert_int_equal(r.pages, n);
    assert_int_equal(r.repaired, n);
    assert_int_equal(r.lost, 0);
    tide_kvstore_close(s);
    s = open_store(f, NODES, 0);
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.degraded, 0); /* every shard back on disk */
    assert_int_equal(tide_kvstore_verify(s, &r, &st), 0);
    assert_int_equal(r.ok, n);
    for (int i = 0; i < n; i++) assert_int_equal(read_page(s, (uint64_t)i), 1);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static void test_three_lost_is_a_miss(void **state) {
    fx *f = *state;
    tide_kvstore *s = open_store(f, NODES, 0);
    for (uint64_t i = 0; i < 8; i++) {
        put_page(s, i, TIDE_KV_CHAT);
        int gone[3], ng = 0;
        while (ng < 3) {
            int c = (int)(tu_next(&f->r) % NODES), dup = 0;
            for (int j = 0; j < ng; j++) dup |= gone[j] == c;
            if (!dup) gone[ng++] = c;
        }
        for (int j = 0; j < 3; j++) {
            char p[1024];
            shard_file(f, i, gone[j], p, sizeof p);
            if (j == 1) corrupt(p, &f->r);
            else unlink(p);
        }
        assert_int_equal(read_page(s, i), 0);
    }
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.hits, 0);
    assert_true(ss.lost + ss.misses >= 8);
    tide_kvstore_report r;
    tide_status st = {0};
    tide_kvstore_verify(s, &r, &st);
    assert_int_equal(r.lost, 8);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static void test_ttl_fake_clock(void **state) {
    fx *f = *state;
    tide_kvstore *s = open_store(f, NODES, 0);
    put_page(s, 1, TIDE_KV_CHAT);  /* 7 days */
    put_page(s, 2, TIDE_KV_AGENT); /* 3 days */
    uint8_t one = 7;
    tide_status st = {0};
    assert_int_equal(tide_kvstore_put(s, key_of(3), 3, &one, 1, TIDE_KV_AGENT, 60, &st), 0); /* per-request ttl */
    f->now += 61;
    uint64_t got;
    int found = 1;
    uint8_t b;
    assert_int_equal(tide_kvstore_get(s, key_of(3), &b, 1, &got, &found, &st), 0);
    assert_int_equal(found, 0);
    f->now += 3 * 86400;
    assert_int_equal(read_page(s, 1), 1);
    assert_int_equal(read_page(s, 2), 0);
    /* a crash's leftovers: a temporary file two hours old goes, a fresh one
     * (maybe another host's write in progress) stays */
    char tmp_old[700], tmp_new[700];
    snprintf(tmp_old, sizeof tmp_old, "%s/.tmp.old", f->node[3]);
    snprintf(tmp_new, sizeof tmp_new, "%s/.tmp.new", f->node[3]);
    fclose(fopen(tmp_old, "w"));
    fclose(fopen(tmp_new, "w"));
    struct timespec old_t[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    assert_int_equal(utimensat(AT_FDCWD, tmp_old, old_t, 0), 0);
    tide_kvstore_report r;
    assert_int_equal(tide_kvstore_gc(s, &r, &st), 0);
    assert_int_equal(r.deleted, 2);
    assert_int_equal(r.tmp_removed, 1);
    assert_int_equal(access(tmp_old, F_OK), -1);
    assert_int_equal(access(tmp_new, F_OK), 0);
    tide_kvstore_close(s);
    s = open_store(f, NODES, 0); /* expiry times come back from the headers */
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.pages, 1);
    assert_int_equal(read_page(s, 1), 1);
    f->now += 4 * 86400;
    assert_int_equal(read_page(s, 1), 0);
    assert_int_equal(tide_kvstore_gc(s, &r, &st), 0);
    assert_int_equal(r.deleted, 1);
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.pages, 0);
    assert_int_equal(ss.bytes, 0);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static void test_lru_capacity(void **state) {
    fx *f = *state;
    /* pages 10..13 are all 1 shard file of 4096 bytes each (k = 1, m = 0) */
    tide_kvstore *s = open_store(f, 1, 3 * 4096);
    uint8_t p[100] = {0};
    tide_status st = {0};
    for (uint64_t i = 10; i < 13; i++) {
        assert_int_equal(tide_kvstore_put(s, key_of(i), i, p, sizeof p, TIDE_KV_CHAT, 0, &st), 0);
        f->now++;
    }
    uint64_t got;
    int found;
    assert_int_equal(tide_kvstore_get(s, key_of(10), p, sizeof p, &got, &found, &st), 0); /* 10 is fresh again */
    assert_int_equal(found, 1);
    f->now++;
    assert_int_equal(tide_kvstore_put(s, key_of(13), 13, p, sizeof p, TIDE_KV_CHAT, 0, &st), 0);
    assert_int_equal(tide_kvstore_has(s, key_of(11)), 0); /* the least recently used */
    assert_int_equal(tide_kvstore_has(s, key_of(10)), 1);
    assert_int_equal(tide_kvstore_has(s, key_of(12)), 1);
    assert_int_equal(tide_kvstore_has(s, key_of(13)), 1);
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.evictions, 1);
    assert_int_equal(ss.bytes, 3 * 4096);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) n += !strncmp(de->d_name, ".tmp.", 5);
    if (d) closedir(d);
    return n;
}

static void test_disk_full(void **state) {
    fx *f = *state;
    mkdir(f->node[0], 0755);
    if (mount("tmpfs", f->node[0], "tmpfs", 0, "size=256k") != 0) {
        fprintf(stderr, "cannot mount a tmpfs (%s): %s\n", strerror(errno),
                getenv("CI") ? "required under CI" : "skipping (run as root)");
        if (getenv("CI")) fail();
        clear_nodes(f);
        skip();
    }
    tide_kvstore *s = open_store_sync(f, 1, 0, 1);
    uint64_t i = 100, ok = 0;
    tide_status st = {0};
    uint8_t *p = malloc(30000);
    int failed = 0;
    for (; i < 140 && !failed; i++) {
        page_of(i, p, 30000);
        if (tide_kvstore_put(s, key_of(i), i, p, 30000, TIDE_KV_CHAT, 0, &st) != 0) failed = 1;
        else ok++;
    }
    assert_true(failed);
    assert_true(ok >= 4);
    assert_non_null(strstr(st.msg, "No space left"));
    fprintf(stderr, "disk full after %llu pages: %s\n", (unsigned long long)ok, st.msg);
    assert_int_equal(count_tmp(f->node[0]), 0); /* nothing half-written left behind */
    assert_int_equal(tide_kvstore_has(s, key_of(i - 1)), 0);
    uint64_t got;
    int found;
    for (uint64_t j = 100; j < 100 + ok; j++) { /* reads go on */
        assert_int_equal(tide_kvstore_get(s, key_of(j), p, 30000, &got, &found, &st), 0);
        assert_int_equal(found, 1);
    }
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.put_errors, 1);
    tide_kvstore_close(s);
    free(p);
    umount(f->node[0]);
    clear_nodes(f);
}

/* Tiers over one or two stores (in lookup order), with a host LRU of host_bytes. */
static tide_kvtiers *tiers_over(tide_kvstore *s0, tide_kvstore *s1, uint64_t host_bytes) {
    tide_kvtiers_cfg tc = {0};
    tc.host_bytes = host_bytes;
    tc.stores[tc.n_stores++] = s0;
    if (s1) tc.stores[tc.n_stores++] = s1;
    tide_kvtiers *t;
    tide_status st = {0};
    if (tide_kvtiers_create(&tc, &t, &st) != 0) fail_msg("%s", st.msg);
    return t;
}

/* A writer killed at a random moment: whatever reads back is exact. */
static void test_kill9_writer(void **state) {
    fx *f = *state;
    int64_t total_pages = 0, total_hits = 0;
    for (int trial = 0; trial < 50; trial++) {
            int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            tide_kvstore_cfg c = {0};
            c.nodes = f->nodes;
            c.n_nodes = NODES;
            c.fingerprint = 42;
            c.no_sync = trial % 5 != 0; /* every fifth trial with fsync */
            tide_kvstore *s;
            tide_status st = {0};
            if (tide_kvstore_open(&c, &s, &st) != 0) _exit(2);
            uint8_t *p = malloc(20000);
            if (write(ready[1], "r", 1) != 1) _exit(2); /* the clock starts once it writes */
            for (uint64_t i = 0;; i++) {
                page_of(i, p, size_of(i));
                tide_kvstore_put(s, key_of(i), i, p, size_of(i), TIDE_KV_CHAT, 0, &st);
            }
        }
        close(ready[1]);
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
        close(ready[0]);
        struct timespec ts = {0, (long)(tu_next(&f->r) % 20000000)}; /* 0-20 ms */
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int wst;
        waitpid(pid, &wst, 0);
        tide_kvstore *s = open_store(f, NODES, 0);
        tide_kvstore_stats ss;
        tide_kvstore_get_stats(s, &ss);
        for (uint64_t i = 0; i < (uint64_t)ss.pages + 2; i++) total_hits += read_page(s, i);
        total_pages += ss.pages;
        tide_kvstore_close(s);
        clear_nodes(f);
    }
    clear_nodes(f);
    fprintf(stderr, "kill -9: 50 trials, %lld pages found, %lld read back (all exact)\n", (long long)total_pages,
            (long long)total_hits);
    assert_true(total_hits > 0);
}

/* Node 4 gone (its directory replaced by a file): a put needing every shard
 * fails cleanly; one needing 11 succeeds, the page reads, and once the node
 * is back verify rebuilds its shard. The tiers fail over: a page that one
 * store cannot take still lands in the next, and is read from there. */
static void test_node_gone(void **state) {
    fx *f = *state;
    char away[600];
    snprintf(away, sizeof away, "%s.away", f->node[4]);
    tide_kvstore *s = open_store(f, NODES, 0);
    tide_kvstore_close(s);
    assert_int_equal(rename(f->node[4], away), 0);
    FILE *fp = fopen(f->node[4], "w");
    assert_non_null(fp);
    fclose(fp);
    s = open_store(f, NODES, 0);
    uint8_t p[3000];
    page_of(1, p, sizeof p);
    tide_status st = {0};
    assert_int_equal(tide_kvstore_put(s, key_of(1), 1, p, sizeof p, TIDE_KV_CHAT, 0, &st), -1);
    assert_non_null(strstr(st.msg, "11 of 12 shards written (Not a directory)"));
    assert_int_equal(tide_kvstore_has(s, key_of(1)), 0);
    tide_kvstore_cfg c = {0};
    c.nodes = f->nodes;
    c.n_nodes = NODES;
    c.no_sync = 1;
    c.min_write_shards = 11;
    c.fingerprint = 42;
    tide_kvstore *s11;
    assert_int_equal(tide_kvstore_open(&c, &s11, &st), 0);
    assert_int_equal(tide_kvstore_put(s11, key_of(2), 2, p, size_of(2) < sizeof p ? size_of(2) : sizeof p,
                                      TIDE_KV_CHAT, 0, &st), 0);

    /* the tiers: store s refuses every page, s11 takes it */
    tide_kvtiers *t = tiers_over(s, s11, 0);
    const tide_kv_tier *h = tide_kvtiers_hooks(t);
    int32_t toks[24];
    uint8_t kv[712], back[712]; /* packed blocks: bytes */
    for (int i = 0; i < 24; i++) toks[i] = (int32_t)(tu_next(&f->r) % 1000);
    for (int i = 0; i < 712; i++) kv[i] = (uint8_t)tu_next(&f->r);
    tide_kv_page pg = {5, toks, 16, 8, 0, kv, 712, -1};
    h->put(h->ctx, &pg);
    tide_kvtiers_flush(t);
    pg.data = back;
    assert_int_equal(h->get(h->ctx, &pg), 1);
    assert_memory_equal(back, kv, sizeof kv);
    pg.salt = 6; /* another tenant: not found */
    assert_int_equal(h->get(h->ctx, &pg), 0);
    tide_kvtiers_stats ts;
    tide_kvtiers_get_stats(t, &ts);
    assert_int_equal(ts.write_errors, 1);
    assert_int_equal(ts.written, 1);
    assert_int_equal(ts.store_hits[1], 1);
    assert_int_equal(ts.misses, 1);

    /* read-ahead: pages 0 and 1 of tenant 7's prefix are stored, page 2 is
     * not; a prefetch of 3 pages reads 2 and stops; get then serves them
     * from the staging list (no store read: store_hits does not move) */
    uint8_t kv2[2][712];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 712; i++) kv2[k][i] = (uint8_t)tu_next(&f->r);
        tide_kv_page q = {7, toks, 8 * (k + 1), 8, 0, kv2[k], 712, TIDE_KV_AGENT};
        h->put(h->ctx, &q);
    }
    tide_kvtiers_flush(t);
    tide_kv_page q = {7, toks, 8, 8, 0, back, 712, -1};
    uint64_t ticket = h->prefetch(h->ctx, &q, 3);
    assert_true(ticket > 0);
    assert_int_equal(h->ready(h->ctx, ticket, 10.0), 1);
    tide_kvtiers_get_stats(t, &ts);
    assert_int_equal(ts.prefetches, 1);
    assert_int_equal(ts.prefetched, 2);
    assert_int_equal(ts.misses, 2); /* page 2 */
    int64_t hits1 = ts.store_hits[1];
    for (int k = 0; k < 2; k++) {
        q.n_tokens = 8 * (k + 1);
        assert_int_equal(h->get(h->ctx, &q), 1);
        assert_memory_equal(back, kv2[k], sizeof back);
    }
    tide_kvtiers_get_stats(t, &ts);
    assert_int_equal(ts.staged_hits, 2);
    assert_int_equal(ts.store_hits[1], hits1);
    h->forget(h->ctx, ticket);
    assert_int_equal(h->ready(h->ctx, ticket, 0), 1); /* a forgotten ticket is done */
    /* forgotten before its pages were taken, or before it ran: nothing leaks */
    q.n_tokens = 8;
    h->forget(h->ctx, h->prefetch(h->ctx, &q, 2));
    ticket = h->prefetch(h->ctx, &q, 2);
    assert_int_equal(h->ready(h->ctx, ticket, 10.0), 1);
    h->forget(h->ctx, ticket);
    tide_kvtiers_destroy(t);
    tide_kvstore_close(s);
    tide_kvstore_close(s11);

    /* the node is back: the pages written while it was gone (page 2, the
     * tiers' page and tenant 7's two) are degraded, verify rebuilds them */
    assert_int_equal(unlink(f->node[4]), 0);
    assert_int_equal(rename(away, f->node[4]), 0);
    s = open_store(f, NODES, 0);
    tide_kvstore_stats ss;
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.pages, 4);
    assert_int_equal(ss.degraded, 4);
    tide_kvstore_report r;
    assert_int_equal(tide_kvstore_verify(s, &r, &st), 0);
    assert_int_equal(r.repaired, 4);
    tide_kvstore_get_stats(s, &ss);
    assert_int_equal(ss.degraded, 0);
    tide_kvstore_close(s);
    clear_nodes(f);
}

typedef struct {
    tide_kvstore *s;
    uint64_t n;
    atomic_int done;
} writer_arg;

static void *writer_main(void *p) {
    writer_arg *w = p;
    uint8_t *b = malloc(20000);
    tide_status st = {0};
    for (uint64_t i = 0; i < w->n; i++) {
        page_of(i, b, size_of(i));
        tide_kvstore_put(w->s, key_of(i), i, b, size_of(i), TIDE_KV_CHAT, 0, &st);
    }
    free(b);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Reads while another thread writes (the engine and the tiers' writer):
 * every read is exact or a miss, and all pages are there at the end. */
static void test_concurrent_read_write(void **state) {
    fx *f = *state;
    tide_kvstore *s = open_store(f, NODES, 0);
    writer_arg w = {s, 60, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
    int64_t hits = 0;
    while (!atomic_load(&w.done))
        for (uint64_t i = 0; i < w.n; i++) hits += read_page(s, i);
    pthread_join(t, NULL);
    for (uint64_t i = 0; i < w.n; i++) assert_int_equal(read_page(s, i), 1);
    fprintf(stderr, "concurrent: %lld reads hit while writing\n", (long long)hits);
    tide_kvstore_close(s);
    clear_nodes(f);
}

static void test_bad_config(void **state) {
    fx *f = *state;
    tide_kvstore_cfg c = {0};
    c.nodes = f->nodes;
    c.n_nodes = NODES;
    c.k = 10;
    c.m = 1;
    tide_kvstore *s = NULL;
    tide_status st = {0};
    assert_int_equal(tide_kvstore_open(&c, &s, &st), -1);
    assert_non_null(strstr(st.msg, "needs 11 node directories, got 12"));
    c.m = 2;
    c.min_write_shards = 3;
    assert_int_equal(tide_kvstore_open(&c, &s, &st), -1);
    assert_non_null(strstr(st.msg, "min_write_shards"));
    c.n_nodes = 0;
    assert_int_equal(tide_kvstore_open(&c, &s, &st), -1);
    assert_null(s);
    tide_kvs_ec ec;
    assert_int_equal(tide_kvs_ec_init(&ec, 30, 3, &st), -1);
}

static void test_shard_format(void **state) {
    fx *f = *state;
    uint8_t data[64], file[TIDE_KVS_HDR + 64];
    for (int i = 0; i < 64; i++) data[i] = (uint8_t)tu_next(&f->r);
    tide_kvs_hdr h = {{1, 2}, 3, 4, 600, 64, 10, 2, 11, 1, 5, 6, 0, 7}, g; /* 10 shards of 64 hold 600 bytes */
    tide_kvs_hdr_write(&h, data, file);
    memcpy(file + TIDE_KVS_HDR, data, 64);
    const uint8_t *d;
    tide_status st = {0};
    assert_int_equal(tide_kvs_shard_parse(file, sizeof file, &g, &d, &st), 0);
    assert_int_equal(g.index, 11);
    assert_int_equal(g.page_bytes, 600);
    assert_int_equal(tide_kvs_shard_parse(file, sizeof file - 1, &g, &d, &st), -1);
    assert_non_null(strstr(st.msg, "truncated"));
    file[TIDE_KVS_HDR + 5] ^= 1;
    assert_int_equal(tide_kvs_shard_parse(file, sizeof file, &g, &d, &st), -1);
    assert_non_null(strstr(st.msg, "data checksum"));
    file[40] ^= 1;
    assert_int_equal(tide_kvs_hdr_parse(file, sizeof file, &g, &st), -1);
    assert_non_null(strstr(st.msg, "header checksum"));
    file[0] = 'X';
    assert_int_equal(tide_kvs_hdr_parse(file, sizeof file, &g, &st), -1);
    assert_non_null(strstr(st.msg, "magic"));
    /* the version: 2 (packed pages); version 1 (f32 pages) is refused by name */
    h.page_bytes = 600;
    tide_kvs_hdr_write(&h, data, file);
    assert_int_equal(file[8], TIDE_KVS_VERSION);
    assert_int_equal(tide_kvs_hdr_parse(file, sizeof file, &g, &st), 0);
    file[8] = 1;
    uint64_t hs = tide_kvs_sum(file, 120); /* a well-formed version 1 header */
    for (int i = 0; i < 8; i++) file[120 + i] = (uint8_t)(hs >> (8 * i));
    assert_int_equal(tide_kvs_hdr_parse(file, sizeof file, &g, &st), -1);
    assert_int_equal(st.code, TIDE_ERR_UNSUPPORTED);
    assert_non_null(strstr(st.msg, "version 1"));
    assert_non_null(strstr(st.msg, "f32"));
    h.page_bytes = 641; /* more than 10 shards of 64 */
    tide_kvs_hdr_write(&h, data, file);
    assert_int_equal(tide_kvs_hdr_parse(file, sizeof file, &g, &st), -1);
    assert_non_null(strstr(st.msg, "do not fit"));
}

static int count_records(const char *dir, const char *want) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)) != NULL)
        n += !strncmp(de->d_name, ".stats.", 7) && (!want || !strcmp(de->d_name, want));
    if (d) closedir(d);
    return n;
}

/* The counters every process persists (tide kv stat): a first process
 * through the tiers (a host-tier hit) and directly (hits, a miss, a
 * degraded read, a repair), a second one; a third process sums both
 * records, saving twice counts once, a corrupt record is ignored, and gc
 * two days later folds both into one record without changing the sums. */
static void test_persisted_counters(void **state) {
    fx *f = *state;
    tide_status st = {0};
    tide_kvstore *a = open_store(f, NODES, 0);
    tide_kvtiers *t = tiers_over(a, NULL, 1 << 20);
    const tide_kv_tier *h = tide_kvtiers_hooks(t);
    int32_t toks[8];
    uint8_t kv[300], back[300];
    for (int i = 0; i < 8; i++) toks[i] = (int32_t)(tu_next(&f->r) % 1000);
    for (int i = 0; i < 300; i++) kv[i] = (uint8_t)tu_next(&f->r);
    tide_kv_page pg = {3, toks, 8, 8, 0, kv, 300, -1};
    h->put(h->ctx, &pg);
    tide_kvtiers_flush(t);
    pg.data = back;
    assert_int_equal(h->get(h->ctx, &pg), 1); /* from the host tier */
    assert_memory_equal(back, kv, sizeof kv);
    tide_kvtiers_destroy(t);
    uint64_t base = 10 + tu_next(&f->r) % 1000;
    for (uint64_t i = base; i < base + 5; i++) put_page(a, i, TIDE_KV_AGENT);
    for (uint64_t i = base; i < base + 3; i++) assert_int_equal(read_page(a, i), 1);
    assert_int_equal(read_page(a, base + 100), 0);
    char p[1024];
    shard_file(f, base + 3, 7, p, sizeof p);
    corrupt(p, &f->r);
    assert_int_equal(read_page(a, base + 3), 1);
    tide_kvstore_report r;
    assert_int_equal(tide_kvstore_repair(a, &r, &st), 0);
    tide_kvstore_stats sa, sb, sum, again;
    tide_kvstore_get_stats(a, &sa);
    assert_int_equal(sa.host_hits, 1);
    assert_int_equal(sa.hits, 4);
    assert_int_equal(sa.repairs, 1);
    assert_true(sa.corrupt_shards >= 1 && sa.puts == 6 && sa.misses == 1);
    tide_kvstore_close(a); /* saves its record */
    assert_int_equal(count_records(f->node[0], NULL), 1);

    tide_kvstore *b = open_store(f, NODES, 0);
    put_page(b, base + 20, TIDE_KV_CHAT);
    assert_int_equal(read_page(b, base + 20), 1);
    assert_int_equal(read_page(b, base + 4), 1);
    tide_kvstore_get_stats(b, &sb);
    assert_int_equal(tide_kvstore_load_counters(b, &sum, &st), 0);
    assert_int_equal(sum.processes, 2);
    assert_int_equal(sum.pages, 7);
    assert_int_equal(sum.hits, sa.hits + sb.hits);
    assert_int_equal(sum.misses, sa.misses + sb.misses);
    assert_int_equal(sum.puts, sa.puts + sb.puts);
    assert_int_equal(sum.bytes_written, sa.bytes_written + sb.bytes_written);
    assert_int_equal(sum.bytes_read, sa.bytes_read + sb.bytes_read);
    assert_int_equal(sum.encode_bytes, sa.encode_bytes + sb.encode_bytes);
    assert_int_equal(sum.decode_bytes, sa.decode_bytes + sb.decode_bytes);
    assert_int_equal(sum.repairs, 1);
    assert_int_equal(sum.corrupt_shards, sa.corrupt_shards);
    assert_int_equal(sum.host_hits, 1);
    assert_true(sum.encode_seconds > 0 && sum.decode_seconds > 0);
    assert_int_equal(tide_kvstore_save_counters(b, &st), 0);
    assert_int_equal(tide_kvstore_save_counters(b, &st), 0); /* rewritten, not added */
    tide_kvstore_close(b);
    assert_int_equal(count_records(f->node[0], NULL), 2);

    /* a third process, which counts nothing itself, sees both records */
    tide_kvstore *c = open_store(f, NODES, 0);
    snprintf(p, sizeof p, "%s/.stats.00000000000000ff", f->node[3]); /* not a record: ignored */
    FILE *bad = fopen(p, "wb");
    assert_non_null(bad);
    fputs("not a counters record", bad);
    fclose(bad);
    assert_int_equal(tide_kvstore_load_counters(c, &again, &st), 0);
    assert_int_equal(again.processes, 2);
    assert_int_equal(again.hits, sum.hits);
    assert_int_equal(again.bytes_written, sum.bytes_written);
    assert_int_equal(again.host_hits, 1);
    unlink(p);
    /* gc now: the records are fresh and stay; 4 days later (the fake clock)
     * they are folded into record 0, and the 5 agent pages expire */
    assert_int_equal(tide_kvstore_gc(c, &r, &st), 0);
    assert_int_equal(count_records(f->node[0], NULL), 2);
    f->now += 4 * 86400;
    assert_int_equal(tide_kvstore_gc(c, &r, &st), 0);
    assert_int_equal(count_records(f->node[0], NULL), 1);
    assert_int_equal(count_records(f->node[0], ".stats.0000000000000000"), 1);
    assert_int_equal(tide_kvstore_load_counters(c, &again, &st), 0);
    assert_int_equal(again.processes, 3); /* c counted the expired pages itself */
    assert_int_equal(again.hits, sum.hits);
    assert_int_equal(again.puts, sum.puts);
    assert_int_equal(again.bytes_read, sum.bytes_read);
    assert_int_equal(again.repairs, 1);
    assert_int_equal(again.host_hits, 1);
    assert_int_equal(again.expired, 5);
    tide_kvstore_close(c);
    f->now -= 4 * 86400;
    clear_nodes(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),        cmocka_unit_test(test_any_two_lost),
        cmocka_unit_test(test_three_lost_is_a_miss), cmocka_unit_test(test_ttl_fake_clock),
        cmocka_unit_test(test_lru_capacity),      cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_kill9_writer),      cmocka_unit_test(test_node_gone),
        cmocka_unit_test(test_concurrent_read_write), cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_shard_format),      cmocka_unit_test(test_persisted_counters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
