/* The tiers behind the prefix cache: see kvstore_tiers.h. */
#include "cache/kvstore_tiers.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"

#define HOST_BUCKETS 4096

typedef struct hpage { /* a page in the host LRU or the write queue */
    tide_kvs_key key;
    uint64_t chain, bytes;
    int klass;                 /* TIDE_KV_CHAT ..., or -1: the tiers' own */
    void *data;
    struct hpage *next, *prev; /* LRU (most recent at head) or queue order */
    struct hpage *chain_next;  /* host hash bucket */
} hpage;

/* A prefetch: a prefix's pages to read ahead, and those found. */
typedef struct pjob {
    uint64_t ticket, salt;
    int32_t *tokens;           /* the prefix up to the last page wanted */
    int64_t first_end, page_tokens, n_pages, n_bytes;
    int done;
    hpage *staged;             /* pages read, in order (chain_next) */
    struct pjob *next;
} pjob;

struct tide_kvtiers {
    tide_kvtiers_cfg cfg;
    tide_kv_tier hooks;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle, rcv; /* rcv: the reader's work, and tickets done */
    pthread_t thread, reader;
    int thread_on, reader_on, quit, busy;
    pjob *jobs;                /* prefetches, newest first */
    uint64_t next_ticket;
    hpage *q_head, *q_tail; /* write queue */
    uint64_t q_bytes;
    hpage *lru_head, *lru_tail;
    hpage *buckets[HOST_BUCKETS];
    uint64_t host_used;
    int64_t last_sweep;
    tide_kvtiers_stats stats;
};

tide_kvs_key tide_kv_page_key(uint64_t fingerprint, uint64_t salt, const int32_t *tokens, int64_t n_tokens) {
    uint64_t seedv[2] = {fingerprint, salt};
    XXH128_hash_t h = XXH3_128bits_withSeed(tokens, (size_t)n_tokens * sizeof *tokens, XXH3_64bits(seedv, sizeof seedv));
    return (tide_kvs_key){h.high64, h.low64};
}

/* ---- the host LRU (under mu) ---------------------------------------------- */

static hpage **bucket(tide_kvtiers *t, tide_kvs_key k) { return &t->buckets[k.lo % HOST_BUCKETS]; }

static void lru_unlink(tide_kvtiers *t, hpage *p) {
    if (p->prev) p->prev->next = p->next;
    else t->lru_head = p->next;
    if (p->next) p->next->prev = p->prev;
    else t->lru_tail = p->prev;
    p->next = p->prev = NULL;
}

static void lru_front(tide_kvtiers *t, hpage *p) {
    p->prev = NULL;
    p->next = t->lru_head;
    if (t->lru_head) t->lru_head->prev = p;
    t->lru_head = p;
    if (!t->lru_tail) t->lru_tail = p;
}

static hpage *host_find(tide_kvtiers *t, tide_kvs_key k) {
    for (hpage *p = *bucket(t, k); p; p = p->chain_next)
        if (p->key.hi == k.hi && p->key.lo == k.lo) return p;
    return NULL;
}

static void host_drop(tide_kvtiers *t, hpage *p) {
    hpage **pp = bucket(t, p->key);
    while (*pp != p) pp = &(*pp)->chain_next;
    *pp = p->chain_next;
    lru_unlink(t, p);
    t->host_used -= p->bytes;
    t->stats.host_pages--;
    free(p->data);
    free(p);
}

/* Takes ownership of p (freed if the host tier is off or it is too big). */
static void host_keep(tide_kvtiers *t, hpage *p) {
    if (p->bytes > t->cfg.host_bytes || host_find(t, p->key)) {
        free(p->data);
        free(p);
        return;
    }
    while (t->host_used + p->bytes > t->cfg.host_bytes && t->lru_tail) {
        host_drop(t, t->lru_tail);
        t->stats.host_evictions++;
    }
    p->chain_next = *bucket(t, p->key);
    *bucket(t, p->key) = p;
    lru_front(t, p);
    t->host_used += p->bytes;
    t->stats.host_pages++;
}

/* ---- the writer thread ---------------------------------------------------- */

