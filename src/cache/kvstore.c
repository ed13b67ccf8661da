/* The persistent KV store: see kvstore.h. The file reads in four parts:
 * the index, opening (rebuilding the index), writing, reading and upkeep. */
#include "cache/kvstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cache/kvstore_ec.h"
#include "cache/kvstore_io.h"

#define MAX_PATH 4096
#define TMP_AGE 3600 /* temporary files older than this are a crash's leftovers */
#define FOLD_AGE 86400 /* counters records not updated for this long belong to processes gone */

typedef struct entry {
    tide_kvstore_entry e;
    uint64_t shard_bytes;
    uint32_t mask; /* shards the index believes on disk */
    int live;
} entry;

struct tide_kvstore {
    tide_kvstore_cfg cfg;
    char **nodes;
    tide_kvs_ec ec;
    tide_kvs_io io;    /* writes and upkeep, under mu */
    tide_kvs_io io_rd; /* reads by get, under rd_mu only: a get never waits for a write's fsyncs */
    pthread_mutex_t mu, rd_mu;
    entry *ents;
    int64_t n_ents, cap_ents, n_live;
    int32_t *slots; /* open addressing over ents: -1 empty, -2 deleted */
    int64_t n_slots, n_used_slots;
    tide_kvs_key *pending; /* pages a read found degraded */
    int n_pending;
    uint64_t tmp_seq;
    tide_kvstore_stats stats;
    uint64_t counters_id; /* this process's counters record */
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int64_t tide_kvstore_now(const tide_kvstore *s) {
    return s->cfg.clock ? s->cfg.clock(s->cfg.clock_ctx) : (int64_t)time(NULL);
}
int tide_kvstore_k(const tide_kvstore *s) { return s->cfg.k; }
int tide_kvstore_m(const tide_kvstore *s) { return s->cfg.m; }

/* ---- the index ------------------------------------------------------------ */

static uint64_t slot_of(const tide_kvstore *s, tide_kvs_key k) {
    return (k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)) & (uint64_t)(s->n_slots - 1);
}

static int key_eq(tide_kvs_key a, tide_kvs_key b) { return a.hi == b.hi && a.lo == b.lo; }

static entry *find(tide_kvstore *s, tide_kvs_key k) {
    for (uint64_t i = slot_of(s, k);; i = (i + 1) & (uint64_t)(s->n_slots - 1)) {
        int32_t v = s->slots[i];
        if (v == -1) return NULL;
        if (v >= 0 && key_eq(s->ents[v].e.key, k)) return &s->ents[v];
    }
}

static void slot_put(tide_kvstore *s, int32_t idx) {
    uint64_t i = slot_of(s, s->ents[idx].e.key);
    while (s->slots[i] >= 0) i = (i + 1) & (uint64_t)(s->n_slots - 1);
    if (s->slots[i] == -1) s->n_used_slots++;
    s->slots[i] = idx;
}

/* Rebuilds the slots (and compacts dead entries) when they fill up. */
static int reindex(tide_kvstore *s, int64_t want_live) {
    int64_t n = 64;
    while (n < 4 * (want_live + 1)) n *= 2;
    int32_t *sl = malloc((size_t)n * sizeof *sl);
    if (!sl) return -1;
    int64_t j = 0;
    for (int64_t i = 0; i < s->n_ents; i++)
        if (s->ents[i].live) s->ents[j++] = s->ents[i];
    s->n_ents = j;
    free(s->slots);
    s->slots = sl;
    s->n_slots = n;
    s->n_used_slots = 0;
    memset(sl, 0xff, (size_t)n * sizeof *sl);
    for (int64_t i = 0; i < s->n_ents; i++) slot_put(s, (int32_t)i);
    return 0;
}

static entry *add_entry(tide_kvstore *s, tide_kvs_key k) {
    if (2 * (s->n_used_slots + 1) > s->n_slots && reindex(s, s->n_live + 1) != 0) return NULL;
    if (s->n_ents == s->cap_ents) {
        int64_t cap = s->cap_ents ? 2 * s->cap_ents : 64;
        entry *e = realloc(s->ents, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        s->ents = e;
        s->cap_ents = cap;
    }
    entry *e = &s->ents[s->n_ents];
    memset(e, 0, sizeof *e);
    e->e.key = k;
    e->live = 1;
    slot_put(s, (int32_t)s->n_ents++);
    s->n_live++;
    return e;
}

static void drop_entry(tide_kvstore *s, entry *e) {
    int32_t idx = (int32_t)(e - s->ents);
    for (uint64_t i = slot_of(s, e->e.key);; i = (i + 1) & (uint64_t)(s->n_slots - 1))
        if (s->slots[i] == idx) {
            s->slots[i] = -2;
            break;
        }
    e->live = 0;
    s->n_live--;
}

static int popcount(uint32_t m) { return __builtin_popcount(m); }

static void shard_path(const tide_kvstore *s, tide_kvs_key k, int i, char *out) {
    char hex[33];
    tide_kvs_key_hex(k, hex);
    snprintf(out, MAX_PATH, "%s/%s.%d", s->nodes[i], hex, i);
}

/* Deletes the page's shard files and its entry. */
static void delete_page(tide_kvstore *s, entry *e) {
    char p[MAX_PATH];
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
        shard_path(s, e->e.key, i, p);
        unlink(p);
    }
    s->stats.bytes -= (int64_t)(tide_kvs_file_bytes(e->shard_bytes) * (uint64_t)popcount(e->mask));
    drop_entry(s, e);
}

