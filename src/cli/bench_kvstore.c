/* tide bench kvstore: the persistent KV store's speeds (docs/kvstore.md):
 * ISA-L erasure coding, the SSD tier's and the 12-node store's writes and
 * reads, and the time to first token of a prompt whose prefix comes back
 * from the store against a cold prefill. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/model_spec.h"
#include "cache/kvstore_ec.h"
#include "cache/kvstore_tiers.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/kv_cli.h"
#include "engine/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tide bench kvstore [options]\n"
            "\n"
            "1. erasure coding: encode a page into K+M shards, and decode it with 2 data shards lost (GB/s of page);\n"
            "2. the SSD tier (one node, no parity) and the shared store (--nodes directories, K+M): write\n"
            "   --pages pages, then read them back (GB/s of page, O_DIRECT, fsync per shard);\n"
            "3. with --model: time to first token of a --ttft-tokens prompt, cold (an empty store) and again in\n"
            "   a fresh engine whose prefix comes from the SSD tier and from the shared store.\n"
            "\n"
            "options:\n"
            "  --dir DIR            where the stores live, DIR/ssd and DIR/shared (default: a temporary\n"
            "                       directory, removed after; a given DIR keeps the pages of step 2 unless --model)\n"
            "  --nodes N            the shared store's node directories (default 12)\n"
            "  --ec K+M             its erasure code (default 10+2)\n"
            "  --page-kib N         page size (default 111: 128 tokens x 890 bytes, the release's global KV)\n"
            "  --pages N            pages written and read per store (default 256)\n"
            "  --model SPEC         checkpoint directory or synth:SHAPE, for the TTFT figures\n"
            "  --ttft-tokens N      prompt length for the TTFT figures (default 32000: with its one new token\n"
            "                       it fits a context of 32,768, synth:tiny's)\n"
            "  --backend cpu|cuda   cuda: the device tier's figures on the GPU (not available yet)\n");
    tide_bench_engine_help(f);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench_ec(int k, int m, uint64_t page, tide_status *st) {
    tide_kvs_ec ec;
    if (tide_kvs_ec_init(&ec, k, m, st) != 0) return -1;
    uint64_t len = tide_kvs_shard_bytes(page, k);
    uint8_t *buf = calloc((size_t)(k + m), (size_t)len), *sh[32], have[32];
    if (!buf) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < (uint64_t)k * len; i++) buf[i] = (uint8_t)(i * 131 + 7);
    for (int i = 0; i < k + m; i++) {
        sh[i] = buf + (size_t)i * len;
        have[i] = 1;
    }
    int reps = (int)(2e9 / (double)page) + 1;
    double t0 = now_s(), c0 = cpu_s();
    for (int r = 0; r < reps; r++) tide_kvs_ec_encode(&ec, len, sh);
    double enc = now_s() - t0, enc_cpu = cpu_s() - c0;
    have[0] = have[k / 2] = 0;
    t0 = now_s();
    c0 = cpu_s();
    for (int r = 0; r < reps && m >= 2; r++) tide_kvs_ec_decode(&ec, len, sh, have, st);
    double dec = now_s() - t0, dec_cpu = cpu_s() - c0;
    double bytes = (double)page * reps;
    /* per wall second, and per CPU second of this thread (a shared machine's wall clock includes waiting for a core) */
    printf("erasure code %d+%d, pages of %llu bytes: encode %.2f GB/s, decode (2 data shards lost) %.2f GB/s; "
           "per CPU second: encode %.2f GB/s, decode %.2f GB/s\n",
           k, m, (unsigned long long)page, bytes / enc / 1e9, m >= 2 ? bytes / dec / 1e9 : 0.0, bytes / enc_cpu / 1e9,
           m >= 2 ? bytes / dec_cpu / 1e9 : 0.0);
    free(buf);
    tide_kvs_ec_free(&ec);
    return 0;
}