static void write_page(tide_kvtiers *t, hpage *p) {
    for (int i = 0; i < t->cfg.n_stores; i++) {
        tide_status st = {0};
        int own = p->klass < 0; /* a request's class has its class's TTL */
        if (tide_kvstore_put(t->cfg.stores[i], p->key, p->chain, p->data, p->bytes, own ? t->cfg.klass : p->klass,
                             own ? t->cfg.ttl_s : 0, &st) != 0) {
            t->stats.write_errors++; /* this tier is full or down: the next one still gets the page */
            tide_log(TIDE_LOG_WARN, "kv tiers: store %d: %s", i, st.msg);
        } else t->stats.written++;
    }
}

/* Store i's counters, with the host tier's hits, persisted (kvstore.h). */
static void save_counters(tide_kvtiers *t, int i) {
    tide_status st = {0};
    pthread_mutex_lock(&t->mu);
    int64_t host_hits = t->stats.host_hits;
    pthread_mutex_unlock(&t->mu);
    tide_kvstore_set_host_hits(t->cfg.stores[i], host_hits);
    if (tide_kvstore_save_counters(t->cfg.stores[i], &st) != 0) tide_log(TIDE_LOG_WARN, "kv tiers: %s", st.msg);
}

/* Expiry sweep, background repair and the counters of every store, every
 * sweep_s. */
static void upkeep(tide_kvtiers *t) {
    int64_t now = (int64_t)time(NULL);
    if (now - t->last_sweep < t->cfg.sweep_s) return;
    t->last_sweep = now;
    for (int i = 0; i < t->cfg.n_stores; i++) {
        tide_kvstore_report r;
        tide_status st = {0};
        tide_kvstore_gc(t->cfg.stores[i], &r, &st);
        tide_kvstore_repair(t->cfg.stores[i], &r, &st);
        save_counters(t, i);
    }
    t->stats.sweeps++;
}

static void *writer(void *arg) {
    tide_kvtiers *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->q_head && !t->quit) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            pthread_mutex_unlock(&t->mu);
            upkeep(t);
            pthread_mutex_lock(&t->mu);
        }
        if (!t->q_head) break; /* quit with nothing left */
        hpage *p = t->q_head;
        t->q_head = p->next;
        if (!t->q_head) t->q_tail = NULL;
        t->busy = 1;
        pthread_mutex_unlock(&t->mu);
        write_page(t, p); /* the stores lock themselves */
        pthread_mutex_lock(&t->mu);
        t->q_bytes -= p->bytes;
        p->next = p->prev = NULL;
        host_keep(t, p);
        t->busy = 0;
        if (!t->q_head) pthread_cond_broadcast(&t->idle);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- read-ahead (the reader thread) -------------------------------------- */

/* A page from the host LRU (under mu): 1 if it is there (refreshed). */
static int host_get(tide_kvtiers *t, tide_kvs_key k, void *data, uint64_t bytes) {
    hpage *p = host_find(t, k);
    if (!p || p->bytes != bytes) return 0;
    memcpy(data, p->data, bytes);
    lru_unlink(t, p);
    lru_front(t, p);
    t->stats.host_hits++;
    return 1;
}

/* A page from the stores in lookup order (no lock held; the stores lock
 * themselves): the store's index, or -1 (a miss, counted). A page of
 * another size is another layout's: a miss. */
static int stores_get(tide_kvtiers *t, tide_kvs_key k, void *data, uint64_t bytes) {
    int found_in = -1;
    for (int i = 0; i < t->cfg.n_stores && found_in < 0; i++) {
        uint64_t got = 0;
        int found = 0;
        tide_status st = {0};
        if (tide_kvstore_get(t->cfg.stores[i], k, data, bytes, &got, &found, &st) == 0 && found && got == bytes)
            found_in = i;
    }
    pthread_mutex_lock(&t->mu);
    if (found_in >= 0) t->stats.store_hits[found_in]++;
    else t->stats.misses++;
    pthread_mutex_unlock(&t->mu);
    return found_in;
}

/* One page from the host LRU or the stores (no lock held on entry). */
static int read_page(tide_kvtiers *t, tide_kvs_key k, void *data, uint64_t bytes) {
    pthread_mutex_lock(&t->mu);
    int hit = host_get(t, k, data, bytes);
    pthread_mutex_unlock(&t->mu);
    return hit || stores_get(t, k, data, bytes) >= 0;
}

