/* The tiers behind tide run's prefix cache: --kv-store, --kv-ssd and
 * friends (docs/kvstore.md). One place, so that the run command only
 * forwards its flags here and wraps its engine in kv_run_open/close. */
#include <stdlib.h>
#include <string.h>

#include "cache/kvstore_tiers.h"
#include "cli/kv_cli.h"

struct kv_run {
    kv_cli_store shared, ssd;
    tide_kvstore *stores[2];
    int n;
    tide_kvtiers *tiers;
};

void kv_run_help(FILE *f) {
    fprintf(f, "persistent KV store (docs/kvstore.md): pages written behind the requests, read back by\n"
               "a later process:\n"
               "  --kv-store ROOT      the shared store: node directories ROOT/node00 ...\n"
               "  --kv-nodes N         its node directories (default 12)\n"
               "  --kv-ec K+M          its erasure code (default 10+2 for 12 nodes)\n"
               "  --kv-ssd DIR         the local SSD tier (one directory, looked up first)\n"
               "  --kv-host-mib N      the host-memory tier (default 1024)\n"
               "  --kv-class C         chat (kept 7 days, default) or agent (3 days)\n");
}

int kv_run_flag(kv_run_opts *o, const char *flag, const char *v) {
    const char **s = !strcmp(flag, "--kv-store") ? &o->root
                     : !strcmp(flag, "--kv-ec")  ? &o->ec
                     : !strcmp(flag, "--kv-ssd") ? &o->ssd
                     : !strcmp(flag, "--kv-class") ? &o->klass
                                                   : NULL;
    int64_t *n = !strcmp(flag, "--kv-nodes") ? &o->nodes : !strcmp(flag, "--kv-host-mib") ? &o->host_mib : NULL;
    if (!s && !n) return 0;
    if (!v) {
        fprintf(stderr, "tide: %s needs a value\n", flag);
        return -1;
    }
    if (s) {
        *s = v;
        if (s == &o->klass && strcmp(v, "chat") && strcmp(v, "agent")) {
            fprintf(stderr, "tide: --kv-class '%s': use chat or agent\n", v);
            return -1;
        }
        return 2;
    }
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end || end == v || x < 1 || x > (n == &o->nodes ? TIDE_KVS_MAX_SHARDS : 1 << 30)) {
        fprintf(stderr, "tide: %s: '%s' is not a valid count\n", flag, v);
        return -1;
    }
    *n = x;
    return 2;
}

static int open_one(kv_run *r, kv_cli_store *so, uint64_t fp, tide_status *st) {
    tide_kvstore_cfg cfg = {0};
    if (kv_cli_store_cfg(so, &cfg, st) != 0) return -1;
    cfg.fingerprint = fp;
    cfg.scan_misses = 1; /* other processes (replicas) may share the store */
    return tide_kvstore_open(&cfg, &r->stores[r->n++], st) == 0 ? 0 : (r->n--, -1);
}

int kv_run_open(const kv_run_opts *o, tide_engine_config *c, kv_run **out, tide_status *st) {
    *out = NULL;
    if (!o->root && !o->ssd) return 0;
    int64_t params[] = {c->kv_block, c->page_tokens, c->canonical_layout, c->index_key_quirk};
    uint64_t fp;
    if (!c->model_dir || tide_kv_fingerprint(c->model_dir, params, 4, &fp, st) != 0) return -1;
    kv_run *r = calloc(1, sizeof *r);
    if (!r) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    r->ssd = (kv_cli_store){.root = o->ssd, .nodes = 1};
    r->shared = (kv_cli_store){.root = o->root, .nodes = o->nodes ? o->nodes : 12, .ec = o->ec};
    if ((o->ssd && open_one(r, &r->ssd, fp, st) != 0) || (o->root && open_one(r, &r->shared, fp, st) != 0)) {
        kv_run_close(r);
        return tide_fail_ctx(st, "kv store");
    }
    tide_kvtiers_cfg tc = {0};
    tc.host_bytes = (uint64_t)(o->host_mib ? o->host_mib : 1024) << 20;
    for (int i = 0; i < r->n; i++) tc.stores[i] = r->stores[i];
    tc.n_stores = r->n;
    tc.fingerprint = fp;
    tc.klass = o->klass && !strcmp(o->klass, "agent") ? TIDE_KV_AGENT : TIDE_KV_CHAT;
    if (tide_kvtiers_create(&tc, &r->tiers, st) != 0) {
        kv_run_close(r);
        return -1;
    }
    c->kv_tier = tide_kvtiers_hooks(r->tiers);
    *out = r;
    return 0;
}

struct tide_kvtiers *kv_run_tiers(const kv_run *r) { return r ? r->tiers : NULL; }

void kv_run_close(kv_run *r) {
    if (!r) return;
    if (r->tiers) {
        tide_kvtiers_stats s;
        tide_kvtiers_flush(r->tiers);
        tide_kvtiers_get_stats(r->tiers, &s);
        fprintf(stderr, "tide: kv tiers: %lld host hits, %lld + %lld store hits, %lld misses; %lld pages written, "
                        "%lld write errors, %lld dropped\n",
                (long long)s.host_hits, (long long)s.store_hits[0], (long long)s.store_hits[1], (long long)s.misses,
                (long long)s.queued, (long long)s.write_errors, (long long)s.dropped);
        tide_kvtiers_destroy(r->tiers);
    }
    for (int i = 0; i < r->n; i++) tide_kvstore_close(r->stores[i]);
    free(r);
}