/* ---- opening: the index from the shard headers ---------------------------- */

/* One shard file found by the scan: its header joins the page's entry. */
static void scan_file(tide_kvstore *s, int node, const char *dir, const char *name) {
    char path[MAX_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tide_kvs_key k;
    size_t len = strlen(name);
    if (len < 34 || name[32] != '.' || tide_kvs_key_parse(name, &k) != 0 || atoi(name + 33) != node) {
        s->stats.foreign++;
        return;
    }
    uint8_t b[TIDE_KVS_HDR];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = pread(fd, b, sizeof b, 0);
    close(fd);
    tide_kvs_hdr h;
    tide_status st = {0};
    if (n != (ssize_t)sizeof b || tide_kvs_hdr_parse(b, sizeof b, &h, &st) != 0 || !key_eq(h.key, k) ||
        h.index != node || h.klass >= TIDE_KV_CLASSES || h.k != s->cfg.k || h.m != s->cfg.m ||
        (s->cfg.fingerprint && h.fingerprint != s->cfg.fingerprint)) {
        s->stats.foreign++;
        return;
    }
    entry *e = find(s, k);
    if (!e) {
        if (!(e = add_entry(s, k))) return;
        e->e.chain = h.chain;
        e->e.page_bytes = h.page_bytes;
        e->shard_bytes = h.shard_bytes;
        e->e.fingerprint = h.fingerprint;
        e->e.klass = h.klass;
        e->e.created = h.created;
        e->e.expires = h.expires;
        e->e.used = h.created;
    } else if (e->e.page_bytes != h.page_bytes || e->shard_bytes != h.shard_bytes || e->e.fingerprint != h.fingerprint) {
        s->stats.foreign++; /* disagrees with its siblings: not one of this page's shards */
        return;
    }
    if (h.expires > e->e.expires) e->e.expires = h.expires; /* a refresh rewrote some shards */
    e->mask |= 1u << node;
    s->stats.bytes += (int64_t)tide_kvs_file_bytes(h.shard_bytes);
}

/* Removes temporary files older than TMP_AGE (younger ones may belong to a
 * writer on another host of a shared store). */
static int64_t sweep_tmp(const char *dir, const char *name) {
    char path[MAX_PATH];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &sb) != 0 || time(NULL) - sb.st_mtime < TMP_AGE) return 0;
    return unlink(path) == 0;
}

static int64_t scan(tide_kvstore *s, int index) {
    int64_t tmp = 0;
    for (int i = 0; i < s->cfg.n_nodes; i++) {
        DIR *d = opendir(s->nodes[i]);
        if (!d) {
            tide_log(TIDE_LOG_WARN, "kv store: node %s: %s (its shards count as missing)", s->nodes[i], strerror(errno));
            continue;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') {
                if (!strncmp(de->d_name, ".tmp.", 5)) tmp += sweep_tmp(s->nodes[i], de->d_name);
                continue;
            }
            if (index) scan_file(s, i, s->nodes[i], de->d_name);
        }
        closedir(d);
    }
    return tmp;
}

/* mkdir -p: a node directory and the directories above it. */
static int mkdir_p(const char *path) {
    char p[MAX_PATH];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
            *c = '/';
        }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int tide_kvstore_open(const tide_kvstore_cfg *cfg, tide_kvstore **out, tide_status *st) {
    *out = NULL;
    if (!cfg->nodes || cfg->n_nodes < 1 || cfg->n_nodes > TIDE_KVS_MAX_SHARDS)
        return tide_fail(st, TIDE_ERR_INVALID, "kv store: %d node directories (use 1..%d)", cfg->n_nodes,
                         TIDE_KVS_MAX_SHARDS);
    tide_kvstore *s = calloc(1, sizeof *s);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
    s->cfg = *cfg;
    if (s->cfg.k == 0 && s->cfg.m == 0) {
        s->cfg.k = cfg->n_nodes == 12 ? 10 : cfg->n_nodes;
        s->cfg.m = cfg->n_nodes - s->cfg.k;
    }
    int n = s->cfg.k + s->cfg.m;
    if (n != cfg->n_nodes || s->cfg.k < 1 || s->cfg.m < 0) {
        free(s);
        return tide_fail(st, TIDE_ERR_INVALID, "kv store: erasure code %d+%d needs %d node directories, got %d",
                         cfg->k, cfg->m, cfg->k + cfg->m, cfg->n_nodes);
    }
    if (s->cfg.min_write_shards == 0) s->cfg.min_write_shards = n;
    if (s->cfg.min_write_shards < s->cfg.k || s->cfg.min_write_shards > n) {
        int k = s->cfg.k;
        free(s);
        return tide_fail(st, TIDE_ERR_INVALID, "kv store: min_write_shards %d outside %d..%d", cfg->min_write_shards,
                         k, n);
    }
    if (s->cfg.ttl[TIDE_KV_CHAT] <= 0) s->cfg.ttl[TIDE_KV_CHAT] = 7 * 86400;
    if (s->cfg.ttl[TIDE_KV_AGENT] <= 0) s->cfg.ttl[TIDE_KV_AGENT] = 3 * 86400;
    s->cfg.nodes = NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->rd_mu, NULL);
    s->nodes = calloc((size_t)n, sizeof *s->nodes);
    s->pending = calloc(64, sizeof *s->pending);
    if (!s->nodes || !s->pending) goto nomem;
    for (int i = 0; i < n; i++) {
        if (!(s->nodes[i] = strdup(cfg->nodes[i]))) goto nomem;
        if (mkdir_p(s->nodes[i]) != 0)
            tide_log(TIDE_LOG_WARN, "kv store: node %s: %s", s->nodes[i], strerror(errno));
    }
    if (tide_kvs_ec_init(&s->ec, s->cfg.k, s->cfg.m, st) != 0 || tide_kvs_io_init(&s->io, st) != 0 ||
        tide_kvs_io_init(&s->io_rd, st) != 0) {
        tide_kvstore_close(s);
        return -1;
    }
    s->io.no_sync = s->io_rd.no_sync = cfg->no_sync;
    if (reindex(s, 0) != 0) goto nomem;
    struct {
        struct timespec t;
        pid_t pid;
        const void *self;
        char host[64];
    } who = {0};
    clock_gettime(CLOCK_REALTIME, &who.t);
    who.pid = getpid();
    who.self = s;
    gethostname(who.host, sizeof who.host - 1);
    s->counters_id = tide_kvs_sum(&who, sizeof who) | 1; /* never 0: that is the folded record's */
    scan(s, 1);
    *out = s;
    return 0;