static int bench_store(const char *name, tide_kvstore_cfg *cfg, uint64_t page, int64_t pages, tide_status *st) {
    tide_kvstore *s;
    if (tide_kvstore_open(cfg, &s, st) != 0) return -1;
    uint8_t *p = malloc(page);
    if (!p) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < page; i++) p[i] = (uint8_t)(i * 7);
    double t0 = now_s();
    int rc = 0;
    for (int64_t i = 0; i < pages && rc == 0; i++)
        rc = tide_kvstore_put(s, (tide_kvs_key){0xbe, (uint64_t)i}, 0, p, page, TIDE_KV_CHAT, 0, st);
    double w = now_s() - t0;
    t0 = now_s();
    for (int64_t i = 0; i < pages && rc == 0; i++) {
        uint64_t got;
        int found;
        rc = tide_kvstore_get(s, (tide_kvs_key){0xbe, (uint64_t)i}, p, page, &got, &found, st);
        if (rc == 0 && !found) rc = tide_fail(st, TIDE_ERR_INTERNAL, "page %lld not found", (long long)i);
    }
    double r = now_s() - t0;
    if (rc == 0)
        printf("%s (%d node%s, %d+%d): write %.3f GB/s (%.2f ms per page), read %.3f GB/s (%.2f ms per page)\n", name,
               cfg->n_nodes, cfg->n_nodes == 1 ? "" : "s", tide_kvstore_k(s), tide_kvstore_m(s), (double)page * pages / w / 1e9, 1e3 * w / pages,
               (double)page * pages / r / 1e9, 1e3 * r / pages);
    free(p);
    tide_kvstore_close(s);
    return rc;
}

/* One engine over tiers of the given stores: the prompt's time to its
 * first (only) token. The writer writes every page to every store, so one
 * cold run fills both (a 32K-token cold prefill takes minutes on the CPU). */
static double proc_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* secs[0]: wall seconds to the first token; secs[1]: CPU seconds of the
 * whole process meanwhile (every thread: a loaded machine stretches the
 * wall clock, not this). */
static int ttft(const tide_model *m, const bench_engine_opts *eo, tide_kvstore *store, tide_kvstore *store2,
                const int32_t *prompt, int64_t n, double *secs, int64_t *hit, tide_status *st) {
    tide_kvtiers_cfg tc = {0};
    tc.stores[tc.n_stores++] = store;
    if (store2) tc.stores[tc.n_stores++] = store2;
    tc.fingerprint = 1;
    tide_kvtiers *t;
    if (tide_kvtiers_create(&tc, &t, st) != 0) return -1;
    tide_engine_config c = tide_bench_engine_config(eo);
    c.kv_tier = tide_kvtiers_hooks(t);
    tide_engine *e;
    if (tide_engine_create_with_model(&c, m, &e, st) != 0) {
        tide_kvtiers_destroy(t);
        return -1;
    }
    tide_request r = tide_request_default();
    r.prompt = prompt;
    r.n_prompt = n;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 1;
    tide_request_id id;
    double t0 = now_s(), c0 = proc_cpu_s();
    int rc = tide_engine_submit(e, &r, &id, st) == 0 && tide_engine_run(e, st) == 0 ? 0 : -1;
    secs[0] = now_s() - t0;
    secs[1] = proc_cpu_s() - c0;
    tide_engine_stats es;
    tide_engine_get_stats(e, &es);
    *hit = es.prefix_hit_tokens;
    tide_engine_destroy(e);
    tide_kvtiers_destroy(t); /* writes the pages behind */
    return rc;
}

static int bench_ttft(const char *spec, const bench_engine_opts *eo, tide_kvstore_cfg *ssd, tide_kvstore_cfg *shared,
                      int64_t n, tide_status *st) {
    tide_model *m;
    if (tide_bench_load_model(spec, (int)eo->threads, &m, st) != 0) return -1;
    int32_t *p = malloc((size_t)n * sizeof *p);
    tide_kvstore *a = NULL, *b = NULL;
    int rc = -1;
    if (!p) goto out;
    uint64_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (int32_t)(100 + (x >> 33) % 50000);
    }
    ssd->fingerprint = shared->fingerprint = 1;
    if (tide_kvstore_open(ssd, &a, st) != 0 || tide_kvstore_open(shared, &b, st) != 0) goto out;
    double cold[2], warm_a[2], warm_b[2];
    int64_t h0, ha, hb;
    if (ttft(m, eo, a, b, p, n, cold, &h0, st) != 0 || ttft(m, eo, a, NULL, p, n, warm_a, &ha, st) != 0 ||
        ttft(m, eo, b, NULL, p, n, warm_b, &hb, st) != 0)
        goto out;
    printf("TTFT of a %lld-token prompt on %s: cold %.3f s; prefix from the SSD tier %.3f s (%lld tokens hit, %.1fx); "
           "from the shared store %.3f s (%lld tokens hit, %.1fx)\n",
           (long long)n, spec, cold[0], warm_a[0], (long long)ha, cold[0] / warm_a[0], warm_b[0], (long long)hb,
           cold[0] / warm_b[0]);
    printf("CPU seconds (all threads) to the first token: cold %.3f s; SSD tier %.3f s (%.1fx); shared store %.3f s "
           "(%.1fx)\n",
           cold[1], warm_a[1], cold[1] / warm_a[1], warm_b[1], cold[1] / warm_b[1]);
    rc = 0;
