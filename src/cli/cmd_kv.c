/* `tide kv stat|ls|verify|gc`: inspect and maintain a persistent KV store
 * (docs/kvstore.md). The store is opened for every model (fingerprint 0):
 * maintenance sees all pages. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/kv_cli.h"

int kv_cli_store_cfg(kv_cli_store *o, tide_kvstore_cfg *cfg, tide_status *st) {
    if (!o->root) return tide_fail(st, TIDE_ERR_INVALID, "--store ROOT is required");
    if (o->nodes < 1 || o->nodes > TIDE_KVS_MAX_SHARDS)
        return tide_fail(st, TIDE_ERR_INVALID, "--nodes %lld: use 1..%d", (long long)o->nodes, TIDE_KVS_MAX_SHARDS);
    int k = 0, m = 0;
    char tail;
    if (o->ec && (sscanf(o->ec, "%d+%d%c", &k, &m, &tail) != 2 || k < 1 || m < 0))
        return tide_fail(st, TIDE_ERR_INVALID, "--ec '%s' is not K+M (e.g. 10+2)", o->ec);
    for (int i = 0; i < o->nodes; i++) {
        snprintf(o->dirs[i], sizeof o->dirs[i], "%s/node%02d", o->root, i);
        o->dir_ptrs[i] = o->dirs[i];
    }
    cfg->nodes = o->dir_ptrs;
    cfg->n_nodes = (int)o->nodes;
    cfg->k = k;
    cfg->m = m;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tide kv stat|ls|verify|gc --store ROOT [options]\n\n"
               "  stat     pages, bytes, traffic classes, degraded pages; the counters every process persisted\n"
               "  ls       one line per page: key, chain hash, class, bytes, shards, created, expires\n"
               "  verify   read every page, rebuild missing or corrupt shards from parity (exit 1 if a page is lost)\n"
               "  gc       delete expired and unreadable pages and a crash's temporary files; evict down to --capacity-mib\n\n"
               "options:\n"
               "  --store ROOT        the store: node directories ROOT/node00, ROOT/node01, ...\n"
               "  --nodes N           node directories (default 12)\n"
               "  --ec K+M            erasure code (default 10+2 for 12 nodes, N+0 otherwise)\n"
               "  --at UNIX_SECONDS   judge expiry at this time instead of now (gc, stat)\n"
               "  --capacity-mib N    gc: evict least recently used pages down to N MiB\n"
               "  --limit N           ls: at most N lines (default all)\n");
}

static int64_t at_clock(void *ctx) { return *(const int64_t *)ctx; }

typedef struct {
    int64_t left;
} ls_ctx;

static void print_entry(void *ctx, const tide_kvstore_entry *e) {
    ls_ctx *c = ctx;
    if (c->left == 0) return;
    if (c->left > 0) c->left--;
    char hex[33];
    tide_kvs_key_hex(e->key, hex);
    printf("%s chain=%016" PRIx64 " model=%016" PRIx64 " class=%s bytes=%" PRIu64 " shards=%d created=%lld expires=%lld\n",
           hex, e->chain, e->fingerprint, e->klass == TIDE_KV_AGENT ? "agent" : "chat", e->page_bytes, e->shards,
           (long long)e->created, (long long)e->expires);
}

int tide_cmd_kv(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? TIDE_EXIT_USAGE : TIDE_EXIT_OK;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "stat") && strcmp(verb, "ls") && strcmp(verb, "verify") && strcmp(verb, "gc")) {
        fprintf(stderr, "tide kv: unknown action '%s'\n\n", verb);
        usage(stderr);
        return TIDE_EXIT_USAGE;
    }
    kv_cli_store so = {.nodes = 12};
    int64_t at = 0, cap_mib = 0, limit = -1;
    const bench_opt opts[] = {
        {"--store", BENCH_STR, &so.root, 0, 0},
        {"--nodes", BENCH_INT, &so.nodes, 1, TIDE_KVS_MAX_SHARDS},
        {"--ec", BENCH_STR, &so.ec, 0, 0},
        {"--at", BENCH_INT, &at, 1, INT64_MAX / 2},
        {"--capacity-mib", BENCH_INT, &cap_mib, 1, INT64_MAX >> 20},
        {"--limit", BENCH_INT, &limit, 0, INT64_MAX},
        {NULL, BENCH_INT, NULL, 0, 0},
    };
    int rc = tide_bench_parse("kv", argc - 1, argv + 1, opts, usage);
    if (rc >= 0) return rc;
    tide_kvstore_cfg cfg = {0};
    tide_status st = {0};
    if (kv_cli_store_cfg(&so, &cfg, &st) != 0) {
        fprintf(stderr, "tide kv %s: %s\n", verb, st.msg);
        return TIDE_EXIT_USAGE;
    }
    cfg.capacity_bytes = (uint64_t)cap_mib << 20;
    if (at) {
        cfg.clock = at_clock;
        cfg.clock_ctx = &at;
    }
    tide_kvstore *s;
    if (tide_kvstore_open(&cfg, &s, &st) != 0) {
        fprintf(stderr, "tide kv %s: %s\n", verb, st.msg);
        return TIDE_EXIT_FAIL;
    }
    rc = TIDE_EXIT_OK;
    tide_kvstore_report r;
    if (!strcmp(verb, "ls")) {
        ls_ctx c = {limit};
        tide_kvstore_each(s, print_entry, &c);
    } else if (!strcmp(verb, "verify")) {
        tide_kvstore_verify(s, &r, &st);
        printf("pages %lld ok %lld repaired %lld lost %lld\n", (long long)r.pages, (long long)r.ok,
               (long long)r.repaired, (long long)r.lost);
        if (r.lost > 0) rc = TIDE_EXIT_FAIL;
    } else if (!strcmp(verb, "gc")) {
        tide_kvstore_gc(s, &r, &st);
        printf("pages %lld deleted %lld temporary files removed %lld\n", (long long)r.pages, (long long)r.deleted,
               (long long)r.tmp_removed);
    }
    if (!strcmp(verb, "stat") || !strcmp(verb, "gc")) {
        tide_kvstore_stats ss;
        if (tide_kvstore_load_counters(s, &ss, &st) != 0) {
            fprintf(stderr, "tide kv %s: %s\n", verb, st.msg);
            tide_kvstore_close(s);
            return TIDE_EXIT_FAIL;
        }
        char b[32], b2[32], b3[32], b4[32];
        printf("store %s: %d nodes, erasure code %d+%d\n", so.root, cfg.n_nodes, tide_kvstore_k(s), tide_kvstore_m(s));
        printf("pages %lld (chat %lld, agent %lld), %s on disk, %lld degraded, %lld foreign or unreadable files\n",
               (long long)ss.pages, (long long)ss.pages_class[TIDE_KV_CHAT], (long long)ss.pages_class[TIDE_KV_AGENT],
               tide_bench_si((double)ss.bytes, "B", b, sizeof b), (long long)ss.degraded, (long long)ss.foreign);
        /* the counters every process that used the store persisted (kvstore.h) */
        printf("counters of %lld processes: hits %lld, misses %lld (%lld expired, %lld lost), host-tier hits %lld\n",
               (long long)ss.processes, (long long)ss.hits, (long long)ss.misses, (long long)ss.expired_misses,
               (long long)ss.lost, (long long)ss.host_hits);
        printf("puts %lld (%lld failed), %s written, %s read, encode %s/s, decode (rebuilding shards) %s/s\n",
               (long long)ss.puts,
               (long long)ss.put_errors, tide_bench_si((double)ss.bytes_written, "B", b, sizeof b),
               tide_bench_si((double)ss.bytes_read, "B", b2, sizeof b2),
               tide_bench_si(ss.encode_seconds > 0 ? (double)ss.encode_bytes / ss.encode_seconds : 0, "B", b3, sizeof b3),
               tide_bench_si(ss.decode_seconds > 0 ? (double)ss.decode_bytes / ss.decode_seconds : 0, "B", b4, sizeof b4));
        printf("corrupt shards %lld, shards repaired %lld, evictions %lld, expired pages deleted %lld\n",
               (long long)ss.corrupt_shards, (long long)ss.repairs, (long long)ss.evictions, (long long)ss.expired);
    }
    tide_kvstore_close(s);
    return rc;
}