nomem:
    tide_kvstore_close(s);
    return tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
}

static int has_counts(const tide_kvstore_stats *x);
static void fold_counters(tide_kvstore *s);

void tide_kvstore_close(tide_kvstore *s) {
    if (!s) return;
    if (s->nodes && s->slots && has_counts(&s->stats)) {
        tide_status st = {0};
        if (tide_kvstore_save_counters(s, &st) != 0) tide_log(TIDE_LOG_WARN, "%s", st.msg);
    }
    for (int i = 0; s->nodes && i < s->cfg.k + s->cfg.m; i++) free(s->nodes[i]);
    free(s->nodes);
    tide_kvs_ec_free(&s->ec);
    tide_kvs_io_free(&s->io);
    tide_kvs_io_free(&s->io_rd);
    free(s->ents);
    free(s->slots);
    free(s->pending);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->rd_mu);
    free(s);
}

/* ---- writing -------------------------------------------------------------- */

typedef struct shards {
    int n;
    uint64_t shard_bytes, file_bytes;
    uint8_t *file[TIDE_KVS_MAX_SHARDS]; /* whole file images: header + data */
    uint8_t *data[TIDE_KVS_MAX_SHARDS]; /* file[i] + TIDE_KVS_HDR */
} shards;

static void shards_free(shards *sh) {
    for (int i = 0; i < sh->n; i++) free(sh->file[i]);
    sh->n = 0;
}

static int shards_alloc(tide_kvstore *s, shards *sh, uint64_t page_bytes) {
    memset(sh, 0, sizeof *sh);
    sh->shard_bytes = tide_kvs_shard_bytes(page_bytes, s->cfg.k);
    sh->file_bytes = tide_kvs_file_bytes(sh->shard_bytes);
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
        if (!(sh->file[i] = tide_kvs_alloc(sh->file_bytes))) {
            shards_free(sh);
            return -1;
        }
        sh->data[i] = sh->file[i] + TIDE_KVS_HDR;
        sh->n++;
    }
    return 0;
}

/* Writes the shards listed in want (a bit mask) of a page whose file
 * images are complete; returns the mask written. */
static uint32_t write_shards(tide_kvstore *s, tide_kvs_key k, shards *sh, uint32_t want, int *err) {
    tide_kvs_file f[TIDE_KVS_MAX_SHARDS];
    char tmp[TIDE_KVS_MAX_SHARDS][MAX_PATH], fin[TIDE_KVS_MAX_SHARDS][MAX_PATH], hex[33];
    int idx[TIDE_KVS_MAX_SHARDS], n = 0;
    tide_kvs_key_hex(k, hex);
    for (int i = 0; i < sh->n; i++) {
        if (!(want >> i & 1)) continue;
        snprintf(tmp[n], MAX_PATH, "%s/.tmp.%s.%d.%ld.%llu", s->nodes[i], hex, i, (long)getpid(),
                 (unsigned long long)++s->tmp_seq);
        shard_path(s, k, i, fin[n]);
        f[n] = (tide_kvs_file){tmp[n], fin[n], s->nodes[i], sh->file[i], sh->file_bytes, 0};
        idx[n++] = i;
    }
    tide_kvs_io_write(&s->io, f, n);
    uint32_t done = 0;
    for (int j = 0; j < n; j++) {
        if (f[j].res >= 0) done |= 1u << idx[j];
        else *err = (int)-f[j].res;
    }
    return done;
}