out:
    tide_kvstore_close(a);
    tide_kvstore_close(b);
    free(p);
    tide_model_free(m);
    return rc;
}

int tide_bench_kvstore(int argc, char **argv) {
    kv_cli_store so = {.nodes = 12, .ec = NULL};
    const char *dir = NULL, *model = NULL, *backend = "cpu";
    int64_t page_kib = 111, pages = 256, ttft_tokens = 32000;
    bench_engine_opts eo;
    tide_bench_engine_defaults(&eo);
    bench_opt opts[8 + BENCH_ENGINE_OPTS + 1] = {
        {"--dir", BENCH_STR, &dir, 0, 0},
        {"--nodes", BENCH_INT, &so.nodes, 1, TIDE_KVS_MAX_SHARDS},
        {"--ec", BENCH_STR, &so.ec, 0, 0},
        {"--page-kib", BENCH_INT, &page_kib, 1, 1 << 20},
        {"--pages", BENCH_INT, &pages, 1, 1 << 24},
        {"--model", BENCH_STR, &model, 0, 0},
        {"--ttft-tokens", BENCH_INT, &ttft_tokens, 2, 1 << 20},
        {"--backend", BENCH_STR, &backend, 0, 0},
    };
    int n = 8;
    tide_bench_engine_table(&eo, opts, &n);
    opts[n] = (bench_opt){NULL, BENCH_INT, NULL, 0, 0};
    int rc = tide_bench_parse("kvstore", argc, argv, opts, usage);
    if (rc >= 0) return rc;
    if (!strcmp(backend, "cuda")) {
        fprintf(stderr, "tide bench kvstore --backend cuda: the device tier's figures (prefetch into the GPU's pools) "
                        "need the CUDA engine path, which the engine does not drive yet (docs/kvstore.md)\n");
        return TIDE_EXIT_FAIL;
    }
    if (strcmp(backend, "cpu")) return tide_bench_usage_error("kvstore", usage, "--backend %s: use cpu or cuda", backend);
    char tmpl[4096];
    int own = !dir;
    if (own) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/tide-kvbench-XXXXXX", t && *t ? t : "/tmp");
        if (!(dir = mkdtemp(tmpl))) {
            perror("tide bench kvstore: mkdtemp");
            return TIDE_EXIT_FAIL;
        }
    }
    char shared_root[4096], ssd_root[4096];
    snprintf(shared_root, sizeof shared_root, "%s/shared", dir);
    snprintf(ssd_root, sizeof ssd_root, "%s/ssd", dir);
    tide_status st = {0};
    tide_kvstore_cfg shared = {0}, ssd = {0};
    kv_cli_store one = {.root = ssd_root, .nodes = 1};
    so.root = shared_root;
    char cmd[16700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", shared_root, ssd_root);
    rc = system(cmd) == 0 ? 0 : tide_fail(&st, TIDE_ERR_IO, "cannot create %s", dir);
    uint64_t page = (uint64_t)page_kib << 10;
    if (rc == 0 && (kv_cli_store_cfg(&so, &shared, &st) != 0 || kv_cli_store_cfg(&one, &ssd, &st) != 0)) rc = -1;
    if (rc == 0) rc = bench_ec(shared.k ? shared.k : (so.nodes == 12 ? 10 : (int)so.nodes),
                               shared.k ? shared.m : (so.nodes == 12 ? 2 : 0), page, &st);
    if (rc == 0) rc = bench_store("SSD tier", &ssd, page, pages, &st);
    if (rc == 0) rc = bench_store("shared store", &shared, page, pages, &st);
    if (rc == 0 && model) { /* a fresh pair of stores for the TTFT runs */
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s' '%s'", shared_root, ssd_root, shared_root, ssd_root);
        if (system(cmd) != 0) rc = tide_fail(&st, TIDE_ERR_IO, "cannot empty %s", dir);
    }
    if (rc == 0 && model) rc = bench_ttft(model, &eo, &ssd, &shared, ttft_tokens, &st);
    if (own) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "tide bench kvstore: could not remove %s\n", dir);
    }
    if (rc != 0) {
        fprintf(stderr, "tide bench kvstore: %s\n", st.msg);
        return TIDE_EXIT_FAIL;
    }
    return TIDE_EXIT_OK;
}