static void run_job(tide_kvtiers *t, pjob *j) {
    uint64_t bytes = (uint64_t)j->n_bytes;
    hpage **tail = &j->staged;
    for (int64_t i = 0; i < j->n_pages; i++) {
        int64_t end = j->first_end + i * j->page_tokens;
        hpage *p = calloc(1, sizeof *p);
        if (p) p->data = malloc(bytes);
        if (!p || !p->data) {
            if (p) free(p);
            break;
        }
        p->key = tide_kv_page_key(t->cfg.fingerprint, j->salt, j->tokens, end);
        p->bytes = bytes;
        if (!read_page(t, p->key, p->data, bytes)) {
            free(p->data);
            free(p);
            break;
        }
        pthread_mutex_lock(&t->mu);
        *tail = p; /* visible to get at once: the engine may take it */
        tail = &p->chain_next;
        t->stats.prefetched++;
        pthread_mutex_unlock(&t->mu);
    }
}

static void *reader(void *arg) {
    tide_kvtiers *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        pjob *j = NULL;
        for (pjob *x = t->jobs; x; x = x->next)
            if (!x->done) j = x; /* the oldest first */
        if (!j) {
            if (t->quit) break;
            pthread_cond_wait(&t->rcv, &t->mu);
            continue;
        }
        j->done = -1; /* running: forget waits for it */
        pthread_mutex_unlock(&t->mu);
        run_job(t, j);
        pthread_mutex_lock(&t->mu);
        j->done = 1;
        pthread_cond_broadcast(&t->rcv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void free_staged(hpage *p) {
    while (p) {
        hpage *n = p->chain_next;
        free(p->data);
        free(p);
        p = n;
    }
}

static uint64_t prefetch_hook(void *ctx, const tide_kv_page *pg, int64_t n_pages) {
    tide_kvtiers *t = ctx;
    if (!t->reader_on || n_pages <= 0) return 0;
    pjob *j = calloc(1, sizeof *j);
    if (j) j->tokens = malloc((size_t)(pg->n_tokens + (n_pages - 1) * pg->page_tokens) * sizeof *j->tokens);
    if (!j || !j->tokens) {
        if (j) free(j);
        return 0; /* get reads at admission instead */
    }
    memcpy(j->tokens, pg->tokens, (size_t)(pg->n_tokens + (n_pages - 1) * pg->page_tokens) * sizeof *j->tokens);
    j->salt = pg->salt;
    j->first_end = pg->n_tokens;
    j->page_tokens = pg->page_tokens;
    j->n_pages = n_pages;
    j->n_bytes = pg->n_bytes;
    pthread_mutex_lock(&t->mu);
    j->ticket = ++t->next_ticket;
    j->next = t->jobs;
    t->jobs = j;
    t->stats.prefetches++;
    pthread_cond_broadcast(&t->rcv);
    pthread_mutex_unlock(&t->mu);
    return j->ticket;
}

static pjob *find_job(tide_kvtiers *t, uint64_t ticket) {
    for (pjob *j = t->jobs; j; j = j->next)
        if (j->ticket == ticket) return j;
    return NULL;
}

static int ready_hook(void *ctx, uint64_t ticket, double wait_s) {
    tide_kvtiers *t = ctx;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double ns = (double)until.tv_nsec + wait_s * 1e9;
    until.tv_sec += (time_t)(ns / 1e9);
    until.tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
    pthread_mutex_lock(&t->mu);
    pjob *j;
    while ((j = find_job(t, ticket)) != NULL && j->done != 1 && wait_s > 0)
        if (pthread_cond_timedwait(&t->rcv, &t->mu, &until) != 0) break;
    int r = !j || j->done == 1;
    pthread_mutex_unlock(&t->mu);
    return r;
}

static void forget_hook(void *ctx, uint64_t ticket) {
    tide_kvtiers *t = ctx;
    pthread_mutex_lock(&t->mu);
    pjob *j = find_job(t, ticket);
    while (j && j->done == -1) pthread_cond_wait(&t->rcv, &t->mu); /* the reader is filling it */
    pjob **pp = &t->jobs;
    while (j && *pp != j) pp = &(*pp)->next;
    if (j) *pp = j->next;
    pthread_mutex_unlock(&t->mu);
    if (!j) return;
    free_staged(j->staged);
    free(j->tokens);
    free(j);
}

/* A staged page (under mu): taken out of its job. */
static hpage *take_staged(tide_kvtiers *t, tide_kvs_key k, uint64_t bytes) {
    for (pjob *j = t->jobs; j; j = j->next)
        for (hpage **pp = &j->staged; *pp; pp = &(*pp)->chain_next) {
            hpage *p = *pp;
            if (p->key.hi != k.hi || p->key.lo != k.lo || p->bytes != bytes) continue;
            *pp = p->chain_next;
            p->chain_next = NULL;
            return p;
        }
    return NULL;
}

/* ---- the hooks ------------------------------------------------------------ */

static void put_hook(void *ctx, const tide_kv_page *pg) {
    tide_kvtiers *t = ctx;
    uint64_t bytes = (uint64_t)pg->n_bytes;
    pthread_mutex_lock(&t->mu);
    if (t->q_bytes + bytes > t->cfg.queue_bytes) {
        t->stats.dropped++;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    hpage *p = calloc(1, sizeof *p);
    if (p) p->data = malloc(bytes);
    if (!p || !p->data) {
        if (p) free(p);
        t->stats.dropped++;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    p->key = tide_kv_page_key(t->cfg.fingerprint, pg->salt, pg->tokens, pg->n_tokens);
    p->chain = pg->chain;
    p->bytes = bytes;
    p->klass = pg->klass >= 0 && pg->klass < TIDE_KV_CLASSES ? pg->klass : -1;
    memcpy(p->data, pg->data, bytes);
    if (t->q_tail) t->q_tail->next = p;
    else t->q_head = p;
    t->q_tail = p;
    t->q_bytes += bytes;
    t->stats.queued++;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void flush_hook(void *ctx) { tide_kvtiers_flush(ctx); }

static int get_hook(void *ctx, tide_kv_page *pg) {
    tide_kvtiers *t = ctx;
    uint64_t bytes = (uint64_t)pg->n_bytes;
    tide_kvs_key k = tide_kv_page_key(t->cfg.fingerprint, pg->salt, pg->tokens, pg->n_tokens);
    pthread_mutex_lock(&t->mu);
    hpage *s = take_staged(t, k, bytes);
    if (s) { /* read ahead: no I/O now; kept in the host LRU like any store hit */
        memcpy(pg->data, s->data, bytes);
        s->chain = pg->chain;
        t->stats.staged_hits++;
        host_keep(t, s);
        pthread_mutex_unlock(&t->mu);
        return 1;
    }
    int hit = host_get(t, k, pg->data, bytes);
    pthread_mutex_unlock(&t->mu);
    if (hit) return 1;
    if (stores_get(t, k, pg->data, bytes) < 0) return 0;
    pthread_mutex_lock(&t->mu); /* a store hit is kept in the host LRU */
    hpage *c = t->cfg.host_bytes >= bytes ? calloc(1, sizeof *c) : NULL;
    if (c && (c->data = malloc(bytes)) != NULL) {
        c->key = k;
        c->chain = pg->chain;
        c->bytes = bytes;
        memcpy(c->data, pg->data, bytes);
        host_keep(t, c);
    } else free(c);
    pthread_mutex_unlock(&t->mu);
    return 1;
}

int tide_kvtiers_create(const tide_kvtiers_cfg *cfg, tide_kvtiers **out, tide_status *st) {
    *out = NULL;
    if (cfg->n_stores < 0 || cfg->n_stores > 4 || cfg->klass < 0 || cfg->klass >= TIDE_KV_CLASSES)
        return tide_fail(st, TIDE_ERR_INVALID, "kv tiers: %d stores (0..4), class %d", cfg->n_stores, cfg->klass);
    tide_kvtiers *t = calloc(1, sizeof *t);
    if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "kv tiers: out of memory");
    t->cfg = *cfg;
    if (!t->cfg.queue_bytes) t->cfg.queue_bytes = 256u << 20;
    if (!t->cfg.sweep_s) t->cfg.sweep_s = 600;
    t->last_sweep = (int64_t)time(NULL);
    t->hooks = (tide_kv_tier){t, put_hook, get_hook, flush_hook, prefetch_hook, ready_hook, forget_hook};
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->idle, NULL);
    pthread_cond_init(&t->rcv, NULL);
    if (pthread_create(&t->thread, NULL, writer, t) != 0) {
        tide_kvtiers_destroy(t);
        return tide_fail(st, TIDE_ERR_NOMEM, "kv tiers: cannot start the writer thread");
    }
    t->thread_on = 1;
    if (pthread_create(&t->reader, NULL, reader, t) != 0) {
        tide_kvtiers_destroy(t);
        return tide_fail(st, TIDE_ERR_NOMEM, "kv tiers: cannot start the reader thread");
    }
    t->reader_on = 1;
    *out = t;
    return 0;
}

void tide_kvtiers_flush(tide_kvtiers *t) {
    pthread_mutex_lock(&t->mu);
    while (t->q_head || t->busy) pthread_cond_wait(&t->idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void tide_kvtiers_destroy(tide_kvtiers *t) {
    if (!t) return;
    if (t->thread_on) {
        pthread_mutex_lock(&t->mu);
        t->quit = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    if (t->reader_on) {
        pthread_mutex_lock(&t->mu);
        t->quit = 1;
        for (pjob *j = t->jobs; j; j = j->next)
            if (!j->done) j->done = 1; /* not started: nothing to read any more */
        pthread_cond_broadcast(&t->rcv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->reader, NULL);
    }
    while (t->jobs) forget_hook(t, t->jobs->ticket);
    while (t->lru_head) host_drop(t, t->lru_head);
    for (int i = 0; i < t->cfg.n_stores; i++) /* saved with the store's counters when it closes */
        tide_kvstore_set_host_hits(t->cfg.stores[i], t->stats.host_hits);
    pthread_cond_destroy(&t->rcv);
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->idle);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

const tide_kv_tier *tide_kvtiers_hooks(tide_kvtiers *t) { return &t->hooks; }

void tide_kvtiers_get_stats(tide_kvtiers *t, tide_kvtiers_stats *out) {
    pthread_mutex_lock(&t->mu);
    *out = t->stats;
    out->host_bytes = (int64_t)t->host_used;
    pthread_mutex_unlock(&t->mu);
}

tide_kvstore *tide_kvtiers_store(const tide_kvtiers *t, int i) {
    return t && i >= 0 && i < t->cfg.n_stores ? t->cfg.stores[i] : NULL;
}

/* ---- the model's fingerprint ---------------------------------------------- */

static int hash_file(XXH3_state_t *x, const char *path, int ends_only) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return -1;
    }
    int64_t size = sb.st_size, mib = 1 << 20;
    XXH3_64bits_update(x, &size, sizeof size);
    static const int64_t none = -1;
    int64_t offs[2] = {0, ends_only && size > mib ? size - mib : none};
    char *buf = malloc((size_t)mib);
    int rc = buf ? 0 : -1;
    for (int i = 0; i < 2 && rc == 0; i++) {
        if (offs[i] < 0) continue;
        ssize_t n = pread(fd, buf, (size_t)(ends_only ? mib : size < mib ? size : mib), offs[i]);
        if (n < 0) rc = -1;
        else XXH3_64bits_update(x, buf, (size_t)n);
        if (!ends_only) break;
    }
    free(buf);
    close(fd);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tide_kv_fingerprint(const char *model_dir, const int64_t *params, int n, uint64_t *out, tide_status *st) {
    char path[4096];
    XXH3_state_t *x = XXH3_createState();
    if (!x) return tide_fail(st, TIDE_ERR_NOMEM, "kv fingerprint: out of memory");
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, params, (size_t)n * sizeof *params);
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    int rc = 0;
    if (hash_file(x, path, 0) != 0) {
        rc = tide_fail(st, TIDE_ERR_IO, "kv fingerprint: cannot read %s", path);
        goto out;
    }
    DIR *d = opendir(model_dir);
    if (!d) {
        rc = tide_fail(st, TIDE_ERR_IO, "kv fingerprint: cannot list %s", model_dir);
        goto out;
    }
    char *names[4096];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && nn < 4096) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors") && (names[nn] = strdup(de->d_name))) nn++;
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, by_name);
    for (int i = 0; i < nn; i++) {
        snprintf(path, sizeof path, "%s/%s", model_dir, names[i]);
        XXH3_64bits_update(x, names[i], strlen(names[i]));
        if (rc == 0 && hash_file(x, path, 1) != 0) rc = tide_fail(st, TIDE_ERR_IO, "kv fingerprint: cannot read %s", path);
        free(names[i]);
    }
    *out = XXH3_64bits_digest(x);
out:
    XXH3_freeState(x);
    return rc;
}