/* Evicts least recently used pages until `more` bytes fit the capacity. */
static void make_room(tide_kvstore *s, uint64_t more) {
    if (s->cfg.capacity_bytes == 0) return;
    while (s->n_live > 0 && (uint64_t)s->stats.bytes + more > s->cfg.capacity_bytes) {
        entry *old = NULL;
        for (int64_t i = 0; i < s->n_ents; i++)
            if (s->ents[i].live && (!old || s->ents[i].e.used < old->e.used)) old = &s->ents[i];
        delete_page(s, old);
        s->stats.evictions++;
    }
}

int tide_kvstore_put(tide_kvstore *s, tide_kvs_key key, uint64_t chain, const void *page, uint64_t bytes, int klass,
                     int64_t ttl_s, tide_status *st) {
    if (bytes == 0 || bytes > TIDE_KVS_MAX_SHARD_BYTES || klass < 0 || klass >= TIDE_KV_CLASSES)
        return tide_fail(st, TIDE_ERR_INVALID, "kv store: put of %llu bytes, class %d", (unsigned long long)bytes, klass);
    pthread_mutex_lock(&s->mu);
    int rc = 0, n = s->cfg.k + s->cfg.m;
    int64_t now = tide_kvstore_now(s), exp = now + (ttl_s > 0 ? ttl_s : s->cfg.ttl[klass]);
    entry *e = find(s, key);
    if (e && e->e.expires > now && popcount(e->mask) == n) { /* stored: keep it longer, if asked to */
        if (exp > e->e.expires) e->e.expires = exp;
        e->e.used = now;
        goto out;
    }
    if (e) delete_page(s, e);
    shards sh;
    if (shards_alloc(s, &sh, bytes) != 0) {
        rc = tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
        goto out;
    }
    make_room(s, sh.file_bytes * (uint64_t)n);
    for (uint64_t off = 0, i = 0; off < bytes; off += sh.shard_bytes, i++)
        memcpy(sh.data[i], (const uint8_t *)page + off, bytes - off < sh.shard_bytes ? bytes - off : sh.shard_bytes);
    double t0 = now_s();
    tide_kvs_ec_encode(&s->ec, sh.shard_bytes, sh.data);
    s->stats.encode_seconds += now_s() - t0;
    s->stats.encode_bytes += (int64_t)bytes;
    tide_kvs_hdr h = {key, chain, s->cfg.fingerprint, bytes, sh.shard_bytes, s->cfg.k, s->cfg.m, 0, klass, now, exp, 0,
                      tide_kvs_sum(page, bytes)};
    for (int i = 0; i < n; i++) {
        h.index = i;
        tide_kvs_hdr_write(&h, sh.data[i], sh.file[i]);
    }
    int err = 0;
    uint32_t done = write_shards(s, key, &sh, n == 32 ? 0xffffffffu : (1u << n) - 1, &err);
    s->stats.puts++;
    if (popcount(done) < s->cfg.min_write_shards) {
        char p[MAX_PATH];
        for (int i = 0; i < n; i++) /* a page that is not fully there is not there */
            if (done >> i & 1) {
                shard_path(s, key, i, p);
                unlink(p);
            }
        s->stats.put_errors++;
        rc = tide_fail(st, TIDE_ERR_IO, "kv store: page %016llx%016llx: %d of %d shards written (%s)",
                       (unsigned long long)key.hi, (unsigned long long)key.lo, popcount(done), n, strerror(err));
    } else if ((e = add_entry(s, key)) != NULL) {
        e->e.chain = chain;
        e->e.page_bytes = bytes;
        e->shard_bytes = sh.shard_bytes;
        e->e.klass = klass;
        e->e.created = e->e.used = now;
        e->e.expires = exp;
        e->mask = done;
        e->e.fingerprint = s->cfg.fingerprint;
        s->stats.bytes += (int64_t)(sh.file_bytes * (uint64_t)popcount(done));
        s->stats.bytes_written += (int64_t)(sh.file_bytes * (uint64_t)popcount(done));
    } else rc = tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
    shards_free(&sh);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- reading -------------------------------------------------------------- */

/* Reads the page's shards into sh: good[i] = 1 for each one whose file is
 * whole, checksummed and agrees with the index. */
static void read_shards(tide_kvstore *s, tide_kvs_io *io, const entry *e, shards *sh, uint8_t *good,
                        tide_kvstore_stats *acc) {
    tide_kvs_file f[TIDE_KVS_MAX_SHARDS];
    char p[TIDE_KVS_MAX_SHARDS][MAX_PATH];
    int n = s->cfg.k + s->cfg.m;
    for (int i = 0; i < n; i++) {
        shard_path(s, e->e.key, i, p[i]);
        f[i] = (tide_kvs_file){NULL, p[i], NULL, sh->file[i], sh->file_bytes, 0};
    }
    tide_kvs_io_read(io, f, n);
    for (int i = 0; i < n; i++) {
        tide_kvs_hdr h;
        const uint8_t *d;
        tide_status st = {0};
        good[i] = f[i].res > 0 && tide_kvs_shard_parse(sh->file[i], (size_t)f[i].res, &h, &d, &st) == 0 &&
                  key_eq(h.key, e->e.key) && h.index == i && h.k == s->cfg.k && h.m == s->cfg.m &&
                  h.page_bytes == e->e.page_bytes && h.shard_bytes == e->shard_bytes &&
                  h.fingerprint == e->e.fingerprint;
        if (f[i].res > 0) acc->bytes_read += f[i].res;
        if (!good[i] && f[i].res != -ENOENT) acc->corrupt_shards++;
    }
}

/* Decodes a read page into out (out = NULL: only checks it); returns 1 when
 * it is whole and its checksum holds. sh keeps every shard rebuilt. */
static int decode_page(tide_kvstore *s, const entry *e, shards *sh, const uint8_t *good, void *out,
                       tide_kvstore_stats *acc) {
    int n = s->cfg.k + s->cfg.m, n_good = 0;
    for (int i = 0; i < n; i++) n_good += good[i];
    if (n_good < s->cfg.k) return 0;
    tide_status st = {0};
    if (n_good < n) { /* the decode throughput counts rebuilds only (a whole page needs none) */
        double t0 = now_s();
        if (tide_kvs_ec_decode(&s->ec, sh->shard_bytes, sh->data, good, &st) != 0) return 0;
        acc->decode_seconds += now_s() - t0;
        acc->decode_bytes += (int64_t)e->e.page_bytes;
    }
    uint8_t *page = out ? out : malloc(e->e.page_bytes);
    if (!page) return 0;
    for (uint64_t off = 0, i = 0; off < e->e.page_bytes; off += sh->shard_bytes, i++)
        memcpy(page + off, sh->data[i],
               e->e.page_bytes - off < sh->shard_bytes ? e->e.page_bytes - off : sh->shard_bytes);
    uint64_t page_sum = 0;
    tide_kvs_hdr h;
    for (int i = 0; i < n; i++) /* any good shard's header carries the page's checksum */
        if (good[i] && tide_kvs_hdr_parse(sh->file[i], TIDE_KVS_HDR, &h, &st) == 0) {
            page_sum = h.page_sum;
            break;
        }
    int ok = tide_kvs_sum(page, e->e.page_bytes) == page_sum;
    if (!out) free(page);
    return ok;
}

/* Rewrites the shards that were not good (their images rebuilt by decode:
 * fresh headers over the rebuilt data). */
static int repair_shards(tide_kvstore *s, entry *e, shards *sh, const uint8_t *good) {
    int n = s->cfg.k + s->cfg.m;
    uint32_t want = 0;
    tide_kvs_hdr h, src;
    tide_status st = {0};
    int have = -1;
    for (int i = 0; i < n; i++) {
        if (!good[i]) want |= 1u << i;
        else if (have < 0 && tide_kvs_hdr_parse(sh->file[i], TIDE_KVS_HDR, &src, &st) == 0) have = i;
    }
    if (!want || have < 0) return 0;
    for (int i = 0; i < n; i++)
        if (want >> i & 1) {
            h = src;
            h.index = i;
            h.expires = e->e.expires;
            tide_kvs_hdr_write(&h, sh->data[i], sh->file[i]);
            memset(sh->data[i] + sh->shard_bytes, 0, sh->file_bytes - TIDE_KVS_HDR - sh->shard_bytes);
        }
    int err = 0;
    uint32_t done = write_shards(s, e->e.key, sh, want, &err);
    uint32_t added = done & ~e->mask;
    s->stats.bytes += (int64_t)(sh->file_bytes * (uint64_t)popcount(added));
    e->mask |= done;
    s->stats.repairs += popcount(done);
    return done == want;
}

static void queue_repair(tide_kvstore *s, tide_kvs_key k) {
    for (int i = 0; i < s->n_pending; i++)
        if (key_eq(s->pending[i], k)) return;
    if (s->n_pending < 64) s->pending[s->n_pending++] = k;
}

int tide_kvstore_has(tide_kvstore *s, tide_kvs_key key) {
    pthread_mutex_lock(&s->mu);
    entry *e = find(s, key);
    int r = e && e->e.expires > tide_kvstore_now(s) && popcount(e->mask) >= s->cfg.k;
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* The page's entry; with cfg.scan_misses, a page the index lacks (or holds
 * too few shards of) is looked for on disk first: another process sharing
 * the store may have written it since this one opened it (tide route's
 * prefill replicas write what its decode replicas read). Under mu. */
static entry *find_or_scan(tide_kvstore *s, tide_kvs_key key) {
    entry *e = find(s, key);
    if (!s->cfg.scan_misses || (e && popcount(e->mask) >= s->cfg.k)) return e;
    char hex[33], name[48];
    tide_kvs_key_hex(key, hex);
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
        if (e && (e->mask >> i & 1)) continue;
        snprintf(name, sizeof name, "%s.%d", hex, i);
        scan_file(s, i, s->nodes[i], name);
        e = find(s, key); /* scan_file may have grown (moved) the index */
    }
    return e;
}

int tide_kvstore_get(tide_kvstore *s, tide_kvs_key key, void *out, uint64_t cap, uint64_t *bytes, int *found,
                     tide_status *st) {
    *found = 0;
    *bytes = 0;
    pthread_mutex_lock(&s->mu);
    entry *e = find_or_scan(s, key), copy;
    int rc = 0, ok = 0;
    if (!e || popcount(e->mask) < s->cfg.k) {
        s->stats.misses++;
    } else if (e->e.expires <= tide_kvstore_now(s)) {
        s->stats.misses++;
        s->stats.expired_misses++;
    } else if (e->e.page_bytes > cap) {
        rc = tide_fail(st, TIDE_ERR_INVALID, "kv store: page of %llu bytes, buffer of %llu",
                       (unsigned long long)e->e.page_bytes, (unsigned long long)cap);
    } else ok = 1;
    if (ok) copy = *e; /* the index may change while the shards are read */
    pthread_mutex_unlock(&s->mu);
    if (!ok) return rc;
    shards sh;
    uint8_t good[TIDE_KVS_MAX_SHARDS];
    if (shards_alloc(s, &sh, copy.e.page_bytes) != 0) return tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
    tide_kvstore_stats acc = {0};
    pthread_mutex_lock(&s->rd_mu);
    read_shards(s, &s->io_rd, &copy, &sh, good, &acc);
    pthread_mutex_unlock(&s->rd_mu);
    int whole = decode_page(s, &copy, &sh, good, out, &acc), degraded = 0;
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) degraded |= !good[i];
    shards_free(&sh);
    pthread_mutex_lock(&s->mu);
    s->stats.bytes_read += acc.bytes_read;
    s->stats.corrupt_shards += acc.corrupt_shards;
    s->stats.decode_seconds += acc.decode_seconds;
    s->stats.decode_bytes += acc.decode_bytes;
    if (whole) {
        *found = 1;
        *bytes = copy.e.page_bytes;
        s->stats.hits++;
        if ((e = find(s, key)) != NULL) e->e.used = tide_kvstore_now(s);
        if (degraded) queue_repair(s, key);
    } else {
        s->stats.misses++;
        s->stats.lost++;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- upkeep --------------------------------------------------------------- */

/* Reads one page and rewrites its bad shards; counts it in r. */
static void check_page(tide_kvstore *s, entry *e, tide_kvstore_report *r) {
    shards sh;
    uint8_t good[TIDE_KVS_MAX_SHARDS];
    r->pages++;
    if (shards_alloc(s, &sh, e->e.page_bytes) != 0) return;
    read_shards(s, &s->io, e, &sh, good, &s->stats);
    int n_good = 0, n = s->cfg.k + s->cfg.m;
    for (int i = 0; i < n; i++) n_good += good[i];
    if (!decode_page(s, e, &sh, good, NULL, &s->stats)) r->lost++;
    else if (n_good == n) r->ok++;
    else r->repaired += repair_shards(s, e, &sh, good);
    shards_free(&sh);
}

int tide_kvstore_verify(tide_kvstore *s, tide_kvstore_report *r, tide_status *st) {
    (void)st;
    memset(r, 0, sizeof *r);
    pthread_mutex_lock(&s->mu);
    for (int64_t i = 0; i < s->n_ents; i++)
        if (s->ents[i].live) check_page(s, &s->ents[i], r);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int tide_kvstore_repair(tide_kvstore *s, tide_kvstore_report *r, tide_status *st) {
    (void)st;
    memset(r, 0, sizeof *r);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_pending; i++) {
        entry *e = find(s, s->pending[i]);
        if (e) check_page(s, e, r);
    }
    s->n_pending = 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int tide_kvstore_gc(tide_kvstore *s, tide_kvstore_report *r, tide_status *st) {
    (void)st;
    memset(r, 0, sizeof *r);
    pthread_mutex_lock(&s->mu);
    int64_t now = tide_kvstore_now(s);
    for (int64_t i = 0; i < s->n_ents; i++) {
        entry *e = &s->ents[i];
        if (!e->live) continue;
        r->pages++;
        int expired = e->e.expires <= now;
        if (expired || popcount(e->mask) < s->cfg.k) {
            delete_page(s, e);
            r->deleted++;
            s->stats.expired += expired;
        }
    }
    int64_t before = s->stats.evictions;
    make_room(s, 0);
    r->deleted += s->stats.evictions - before;
    r->tmp_removed = scan(s, 0);
    fold_counters(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void tide_kvstore_each(tide_kvstore *s, void (*fn)(void *ctx, const tide_kvstore_entry *e), void *ctx) {
    pthread_mutex_lock(&s->mu);
    for (int64_t i = 0; i < s->n_ents; i++)
        if (s->ents[i].live) {
            tide_kvstore_entry e = s->ents[i].e;
            e.shards = popcount(s->ents[i].mask);
            fn(ctx, &e);
        }
    pthread_mutex_unlock(&s->mu);
}

void tide_kvstore_get_stats(tide_kvstore *s, tide_kvstore_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->pages = s->n_live;
    out->degraded = 0;
    memset(out->pages_class, 0, sizeof out->pages_class);
    for (int64_t i = 0; i < s->n_ents; i++)
        if (s->ents[i].live) {
            out->pages_class[s->ents[i].e.klass]++;
            out->degraded += popcount(s->ents[i].mask) < s->cfg.k + s->cfg.m;
        }
    pthread_mutex_unlock(&s->mu);
}

/* ---- persisted counters --------------------------------------------------- */

/* The record's integer counters and where each lives in the statistics
 * (the two times are kept in nanoseconds). */
static const struct {
    int idx;
    size_t off;
} INT_COUNTERS[] = {
    {TIDE_KVC_HITS, offsetof(tide_kvstore_stats, hits)},
    {TIDE_KVC_MISSES, offsetof(tide_kvstore_stats, misses)},
    {TIDE_KVC_EXPIRED_MISSES, offsetof(tide_kvstore_stats, expired_misses)},
    {TIDE_KVC_LOST, offsetof(tide_kvstore_stats, lost)},
    {TIDE_KVC_PUTS, offsetof(tide_kvstore_stats, puts)},
    {TIDE_KVC_PUT_ERRORS, offsetof(tide_kvstore_stats, put_errors)},
    {TIDE_KVC_BYTES_WRITTEN, offsetof(tide_kvstore_stats, bytes_written)},
    {TIDE_KVC_BYTES_READ, offsetof(tide_kvstore_stats, bytes_read)},
    {TIDE_KVC_CORRUPT, offsetof(tide_kvstore_stats, corrupt_shards)},
    {TIDE_KVC_REPAIRS, offsetof(tide_kvstore_stats, repairs)},
    {TIDE_KVC_EVICTIONS, offsetof(tide_kvstore_stats, evictions)},
    {TIDE_KVC_EXPIRED, offsetof(tide_kvstore_stats, expired)},
    {TIDE_KVC_ENCODE_BYTES, offsetof(tide_kvstore_stats, encode_bytes)},
    {TIDE_KVC_DECODE_BYTES, offsetof(tide_kvstore_stats, decode_bytes)},
    {TIDE_KVC_HOST_HITS, offsetof(tide_kvstore_stats, host_hits)},
};
enum { N_INT_COUNTERS = sizeof INT_COUNTERS / sizeof INT_COUNTERS[0] };
_Static_assert(N_INT_COUNTERS + 3 == TIDE_KVS_NCOUNTERS, "every counter: these, the two times and the processes");

static int64_t int_counter(const tide_kvstore_stats *x, int i) {
    return *(const int64_t *)((const char *)x + INT_COUNTERS[i].off);
}

/* The counters of this process's statistics x as a record's values. */
static void counters_of(const tide_kvstore_stats *x, int64_t *v) {
    for (int i = 0; i < N_INT_COUNTERS; i++) v[INT_COUNTERS[i].idx] = int_counter(x, i);
    v[TIDE_KVC_ENCODE_NS] = (int64_t)(x->encode_seconds * 1e9);
    v[TIDE_KVC_DECODE_NS] = (int64_t)(x->decode_seconds * 1e9);
    v[TIDE_KVC_PROCESSES] = 1;
}

/* Adds a record's values to x. */
static void add_counters(tide_kvstore_stats *x, const int64_t *v) {
    for (int i = 0; i < N_INT_COUNTERS; i++) *(int64_t *)((char *)x + INT_COUNTERS[i].off) += v[INT_COUNTERS[i].idx];
    x->encode_seconds += 1e-9 * (double)v[TIDE_KVC_ENCODE_NS];
    x->decode_seconds += 1e-9 * (double)v[TIDE_KVC_DECODE_NS];
    x->processes += v[TIDE_KVC_PROCESSES];
}

static int has_counts(const tide_kvstore_stats *x) {
    int64_t v[TIDE_KVS_NCOUNTERS];
    counters_of(x, v);
    for (int i = 0; i < TIDE_KVS_NCOUNTERS; i++)
        if (i != TIDE_KVC_PROCESSES && v[i] != 0) return 1;
    return 0;
}

void tide_kvstore_set_host_hits(tide_kvstore *s, int64_t hits) {
    pthread_mutex_lock(&s->mu);
    s->stats.host_hits = hits;
    pthread_mutex_unlock(&s->mu);
}

/* Writes record bytes b under a temporary name in node i (fsynced unless
 * no_sync); returns 0, or the errno (nothing left behind). */
static int write_tmp_record(tide_kvstore *s, int i, const uint8_t *b, char tmp[MAX_PATH]) {
    snprintf(tmp, MAX_PATH, "%s/.tmp.stats.%ld.%llu", s->nodes[i], (long)getpid(), (unsigned long long)++s->tmp_seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    int err = write(fd, b, TIDE_KVS_COUNTERS_BYTES) == TIDE_KVS_COUNTERS_BYTES && (s->cfg.no_sync || fsync(fd) == 0)
                  ? 0
                  : (errno ? errno : EIO);
    if (close(fd) != 0 && !err) err = errno;
    if (err) unlink(tmp);
    return err;
}

static void record_path(const tide_kvstore *s, int i, uint64_t id, char out[MAX_PATH]) {
    snprintf(out, MAX_PATH, "%s/.stats.%016llx", s->nodes[i], (unsigned long long)id);
}

/* Writes record c crash-safely (temporary file, rename) into the first
 * node directory that takes it; *node = that one. */
static int write_counters(tide_kvstore *s, const tide_kvs_counters *c, int *node, tide_status *st) {
    uint8_t b[TIDE_KVS_COUNTERS_BYTES];
    tide_kvs_counters_write(c, b);
    int err = 0;
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
        char tmp[MAX_PATH], fin[MAX_PATH];
        if ((err = write_tmp_record(s, i, b, tmp)) != 0) continue;
        record_path(s, i, c->id, fin);
        if (rename(tmp, fin) == 0) {
            *node = i;
            return 0;
        }
        err = errno;
        unlink(tmp);
    }
    return tide_fail(st, TIDE_ERR_IO, "kv store: counters record %016llx: no node directory took it (%s)",
                     (unsigned long long)c->id, strerror(err));
}

int tide_kvstore_save_counters(tide_kvstore *s, tide_status *st) {
    pthread_mutex_lock(&s->mu);
    tide_kvs_counters c = {s->counters_id, tide_kvstore_now(s), {0}};
    counters_of(&s->stats, c.v);
    int node = 0, rc = write_counters(s, &c, &node, st);
    char p[MAX_PATH];
    for (int i = 0; rc == 0 && i < node; i++) { /* an earlier node's copy is stale now */
        record_path(s, i, c.id, p);
        unlink(p);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

typedef struct {
    tide_kvs_counters *r;
    int n, cap;
} records;

/* Every counters record on disk, one per id: the copies of a record (a
 * node that failed, then another) merged by taking each counter's largest
 * value (a record's counts only grow). */
static int read_records(tide_kvstore *s, records *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
        DIR *d = opendir(s->nodes[i]);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, ".stats.", 7) || strlen(de->d_name) != 23) continue;
            char path[MAX_PATH];
            uint8_t b[TIDE_KVS_COUNTERS_BYTES + 1];
            snprintf(path, sizeof path, "%s/%s", s->nodes[i], de->d_name);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            ssize_t n = read(fd, b, sizeof b);
            close(fd);
            tide_kvs_counters c;
            tide_status bad = {0};
            char want[24];
            if (n < 0 || tide_kvs_counters_parse(b, (size_t)n, &c, &bad) != 0 ||
                (snprintf(want, sizeof want, ".stats.%016llx", (unsigned long long)c.id), strcmp(want, de->d_name))) {
                tide_log(TIDE_LOG_WARN, "kv store: %s: %s (ignored)", path, bad.msg[0] ? bad.msg : "not its name's record");
                continue;
            }
            int j = 0;
            while (j < out->n && out->r[j].id != c.id) j++;
            if (j == out->n) {
                if (out->n == out->cap) {
                    int cap = out->cap ? 2 * out->cap : 16;
                    tide_kvs_counters *r = realloc(out->r, (size_t)cap * sizeof *r);
                    if (!r) {
                        closedir(d);
                        free(out->r);
                        return tide_fail(st, TIDE_ERR_NOMEM, "kv store: out of memory");
                    }
                    out->r = r;
                    out->cap = cap;
                }
                out->r[out->n++] = c;
                continue;
            }
            tide_kvs_counters *o = &out->r[j];
            if (c.updated > o->updated) o->updated = c.updated;
            for (int k = 0; k < TIDE_KVS_NCOUNTERS; k++)
                if (c.v[k] > o->v[k]) o->v[k] = c.v[k];
        }
        closedir(d);
    }
    return 0;
}

int tide_kvstore_load_counters(tide_kvstore *s, tide_kvstore_stats *out, tide_status *st) {
    records rec;
    if (read_records(s, &rec, st) != 0) return -1;
    tide_kvstore_get_stats(s, out);
    out->processes = has_counts(out); /* every counter is 0 otherwise */
    for (int i = 0; i < rec.n; i++)
        if (rec.r[i].id != s->counters_id) add_counters(out, rec.r[i].v); /* our own is counted live */
    free(rec.r);
    return 0;
}

/* gc's part: records not updated for FOLD_AGE are summed into record 0.
 * The new record 0 is written under a temporary name, the folded records
 * deleted, then it is renamed into place. Under mu. */
static void fold_counters(tide_kvstore *s) {
    records rec;
    tide_status st = {0};
    if (read_records(s, &rec, &st) != 0) return;
    int64_t now = tide_kvstore_now(s);
    tide_kvs_counters total = {0, now, {0}};
    int folded = 0;
    for (int i = 0; i < rec.n; i++) {
        tide_kvs_counters *c = &rec.r[i];
        int old = c->id != s->counters_id && c->updated < now - FOLD_AGE;
        if (c->id != 0 && !old) continue;
        for (int k = 0; k < TIDE_KVS_NCOUNTERS; k++) total.v[k] += c->v[k];
        folded += c->id != 0;
        c->updated = -1; /* folded into the total: its files go */
    }
    if (folded > 0) {
        uint8_t b[TIDE_KVS_COUNTERS_BYTES];
        tide_kvs_counters_write(&total, b);
        char tmp[MAX_PATH], fin[MAX_PATH], p[MAX_PATH];
        for (int i = 0; i < s->cfg.k + s->cfg.m; i++) {
            if (write_tmp_record(s, i, b, tmp) != 0) continue;
            record_path(s, i, 0, fin);
            for (int r = 0; r < rec.n; r++) /* every copy of what the total now holds */
                for (int j = 0; rec.r[r].updated == -1 && j < s->cfg.k + s->cfg.m; j++) {
                    record_path(s, j, rec.r[r].id, p);
                    if (strcmp(p, fin)) unlink(p);
                }
            if (rename(tmp, fin) != 0) {
                tide_log(TIDE_LOG_WARN, "kv store: %s: %s (the folded counts are lost)", fin, strerror(errno));
                unlink(tmp);
            }
            break;
        }
    }
    free(rec.r);
}
